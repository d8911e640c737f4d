// The Hopper forward's grid switches, read on every call (cuda_backend.cu): the persistent
// grid, its blocks, the split tail, the L2 sections and the longest-first tail of causal orders.
// Each is on by default; the environment variables exist for A/B runs and tests (README's
// "A/B and tuning switches": any other value is a flash::Error).
#pragma once

#include <cstdint>
#include <string>

#include "dispatch/env_switch.hpp"

namespace flash::cuda {

// Whether the Hopper forward runs on its persistent grid (one block per SM taking work
// tiles from a counter; the next tile's Q and K/V load while this one finishes) instead
// of one block per tile: always, unless FLASH_CUDA_FWD_PERSISTENT=0 (A/B).
// Measured against that (bench/RESULTS.md 2026-11-24, H100, 779816c, bf16, D 64-256):
// unmasked +1-4 % at S = 4k, -5 to +4 % at 16k, +8-16 % at 1k; causal +5-8 % at 4k,
// +1-4 % at 16k, +11-22 % at 1k.
inline bool fwd_wgmma_persistent() {
  return flash::detail::env_switch("FLASH_CUDA_FWD_PERSISTENT", {"0", "1"}) != "0";
}
// Blocks of the persistent grid: one per SM, or fewer with FLASH_CUDA_FWD_BLOCKS=<n> (tests:
// on a grid of two blocks every block runs many work tiles, so small problems cross the
// hand-over from one tile to the next: Q reloaded, the K/V ring continuing).
inline int fwd_persistent_blocks(int sms) {
  const long long cap = flash::detail::env_positive_int("FLASH_CUDA_FWD_BLOCKS");
  return cap > 0 && cap < sms ? static_cast<int>(cap) : sms;
}

// The split tail of the persistent Hopper forward (fwd_tail_split.cuh): FwdParams::tail_split,
// 1 (where fwd_tail_plan's limits say it pays) unless FLASH_CUDA_FWD_TAIL=0 turns it off (A/B)
// or =force splits wherever each range gets a step (tests: small problems on three blocks).
inline int fwd_tail_split_mode() {
  const std::string v = flash::detail::env_switch("FLASH_CUDA_FWD_TAIL", {"0", "1", "force"});
  return v == "0" ? 0 : v == "force" ? 2 : 1;
}

// K/V bytes that the causal / banded Hopper forward's tiles in flight may share in L2
// (work_tile_order.cuh's sections): 1 / kFwdL2SectionShare of the L2, the rest left to
// the Q and O streams and to the tiles of the next section starting while this one ends.
// (Half the L2, H100, 2026-11-24: D 128 causal +5 % at S = 4k (12 pairs) but -4 % at 16k
// (3 pairs) against one head after another; a quarter takes 6 pairs at 4k, one at 16k.)
// FLASH_CUDA_FWD_L2_SECTIONS=0 takes one head after another instead (the order before
// the sections, kept for A/B).
constexpr int kFwdL2SectionShare = 4;
inline int64_t fwd_l2_section_bytes(int l2_bytes) {
  const bool off = flash::detail::env_switch("FLASH_CUDA_FWD_L2_SECTIONS", {"0", "1"}) == "0";
  return off ? 0 : l2_bytes / kFwdL2SectionShare;
}

// Whether the causal / banded Hopper forward ends its tile order with a longest-first run
// over the last pairs (work_tile_order.cuh, work_tile_tail_pairs): on, unless
// FLASH_CUDA_FWD_LPT_TAIL=0 (A/B).
inline bool fwd_lpt_tail() {
  return flash::detail::env_switch("FLASH_CUDA_FWD_LPT_TAIL", {"0", "1"}) != "0";
}

}  // namespace flash::cuda
