// The "cpu" backend module: Highway SIMD kernels (targets.cpp) run over OpenMP work
// items. This file holds the one decision (choose), the threading, and the C ABI
// entry point the core's registry calls.
//
// Threads: each call runs an OpenMP parallel loop over work items with a dynamic
// schedule (items of a causal mask differ in cost; the most expensive are handed out
// first), so OMP_NUM_THREADS / omp_set_num_threads set its width. If the caller is
// already inside an OpenMP parallel region the call runs on the calling thread only:
// the caller has chosen its parallelism and a nested team would oversubscribe the
// cores. Callers that run several attention calls from their own (non-OpenMP) thread
// pool should set OMP_NUM_THREADS (or omp_set_num_threads) so that threads x
// OpenMP width does not exceed the cores.
// Memory: per-thread workspace of O(tile) floats in thread-local storage, grown to
// the largest tile set seen and reused by later calls (see Workspace in cpu_plan.h).

#include <omp.h>

#include <atomic>
#include <exception>
#include <string>
#include <vector>

#include "backends/cpu/cpu_plan.h"
#include "backends/cpu/targets.h"
#include "dispatch/backend_adapter.hpp"
#include "dispatch/sequence_arrays.hpp"
#include "flash/flash.hpp"

namespace flash::cpu {
namespace {

// Runs fn(i) for i in [0, n) over OpenMP threads (see the file comment). An exception
// from any item (std::bad_alloc from a workspace) is rethrown after the loop.
template <class Fn>
void ParallelFor(int64_t n, const Fn& fn) {
  const bool nested = omp_in_parallel() != 0;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel for schedule(dynamic, 1) if (!nested && n > 1)
  for (int64_t i = 0; i < n; ++i) {
    if (failed.load(std::memory_order_relaxed)) continue;
    try {
      fn(i);
    } catch (...) {
#pragma omp critical(flash_cpu_error)
      if (!error) error = std::current_exception();
      failed.store(true);
    }
  }
  if (error) std::rethrow_exception(error);
}

const char* DTypeName(int32_t dtype) {
  return dtype == FLASH_F32 ? "f32" : dtype == FLASH_F16 ? "f16" : "bf16";
}

struct CpuBackend {
  static const char* name() { return "cpu"; }

  static bool probe(std::string& reason, std::string& detail) {
    // The hardware decides availability. A bad FLASH_CPU_TARGET is a configuration
    // error of the call: choose() raises it (invalid argument) when the cpu backend
    // is used, so here it only shows in the detail.
    const TargetKernels* target = &SupportedTargets().front();
    std::string simd;
    try {
      target = &SelectTarget();
      simd = target->name;
    } catch (const flash::Error& e) {
      simd = std::string("invalid FLASH_CPU_TARGET (") + e.what() + ")";
    }
    const TargetKernels& t = *target;
    detail = std::string("simd=") + simd + "; supported=" + SupportedList() +
             "; threads=" + std::to_string(omp_get_max_threads()) +
             "; tile=" + std::to_string(t.tiles.rows) + "x" + std::to_string(t.tiles.keys);
    reason.clear();
    return true;
  }

  static bool owns_pointer(const void*) { return false; }  // host memory only

  static flash::detail::Choice choose(const flash_problem& p, int direction) {
    // Every validated problem runs (any head_dim, dtype, mask, stride); only the SIMD
    // target and the fast/tail path vary.
    const TargetKernels& t = SelectTarget();
    if (direction == FLASH_MERGE)
      return flash::detail::Choice::decline("cpu backend: merge_partials is not implemented yet");
    if (flash::detail::has_sequence_arrays(p))
      return flash::detail::Choice::decline(
          "cpu backend: packed batches, cache lengths and paged caches are not implemented yet");
    const bool vec = p.head_dim % static_cast<int64_t>(t.tiles.lanes) == 0 &&
                     p.head_dim_v % static_cast<int64_t>(t.tiles.lanes) == 0;
    std::string kernel = std::string("cpu.") + (direction == FLASH_BACKWARD ? "bwd." : "fwd.") +
                         t.name + "." + DTypeName(p.dtype) + ".d" + std::to_string(p.head_dim);
    if (p.head_dim_v != p.head_dim) kernel += "v" + std::to_string(p.head_dim_v);
    if (!vec) kernel += ".tail";
    return flash::detail::Choice::run(kernel);
  }

  static void forward(const flash_problem& p, const void* q, const void* k, const void* v,
                      void* o) {
    const TargetKernels& t = SelectTarget();
    CallArgs args{&p, q, k, v, o, o, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    const Plan plan = Plan::Make(args, t.tiles, Plan::kMaxPasses);
    ParallelFor(plan.q_items(), [&](int64_t item) { t.forward_item(plan, item); });
  }

  static void backward(const flash_problem& p, const void* q, const void* k, const void* v,
                       const void* o, const void* dout, const float* lse, void* dq, void* dk,
                       void* dv) {
    const TargetKernels& t = SelectTarget();
    // Dᵢ per query row: O(batch·heads·seqlen_q), like lse (the backward is allowed
    // per-call memory of that size; nothing of size seqlen_q x seqlen_kv).
    std::vector<float> delta(static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q));
    CallArgs args{&p, q, k, v, o, nullptr, dout, lse, dq, dk, dv, delta.data()};
    const Plan plan = Plan::Make(args, t.tiles, Plan::kMaxPasses, Plan::kMaxPasses);
    ParallelFor(plan.delta_items(), [&](int64_t item) { t.backward_delta_item(plan, item); });
    if (p.seqlen_kv > 0)
      ParallelFor(plan.kv_items(), [&](int64_t item) { t.backward_kv_item(plan, item); });
    ParallelFor(plan.q_items(), [&](int64_t item) { t.backward_q_item(plan, item); });
  }

  static void merge(const flash_problem&, int64_t, const void*, const float*, void*, float*) {
    throw flash::Error("cpu backend: merge_partials is not implemented yet",
                       flash::Error::Kind::unsupported);
  }
};

}  // namespace
}  // namespace flash::cpu

extern "C" const flash_backend_module* flash_cpu_module(void) {
  return flash::detail::make_module<flash::cpu::CpuBackend>();
}
