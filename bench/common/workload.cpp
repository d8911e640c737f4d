#include "common/workload.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "common/dtype.hpp"
#include "common/problem.hpp"

namespace bench {
namespace {

// Uniform on [-sqrt(3), sqrt(3)): mean 0 and variance 1 like randn, but cheap enough
// to fill the 100M-element tensors of the GPU shapes in well under a second.
const float kUnitVarianceHalfWidth = std::sqrt(3.0f);
// Tensors from this many elements on are filled by all of the host's threads.
constexpr size_t kParallelFillElements = size_t{1} << 22;
// Byte that makes every f32, f16 and bf16 element a NaN.
constexpr int kNanByte = 0xff;

// splitmix64: a tiny, well-mixed generator; each (seed, index) gives one value, so
// fills are reproducible.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<unsigned char> random_tensor(size_t elements, flash::DType dtype, uint64_t seed) {
  std::vector<unsigned char> out(elements * element_size(dtype));
  // 24 random bits give a float in [0, 1) with every value exactly representable.
  constexpr float kToUnit = 1.0f / 16777216.0f;
  const auto fill = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const float unit = static_cast<float>(mix(seed * 0x100000001b3ull + i) >> 40) * kToUnit;
      store_from_float(out.data(), i, dtype, (2.0f * unit - 1.0f) * kUnitVarianceHalfWidth);
    }
  };
  // Each element depends on (seed, index) alone, so the host's threads fill slices of it
  // with the same bytes: a decode cache of 2^30 elements takes ~5 s on one core.
  const size_t threads = elements < kParallelFillElements
                             ? 1
                             : std::max<size_t>(1, std::thread::hardware_concurrency());
  std::vector<std::thread> workers;
  const size_t slice = (elements + threads - 1) / threads;
  for (size_t t = 1; t < threads; ++t)
    workers.emplace_back(fill, std::min(elements, t * slice), std::min(elements, (t + 1) * slice));
  fill(0, std::min(elements, slice));
  for (std::thread& w : workers) w.join();
  return out;
}

HostInputs make_host_inputs(const flash::AttentionDesc& desc, bool backward, uint64_t seed) {
  HostInputs in;
  in.q = random_tensor(q_elements(desc), desc.dtype, seed + 1);
  in.k = random_tensor(k_elements(desc), desc.dtype, seed + 2);
  in.v = random_tensor(v_elements(desc), desc.dtype, seed + 3);
  if (backward) in.dout = random_tensor(o_elements(desc), desc.dtype, seed + 4);
  return in;
}

Workload::Workload(const flash::AttentionDesc& desc, bool backward, Device& device,
                   const HostInputs& inputs)
    : desc_(desc), backward_(backward), device_(device) {
  desc_.stream = device.stream();
  desc_.lse = nullptr;
  const size_t e = element_size(desc_.dtype);
  auto upload = [&](DeviceBuffer& dst, const std::vector<unsigned char>& src, size_t bytes) {
    if (src.size() != bytes) throw std::logic_error("Workload: inputs do not match desc");
    dst = DeviceBuffer(device, bytes);
    device.upload(dst.data(), src.data(), bytes);
  };
  upload(q_, inputs.q, q_elements(desc_) * e);
  upload(k_, inputs.k, k_elements(desc_) * e);
  upload(v_, inputs.v, v_elements(desc_) * e);
  o_ = DeviceBuffer(device, o_elements(desc_) * e);
  device.fill_bytes(o_.data(), kNanByte, o_.bytes());
  if (backward_) {
    upload(dout_, inputs.dout, o_elements(desc_) * e);
    lse_ = DeviceBuffer(device, lse_elements(desc_) * sizeof(float));
    dq_ = DeviceBuffer(device, q_.bytes());
    dk_ = DeviceBuffer(device, k_.bytes());
    dv_ = DeviceBuffer(device, v_.bytes());
    for (DeviceBuffer* b : {&lse_, &dq_, &dk_, &dv_})
      device.fill_bytes(b->data(), kNanByte, b->bytes());
  }
  // Last: the sizes above read the host arrays.
  const int64_t batch = desc_.batch;
  auto upload_array = [&](DeviceBuffer& dst, const int32_t*& field, int64_t count) {
    if (!field) return;
    dst = DeviceBuffer(device, static_cast<size_t>(count) * sizeof(int32_t));
    device.upload(dst.data(), field, dst.bytes());
    field = static_cast<const int32_t*>(dst.data());
  };
  upload_array(cu_seqlens_q_, desc_.cu_seqlens_q, batch + 1);
  upload_array(cu_seqlens_kv_, desc_.cu_seqlens_kv, batch + 1);
  upload_array(seqlens_kv_, desc_.seqlens_kv, batch);
  upload_array(block_table_, desc_.block_table, batch * desc_.pages_per_seq);
}

void Workload::prepare() {
  if (!backward_) return;
  flash::AttentionDesc forward = desc_;
  forward.lse = static_cast<float*>(lse_.data());
  flash::attention(forward, q_.data(), k_.data(), v_.data(), o_.data());
  device_.synchronize();
}

void Workload::run() {
  if (backward_) {
    flash::attention_backward(desc_, q_.data(), k_.data(), v_.data(), o_.data(), dout_.data(),
                              static_cast<const float*>(lse_.data()), dq_.data(), dk_.data(),
                              dv_.data());
  } else {
    flash::attention(desc_, q_.data(), k_.data(), v_.data(), o_.data());
  }
}

DeviceBuffer& Workload::buffer(Tensor which) {
  switch (which) {
    case Tensor::q:
      return q_;
    case Tensor::k:
      return k_;
    case Tensor::v:
      return v_;
    case Tensor::o:
      return o_;
    case Tensor::dout:
      return dout_;
    case Tensor::dq:
      return dq_;
    case Tensor::dk:
      return dk_;
    case Tensor::dv:
      return dv_;
  }
  throw std::logic_error("buffer: unknown tensor");
}

std::vector<float> Workload::read_as_float(Tensor which) {
  DeviceBuffer& b = buffer(which);
  std::vector<unsigned char> raw(b.bytes());
  device_.synchronize();
  device_.download(raw.data(), b.data(), raw.size());
  const size_t n = raw.size() / element_size(desc_.dtype);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = load_as_float(raw.data(), i, desc_.dtype);
  return out;
}

}  // namespace bench
