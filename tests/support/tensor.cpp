#include "tensor.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "reference/dtype.hpp"

namespace flash::test {
namespace {

// Padding in elements that keeps 16-byte alignment for every dtype.
constexpr int64_t kRowPad = 8;
constexpr int64_t kBatchPad = 16;

int32_t code(DType d) { return static_cast<int32_t>(d); }
int64_t bytes_of(DType d) { return d == DType::f32 ? 4 : 2; }

}  // namespace

const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::packed:
      return "packed";
    case Layout::bhsd:
      return "bhsd";
    case Layout::padded:
      return "padded";
  }
  return "?";
}

HostTensor::HostTensor(DType dtype_, int64_t batch_, int64_t seq_, int64_t heads_, int64_t dim_,
                       Layout layout)
    : dtype(dtype_), batch(batch_), seq(seq_), heads(heads_), dim(dim_) {
  switch (layout) {
    case Layout::packed:
      resolved[2] = dim;
      resolved[1] = heads * dim;
      resolved[0] = seq * heads * dim;
      stride = {};
      break;
    case Layout::bhsd:
      resolved[1] = dim;
      resolved[2] = seq * dim;
      resolved[0] = heads * seq * dim;
      stride = {resolved[0], resolved[1], resolved[2]};
      break;
    case Layout::padded:
      resolved[2] = dim + kRowPad;
      resolved[1] = heads * resolved[2];
      resolved[0] = seq * resolved[1] + kBatchPad;
      stride = {resolved[0], resolved[1], resolved[2]};
      break;
  }
  // Every layout here ends its last batch at batch * batch-stride (padding included).
  capacity_ = elements() == 0 ? 0 : batch * resolved[0];
  const int64_t bytes = std::max<int64_t>(capacity_, 1) * bytes_of(dtype);
  storage.assign(static_cast<size_t>((bytes + 7) / 8), 0);
}

double HostTensor::get(int64_t b, int64_t s, int64_t h, int64_t d) const {
  return reference::load(data(), code(dtype), offset(b, s, h) + d);
}

void HostTensor::set(int64_t b, int64_t s, int64_t h, int64_t d, double value) {
  reference::store(data(), code(dtype), offset(b, s, h) + d, value);
}

void HostTensor::fill_random(std::mt19937_64& rng, double amplitude) {
  std::uniform_real_distribution<double> dist(-amplitude, amplitude);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d) set(b, s, h, d, dist(rng));
}

void HostTensor::poison() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t i = 0; i < capacity(); ++i) reference::store(data(), code(dtype), i, nan);
}

bool HostTensor::padding_untouched() const {
  std::vector<char> in_view(static_cast<size_t>(capacity()), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d) in_view[offset(b, s, h) + d] = 1;
  for (int64_t i = 0; i < capacity(); ++i)
    if (!in_view[i] && !std::isnan(reference::load(data(), code(dtype), i))) return false;
  return true;
}

std::vector<double> HostTensor::to_packed() const {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(elements()));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d) out.push_back(get(b, s, h, d));
  return out;
}

std::vector<float> poisoned_lse(int64_t count) {
  return std::vector<float>(static_cast<size_t>(std::max<int64_t>(count, 1)),
                            std::numeric_limits<float>::quiet_NaN());
}

}  // namespace flash::test
