// Host memory in a call of the cuda backend: which pointers are device memory, and the
// staging of host tensors through a cached device buffer (FLASH_BACKEND=cuda in a
// host-memory program). Used by cuda_backend.cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "device_buffers.hpp"

namespace flash::cuda {

// FLASH_LOG=1 (any value but 0 or empty): one line per choice on stderr.
inline bool log_enabled() {
  const char* v = std::getenv("FLASH_LOG");
  return v != nullptr && std::strcmp(v, "0") != 0 && v[0] != '\0';
}

inline bool is_device_pointer(const void* p) {
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // clear: an unknown host pointer is not an error here
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

// Host tensors of one call, staged through a cached device buffer. Inputs are copied
// in; outputs are copied in too (their gaps between strided rows must survive) and
// copied back by finish(), which then waits for the stream: host memory must hold the
// result when the call returns.
class HostStaging {
 public:
  explicit HostStaging(cudaStream_t stream) : stream_(stream) {}

  // Registers a tensor; returns the pointer the kernels should use (device memory).
  template <class P>
  P* add(const char* name, P* ptr, size_t bytes, bool is_output) {
    if (ptr == nullptr || is_device_pointer(ptr)) return ptr;
    entries_.push_back(
        {name, const_cast<void*>(static_cast<const void*>(ptr)), bytes, is_output, total_});
    total_ += (bytes + 255) / 256 * 256;
    return nullptr;  // resolved by commit()
  }

  // Registers ptr (if host memory) and points it at its device copy on commit().
  template <class P>
  void stage(const char* name, P*& ptr, size_t bytes, bool is_output) {
    if (add(name, ptr, bytes, is_output) == nullptr && ptr != nullptr)
      entries_.back().patch = [&ptr](void* device) { ptr = static_cast<P*>(device); };
  }

  // Allocates (cached) and copies host -> device. Returns the device pointers in
  // registration order.
  std::vector<void*> commit() {
    std::vector<void*> out;
    if (entries_.empty()) return out;
    // Held until this object dies (after finish() synchronised the stream): another
    // host thread staging on the same stream must not refill the buffer in between.
    staging_ = lock_device_buffer(stream_, BufferPurpose::staging, total_);
    char* base = static_cast<char*>(staging_.ptr);
    std::string names;
    for (auto& e : entries_) {
      e.device = base + e.offset;
      check_cuda(cudaMemcpyAsync(e.device, e.host, e.bytes, cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync (staging host input)");
      out.push_back(e.device);
      if (e.patch) e.patch(e.device);
      names += names.empty() ? e.name : std::string(", ") + e.name;
    }
    if (log_enabled())
      std::fprintf(stderr,
                   "flash: cuda backend staging host memory through device memory (%s, "
                   "%zu bytes); pass device pointers to avoid the copies\n",
                   names.c_str(), total_);
    return out;
  }

  void finish() {
    if (entries_.empty()) return;
    for (auto& e : entries_)
      if (e.is_output)
        check_cuda(cudaMemcpyAsync(e.host, e.device, e.bytes, cudaMemcpyDeviceToHost, stream_),
                   "cudaMemcpyAsync (staging output back)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (staged output)");
  }

 private:
  struct Entry {
    const char* name;
    void* host;
    size_t bytes;
    bool is_output;
    size_t offset;
    void* device = nullptr;
    std::function<void(void*)> patch;  // set by stage()
  };
  cudaStream_t stream_;
  std::vector<Entry> entries_;
  size_t total_ = 0;
  LockedBuffer staging_;
};

}  // namespace flash::cuda
