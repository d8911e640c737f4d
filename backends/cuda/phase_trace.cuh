// Where a kernel's cycles go, per role and phase, for diagnostic builds only
// (-DFLASH_PHASE_TRACE; how to run: backends/cuda/README.md, "How to check and measure").
// One thread of each role (an MMA warpgroup, the producer, ...) marks the end of each phase
// it runs: the cycles since its previous mark (clock, this SM's clock) are added to a
// per-SM table [role][phase] with fire-and-forget reductions (red.global: no return value, no
// stall), with a count of marks. After the launch (synchronising: every traced launch does)
// the launcher prints, per role, each phase's share of the role's cycles and its cycles per
// mark. Phases are the kernel's own small enums; the printout takes their names.
// What it costs: two registers (the last clock, the role) and two reductions per mark in the
// tracing thread; the kernels' registers and spills move a little, so trace builds are for where
// the time goes, not for speeds. Without the macro every hook is empty and nothing here is compiled
// into the module.
#pragma once

#include <cuda_runtime.h>

#ifdef FLASH_PHASE_TRACE
#include <cstdio>
#include <vector>
#endif

namespace flash::cuda {

constexpr int kTraceRoles = 4, kTracePhases = 12, kTraceSms = 256;

#ifdef FLASH_PHASE_TRACE
// static: one table per translation unit, read by that unit's launchers (as decode_trace.cuh).
static __device__ unsigned long long g_phase_cycles[kTraceSms][kTraceRoles][kTracePhases];
static __device__ unsigned long long g_phase_marks[kTraceSms][kTraceRoles][kTracePhases];

// The clock of one tracing thread; other threads hold one that records nothing.
class PhaseClock {
 public:
  __device__ __forceinline__ PhaseClock(bool tracing, int role)
      : last_(tracing ? clock() : 0), role_(tracing ? role : -1) {}
  __device__ __forceinline__ void mark(int phase) {
    if (role_ < 0) return;
    const unsigned now = clock();  // 32 bits: one register; phases are far shorter than 2^32
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    sm %= kTraceSms;
    atomicAdd(&g_phase_cycles[sm][role_][phase], static_cast<unsigned long long>(now - last_));
    atomicAdd(&g_phase_marks[sm][role_][phase], 1ull);
    last_ = now;
  }

 private:
  unsigned last_;
  int role_;
};

static void phase_trace_before_launch(cudaStream_t stream) {
  void* cycles = nullptr;
  void* marks = nullptr;
  cudaError_t err = cudaGetSymbolAddress(&cycles, g_phase_cycles);
  if (err == cudaSuccess) err = cudaGetSymbolAddress(&marks, g_phase_marks);
  if (err == cudaSuccess) err = cudaMemsetAsync(cycles, 0, sizeof(g_phase_cycles), stream);
  if (err == cudaSuccess) err = cudaMemsetAsync(marks, 0, sizeof(g_phase_marks), stream);
  if (err != cudaSuccess) std::fprintf(stderr, "phase trace: %s\n", cudaGetErrorString(err));
}

// Waits for the launch and prints the table of `kernel`: role r named roles[r] (nullptr
// ends the list), phase i named phases[i] (nullptr ends it).
static void phase_trace_after_launch(cudaStream_t stream, const char* kernel,
                                     const char* const* roles, const char* const* phases) {
  using Table = unsigned long long[kTraceSms][kTraceRoles][kTracePhases];
  std::vector<unsigned long long> cycles(sizeof(Table) / 8), marks(sizeof(Table) / 8);
  cudaError_t err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess) err = cudaMemcpyFromSymbol(cycles.data(), g_phase_cycles, sizeof(Table));
  if (err == cudaSuccess) err = cudaMemcpyFromSymbol(marks.data(), g_phase_marks, sizeof(Table));
  if (err != cudaSuccess) {
    std::fprintf(stderr, "phase trace: %s\n", cudaGetErrorString(err));
    return;
  }
  std::fprintf(stderr, "phase trace of %s (cycles summed over SMs; per mark = cycles / marks)\n",
               kernel);
  for (int r = 0; r < kTraceRoles && roles[r] != nullptr; ++r) {
    unsigned long long total = 0, sum_c[kTracePhases] = {}, sum_m[kTracePhases] = {};
    for (int sm = 0; sm < kTraceSms; ++sm)
      for (int ph = 0; ph < kTracePhases; ++ph) {
        const size_t i = (static_cast<size_t>(sm) * kTraceRoles + r) * kTracePhases + ph;
        sum_c[ph] += cycles[i];
        sum_m[ph] += marks[i];
        total += cycles[i];
      }
    if (total == 0) continue;
    std::fprintf(stderr, "  %s: %.3g cycles\n", roles[r], static_cast<double>(total));
    for (int ph = 0; ph < kTracePhases && phases[ph] != nullptr; ++ph)
      if (sum_m[ph] > 0)
        std::fprintf(stderr, "    %-22s %5.1f %%  %9.0f cycles / mark  (%llu marks)\n", phases[ph],
                     100.0 * sum_c[ph] / total, static_cast<double>(sum_c[ph]) / sum_m[ph],
                     sum_m[ph]);
  }
}
#else
class PhaseClock {
 public:
  __device__ __forceinline__ PhaseClock(bool, int) {}
  __device__ __forceinline__ void mark(int) {}
};
inline void phase_trace_before_launch(cudaStream_t) {}
inline void phase_trace_after_launch(cudaStream_t, const char*, const char* const*,
                                     const char* const*) {}
#endif

}  // namespace flash::cuda
