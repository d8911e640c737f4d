// Memory and timing on the processor a backend runs on, so one benchmark loop
// serves every backend: host memory and a steady clock for reference and cpu;
// device memory, a stream and events for GPU backends.
//
// GPU support is a separate piece of the bench (cuda_device.cpp), compiled only when
// the CUDA toolkit is found at build time; the core library never links a GPU
// runtime. Without it, GPU backends are skipped with "built without CUDA toolkit".
// The hip backend is timed only in its hip-on-cuda build (NVIDIA memory); a HIP
// helper for AMD GPUs does not exist yet.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "flash/flash.hpp"

namespace bench {

class Device {
 public:
  virtual ~Device() = default;

  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* data) noexcept = 0;
  virtual void upload(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* device_src, size_t bytes) = 0;
  // Sets every byte; 0xff makes every element NaN in f32, f16 and bf16.
  virtual void fill_bytes(void* device_dst, int byte, size_t bytes) = 0;

  // Copies bytes within this device's memory, as fast as the device copies (all host
  // threads on the host; queued on stream() on a GPU): the bandwidth ceiling of the
  // decode benchmark.
  virtual void copy_bytes(void* dst, const void* src, size_t bytes) = 0;
  // Stream to put in AttentionDesc::stream (null on the host).
  virtual void* stream() = 0;
  // Waits until all work queued on stream() has finished.
  virtual void synchronize() = 0;
  // Evicts the last-level cache so a timed call does not find its inputs there.
  virtual void evict_cache() = 0;
  // Milliseconds fn's work took: host clock around fn, or GPU events around the
  // work fn queues on stream(). Returns after that work has finished.
  virtual double time_ms(const std::function<void()>& fn) = 0;
};

// The device backend runs on, or null with why_not set (e.g. built without CUDA).
std::unique_ptr<Device> open_device(flash::Backend backend, std::string* why_not);

// Owns one allocation on a Device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& device, size_t bytes)
      : device_(&device), data_(bytes ? device.allocate(bytes) : nullptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    swap(other);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_) device_->release(data_);
  }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(device_, other.device_);
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Defined in cuda_device.cpp, or in cuda_device_none.cpp when built without CUDA.
std::unique_ptr<Device> open_cuda_device(std::string* why_not);

}  // namespace bench
