// Split-KV forward on the hip backend (flash-decoding): when a forward's grid leaves most
// compute units idle (decode: a few query rows per head over a long KV cache), the keys
// are cut into kv_splits ranges, each block computes its rows over one range into f32
// partials (o normalised, lse), and launch_split_merge combines them as merge_partials
// does. Both forward kernels (MFMA, portable) take the split from their block index
// (kernel_problem.h: keys_of_split, partial_o_rows, partial_lse_rows).
// The plan here is the host's; FLASH_HIP_SPLITS=N forces N splits (1: none) for A/B runs
// and tests.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flash::hip {

// Blocks per compute unit a split launch aims for (several, so that one block's memory
// latency hides under the others' loads).
constexpr int64_t kSplitBlocksPerUnit = 4;
// The fewest keys a split streams: shorter splits pay more for the merge than they save.
constexpr int64_t kSplitMinKeys = 512;
constexpr int64_t kSplitMaxSplits = 64;
// Split ranges are whole multiples of this many keys (the kernels' key tiles divide it).
constexpr int64_t kSplitKeyAlign = 128;
// The partials' workspace stays under this (a larger split is cut to fewer ranges).
constexpr int64_t kSplitMaxWorkspaceBytes = int64_t{256} << 20;

struct SplitPlan {
  int64_t splits = 1, split_keys = 0;
};

// blocks: the unsplit grid; forced: FLASH_HIP_SPLITS (0 = automatic).
inline SplitPlan plan_split_kv(int64_t blocks, int compute_units, int64_t seqlen_kv,
                               int64_t partial_bytes_per_split, int64_t forced) {
  SplitPlan plan;
  int64_t splits = forced;
  if (splits == 0) {
    if (blocks <= 0 || blocks >= compute_units) return plan;  // the grid fills the device
    splits = (compute_units * kSplitBlocksPerUnit + blocks - 1) / blocks;
    splits = std::min({splits, seqlen_kv / kSplitMinKeys, kSplitMaxSplits});
  }
  splits =
      std::min(splits, kSplitMaxWorkspaceBytes / std::max<int64_t>(1, partial_bytes_per_split));
  if (splits < 2 || seqlen_kv < 2) return plan;
  const int64_t per = (seqlen_kv + splits - 1) / splits;
  const int64_t align = per >= kSplitKeyAlign ? kSplitKeyAlign : 1;  // short: forced, tests
  plan.split_keys = (per + align - 1) / align * align;
  plan.splits = (seqlen_kv + plan.split_keys - 1) / plan.split_keys;  // no empty split
  if (plan.splits < 2) plan = SplitPlan{};
  return plan;
}

}  // namespace flash::hip
