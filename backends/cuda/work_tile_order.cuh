// The order in which the Hopper forward's blocks start their work tiles
// (fwd_wgmma_kernel.cuh: the hardware dispatches blocks, and the persistent grid hands
// out tiles, in tile-number order). Host and device: tests/cuda/work_tile_order_test.cu
// checks on the host that every order is a permutation of the tiles.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flash::cuda {

// Tile t of num_qblocks x pairs tiles, pair = head + heads_q · sequence.
struct WorkTileSlot {
  int qblock, pair;
};

// Unmasked (longest_first = false): query block fastest, so the tiles in flight share
// the K/V of a few heads in L2. Causal / banded (longest_first): tiles differ in length
// (late query blocks see the most keys) and a grid ends evenly only if the longest start
// first; the pairs go in sections of section_pairs (1 <= section_pairs <= pairs) whose
// K/V fit the L2 together, and within a section the longest query block of every pair
// comes first (longest-processing-time order within what the L2 holds; section_pairs = 1
// is one head after another). The last tail_pairs pairs (0 <= tail_pairs <= pairs) form
// one longest-first run of their own: a last section whose long tiles start while the
// other blocks have only short work left ends the grid unevenly (its longest tile is the
// tail), so the tail mixes enough pairs that its long tiles start a few waves before the
// end (work_tile_tail_pairs).
__host__ __device__ inline WorkTileSlot work_tile_slot(int t, int num_qblocks, int pairs,
                                                       bool longest_first, int section_pairs,
                                                       int tail_pairs = 0) {
  if (!longest_first) return {t % num_qblocks, t / num_qblocks};
  const int body_pairs = pairs - tail_pairs;
  if (t >= body_pairs * num_qblocks) {
    const int within = t - body_pairs * num_qblocks;
    return {num_qblocks - 1 - within / tail_pairs, body_pairs + within % tail_pairs};
  }
  const int per_section = section_pairs * num_qblocks;
  const int section = t / per_section, within = t - section * per_section;
  const int first = section * section_pairs;
  // The last section may hold fewer pairs; t < body_pairs · num_qblocks keeps within below
  // here · num_qblocks.
  const int here = section_pairs < body_pairs - first ? section_pairs : body_pairs - first;
  return {num_qblocks - 1 - within / here, first + within % here};
}

// Host: the pairs of the longest-first tail for `blocks` resident blocks (the persistent
// grid's SMs): the fewest whole pairs holding kTailWaves waves of tiles, so that the
// longest tiles of the end start while every block still has that much work before it.
// (bench/simulate_tile_order.py, causal benchmark shapes, 132 blocks: the grid takes up to
// 1.122x the ideal time with sections alone, 1.031x with a 2-wave tail, 1.024x with 3.
// Measured on the H200: causal D 256 S 4k +12 %, D 128 4k +4 %, bench/RESULTS.md.)
constexpr int kTailWaves = 3;
inline int work_tile_tail_pairs(int num_qblocks, int pairs, int blocks) {
  const int64_t tiles = static_cast<int64_t>(kTailWaves) * std::max(1, blocks);
  const int64_t want = (tiles + num_qblocks - 1) / std::max(1, num_qblocks);
  return static_cast<int>(std::min<int64_t>(want, pairs));
}

// Host: the pairs per section for a launch of `pairs` (head, sequence) pairs whose K/V
// may share l2_section_bytes of L2 (0: one pair per section). The query heads of a GQA
// group read one kv head's K/V, so a query head counts 1/group of it.
inline int work_tile_section_pairs(int64_t l2_section_bytes, int64_t seqlen_kv, int head_dim,
                                   int head_dim_v, int element_bytes, int group, int64_t pairs) {
  const int64_t kv_bytes_per_head = std::max<int64_t>(
      1, seqlen_kv * (head_dim + head_dim_v) * element_bytes / std::max(1, group));
  return static_cast<int>(
      std::clamp<int64_t>(l2_section_bytes / kv_bytes_per_head, 1, std::max<int64_t>(1, pairs)));
}

}  // namespace flash::cuda
