// The split tail of the Hopper forward's persistent grid (fwd_wgmma_kernel.cuh): the last
// partial round of equal work tiles cut into one key range per block (stream-K).
//
// Unmasked dense problems give every work tile the same K/V steps, so the tiles run in rounds
// of one tile per block; when the tile count is not a multiple of the grid, the last round
// runs on some blocks while the others have nothing left (FlashAttention's D 128 shapes: 2048
// tiles on 132 SMs, 15.5 rounds, the last one half empty). Here the last `total % grid` tiles
// ("split tiles") are laid end to end as one run of K/V steps and cut into `ranges` (= the
// grid's blocks) ranges of equal length; each range is taken as one item from the tile
// counter and covers the end of one split tile and / or the start of the next (one or two
// segments: a range is shorter than a tile). A segment runs like a work tile restricted to its
// steps and leaves its unnormalised O, row max and row sum in the workspace; the last segment
// of a tile to finish (a per-tile, per-consumer counter) merges the others into its own and
// writes O and lse as a whole tile does. Host and device; tests/cuda/work_tile_order_test.cu
// checks the cut on the host.
#pragma once

#include <vector_types.h>  // float4

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#include <cuda/atomic>

#include "device_ops.cuh"
#include "tma_ops.cuh"
#endif

namespace flash::cuda {

// The plan (FwdTmaParams::tail): tiles [first, total) are split; ranges = 0: no split.
struct FwdTailSplit {
  int first = 0;   // the first split tile
  int ranges = 0;  // ranges the split tiles' steps are cut into (one per block)
  int steps = 0;   // K/V steps of every split tile
  // Device memory: per split tile and consumer the segments counted so far (in the per-stream
  // counter buffer, zero between launches: the merging segment resets it; a region no other
  // data ever shares, or a previous launch's values would be taken for counts); the segments'
  // partials (the per-stream workspace), [fwd_tail_part_index][consumer][dim / 8 + 1
  // vectors][128 threads] float4 (in the layout of the threads' accumulators: each thread
  // writes and reads only its own).
  float4* partials = nullptr;
  int* counts = nullptr;
};

// Host planning (fwd_tail_plan): a range pays a work tile's fixed cost (the first S and
// softmax, the epilogue) once or twice and a merge, so the split is taken only where each range
// holds at least kFwdTailMinRangeSteps K/V steps and the idle share of the last round is worth
// at least kFwdTailMinSavedSteps steps ((blocks - split tiles) / blocks of a tile). H200,
// session 34: D 256 with 1k keys (13 steps a tile, 100 of 132 blocks busy: 3 steps idle) ran
// 5-6 % slower split; D 128 / 192 / 256 with 4k keys (11-13 steps idle) the same either way;
// every problem with 16k keys (19-50 steps idle) and D 64 with 4k (21) 1-5 % faster.
constexpr int kFwdTailMinRangeSteps = 8, kFwdTailMinSavedSteps = 16;

// Items the tile counter hands out: whole tiles below `first`, then one per range.
__host__ __device__ inline int fwd_tail_items(const FwdTailSplit& s, int total) {
  return s.ranges > 0 ? s.first + s.ranges : total;
}

// Work slots (what the producer hands the consumers): slot < total is whole tile slot; slot
// total + 2j + k is segment k (0 or 1) of range j.
__host__ __device__ inline int fwd_tail_slot_of_item(const FwdTailSplit& s, int total, int item) {
  return item < s.first || s.ranges == 0 ? item : total + 2 * (item - s.first);
}

// First step of range j in the run of the split tiles' steps.
__host__ __device__ inline int64_t fwd_tail_range_start(const FwdTailSplit& s, int total, int j) {
  return static_cast<int64_t>(total - s.first) * s.steps * j / s.ranges;
}

// The range holding step u of the run (ranges are never empty: work >= ranges).
__host__ __device__ inline int fwd_tail_range_of_step(const FwdTailSplit& s, int total, int64_t u) {
  const int64_t work = static_cast<int64_t>(total - s.first) * s.steps;
  return static_cast<int>(((u + 1) * s.ranges - 1) / work);
}

// Segment k of range j: steps [step_begin, step_begin + steps) of work tile `tile`; steps 0
// when range j lies within one tile (k = 1 only).
struct FwdTailSegment {
  int tile, step_begin, steps;
};
__host__ __device__ inline FwdTailSegment fwd_tail_segment(const FwdTailSplit& s, int total, int j,
                                                           int k) {
  const int64_t u0 = fwd_tail_range_start(s, total, j), u1 = fwd_tail_range_start(s, total, j + 1);
  const int64_t tile0 = u0 / s.steps, boundary = (tile0 + 1) * s.steps;
  if (k == 0) {
    const int64_t end = u1 < boundary ? u1 : boundary;
    return {s.first + static_cast<int>(tile0), static_cast<int>(u0 - tile0 * s.steps),
            static_cast<int>(end - u0)};
  }
  return {s.first + static_cast<int>(tile0) + 1, 0,
          static_cast<int>(u1 > boundary ? u1 - boundary : 0)};
}

// The segment of work slot t >= total.
__host__ __device__ inline FwdTailSegment fwd_tail_segment_of_slot(const FwdTailSplit& s, int total,
                                                                   int t) {
  return fwd_tail_segment(s, total, (t - total) / 2, (t - total) % 2);
}
// Whether work slot t is the first segment of a range that has a second (slot t + 1, taken
// by the same block right after it, without the tile counter).
__host__ __device__ inline bool fwd_tail_has_second(const FwdTailSplit& s, int total, int t) {
  return t >= total && (t - total) % 2 == 0 && fwd_tail_segment_of_slot(s, total, t + 1).steps > 0;
}

// The segments of split tile `tile`: ranges j_first .. j_first + count - 1; the first one's
// segment in this tile is its segment 1 when it starts in the tile before.
struct FwdTailPieces {
  int j_first, count;
  bool first_is_second_segment;
};
__host__ __device__ inline FwdTailPieces fwd_tail_pieces(const FwdTailSplit& s, int total,
                                                         int tile) {
  const int64_t lo = static_cast<int64_t>(tile - s.first) * s.steps, hi = lo + s.steps - 1;
  const int j0 = fwd_tail_range_of_step(s, total, lo), j1 = fwd_tail_range_of_step(s, total, hi);
  return {j0, j1 - j0 + 1, fwd_tail_range_start(s, total, j0) < lo};
}

// The index of the segment of range j in split tile `tile` among the partials: j + (tile −
// first), unique (the segments in range order each add one, or two where a range starts on a
// tile boundary) and below ranges + (total − first).
__host__ __device__ inline int fwd_tail_part_index(const FwdTailSplit& s, int j, int tile) {
  return j + (tile - s.first);
}

// Host: the counters a split of tiles on `blocks` blocks may need at most (fewer split tiles
// than blocks, at most kFwdTailMaxConsumers warpgroups each), and the bytes of its partials.
constexpr int kFwdTailMaxConsumers = 3;
inline int64_t fwd_tail_max_counts(int blocks) {
  return static_cast<int64_t>(blocks) * kFwdTailMaxConsumers;
}
inline size_t fwd_tail_partials_bytes(const FwdTailSplit& s, int total, int consumers, int dim) {
  const size_t parts = static_cast<size_t>(s.ranges + (total - s.first)) * consumers;
  return parts * (dim / 8 + 1) * 128 * 16;
}

// Host: the split for `total` equal tiles of `steps` K/V steps each on a persistent grid of
// `blocks` blocks: the last partial round, when there is one after at least one whole round,
// with the limits above, or `forced` (tests) wherever each range gets a step.
inline FwdTailSplit fwd_tail_plan(int total, int steps, int blocks, bool forced) {
  FwdTailSplit s;
  const int rest = blocks > 1 ? total % blocks : 0;
  if (rest == 0 || total < blocks || steps < 2) return s;
  const int64_t work = static_cast<int64_t>(rest) * steps;
  if (work < static_cast<int64_t>(blocks) * (forced ? 1 : kFwdTailMinRangeSteps)) return s;
  if (!forced && static_cast<int64_t>(blocks - rest) * steps <
                     static_cast<int64_t>(blocks) * kFwdTailMinSavedSteps)
    return s;
  s.first = total - rest;
  s.ranges = blocks;
  s.steps = steps;
  return s;
}

#ifdef __CUDACC__
// The end of a segment, for one consumer warpgroup (its 128 threads, named barrier
// `barrier`): stores this thread's O accumulators (OT n8 blocks, unnormalised), its rows' max
// and (quad-reduced) sum as the segment's partial, and counts the segment on its tile. The
// last segment of the tile to count merges the others' partials into its own (the online
// softmax's rescale, as between two K/V tiles) and returns true: the caller then finishes the
// tile like a whole one. `last_flag`: a shared int of this consumer.
// (Partials are read with ld.global.cg: L1 is not coherent. Ordering as decode_merge_if_last:
// every store precedes the barrier, thread 0's acq_rel count publishes them and acquires the
// others'.)
template <int OT>
__device__ __forceinline__ bool fwd_tail_merge(const FwdTailSplit& s, int total, int slot,
                                               int consumer, int consumers, int barrier,
                                               float (&acc)[OT * 4], float (&row_max)[2],
                                               float (&row_sum)[2], float mult, int* last_flag) {
  constexpr int kVecs = OT + 1;
  const int ct = threadIdx.x % 128, j = (slot - total) / 2;
  const FwdTailSegment seg = fwd_tail_segment_of_slot(s, total, slot);
  const auto part = [&](int index) {
    return s.partials + (static_cast<int64_t>(index) * consumers + consumer) * kVecs * 128 + ct;
  };
  const int own = fwd_tail_part_index(s, j, seg.tile);
  float4* mine = part(own);
#pragma unroll
  for (int i = 0; i < OT; ++i)
    mine[i * 128] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
  mine[OT * 128] = make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]);
  const FwdTailPieces pieces = fwd_tail_pieces(s, total, seg.tile);
  named_barrier_sync(barrier, 128);
  if (ct == 0) {
    ::cuda::atomic_ref<int, ::cuda::thread_scope_device> count(
        s.counts[(seg.tile - s.first) * consumers + consumer]);
    const bool last = count.fetch_add(1, ::cuda::memory_order_acq_rel) == pieces.count - 1;
    if (last) count.store(0, ::cuda::memory_order_relaxed);  // every segment has counted
    *last_flag = last;
  }
  named_barrier_sync(barrier, 128);
  if (!*last_flag) return false;
  for (int q = 0; q < pieces.count; ++q) {
    const int index = fwd_tail_part_index(s, pieces.j_first + q, seg.tile);
    if (index == own) continue;
    const float4* other = part(index);
    const float4 stats = __ldcg(other + OT * 128);
    const float other_max[2] = {stats.x, stats.y}, other_sum[2] = {stats.z, stats.w};
    float mine_scale[2], other_scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mx = fmaxf(row_max[h], other_max[h]);
      const float used = mx == -INFINITY ? 0.f : mx;  // rows that saw no key: both sums 0
      mine_scale[h] = fast_exp2((row_max[h] - used) * mult);
      other_scale[h] = fast_exp2((other_max[h] - used) * mult);
      row_max[h] = mx;
      row_sum[h] = row_sum[h] * mine_scale[h] + other_sum[h] * other_scale[h];
    }
#pragma unroll
    for (int i = 0; i < OT; ++i) {
      const float4 o = __ldcg(other + i * 128);
      acc[4 * i] = acc[4 * i] * mine_scale[0] + o.x * other_scale[0];
      acc[4 * i + 1] = acc[4 * i + 1] * mine_scale[0] + o.y * other_scale[0];
      acc[4 * i + 2] = acc[4 * i + 2] * mine_scale[1] + o.z * other_scale[1];
      acc[4 * i + 3] = acc[4 * i + 3] * mine_scale[1] + o.w * other_scale[1];
    }
  }
  return true;
}
#endif

}  // namespace flash::cuda
