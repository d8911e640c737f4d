// Quick GFLOP/s of the CPU backend beside this machine's f32 FMA peak, for kernel
// development (the project's benchmark is bench/flashattn_bench). Not a test.
// Usage: flash_cpu_speed [batch heads seqlen head_dim dtype(f32|f16|bf16) reps]
//        flash_cpu_speed [batch heads seqlen head_dim A/B reps], e.g. bf16/f32: forwards of
//        A and B alternate in one run (A, B, B, A, ...), each round printing both and
//        the ratio A/B (wall and per CPU-second), then the median ratio. A side is
//        dtype[@target]: bf16@amx/bf16@avx512bf16 runs bf16 with FLASH_CPU_TARGET=amx
//        against bf16 with FLASH_CPU_TARGET=avx512bf16 (no @: the environment's choice).
//        An 8th argument "backward" alternates backwards instead of forwards. A side may
//        end in #0 or #1: FLASH_CPU_BWD_FUSED for it, e.g. f32#1/f32#0 backward times the
//        fused f32 backward against the two passes.
// FLOPs: 4·B·H·Sq·Sk·D forward (half for causal); backward 2.5x forward.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "cpu_test_util.h"

namespace {

using Clock = std::chrono::steady_clock;

// CPU seconds of the whole process (all threads). On a shared machine the wall clock
// includes time the scheduler gave to other users' processes; CPU time does not, so
// flops / (CPU time / threads) estimates the speed on a quiet machine (it still counts
// cache interference from neighbours).
double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// 12 independent FMA chains of 8 lanes per thread (2 FMA pipes x 4-5 cycles latency
// need >= 10 in flight); the compiler keeps them in ymm registers (-O2 with the
// target attribute; no memory operands in the loop).
__attribute__((target("avx2,fma"))) double FmaPeakAvx2(long iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

// The same with 16-lane zmm registers (12 of 32).
__attribute__((target("avx512f"))) double FmaPeakAvx512(long iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

// Returns {wall GFLOP/s, CPU-time GFLOP/s} of the widest FMA this CPU has (AVX-512F
// or AVX2), whichever the backend's default SIMD target would use.
std::pair<double, double> PeakGflops(int threads) {
  const long iters = 100000000 / 12;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int lanes = avx512 ? 16 : 8;
  double sink = 0;
  const auto t0 = Clock::now();
  const double c0 = CpuSeconds();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  sink += avx512 ? FmaPeakAvx512(iters) : FmaPeakAvx2(iters);
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = (CpuSeconds() - c0) / threads;
  if (sink == 12345.0) std::printf(" ");
  const double flops = 2.0 * lanes * 12 * iters * threads;
  return {flops / sec / 1e9, flops / cpu / 1e9};
}

int32_t DType(const std::string& name) {
  const std::string dtype = name.substr(0, name.find_first_of("@#"));
  return dtype == "f16" ? FLASH_F16 : dtype == "bf16" ? FLASH_BF16 : FLASH_F32;
}

// Sets environment variable `var` to `value` for a scope (none: left as it is).
struct EnvScope {
  std::string var, saved;
  bool had = false, active = false;
  EnvScope(const char* name, const std::string* value) : var(name) {
    if (value == nullptr) return;
    if (const char* old = std::getenv(name)) {
      had = true;
      saved = old;
    }
    setenv(name, value->c_str(), 1);
    active = true;
  }
  ~EnvScope() {
    if (!active) return;
    if (had)
      setenv(var.c_str(), saved.c_str(), 1);
    else
      unsetenv(var.c_str());
  }
};

// The text of side `name` ("dtype[@target][#fused]") after `mark` up to the next mark.
std::string Field(const std::string& name, char mark, bool* present) {
  const size_t at = name.find(mark);
  *present = at != std::string::npos;
  if (!*present) return "";
  const size_t end = name.find_first_of("@#", at + 1);
  return name.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
}

// FLASH_CPU_TARGET (@) and FLASH_CPU_BWD_FUSED (#) for side `name`, or the
// environment's values at start.
struct TargetScope {
  bool has_target = false, has_fused = false;
  std::string target_value, fused_value;
  EnvScope target, fused;
  explicit TargetScope(const std::string& name)
      : target_value(Field(name, '@', &has_target)),
        fused_value(Field(name, '#', &has_fused)),
        target("FLASH_CPU_TARGET", has_target ? &target_value : nullptr),
        fused("FLASH_CPU_BWD_FUSED", has_fused ? &fused_value : nullptr) {}
};

// Forwards of two dtypes on one shape, alternating so that both see the same load.
void Alternate(int64_t B, int64_t H, int64_t S, int64_t D, const std::string& name_a,
               const std::string& name_b, int reps, bool backward) {
  using namespace flash::cpu::test;
  const int threads = omp_get_max_threads();
  for (bool causal : {false, true}) {
    std::vector<Problem> pr;
    const std::string names[2] = {name_a, name_b};
    for (const std::string& name : names) {
      Case c;
      c.batch = B;
      c.hq = c.hk = H;
      c.sq = c.sk = S;
      c.d = D;
      c.dtype = DType(name);
      c.causal = causal;
      pr.emplace_back(c);
      const TargetScope target(name);
      std::string error;
      // Also warms the workspaces; the backward reads this forward's o and lse.
      if (pr.back().Forward(&error) != FLASH_OK ||
          (backward && pr.back().Backward(&error) != FLASH_OK)) {
        std::printf("%s: %s\n", name.c_str(), error.c_str());
        std::exit(1);
      }
    }
    const double flops = 4.0 * B * H * S * S * D * (causal ? 0.5 : 1.0) * (backward ? 2.5 : 1.0);
    std::vector<double> ratio_wall, ratio_cpu;
    for (int r = 0; r < reps; ++r) {
      double wall[2], cpu[2];
      for (int k = 0; k < 2; ++k) {
        const int which = r % 2 == 0 ? k : 1 - k;  // A B, then B A
        const TargetScope target(names[which]);
        const auto t0 = Clock::now();
        const double c0 = CpuSeconds();
        if (backward)
          pr[which].Backward();
        else
          pr[which].Forward();
        cpu[which] = flops / ((CpuSeconds() - c0) / threads) / 1e9;
        wall[which] = flops / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
      }
      ratio_wall.push_back(wall[0] / wall[1]);
      ratio_cpu.push_back(cpu[0] / cpu[1]);
      std::printf(
          "%s %s round %d: %s %.1f GFLOP/s (%.1f per CPU-s) | %s %.1f (%.1f) | ratio %.2f "
          "(%.2f per CPU-s)\n",
          backward ? "backward" : "forward", causal ? "causal" : "full", r, name_a.c_str(), wall[0],
          cpu[0], name_b.c_str(), wall[1], cpu[1], ratio_wall.back(), ratio_cpu.back());
    }
    std::sort(ratio_wall.begin(), ratio_wall.end());
    std::sort(ratio_cpu.begin(), ratio_cpu.end());
    std::printf(
        "%s %s B=%ld H=%ld S=%ld D=%ld, %d threads: median ratio %s/%s %.2f wall, %.2f per "
        "CPU-s (range %.2f-%.2f wall)\n",
        backward ? "backward" : "forward", causal ? "causal" : "full", (long)B, (long)H, (long)S,
        (long)D, threads, name_a.c_str(), name_b.c_str(), ratio_wall[ratio_wall.size() / 2],
        ratio_cpu[ratio_cpu.size() / 2], ratio_wall.front(), ratio_wall.back());
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace flash::cpu::test;
  const int64_t B = argc > 1 ? std::atol(argv[1]) : 1, H = argc > 2 ? std::atol(argv[2]) : 8;
  const int64_t S = argc > 3 ? std::atol(argv[3]) : 2048, D = argc > 4 ? std::atol(argv[4]) : 128;
  const std::string dt = argc > 5 ? argv[5] : "f32";
  const int reps = argc > 6 ? std::atoi(argv[6]) : 3;
  const int32_t dtype = DType(dt);
  const int threads = omp_get_max_threads();
  flash_message reason{}, detail{};
  flash_cpu_module()->probe(&reason, &detail);
  std::printf("cpu backend: %s\n", detail.text);
  if (const size_t slash = dt.find('/'); slash != std::string::npos) {
    const bool backward = argc > 7 && std::string(argv[7]) == "backward";
    Alternate(B, H, S, D, dt.substr(0, slash), dt.substr(slash + 1), reps, backward);
    return 0;
  }
  const TargetScope target(dt);
  const bool probe_peak = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  // The machine is shared: interleave the peak probe with the kernel and keep the best
  // of each, so both see the same (least) interference.
  double peak = 0, peak_cpu = 0;
  auto sample_peak = [&] {
    if (!probe_peak) return;
    const auto pk = PeakGflops(threads);
    peak = std::max(peak, pk.first);
    peak_cpu = std::max(peak_cpu, pk.second);
  };
  for (bool causal : {false, true}) {
    Case c;
    c.batch = B;
    c.hq = c.hk = H;
    c.sq = c.sk = S;
    c.d = D;
    c.dtype = dtype;
    c.causal = causal;
    Problem pr(c);
    std::string error;
    if (pr.Forward(&error) != FLASH_OK) {  // also warms the workspaces
      std::printf("%s: %s\n", dt.c_str(), error.c_str());
      return 1;
    }
    const double flops = 4.0 * B * H * S * S * D * (causal ? 0.5 : 1.0);
    double best_f = 1e30, best_b = 1e30, best_fc = 1e30, best_bc = 1e30;
    for (int r = 0; r < reps; ++r) {
      sample_peak();
      auto t0 = Clock::now();
      const double c0 = CpuSeconds();
      pr.Forward();
      best_fc = std::min(best_fc, (CpuSeconds() - c0) / threads);
      best_f = std::min(best_f, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    for (int r = 0; r < (reps + 1) / 2; ++r) {
      auto t0 = Clock::now();
      const double c0 = CpuSeconds();
      pr.Backward();
      best_bc = std::min(best_bc, (CpuSeconds() - c0) / threads);
      best_b = std::min(best_b, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::printf(
        "%s B=%ld H=%ld S=%ld D=%ld %s, %d threads: forward %.1f ms %.1f GFLOP/s (%.0f%% of "
        "peak %.1f) | backward %.1f ms %.1f GFLOP/s\n",
        dt.c_str(), (long)B, (long)H, (long)S, (long)D, causal ? "causal" : "full", threads,
        best_f * 1e3, flops / best_f / 1e9, 100 * flops / best_f / 1e9 / peak, peak, best_b * 1e3,
        2.5 * flops / best_b / 1e9);
    std::printf(
        "    by CPU time: forward %.1f GFLOP/s = %.0f%% of FMA peak %.1f (CPU time); "
        "backward %.1f GFLOP/s\n",
        flops / best_fc / 1e9, 100 * flops / best_fc / 1e9 / peak_cpu, peak_cpu,
        2.5 * flops / best_bc / 1e9);
  }
  return 0;
}
