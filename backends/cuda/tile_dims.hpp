// Which tile head dim runs a problem: the compiled widths of the mma.sync kernels and the
// wider tiles the Hopper (wgmma) kernels run narrower dims on, for cuda_backend.cu's one
// choose() and its launches (both ask here, so what is logged is what runs).
#pragma once

#include <cstdint>
#include <string>

#include "bwd_configs.hpp"
#include "dispatch/module_abi.h"

namespace flash::cuda {

// Compiled tile head dims. Any head_dim / head_dim_v that is a multiple of 8 up to 256
// runs on the smallest of these that holds max(head_dim, head_dim_v): the loads
// zero-fill the tile columns past each dim in shared memory (16-byte chunks: 8 elements
// of f16/bf16, so a multiple of 8 never splits a chunk) and the stores stop at the real
// dim, so nothing past a row is read or written in device memory.
inline constexpr int kTileDims[] = {32, 64, 96, 128, 160, 192, 256};

// The width a tile must hold: max(head_dim, head_dim_v).
inline int64_t widest_dim(const flash_problem& p) {
  return p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
}

// Tile head dim: the smallest compiled dim that holds both head_dim and head_dim_v (the
// kernels take the real dims at run time). Called only for supported dims.
inline int tile_dim(const flash_problem& p) {
  const int64_t need = widest_dim(p);
  for (int d : kTileDims)
    if (d >= need) return d;
  return kTileDims[sizeof kTileDims / sizeof kTileDims[0] - 1];
}

// The Hopper forward's tile head dim: the smallest of its widths (64, 128, 192, 256) that
// holds both dims. Problems between them (96, 160, DeepSeek's 192 / 128) run there with
// zero columns rather than on the mma.sync kernel of their own width: at D = 96 that kernel
// ran at 0.55-0.64 of cuDNN, below torch's FlashAttention-2, and the 128-wide wgmma tile
// reaches 0.89-1.01 (bench/RESULTS.md, session 12). Widths up to 96 take the 128 tile's
// 96-column config where the regular tile runs (cuda_backend.cu, fwd_kernel_dim).
inline int wgmma_tile_dim(const flash_problem& p) {
  const int64_t need = widest_dim(p);
  return need <= 64 ? 64 : need <= 128 ? 128 : need <= 192 ? 192 : 256;
}

// The forward's tile head dim on the kernel that runs it.
inline int fwd_tile_dim(const flash_problem& p, bool wgmma) {
  return wgmma ? wgmma_tile_dim(p) : tile_dim(p);
}

// " (head_dim 48 on the 64-wide tile)" when the tile is wider than the problem's dims.
inline std::string padding_note(const flash_problem& p, int dim) {
  if (p.head_dim == dim && p.head_dim_v == dim) return "";
  std::string dims = "head_dim " + std::to_string(p.head_dim);
  if (p.head_dim_v != p.head_dim) dims += "/" + std::to_string(p.head_dim_v);
  return " (" + dims + " on the " + std::to_string(dim) + "-wide tile, columns past it zero)";
}

// The backward's tile head dim and whether the wgmma kernel runs it. On the wgmma kernel
// (bwd_wgmma_usable: sm_90a, f16 / bf16) dims past 32 run on the smallest of its configs
// (64, 96, 128, 192, 256) that holds both, with zero columns past them (160 on 192; 96 and 192
// use the 128 and 256 tiles with their products cut to 96 / 192 columns, bwd_configs.hpp); the
// mma.sync kernels of their own widths ran 96 and 192 2.2-3.1x slower (bench/RESULTS.md, session
// 13). Elsewhere (and for 32): tile_dim on the mma.sync / f32 kernels.
struct BwdTile {
  int dim;
  bool wgmma;
};
inline BwdTile bwd_tile(const flash_problem& p, int cc_major, int cc_minor) {
  const int dim = tile_dim(p);
  const int wide = dim <= 64 ? 64 : dim <= 96 ? 96 : dim <= 128 ? 128 : dim <= 192 ? 192 : 256;
  if (dim > 32 && bwd_wgmma_usable(p.dtype == FLASH_F32, wide, cc_major, cc_minor))
    return {wide, true};
  return {dim, false};
}

}  // namespace flash::cuda
