// See device_buffers.hpp.
#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "cuda_check.hpp"
#include "device_buffers.hpp"

namespace flash::cuda {

namespace {
struct Buffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  std::mutex user;  // held by lock_device_buffer's caller
};
std::mutex buffers_mutex;
// Key: device, stream, purpose, and the host thread when the stream is cudaStreamPerThread
// (that handle names a different stream in every thread: one buffer for all of them let
// two threads' kernels run at once on one tile counter or workspace). A thread's entries
// outlive it, as every entry does.
using BufferKey = std::tuple<int, cudaStream_t, int, std::thread::id>;
std::map<BufferKey, Buffer>& buffers() {
  static auto* m = new std::map<BufferKey, Buffer>;  // never freed: destroying it at exit
  return *m;                                         // could race the driver's own teardown
}
}  // namespace

namespace {
Buffer& buffer_entry(cudaStream_t stream, BufferPurpose purpose) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(buffers_mutex);
  const std::thread::id owner =
      stream == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id();
  return buffers()[{device, stream, static_cast<int>(purpose), owner}];  // nodes are stable
}

// Grows b to at least `bytes` (zero-filled on the stream when `zero`); the caller
// serialises access to b.
void* grow(Buffer& b, cudaStream_t stream, size_t bytes, bool zero) {
  if (b.bytes >= bytes && b.ptr != nullptr) return b.ptr;
  const size_t grown = std::max(bytes, b.bytes + b.bytes / 2);  // amortise growth
  if (b.ptr != nullptr) check_cuda(cudaFreeAsync(b.ptr, stream), "cudaFreeAsync (scratch)");
  b.ptr = nullptr;
  b.bytes = 0;
  check_cuda(cudaMallocAsync(&b.ptr, grown, stream), "cudaMallocAsync (scratch)");
  b.bytes = grown;
  if (zero) check_cuda(cudaMemsetAsync(b.ptr, 0, grown, stream), "cudaMemsetAsync (counters)");
  return b.ptr;
}
}  // namespace

void* cached_device_buffer(cudaStream_t stream, BufferPurpose purpose, size_t bytes) {
  Buffer& b = buffer_entry(stream, purpose);
  std::lock_guard<std::mutex> lock(b.user);
  return grow(b, stream, bytes, purpose == BufferPurpose::counters);
}

LockedBuffer lock_device_buffer(cudaStream_t stream, BufferPurpose purpose, size_t bytes) {
  Buffer& b = buffer_entry(stream, purpose);
  LockedBuffer out;
  out.lock = std::unique_lock<std::mutex>(b.user);
  out.ptr = grow(b, stream, bytes, purpose == BufferPurpose::counters);
  return out;
}

}  // namespace flash::cuda
