// Per-block timestamps of the decode kernels, for diagnostic builds only
// (-DFLASH_DECODE_TRACE, e.g. VARIANT_FLAGS in tests/cuda/device_hopper.sh, step
// decodetrace). Each block's thread 0 records when it started, when its own warp's keys
// were streamed, when every warp had joined (the warps combined in shared memory), when
// the block had published its partial and counted itself done (a cluster launch: when its
// slices had landed), and when it finished (after the split merge, for the unit's last
// block; in a cluster launch every block merges its slice), and its SM; after each launch
// (synchronising) the records are summarised on stderr: how the kernel's time splits
// into start skew, streaming and tail. Without the macro every
// hook is empty and nothing here is compiled into the module.
#pragma once

#include <cuda_runtime.h>

#ifdef FLASH_DECODE_TRACE
#include <algorithm>
#include <cstdio>
#include <vector>
#endif

namespace flash::cuda {

enum class DecodeMark { start, streamed, joined, counted, end };
constexpr int kDecodeMarks = 5;

#ifdef FLASH_DECODE_TRACE
struct DecodeTraceRecord {
  unsigned long long t[kDecodeMarks];  // globaltimer ns at each DecodeMark
  unsigned sm, used;
};
constexpr int kDecodeTraceBlocks = 16384;
// static, as are the host functions below: one copy per translation unit, each dtype's
// launcher reading its own (an inline host function would be merged across the units
// by the linker and read another unit's copy: nothing recorded).
static __device__ DecodeTraceRecord g_decode_trace[kDecodeTraceBlocks];

__device__ __forceinline__ void decode_trace(DecodeMark mark) {
  if (threadIdx.x != 0) return;
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (block >= kDecodeTraceBlocks) return;
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  DecodeTraceRecord& r = g_decode_trace[block];
  r.t[static_cast<int>(mark)] = now;
  if (mark == DecodeMark::start) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    r.sm = sm;
    r.used = 1;
  }
}

// Quantiles (0, 10, 50, 90, 100 %) of v in microseconds.
static void print_quantiles(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto q = [&](double f) { return v[static_cast<size_t>(f * (v.size() - 1))] / 1e3; };
  std::fprintf(stderr, "  %-26s %8.2f %8.2f %8.2f %8.2f %8.2f\n", what, q(0), q(0.1), q(0.5),
               q(0.9), q(1));
}

static void decode_trace_summary() {
  std::vector<DecodeTraceRecord> rec(kDecodeTraceBlocks);
  const cudaError_t err =
      cudaMemcpyFromSymbol(rec.data(), g_decode_trace, sizeof(DecodeTraceRecord) * rec.size());
  if (err != cudaSuccess) {
    std::fprintf(stderr, "decode trace: %s\n", cudaGetErrorString(err));
    return;
  }
  rec.erase(std::remove_if(rec.begin(), rec.end(), [](const auto& r) { return r.used == 0; }),
            rec.end());
  if (rec.empty()) {
    std::fprintf(stderr, "decode trace: no block recorded\n");
    return;
  }
  unsigned long long t0 = ~0ull, t_end = 0;
  for (const auto& r : rec) {
    t0 = std::min(t0, r.t[0]);
    t_end = std::max(t_end, r.t[4]);
  }
  std::vector<double> start, stream, streamed, join, count, merge, end;
  std::vector<int> per_sm(1024, 0);
  for (const auto& r : rec) {
    start.push_back(static_cast<double>(r.t[0] - t0));
    stream.push_back(static_cast<double>(r.t[1] - r.t[0]));
    streamed.push_back(static_cast<double>(r.t[1] - t0));
    join.push_back(static_cast<double>(r.t[2] - r.t[1]));
    count.push_back(static_cast<double>(r.t[3] - r.t[2]));
    // Only the unit's last block merges (the others end right after counting; in a cluster
    // launch every block merges a slice); a single split has no merge and no count.
    if (r.t[4] - r.t[3] > 100) merge.push_back(static_cast<double>(r.t[4] - r.t[3]));
    end.push_back(static_cast<double>(r.t[4] - t0));
    ++per_sm[std::min(r.sm, 1023u)];
  }
  int sms = 0, most = 0;
  for (int n : per_sm) {
    sms += n > 0;
    most = std::max(most, n);
  }
  std::fprintf(stderr,
               "decode trace: %zu blocks on %d SMs (at most %d per SM), first start "
               "to last end %.2f us\n  %-26s %8s %8s %8s %8s %8s\n",
               rec.size(), sms, most, (t_end - t0) / 1e3, "us (quantiles)", "min", "10%", "50%",
               "90%", "max");
  print_quantiles("start (from first start)", start);
  print_quantiles("streaming (start..streamed)", stream);
  print_quantiles("streamed (from first start)", streamed);
  print_quantiles("warps joined (..joined)", join);
  print_quantiles("publish+count (..counted)", count);
  if (!merge.empty()) print_quantiles("merge, last blocks (..end)", merge);
  print_quantiles("end (from first start)", end);
}

// Clears the records before a launch (blocks that return early leave none).
static void decode_trace_before_launch(cudaStream_t stream) {
  void* records = nullptr;
  cudaError_t err = cudaGetSymbolAddress(&records, g_decode_trace);
  if (err == cudaSuccess)
    err = cudaMemsetAsync(records, 0, sizeof(DecodeTraceRecord) * kDecodeTraceBlocks, stream);
  if (err != cudaSuccess) std::fprintf(stderr, "decode trace: %s\n", cudaGetErrorString(err));
}
// Waits for the launch and prints its summary (a diagnostic build: every launch
// synchronises, so its timings are not the kernel's).
static void decode_trace_after_launch(cudaStream_t stream) {
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "decode trace: %s\n", cudaGetErrorString(err));
    return;
  }
  decode_trace_summary();
}
#else
__device__ __forceinline__ void decode_trace(DecodeMark) {}
inline void decode_trace_before_launch(cudaStream_t) {}
inline void decode_trace_after_launch(cudaStream_t) {}
#endif

}  // namespace flash::cuda
