// Plain C++ (no SIMD) description of one CPU attention call: the mask as per-row key
// intervals, the work decomposition into items, the per-thread workspace, and the
// tile parameters each SIMD target reports. Shared by cpu_backend.cpp (threads,
// dispatch) and the per-target kernels (*-inl.h compiled through targets_*.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "dispatch/env_switch.hpp"
#include "dispatch/module_abi.h"
#include "hwy/aligned_allocator.h"

namespace flash::cpu {

// Tile parameters of one SIMD target (filled by the target's TargetTiles()).
struct TargetTiles {
  size_t lanes;      // f32 lanes per vector
  size_t rows;       // query rows per work item (forward, dq pass, dk/dv pass q tile)
  size_t keys;       // keys per K/V tile
  size_t row_align;  // item rows are padded to a multiple of this
  size_t key_align;  // K/V tiles are padded to a multiple of this many keys
};

// Row i sees key j iff lo(i) <= j <= hi(i) (empty when lo > hi). Both bounds are
// non-decreasing in i, which is what makes whole-block skipping a range test.
struct MaskRule {
  int64_t seqlen_q, seqlen_kv;
  bool causal;
  int64_t window_left, window_right;  // clamped to seqlen_q + seqlen_kv: same mask, no overflow

  static MaskRule From(const flash_problem& p) {
    const int64_t bound = p.seqlen_q + p.seqlen_kv;
    return {p.seqlen_q, p.seqlen_kv, p.causal != 0, std::min(p.window_left, bound),
            std::min(p.window_right, bound)};
  }
  int64_t diag(int64_t i) const { return i + seqlen_kv - seqlen_q; }
  int64_t lo(int64_t i) const {
    return window_left < 0 ? 0 : std::max<int64_t>(0, diag(i) - window_left);
  }
  int64_t hi(int64_t i) const {
    int64_t h = seqlen_kv - 1;
    if (causal) h = std::min(h, diag(i));
    if (window_right >= 0) h = std::min(h, diag(i) + window_right);
    return h;
  }
  // Rows [i0, i1] see some key in [j0, j1] (range test; holes cannot occur because
  // every row's interval shifts by one key per row).
  bool any(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    return lo(i0) <= j1 && hi(i1) >= j0 && lo(i0) <= hi(i1);
  }
  // Every row in [i0, i1] sees every key in [j0, j1]: the tile needs no mask.
  bool all(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    return lo(i1) <= j0 && hi(i0) >= j1;
  }
};

// Pointers of one call. Backward-only fields are null in the forward.
struct CallArgs {
  const flash_problem* p;
  const void *q, *k, *v;
  const void* o;  // forward: output; backward: forward's output
  void* o_out;    // forward output (same as o)
  const void* dout;
  const float* lse;  // backward input
  void *dq, *dk, *dv;
  // Backward: Dᵢ = rowsum(dO∘O) per (b, h, i), packed like lse; filled by the delta
  // pass before the dK/dV and dQ passes read it.
  float* delta;
};

// How a call is cut into work items. An item of the forward and the dq pass is
// (batch, kv head, block of q rows) with the rows of all heads_q/heads_kv query heads
// of the group stacked, so each K/V tile is loaded once for the whole group.
struct Plan {
  CallArgs a;
  TargetTiles tiles;
  MaskRule mask;
  int64_t group;          // query heads per kv head
  int64_t rows_per_head;  // q rows of each head in one item
  int64_t item_rows;      // group * rows_per_head padded to tiles.row_align
  int64_t q_blocks;       // per (batch, kv head)
  int64_t kv_blocks;      // K/V tiles per (batch, kv head)
  int64_t kv_groups;      // dK/dV items per (batch, kv head)
  int64_t kv_per_item;    // K/V tiles per dK/dV item
  int64_t bh;             // batch * heads_kv

  // The forward may give an item up to kMaxPasses x tiles.rows rows (each K/V tile is
  // then widened once for all of them: on the dev machine the K/V copies fell from
  // ~26% to ~13% of forward time); the backward's dK/dV pass likewise gives an item up
  // to kMaxPasses K/V blocks (Q and dO are loaded once for all of them).
  static constexpr int kMaxPasses = 4;
  // Items are made as large as possible while leaving at least MinItems() of them. It
  // does not depend on the thread count, so neither do the results (tile grouping
  // decides which tiles take the masked path and where windowed K/V tiles start).
  // Larger values give short sequences more, smaller items (better balance over many
  // threads, more K/V packing per row): FLASH_CPU_MIN_ITEMS (a positive integer, read on
  // every call) sets it, for tuning measurements (tests/cpu/device_cpu.sh "items" step).
  static constexpr int64_t kMinItems = 32;
  static int64_t MinItems() {
    const long long v = flash::detail::env_positive_int("FLASH_CPU_MIN_ITEMS");
    return v > 0 ? static_cast<int64_t>(v) : kMinItems;
  }

  // max_passes: forward rows per item in units of tiles.rows; max_kv_blocks: K/V blocks
  // per dK/dV item; min_items: MinItems() (read here when negative; callers that plan
  // many sequences read it once).
  static Plan Make(const CallArgs& a, const TargetTiles& t, int max_passes = 1,
                   int max_kv_blocks = 1, int64_t min_items = -1) {
    const flash_problem& p = *a.p;
    if (min_items < 0) min_items = MinItems();
    Plan plan{
        a,  t, MaskRule::From(p), p.heads_q / p.heads_kv, 0, 0, 0, 0, 0, 1, p.batch * p.heads_kv,
        {}, {}};
    for (int passes = max_passes; passes >= 1; passes /= 2) {
      const int64_t rows = static_cast<int64_t>(t.rows) * passes;
      plan.rows_per_head = std::max<int64_t>(1, std::min<int64_t>(rows / plan.group, p.seqlen_q));
      plan.q_blocks = (p.seqlen_q + plan.rows_per_head - 1) / plan.rows_per_head;
      if (plan.q_items() >= min_items) break;
    }
    const int64_t stacked = plan.group * plan.rows_per_head;
    const int64_t align = static_cast<int64_t>(t.row_align);
    plan.item_rows = (stacked + align - 1) / align * align;
    const int64_t keys = static_cast<int64_t>(t.keys);
    plan.kv_blocks = (p.seqlen_kv + keys - 1) / keys;
    for (int n = max_kv_blocks; n >= 1; n /= 2) {
      plan.kv_per_item = n;
      plan.kv_groups = (plan.kv_blocks + n - 1) / n;
      if (plan.kv_items() >= min_items) break;
    }
    return plan;
  }

  // Item order: performance only (an item computes the same whatever its position, so
  // results never depend on it). Head-major (q_order / kv_order empty): items of one
  // (batch, kv head) are consecutive, so the threads work through the same K/V at the
  // same time (it stays in L2/L3), and within a head the last q blocks (the most
  // expensive under a causal mask) and the first K/V groups (seen by the most q rows)
  // come first: with a dynamic schedule the loop ends on the cheapest items.
  // Cost-major (OrderForThreads, when there are few items per thread): block by block
  // in order of estimated cost, costliest first, each block across all heads —
  // longest-first list scheduling. With 48 items on 16 threads (S = 1k, 16 heads) the
  // head-major order leaves threads idle at the end (a cost model of the dynamic
  // schedule: 89% busy non-causal, 80% causal; cost-major: 100%).
  // FLASH_CPU_COST_ORDER=0 keeps head-major order always (for A/B measurements,
  // tests/cpu/device_cpu.sh "items" step).
  std::vector<int64_t> q_order, kv_order;  // block indices, costliest first; empty: head-major
  static constexpr int64_t kHeadMajorItemsPerThread = 8;
  static bool CostOrderEnabled() {  // FLASH_CPU_COST_ORDER=0 / 1, read on every call
    return flash::detail::env_switch("FLASH_CPU_COST_ORDER", {"0", "1"}) != "0";
  }

  void OrderForThreads(int64_t threads) {
    q_order.clear();
    kv_order.clear();
    if (!CostOrderEnabled()) return;
    const int64_t sq = a.p->seqlen_q;
    // Visible (row, key) pairs of row i and of key j. lo and hi never decrease with the
    // row, so the rows seeing key j are contiguous: [first with hi >= j, first with lo > j).
    auto row_keys = [&](int64_t i) { return std::max<int64_t>(0, mask.hi(i) - mask.lo(i) + 1); };
    auto first_row = [&](const auto& pred) {  // first row where pred turns true, or sq
      int64_t lo = 0, hi = sq;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (pred(mid))
          hi = mid;
        else
          lo = mid + 1;
      }
      return lo;
    };
    auto key_rows = [&](int64_t j) {
      const int64_t first = first_row([&](int64_t i) { return mask.hi(i) >= j; });
      const int64_t end = first_row([&](int64_t i) { return mask.lo(i) > j; });
      return std::max<int64_t>(0, end - first);
    };
    // Block indices by cost, descending; equal costs keep the head-major preference
    // (later q blocks first, earlier K/V groups first).
    auto by_cost = [](std::vector<int64_t>& order, const std::vector<int64_t>& cost,
                      bool later_first) {
      order.resize(cost.size());
      for (size_t i = 0; i < cost.size(); ++i) order[i] = static_cast<int64_t>(i);
      std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        const size_t ux = static_cast<size_t>(x), uy = static_cast<size_t>(y);
        if (cost[ux] != cost[uy]) return cost[ux] > cost[uy];
        return later_first ? x > y : x < y;
      });
    };
    if (q_items() < kHeadMajorItemsPerThread * threads) {
      std::vector<int64_t> cost(static_cast<size_t>(q_blocks), 0);
      for (int64_t i = 0; i < sq; ++i) cost[static_cast<size_t>(i / rows_per_head)] += row_keys(i);
      by_cost(q_order, cost, /*later_first=*/true);
    }
    if (kv_items() < kHeadMajorItemsPerThread * threads) {
      const int64_t keys = static_cast<int64_t>(tiles.keys);
      std::vector<int64_t> cost(static_cast<size_t>(kv_groups), 0);
      for (int64_t kb = 0; kb < kv_blocks; ++kb) {  // a tile's middle key x its keys
        const int64_t j0 = kb * keys, n = std::min(keys, a.p->seqlen_kv - j0);
        cost[static_cast<size_t>(kb / kv_per_item)] += key_rows(j0 + n / 2) * n;
      }
      by_cost(kv_order, cost, /*later_first=*/false);
    }
  }

  int64_t q_items() const { return bh * q_blocks; }
  void decode_q_item(int64_t item, int64_t& b, int64_t& hkv, int64_t& qb) const {
    int64_t bhi;
    if (q_order.empty()) {
      qb = q_blocks - 1 - item % q_blocks;
      bhi = item / q_blocks;
    } else {
      qb = q_order[static_cast<size_t>(item / bh)];
      bhi = item % bh;
    }
    b = bhi / a.p->heads_kv;
    hkv = bhi % a.p->heads_kv;
  }
  int64_t kv_items() const { return bh * kv_groups; }
  // Delta pass: one item per (batch, query head).
  int64_t delta_items() const { return a.p->batch * a.p->heads_q; }
  // kb: first K/V tile of the item.
  void decode_kv_item(int64_t item, int64_t& b, int64_t& hkv, int64_t& kb) const {
    int64_t bhi;
    if (kv_order.empty()) {
      kb = (item % kv_groups) * kv_per_item;  // causal: low kv blocks are seen by the most q rows
      bhi = item / kv_groups;
    } else {
      kb = kv_order[static_cast<size_t>(item / bh)] * kv_per_item;
      bhi = item % bh;
    }
    b = bhi / a.p->heads_kv;
    hkv = bhi % a.p->heads_kv;
  }
};

// The fused backward (backward-inl.h, BackwardFusedItemImpl): one item per (batch, kv
// head) computes dK, dV and dQ in one pass (5 tile products per (q tile, K/V tile) where
// the two passes take 8), holding the f32 dQ of all the group's query rows. Its results
// are bitwise those of the two passes (same tiles, same order per output element), so
// the choice may follow the thread count: it is taken where batch x kv heads items keep
// the threads as busy as the two passes' 8/5 more arithmetic would.
struct FusedBackward {
  // dQ accumulator per item (group x seqlen_q rows of head_dim floats): it stays in L2.
  static constexpr size_t kMaxDqBytes = size_t{2} << 20;
  // Tile products per (q tile, K/V tile): fused, two passes.
  static constexpr double kFusedProducts = 5, kTwoPassProducts = 8;

  // group x seqlen_q rows of head_dim (padded to whole vectors) floats within
  // kMaxDqBytes; the item pads rows to whole q tiles on top (S = 4096, D = 128 fits).
  static bool Fits(int64_t group, int64_t seqlen_q, int64_t head_dim, const TargetTiles& t) {
    const size_t d_pad = (static_cast<size_t>(head_dim) + t.lanes - 1) / t.lanes * t.lanes;
    return static_cast<size_t>(group * seqlen_q) * d_pad * sizeof(float) <= kMaxDqBytes;
  }

  // FLASH_CPU_BWD_FUSED: "0" always runs the two passes, "1" the fused backward wherever
  // its dQ accumulator fits (whatever the thread count); unset: Pays(); anything else is
  // an error. Read on every call, so tests and A/B timings can switch it with setenv.
  static int Forced() {
    const std::string v = flash::detail::env_switch("FLASH_CPU_BWD_FUSED", {"0", "1"});
    return v.empty() ? -1 : v[0] - '0';
  }

  // Cost model: item costs (any unit, e.g. q rows x keys x group heads) of the fused
  // items, scheduled longest first on `threads` threads (the makespan of the dynamic
  // schedule when items come costliest first), against the two passes' 8/5 of the same
  // work spread evenly. B=1, H=16 on 16 threads: 5 vs 8 (fused); 17 items on 16
  // threads: 10 vs 8.5 (two passes).
  static bool Pays(std::vector<double> costs, int64_t threads) {
    if (costs.empty() || threads < 1) return false;
    std::sort(costs.begin(), costs.end(), [](double x, double y) { return x > y; });
    std::vector<double> load(
        static_cast<size_t>(std::min<int64_t>(threads, static_cast<int64_t>(costs.size()))), 0.0);
    double total = 0;
    for (double c : costs) {
      *std::min_element(load.begin(), load.end()) += c;
      total += c;
    }
    const double fused = kFusedProducts * *std::max_element(load.begin(), load.end());
    const double two_pass = kTwoPassProducts * total / static_cast<double>(threads);
    return fused <= two_pass;
  }
};

// Per-thread scratch memory, O(tile) (the fused backward: plus its dQ accumulator,
// at most FusedBackward::kMaxDqBytes). Each OpenMP worker keeps one in thread-local
// storage; it only grows (to the largest tile set seen) and is reused by every later
// call on that thread, so a call allocates nothing once the pool is warm.
class Workspace {
 public:
  // Hands out consecutive 64-byte-aligned float arrays; reset() before each item.
  void reset(size_t total_floats) {
    if (total_floats > capacity_) {
      buffer_ = hwy::AllocateAligned<float>(total_floats);
      capacity_ = total_floats;
    }
    used_ = 0;
  }
  float* take(size_t n) {
    float* p = buffer_.get() + used_;
    used_ += RoundUp(n);
    return p;
  }
  static size_t RoundUp(size_t n) { return (n + 15) / 16 * 16; }
  // Integer scratch (row indices), same growth rule.
  int64_t* index(size_t n) {
    if (index_.size() < n) index_.resize(n);
    return index_.data();
  }
  static Workspace& ForThisThread() {
    static thread_local Workspace ws;
    return ws;
  }

 private:
  hwy::AlignedFreeUniquePtr<float[]> buffer_;
  size_t capacity_ = 0, used_ = 0;
  std::vector<int64_t> index_;
};

inline size_t ElementSize(int32_t dtype) { return dtype == FLASH_F32 ? 4 : 2; }

// Address of element (b, s, h, 0) of a tensor with the given element strides.
inline const void* At(const void* base, int32_t dtype, const int64_t* stride, int64_t b, int64_t s,
                      int64_t h) {
  return static_cast<const char*>(base) +
         (b * stride[0] + s * stride[1] + h * stride[2]) * static_cast<int64_t>(ElementSize(dtype));
}
inline void* At(void* base, int32_t dtype, const int64_t* stride, int64_t b, int64_t s, int64_t h) {
  return const_cast<void*>(At(static_cast<const void*>(base), dtype, stride, b, s, h));
}

}  // namespace flash::cpu
