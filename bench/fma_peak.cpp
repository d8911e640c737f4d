// BM_cpu_fma_peak: the f32 multiply-add ceiling of this CPU, the yardstick for the
// cpu backend (its acceptance states GFLOP/s as a share of this peak).
//
// Each thread runs kChains independent accumulator chains, acc = acc·x + y, held in
// vector registers: an FMA has ~4 cycles latency and cores issue 2 per cycle, so at
// least 8 chains must be in flight to hide the latency; the extra chains cover cores
// with longer latency. No loads or stores inside the loop (check:
//   objdump -d --no-show-raw-insn bench/flashattn_bench | grep -A40 'fma_chains_avx512'
// shows only vfmadd...ps on zmm registers plus the loop counter).
// Uses the widest of AVX-512F and AVX2+FMA that the CPU has, chosen at run time.
#include "fma_peak.hpp"

#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace {

// Independent chains per thread: 2 FMA ports × 4-cycle latency = 8, plus margin.
// 12 of 16 ymm registers (AVX2) or 12 of 32 zmm registers (AVX-512) stay free of spills.
constexpr int kChains = 12;
// FMAs per chain per call: long enough that the call overhead vanishes.
constexpr int64_t kStepsPerCall = 1 << 20;
constexpr double kFlopsPerFma = 2.0;
// acc·x + y converges to y / (1 - x) = 0.1: values stay normal (no denormal slowdown).
constexpr float kMultiplier = 0.999999f;
constexpr float kAddend = 1e-7f;

__attribute__((target("avx512f"))) float fma_chains_avx512() {
  const __m512 x = _mm512_set1_ps(kMultiplier), y = _mm512_set1_ps(kAddend);
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  for (int64_t step = 0; step < kStepsPerCall; ++step) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], x, y);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0f;
  for (float lane : lanes) total += lane;
  return total;
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2() {
  const __m256 x = _mm256_set1_ps(kMultiplier), y = _mm256_set1_ps(kAddend);
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  for (int64_t step = 0; step < kStepsPerCall; ++step) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], x, y);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0f;
  for (float lane : lanes) total += lane;
  return total;
}

struct FmaKernel {
  float (*run)();
  int lanes;         // f32 lanes per vector
  const char* name;  // ISA, for the benchmark's label
};

FmaKernel widest_fma_kernel() {
  if (__builtin_cpu_supports("avx512f")) return {fma_chains_avx512, 16, "avx512f zmm"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {fma_chains_avx2, 8, "avx2+fma ymm"};
  return {nullptr, 0, "no AVX2/FMA"};
}

void BM_cpu_fma_peak(benchmark::State& state) {
  const FmaKernel kernel = widest_fma_kernel();
  if (!kernel.run) {
    state.SkipWithError("CPU has neither AVX-512F nor AVX2+FMA");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(kernel.run());
  const double flops_per_call =
      kFlopsPerFma * kChains * kernel.lanes * static_cast<double>(kStepsPerCall);
  // Iterations are already summed over threads; averaging the per-thread counter keeps
  // it from being summed a second time: total FLOPs / wall time, the all-threads rate.
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops_per_call / 1e9, benchmark::Counter::kIsIterationInvariantRate |
                                benchmark::Counter::kAvgThreads);
  state.SetLabel(kernel.name);
}

const unsigned kAllThreads =
    std::thread::hardware_concurrency() ? std::thread::hardware_concurrency() : 1;

// Calls per thread for fma_peak_flops(): 32 calls ≈ 50-100 ms per thread, timed from
// the moment every thread is running, so thread start-up stays out of the rate.
constexpr int kProbeCallsPerThread = 32;

}  // namespace

namespace bench {

double fma_peak_flops(int threads) {
  const FmaKernel kernel = widest_fma_kernel();
  if (!kernel.run || threads < 1) return 0.0;
  std::vector<std::thread> workers;
  std::atomic<int> ready{0};
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      ready.fetch_add(1);
      while (ready.load() < threads) {  // start together
      }
      for (int i = 0; i < kProbeCallsPerThread; ++i) benchmark::DoNotOptimize(kernel.run());
    });
  while (ready.load() < threads) {
  }
  const auto start = std::chrono::steady_clock::now();
  for (std::thread& w : workers) w.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double flops_per_call =
      kFlopsPerFma * kChains * kernel.lanes * static_cast<double>(kStepsPerCall);
  return threads * kProbeCallsPerThread * flops_per_call / seconds;
}

}  // namespace bench

// Single thread and every hardware thread; wall time, since the rate is per second.
BENCHMARK(BM_cpu_fma_peak)->Threads(1)->UseRealTime();
BENCHMARK(BM_cpu_fma_peak)->Threads(static_cast<int>(kAllThreads))->UseRealTime();
