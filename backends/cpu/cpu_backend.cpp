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

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/avx512bf16.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_plan.h"
#include "backends/cpu/cpu_sequences.h"
#include "backends/cpu/decode_plan.h"
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

// Threads a ParallelFor called here would use (1 inside an OpenMP parallel region).
int64_t LoopThreads() { return omp_in_parallel() != 0 ? 1 : omp_get_max_threads(); }

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
    const std::string unsupported = UnsupportedList();
    if (!unsupported.empty()) detail += "; unsupported=" + unsupported;
    reason.clear();
    return true;
  }

  static bool owns_pointer(const void*) { return false; }  // host memory only

  // Every switch environment variable checked on every call, whichever path the call
  // takes (a bad value fails even where its knob does not apply, before any work).
  static void ValidateSwitches() {
    (void)DecodePrefetchPolicy(sizeof(float));
    (void)FusedBackward::Forced();
    (void)Plan::CostOrderEnabled();
    (void)Plan::MinItems();
  }

  static flash::detail::Choice choose(const flash_problem& p, int direction) {
    ValidateSwitches();
    return flash::detail::Choice::run(Decide(p, direction, SelectTarget()).kernel);
  }

  static void forward(const flash_problem& p, const void* q, const void* k, const void* v,
                      void* o) {
    ValidateSwitches();
    const TargetKernels& selected = SelectTarget();
    const Decision decision = Decide(p, FLASH_FORWARD, selected);
    if (decision.path == Path::kDecode) return DecodeForward(selected, p, q, k, v, o);
    // The bf16 forwards (vdpbf16ps, AMX tiles) share the avx512 target's Plan (same
    // tiles), so only the item function differs.
    TargetKernels t = selected;
    if (decision.path == Path::kBf16Tiles) t.forward_item = t.bf16_forward_item;
    if (detail::has_sequence_arrays(p)) return ForwardSequences(t, p, q, k, v, o);
    CallArgs args{&p, q, k, v, o, o, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    Plan plan = Plan::Make(args, t.tiles, Plan::kMaxPasses);
    plan.OrderForThreads(LoopThreads());  // item order only: results do not depend on it
    ParallelFor(plan.q_items(), [&](int64_t item) { t.forward_item(plan, item); });
  }

  static void backward(const flash_problem& p, const void* q, const void* k, const void* v,
                       const void* o, const void* dout, const float* lse, void* dq, void* dk,
                       void* dv) {
    ValidateSwitches();
    const TargetKernels& selected = SelectTarget();
    // The bf16 backwards (vdpbf16ps, AMX tiles) share the avx512 target's Plan: only the
    // dK/dV and dQ item functions differ.
    TargetKernels t = selected;
    const Decision decision = Decide(p, FLASH_BACKWARD, selected);
    if (decision.path == Path::kBf16Tiles) {
      t.backward_kv_item = t.bf16_backward_kv_item;
      t.backward_q_item = t.bf16_backward_q_item;
    }
    if (detail::has_sequence_arrays(p))
      return BackwardSequences(t, p, q, k, v, o, dout, lse, dq, dk, dv, decision.fused);
    // Dᵢ per query row: O(batch·heads·seqlen_q), like lse (the backward is allowed
    // per-call memory of that size; nothing of size seqlen_q x seqlen_kv).
    std::vector<float> delta(static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q));
    CallArgs args{&p, q, k, v, o, nullptr, dout, lse, dq, dk, dv, delta.data()};
    Plan plan = Plan::Make(args, t.tiles, Plan::kMaxPasses, Plan::kMaxPasses);
    plan.OrderForThreads(LoopThreads());  // item order only: results do not depend on it
    ParallelFor(plan.delta_items(), [&](int64_t item) { t.backward_delta_item(plan, item); });
    if (decision.fused)
      return ParallelFor(plan.bh, [&](int64_t item) { t.backward_fused_item(plan, item); });
    if (p.seqlen_kv > 0)
      ParallelFor(plan.kv_items(), [&](int64_t item) { t.backward_kv_item(plan, item); });
    ParallelFor(plan.q_items(), [&](int64_t item) { t.backward_q_item(plan, item); });
  }

  // merge_partials: per (row, head), the parts' weights exp(lse_i - lse) in double
  // (parts is small), then one pass over head_dim_v. Bandwidth-bound: rows in parallel.
  static void merge(const flash_problem& p, int64_t parts, const void* o_parts,
                    const float* lse_parts, void* o, float* lse) {
    const bool packed = p.cu_seqlens_q != nullptr;
    const int64_t rows = packed ? p.cu_seqlens_q[p.batch] : p.batch * p.seqlen_q;
    const int64_t hq = p.heads_q, dv = p.head_dim_v;
    const int64_t part_lse = rows * hq, part_o = part_lse * dv;
    constexpr double kNegInf = -std::numeric_limits<double>::infinity();
    ParallelFor(p.batch, [&](int64_t b) {
      const int64_t sq = packed ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.seqlen_q;
      const int64_t row0 = packed ? p.cu_seqlens_q[b] : b * p.seqlen_q;
      std::vector<float> acc(static_cast<size_t>(dv)), part(static_cast<size_t>(dv));
      std::vector<double> weight(static_cast<size_t>(parts));
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t h = 0; h < hq; ++h) {
          const int64_t li = packed ? h * rows + row0 + i : (b * hq + h) * p.seqlen_q + i;
          double max = kNegInf;
          // A NaN part makes the row NaN (max keeps NaN, then every weight is NaN).
          for (int64_t t = 0; t < parts; ++t) {
            const double l = lse_parts[t * part_lse + li];
            max = std::isnan(max) || std::isnan(l) ? l + max : std::fmax(max, l);
          }
          double total = kNegInf;
          std::fill(acc.begin(), acc.end(), 0.f);
          if (max != kNegInf) {
            double sum = 0;
            for (int64_t t = 0; t < parts; ++t) sum += std::exp(lse_parts[t * part_lse + li] - max);
            total = max + std::log(sum);
            for (int64_t t = 0; t < parts; ++t) {
              const double l = lse_parts[t * part_lse + li];
              if (l == kNegInf) continue;
              const float w = static_cast<float>(std::exp(l - total));
              const int64_t at = t * part_o + ((row0 + i) * hq + h) * dv;
              LoadScalarRow(p.dtype, Offset(o_parts, p.dtype, at), dv, part.data());
              for (int64_t e = 0; e < dv; ++e) acc[e] += w * part[e];
            }
          }
          void* dst = packed ? At(o, p.dtype, p.o_stride, 0, row0 + i, h)
                             : At(o, p.dtype, p.o_stride, b, i, h);
          StoreFromF32(p.dtype, acc.data(), static_cast<size_t>(dv), 1.0f, dst);
          if (lse) lse[li] = static_cast<float>(total);
        }
    });
  }

  enum class Path { kTiles, kBf16Tiles, kDecode, kMerge };
  struct Decision {
    Path path;
    std::string kernel;  // what choose() reports (FLASH_LOG=1)
    bool fused = false;  // backward on Path::kTiles: the fused item instead of two passes
  };

  // The fused backward (FusedBackward in cpu_plan.h) for a backward on the Highway
  // kernels: its dQ accumulator fits for every sequence, and FLASH_CPU_BWD_FUSED=1 or the
  // cost model says batch x kv heads items keep this call's threads busy enough. It may
  // follow the thread count because its results are bitwise those of the two passes.
  static bool FusedBackwardPays(const flash_problem& p, const TargetTiles& tiles) {
    const int forced = FusedBackward::Forced();
    if (forced == 0) return false;
    const int64_t group = p.heads_q / p.heads_kv;
    const int64_t threads = LoopThreads();
    if (!detail::has_sequence_arrays(p)) {
      if (p.seqlen_q == 0 || p.seqlen_kv == 0 ||
          !FusedBackward::Fits(group, p.seqlen_q, p.head_dim, tiles))
        return false;
      if (forced == 1) return true;
      // Equal items: a makespan of ceil(items / threads) items.
      const int64_t items = p.batch * p.heads_kv;
      return FusedBackward::kFusedProducts * static_cast<double>((items + threads - 1) / threads) <=
             FusedBackward::kTwoPassProducts * static_cast<double>(items) /
                 static_cast<double>(threads);
    }
    const detail::SequenceArrays arrays = detail::arrays_of(p);
    std::vector<double> costs;
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t sq = detail::seq_len_q(p, arrays, b), sk = detail::seq_len_kv(p, arrays, b);
      if (!FusedBackward::Fits(group, sq, p.head_dim, tiles)) return false;
      if (sq > 0)
        costs.insert(costs.end(), static_cast<size_t>(p.heads_kv),
                     static_cast<double>(sq) * static_cast<double>(std::max<int64_t>(sk, 1)));
    }
    if (costs.empty()) return false;
    return forced == 1 || FusedBackward::Pays(std::move(costs), threads);
  }

  // The one decision (choose() reports it, forward() follows it). Every validated
  // problem runs (any head_dim, dtype, mask, stride); the SIMD target and the path vary.
  // Decode (decode-inl.h): a forward whose rows per (sequence, kv head) fit one decode
  // item, against enough keys to split, with head dims in whole pairs of vectors (the
  // decode kernel has no partial vectors); it reads paged caches in place.
  // Backward on the Highway kernels: the fused item (".fused") where FusedBackwardPays().
  // amx / avx512bf16: a prefill forward or a backward that Avx512Bf16Declines() accepts
  // (bf16, any head dims) runs the target's own kernels (cpu.fwd.amx.*, cpu.bwd.amx.* on
  // tiles, cpu.fwd.avx512bf16.*, cpu.bwd.avx512bf16.* on vdpbf16ps); f32, f16 and decode
  // run the avx512 Highway kernels and are named so (cpu.*.avx512.*).
  static Decision Decide(const flash_problem& p, int direction, const TargetKernels& t) {
    if (direction == FLASH_MERGE)
      return {Path::kMerge, std::string("cpu.merge.") + DTypeName(p.dtype)};
    const int64_t lanes = static_cast<int64_t>(t.tiles.lanes);
    const bool vec = p.head_dim % lanes == 0 && p.head_dim_v % lanes == 0;
    // The decode kernel widens K/V rows 2 vectors at a time (decode-inl.h LoadPair).
    const bool pairs = p.head_dim % (2 * lanes) == 0 && p.head_dim_v % (2 * lanes) == 0;
    const bool decode = direction == FLASH_FORWARD && pairs &&
                        p.seqlen_q * (p.heads_q / p.heads_kv) <= kDecodeMaxRows &&
                        p.seqlen_kv >= kDecodeMinKeys;
    const bool bf16_ok = Avx512Bf16Declines(p) == nullptr;
    const bool bf16_fwd = t.bf16_forward_item && direction == FLASH_FORWARD && !decode && bf16_ok;
    const bool bf16_bwd = t.bf16_backward_kv_item && direction == FLASH_BACKWARD && bf16_ok;
    const bool bf16 = bf16_fwd || bf16_bwd;
    const char* simd = bf16 ? t.name : t.highway_name;
    std::string kernel = std::string("cpu.") +
                         (decode                        ? "decode."
                          : direction == FLASH_BACKWARD ? "bwd."
                                                        : "fwd.") +
                         simd + "." + DTypeName(p.dtype) + ".d" + std::to_string(p.head_dim);
    if (p.head_dim_v != p.head_dim) kernel += "v" + std::to_string(p.head_dim_v);
    // The bf16 kernel pads head dims to whole pairs / vectors: no separate tail variant.
    if (!vec && !bf16) kernel += ".tail";
    // Inference fields: the tiles run them per sequence (cpu_sequences.h), decode reads
    // them directly; the name says how.
    if (p.cu_seqlens_q || p.cu_seqlens_kv) kernel += ".packed";
    if (p.seqlens_kv) kernel += ".cache";
    if (p.block_table) kernel += decode ? ".paged" : ".paged-gather";
    const bool fused = direction == FLASH_BACKWARD && !bf16 && t.backward_fused_item &&
                       FusedBackwardPays(p, t.tiles);
    if (fused) kernel += ".fused";
    return {decode ? Path::kDecode : bf16 ? Path::kBf16Tiles : Path::kTiles, kernel, fused};
  }

  // Decode: items (sequence, kv head, key chunk) in one parallel loop, then the combine
  // of split (sequence, kv head) pairs in chunk order. The partials live in a scratch of
  // the calling thread, grown to the largest call seen and reused (O(rows x head_dim_v x
  // chunks): a few hundred KiB at most for B=8, Hq=32).
  static void DecodeForward(const TargetKernels& t, const flash_problem& p, const void* q,
                            const void* k, const void* v, void* o) {
    DecodePlan plan = DecodePlan::Make(p, q, k, v, o);
    static thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>(plan.scratch_floats))
      scratch.resize(static_cast<size_t>(plan.scratch_floats));
    plan.scratch = scratch.data();
    ParallelFor(plan.items, [&](int64_t item) { t.decode_item(plan, item); });
    ParallelFor(static_cast<int64_t>(plan.combines.size()),
                [&](int64_t u) { t.decode_combine(plan, plan.combines[static_cast<size_t>(u)]); });
  }

 private:
  // n elements of dtype as f32 (merge's partial rows; scalar: merge is bandwidth-bound).
  static void LoadScalarRow(int32_t dtype, const void* src, int64_t n, float* out) {
    if (dtype == FLASH_F32) {
      std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
      return;
    }
    const uint16_t* bits = static_cast<const uint16_t*>(src);
    for (int64_t e = 0; e < n; ++e) {
      if (dtype == FLASH_F16) {
        out[e] = F32FromF16(bits[e]);
      } else {
        const uint32_t u = static_cast<uint32_t>(bits[e]) << 16;
        std::memcpy(&out[e], &u, sizeof(float));
      }
    }
  }

  // Per-sequence plans over one item space (cpu_sequences.h). max_kv_blocks as in
  // Plan::Make; calls with no query rows get no plan.
  static std::vector<Plan> MakePlans(const TargetKernels& t, std::vector<SequenceCall>& calls,
                                     const std::vector<CallArgs>& args, int max_kv_blocks,
                                     int64_t min_items) {
    std::vector<Plan> plans;
    plans.reserve(calls.size());
    for (size_t s = 0; s < calls.size(); ++s)
      plans.push_back(Plan::Make(args[s], t.tiles, Plan::kMaxPasses, max_kv_blocks, min_items));
    return plans;
  }

  static void ForwardSequences(const TargetKernels& t, const flash_problem& p, const void* q,
                               const void* k, const void* v, void* o) {
    std::vector<SequenceCall> calls =
        SplitSequences(p, q, k, v, nullptr, o, nullptr, nullptr, nullptr, nullptr);
    // Packed queries: the kernels write lse [Hq, Sq_b] per sequence into a scratch, then
    // it is scattered to the caller's [Hq, total_q].
    const bool packed_lse = p.lse && p.cu_seqlens_q;
    std::vector<float> lse_scratch(
        packed_lse ? static_cast<size_t>(p.heads_q * p.cu_seqlens_q[p.batch]) : 0);
    const int64_t min_items = Plan::MinItems();  // one environment read per call
    for (SequenceCall& c : calls)
      c.p.lse = !p.lse       ? nullptr
                : packed_lse ? lse_scratch.data() + c.lse_offset
                             : p.lse + c.b * p.heads_q * p.seqlen_q;
    const auto run = [&](std::vector<SequenceCall>& group) {
      std::vector<CallArgs> args;
      args.reserve(group.size());
      for (SequenceCall& c : group)
        args.push_back(CallArgs{&c.p, c.q, c.k, c.v, c.o, c.o, nullptr, nullptr, nullptr, nullptr,
                                nullptr, nullptr});
      const std::vector<Plan> plans = MakePlans(t, group, args, 1, min_items);
      const ItemSpace items(plans.size(), [&](size_t s) {
        return group[s].p.seqlen_q > 0 ? plans[s].q_items() : int64_t{0};
      });
      ParallelFor(items.total(), [&](int64_t item) {
        const size_t s = items.plan_of(item);
        t.forward_item(plans[s], item - items.first[s]);
      });
    };
    if (!p.block_table) {
      run(calls);
    } else {
      // One sequence at a time: its pages gathered into reused contiguous buffers.
      std::vector<char> k_buf, v_buf;
      for (SequenceCall& c : calls) {
        if (c.p.seqlen_q == 0) continue;
        GatherPages(p, k, v, c, k_buf, v_buf,
                    [](int64_t n, const auto& fn) { ParallelFor(n, fn); });
        std::vector<SequenceCall> one{c};
        run(one);
      }
    }
    if (packed_lse)
      for (const SequenceCall& c : calls)
        for (int64_t h = 0; h < p.heads_q; ++h)
          for (int64_t i = 0; i < c.p.seqlen_q; ++i)
            p.lse[h * p.cu_seqlens_q[p.batch] + c.q_row0 + i] =
                lse_scratch[c.lse_offset + h * c.p.seqlen_q + i];
  }

  static void BackwardSequences(const TargetKernels& t, const flash_problem& p, const void* q,
                                const void* k, const void* v, const void* o, const void* dout,
                                const float* lse, void* dq, void* dk, void* dv, bool fused) {
    // Validation keeps seqlens_kv and block_table out of the backward: packed batches only.
    std::vector<SequenceCall> calls = SplitSequences(p, q, k, v, o, nullptr, dout, dq, dk, dv);
    const int64_t rows =
        calls.empty() ? 0
                      : calls.back().lse_offset / p.heads_q + calls.back().p.seqlen_q;  // Σ Sq_b
    // lse and Δ of each sequence as [Hq, Sq_b] blocks (the kernels' batch-1 layout).
    std::vector<float> lse_scratch(static_cast<size_t>(p.heads_q * rows));
    std::vector<float> delta(static_cast<size_t>(p.heads_q * rows));
    for (const SequenceCall& c : calls)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < c.p.seqlen_q; ++i)
          lse_scratch[c.lse_offset + h * c.p.seqlen_q + i] =
              p.cu_seqlens_q ? lse[h * p.cu_seqlens_q[p.batch] + c.q_row0 + i]
                             : lse[(c.b * p.heads_q + h) * p.seqlen_q + i];
    std::vector<CallArgs> args;
    args.reserve(calls.size());
    for (SequenceCall& c : calls) {
      if (c.p.seqlen_q == 0) ZeroKeyRows(c);  // no query sees these keys: dk = dv = 0
      args.push_back(CallArgs{&c.p, c.q, c.k, c.v, c.o_in, nullptr, c.dout,
                              lse_scratch.data() + c.lse_offset, c.dq, c.dk, c.dv,
                              delta.data() + c.lse_offset});
    }
    const std::vector<Plan> plans = MakePlans(t, calls, args, Plan::kMaxPasses, Plan::MinItems());
    const auto pass = [&](auto count, auto item_fn) {
      const ItemSpace items(plans.size(), [&](size_t s) {
        return calls[s].p.seqlen_q > 0 ? count(plans[s], calls[s].p) : int64_t{0};
      });
      ParallelFor(items.total(), [&](int64_t item) {
        const size_t s = items.plan_of(item);
        item_fn(plans[s], item - items.first[s]);
      });
    };
    pass([](const Plan& pl, const flash_problem&) { return pl.delta_items(); },
         t.backward_delta_item);
    if (fused) {
      pass([](const Plan& pl, const flash_problem& sp) { return sp.seqlen_q > 0 ? pl.bh : 0; },
           t.backward_fused_item);
      return;
    }
    pass([](const Plan& pl,
            const flash_problem& sp) { return sp.seqlen_kv > 0 ? pl.kv_items() : int64_t{0}; },
         t.backward_kv_item);
    pass([](const Plan& pl, const flash_problem&) { return pl.q_items(); }, t.backward_q_item);
  }

  // dk = dv = 0 for the keys of a sequence without query rows (all-zero bits are +0 in
  // every storage type).
  static void ZeroKeyRows(const SequenceCall& c) {
    const flash_problem& p = c.p;
    const size_t eb = ElementSize(p.dtype);
    for (int64_t j = 0; j < p.seqlen_kv; ++j)
      for (int64_t h = 0; h < p.heads_kv; ++h) {
        std::memset(At(c.dk, p.dtype, p.k_stride, 0, j, h), 0,
                    static_cast<size_t>(p.head_dim) * eb);
        std::memset(At(c.dv, p.dtype, p.v_stride, 0, j, h), 0,
                    static_cast<size_t>(p.head_dim_v) * eb);
      }
  }
};

}  // namespace
}  // namespace flash::cpu

extern "C" const flash_backend_module* flash_cpu_module(void) {
  return flash::detail::make_module<flash::cpu::CpuBackend>();
}
