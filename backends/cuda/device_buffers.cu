// See device_buffers.hpp.
#include "device_buffers.hpp"

#include <map>
#include <mutex>
#include <tuple>

#include "cuda_check.hpp"

namespace flash::cuda {

namespace {
struct Buffer {
  void* ptr = nullptr;
  size_t bytes = 0;
};
std::mutex buffers_mutex;
std::map<std::tuple<int, cudaStream_t, int>, Buffer>& buffers() {
  static auto* m = new std::map<std::tuple<int, cudaStream_t, int>, Buffer>;  // never freed:
  return *m;  // destroying it at exit could race the driver's own teardown
}
}  // namespace

void* cached_device_buffer(cudaStream_t stream, BufferPurpose purpose, size_t bytes) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(buffers_mutex);
  Buffer& b = buffers()[{device, stream, static_cast<int>(purpose)}];
  if (b.bytes >= bytes && b.ptr != nullptr) return b.ptr;
  const size_t grown = std::max(bytes, b.bytes + b.bytes / 2);  // amortise growth
  if (b.ptr != nullptr) check_cuda(cudaFreeAsync(b.ptr, stream), "cudaFreeAsync (scratch)");
  b.ptr = nullptr;
  b.bytes = 0;
  check_cuda(cudaMallocAsync(&b.ptr, grown, stream), "cudaMallocAsync (scratch)");
  b.bytes = grown;
  return b.ptr;
}

}  // namespace flash::cuda
