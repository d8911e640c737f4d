// Device memory, a stream and event timing for the cuda backend. Plain C++ against
// the CUDA runtime API (its one kernel, the read flush, is in l2_flush.cu); linked only
// into the bench tools.
//
// The bench links its own (static) CUDA runtime, as the cuda backend module does.
// Both use the device's primary context, so pointers, streams and events created
// here are valid for the backend.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "common/device.hpp"
#include "common/l2_flush.hpp"

namespace bench {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// Touching a buffer twice the L2 size pushes every earlier line out of L2.
constexpr size_t kEvictionBufferPerL2 = 2;

// FLASH_BENCH_FLUSH=write: flush L2 by zeroing the buffer (what the bench did before
// 2026-11-24, and what torch's timers usually do), leaving L2 full of dirty lines that
// the timed call writes back. Default (read): read a buffer the bench never writes
// (l2_flush.cu), so the timed call pays only for its own traffic.
bool write_flush_requested() {
  const char* v = std::getenv("FLASH_BENCH_FLUSH");
  return v && std::string(v) == "write";
}

// FLASH_BENCH_GATE=1: the stream waits in a host function until the timed call has been
// queued, so the events bracket GPU work only. Without it a call whose host side takes
// longer than the eviction memset runs counts its host time too (a real cost, measured
// separately: compare both modes in one run). The wait gives up after a second so a
// call that synchronises its own stream cannot deadlock the bench.
struct Gate {
  std::atomic<bool> open{false};
  static void CUDART_CB wait(void* self) {
    auto& gate = *static_cast<Gate*>(self);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!gate.open.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < give_up) {
    }
  }
};

bool gate_requested() {
  const char* v = std::getenv("FLASH_BENCH_GATE");
  return v && v[0] == '1';
}

class CudaDevice final : public Device {
 public:
  CudaDevice() {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    int l2_bytes = 0;
    check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device),
          "cudaDeviceGetAttribute(L2)");
    check(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device),
          "cudaDeviceGetAttribute(SMs)");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
    eviction_bytes_ = kEvictionBufferPerL2 * static_cast<size_t>(l2_bytes);
    if (eviction_bytes_) check(cudaMalloc(&eviction_buffer_, eviction_bytes_), "cudaMalloc");
    check(cudaMalloc(&flush_sink_, sizeof(unsigned)), "cudaMalloc");
  }
  ~CudaDevice() override {
    cudaFree(eviction_buffer_);
    cudaFree(flush_sink_);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
  }

  void* allocate(size_t bytes) override {
    void* data = nullptr;
    check(cudaMalloc(&data, bytes), "cudaMalloc");
    return data;
  }
  void release(void* data) noexcept override { cudaFree(data); }
  void upload(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpy H2D");
    synchronize();
  }
  void download(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy D2H");
    synchronize();
  }
  void fill_bytes(void* dst, int byte, size_t bytes) override {
    check(cudaMemsetAsync(dst, byte, bytes, stream_), "cudaMemset");
    synchronize();
  }
  void copy_bytes(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
  }
  void* stream() override { return stream_; }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void evict_cache() override {
    if (!eviction_buffer_) return;
    if (write_flush_)
      check(cudaMemsetAsync(eviction_buffer_, 0, eviction_bytes_, stream_), "cudaMemset(evict)");
    else
      check(read_flush(eviction_buffer_, eviction_bytes_, sms_, flush_sink_, stream_),
            "read_flush");
  }
  double time_ms(const std::function<void()>& fn) override {
    if (gated_) {
      gate_.open.store(false, std::memory_order_release);
      check(cudaLaunchHostFunc(stream_, &Gate::wait, &gate_), "cudaLaunchHostFunc");
    }
    check(cudaEventRecord(start_, stream_), "cudaEventRecord");
    fn();
    check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    if (gated_) gate_.open.store(true, std::memory_order_release);
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* eviction_buffer_ = nullptr;
  size_t eviction_bytes_ = 0;
  unsigned* flush_sink_ = nullptr;
  int sms_ = 0;  // the read flush's grid
  const bool write_flush_ = write_flush_requested();
  const bool gated_ = gate_requested();
  Gate gate_;
};

}  // namespace

std::unique_ptr<Device> open_cuda_device(std::string* why_not) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    if (why_not)
      *why_not = std::string("no CUDA device: ") +
                 (status != cudaSuccess ? cudaGetErrorString(status) : "device count is 0");
    return nullptr;
  }
  try {
    return std::make_unique<CudaDevice>();
  } catch (const std::exception& e) {
    if (why_not) *why_not = e.what();
    return nullptr;
  }
}

}  // namespace bench
