// Cached device scratch memory, one buffer per (device, stream, purpose), and per host
// thread for cudaStreamPerThread (a different stream in each thread). Buffers only
// grow (stream-ordered cudaFreeAsync/cudaMallocAsync on the caller's stream, so the
// old buffer stays valid for work already queued); a steady workload allocates nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>

namespace flash::cuda {

// counters: zero-filled when (re)allocated; kernels that use them leave them zero (the
// decode kernel's split counters, reset by the block that counts last). tensor_maps: the
// Hopper forward's tensor maps of packed batches (written on the device per call).
enum class BufferPurpose { staging = 0, workspace = 1, counters = 2, tensor_maps = 3 };

// Returns at least `bytes` of device memory, 256-byte aligned, valid for work queued on
// `stream` until the next call with the same (device, stream, purpose).
void* cached_device_buffer(cudaStream_t stream, BufferPurpose purpose, size_t bytes);

// The same buffer, held exclusively while `lock` lives. Host threads sharing a stream
// (e.g. the default stream) must not interleave "fill buffer, enqueue kernels" sequences:
// hold the lock until the last operation using the buffer is enqueued (and, for host
// staging, until the stream is synchronised).
struct LockedBuffer {
  void* ptr = nullptr;
  std::unique_lock<std::mutex> lock;
};
LockedBuffer lock_device_buffer(cudaStream_t stream, BufferPurpose purpose, size_t bytes);

}  // namespace flash::cuda
