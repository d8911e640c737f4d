// Host memory and wall-clock timing for the reference and cpu backends.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "common/device.hpp"

namespace bench {
namespace {

// Cache-line and AVX-512 aligned, like the buffers a real caller would pass.
constexpr size_t kHostAlignment = 64;

class HostDevice final : public Device {
 public:
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    void* data = std::aligned_alloc(kHostAlignment, rounded);
    if (!data) throw std::bad_alloc();
    return data;
  }
  void release(void* data) noexcept override { std::free(data); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void fill_bytes(void* dst, int byte, size_t bytes) override { std::memset(dst, byte, bytes); }
  // One contiguous slice per hardware thread: one thread cannot saturate memory.
  void copy_bytes(void* dst, const void* src, size_t bytes) override {
    const size_t threads = std::max(1u, std::thread::hardware_concurrency());
    const size_t slice = (bytes / threads + 63) / 64 * 64;
    std::vector<std::thread> pool;
    for (size_t t = 0; t * slice < bytes; ++t)
      pool.emplace_back([=] {
        const size_t begin = t * slice, n = std::min(slice, bytes - begin);
        std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, n);
      });
    for (std::thread& th : pool) th.join();
  }
  void* stream() override { return nullptr; }
  void synchronize() override {}
  // Not evicted: the CPU kernels of interest are compute bound, and the peer they are
  // compared with (torch SDPA's CPU kernel in compare_torch.py) runs warm as well.
  void evict_cache() override {}
  double time_ms(const std::function<void()>& fn) override {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const auto stop = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(stop - start).count();
  }
};

}  // namespace

std::unique_ptr<Device> open_device(flash::Backend backend, std::string* why_not) {
  switch (backend) {
    case flash::Backend::reference:
    case flash::Backend::cpu:
      return std::make_unique<HostDevice>();
    case flash::Backend::cuda:
      return open_cuda_device(why_not);
    case flash::Backend::hip: {
      // The hip-on-cuda build of the hip module (FLASHATTN_HIP_ON_CUDA) runs on an
      // NVIDIA GPU, where HIP memory is CUDA memory. AMD GPUs need a HIP helper.
      std::string cuda_why;
      if (auto device = open_cuda_device(&cuda_why)) return device;
      if (why_not)
        *why_not =
            "the bench has no HIP memory helper for AMD GPUs yet (only hip-on-cuda "
            "builds are timed, with CUDA memory: " +
            cuda_why + ")";
      return nullptr;
    }
    case flash::Backend::automatic:
      break;
  }
  if (why_not) *why_not = "benchmarks need a concrete backend, not automatic";
  return nullptr;
}

}  // namespace bench
