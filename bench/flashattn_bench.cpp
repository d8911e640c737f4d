// flashattn_bench: every backend × dtype × shape × {causal, not} × {forward, backward}.
//
// Names: attn/<fwd|bwd>/<backend>/<dtype>/<shape>/<causal|none>, e.g.
//   attn/fwd/cpu/f32/B1_Hq8_Hkv8_Sq1024_Sk1024_D64/causal
// Counters: FLOPS (FlashAttention's count, common/flops.hpp), bytes_per_second
// (compulsory traffic) and, for the cpu backend, peak_share: FLOPS over the FMA
// ceiling of fma_peak.cpp probed in the same process with the backend's threads.
// Host backends are timed on the wall clock; GPU backends with events around each
// call after a warm-up call, with L2 evicted before each timed call (manual time).
// A backend that is unavailable, or declines a problem, is skipped with the
// library's reason. JSON: --benchmark_format=json.
//
//   flashattn_bench --benchmark_filter=_Sq128_Sk128_D64/ --benchmark_min_time=0.05  # CI
//   flashattn_bench --benchmark_filter='attn/fwd/cpu/f32/.*D128'
//   flashattn_bench --benchmark_filter=BM_cpu_fma_peak
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/device.hpp"
#include "common/flops.hpp"
#include "common/problem.hpp"
#include "common/workload.hpp"
#include "flash/flash.hpp"
#include "fma_peak.hpp"
#include "shapes.hpp"

namespace {

constexpr uint64_t kInputSeed = 20261121;

bool is_gpu(flash::Backend b) { return b == flash::Backend::cuda || b == flash::Backend::hip; }

// One device per backend for the whole run (a CUDA context is expensive). Never
// destroyed: the GPU runtime may already be torn down at exit.
bench::Device* device_for(flash::Backend backend, std::string* why_not) {
  static std::map<flash::Backend, bench::Device*> devices;
  static std::map<flash::Backend, std::string> failures;
  if (auto it = devices.find(backend); it != devices.end()) return it->second;
  if (auto it = failures.find(backend); it != failures.end()) {
    *why_not = it->second;
    return nullptr;
  }
  std::unique_ptr<bench::Device> device = bench::open_device(backend, why_not);
  if (!device) {
    failures[backend] = *why_not;
    return nullptr;
  }
  return devices[backend] = device.release();
}

// Threads the cpu backend runs on: OpenMP's default, or OMP_NUM_THREADS when set.
int cpu_backend_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0)
    return std::atoi(env);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

// FMA ceiling with the cpu backend's threads, probed once per process.
double cpu_peak_flops() {
  static const double peak = bench::fma_peak_flops(cpu_backend_threads());
  return peak;
}

void BM_attention(benchmark::State& state, flash::AttentionDesc desc, bool backward,
                  flash::BackendInfo info) {
  if (!info.available) {
    state.SkipWithError(("backend unavailable: " + info.reason).c_str());
    return;
  }
  std::string why_not;
  bench::Device* device = device_for(desc.backend, &why_not);
  if (!device) {
    state.SkipWithError(why_not.c_str());
    return;
  }
  double loop_seconds = 0.0;
  try {
    const bench::HostInputs inputs = bench::make_host_inputs(desc, backward, kInputSeed);
    bench::Workload workload(desc, backward, *device, inputs);
    workload.prepare();
    workload.run();  // warm-up: module load, kernel choice, first-touch of memory
    device->synchronize();
    const auto loop_start = std::chrono::steady_clock::now();
    for (auto _ : state) {
      if (is_gpu(desc.backend)) {
        device->evict_cache();
        state.SetIterationTime(device->time_ms([&] { workload.run(); }) / 1e3);
      } else {
        workload.run();
      }
    }
    loop_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
  } catch (const std::exception& e) {  // flash::Error: declined problem; runtime failures
    state.SkipWithError(e.what());
    return;
  }
  const double flops = backward ? bench::backward_flops(desc) : bench::forward_flops(desc);
  const double bytes =
      backward ? bench::backward_bytes(desc) : bench::forward_bytes(desc, /*with_lse=*/false);
  // Raw rates: the console prints them with SI prefixes ("FLOPS=1.23T/s" is
  // 1.23 TFLOP/s, "bytes_per_second=850G/s" is 850 GB/s); JSON keeps the plain numbers.
  state.counters["FLOPS"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  // The cpu backend's acceptance is stated as a share of the FMA ceiling measured in
  // the same process with the same thread count (1.0 = every FMA unit busy).
  // A plain value (the rate is computed here), so the console shows no "/s".
  if (desc.backend == flash::Backend::cpu && cpu_peak_flops() > 0 && loop_seconds > 0)
    state.counters["peak_share"] =
        flops * static_cast<double>(state.iterations()) / loop_seconds / cpu_peak_flops();
  state.SetLabel(info.detail);
}

std::vector<bench::Shape> shapes_for(flash::Backend backend) {
  std::vector<bench::Shape> shapes = bench::ci_shapes();
  std::vector<bench::Shape> more;
  if (backend == flash::Backend::cpu) more = bench::host_shapes();
  if (is_gpu(backend)) more = bench::gpu_shapes();
  shapes.insert(shapes.end(), more.begin(), more.end());
  return shapes;
}

void register_attention_benchmarks() {
  for (const flash::BackendInfo& info : flash::backends()) {
    for (flash::DType dtype : {flash::DType::f32, flash::DType::f16, flash::DType::bf16})
      for (const bench::Shape& s : shapes_for(info.backend))
        for (bool causal : {false, true})
          for (bool backward : {false, true}) {
            flash::AttentionDesc d;
            d.batch = s.batch;
            d.heads_q = s.heads_q;
            d.heads_kv = s.heads_kv;
            d.seqlen_q = s.seqlen_q;
            d.seqlen_kv = s.seqlen_kv;
            d.head_dim = s.head_dim;
            d.dtype = dtype;
            d.causal = causal;
            d.backend = info.backend;
            const std::string name = std::string("attn/") + (backward ? "bwd/" : "fwd/") +
                                     flash::to_string(info.backend) + "/" +
                                     flash::to_string(dtype) + "/" + bench::shape_label(d) + "/" +
                                     bench::mask_label(d);
            benchmark::internal::Benchmark* b =
                benchmark::RegisterBenchmark(name.c_str(), BM_attention, d, backward, info);
            b->Unit(benchmark::kMillisecond);
            if (is_gpu(info.backend))
              b->UseManualTime();
            else
              b->UseRealTime();  // the backend's threads work while this one waits
          }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("flashattn", flash::version());
  for (const flash::BackendInfo& info : flash::backends())
    benchmark::AddCustomContext(
        std::string("backend.") + flash::to_string(info.backend),
        info.available ? "available: " + info.detail : "unavailable: " + info.reason);
  register_attention_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
