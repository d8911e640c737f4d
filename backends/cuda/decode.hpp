// Host side of the split-KV decode kernel (decode_kernel.cuh): which shape runs a
// problem, and the launcher (instantiated per dtype in decode_{f32,f16,bf16}.cu).
#pragma once

#include <string>

#include "kernel_params.hpp"

namespace flash::cuda {

struct DecodeParams;

// Query rows per block (kM): 16 (one m16 tile); 4 on the f32 kernel when seqlen_q · group
// fits; 32 on the tensor-core kernel (two m16 tiles sharing each K/V tile) for decode steps
// of 17 to kDecodeMaxRows rows when the padded head dim is at most kDecodeTwoTileMaxDim (two
// tiles' O accumulators are kDim floats a lane: at 256 they would not fit) and each warp
// streams at least kDecodeTwoTileMinTilesPerWarp key tiles per split (decode_plan.cu;
// FLASH_CUDA_DECODE_ROWS, decode_plan.hpp, overrides it).
constexpr int kDecodeRowsSmall = 4, kDecodeRowsLarge = 16, kDecodeRowsTwoTiles = 32;
constexpr int kDecodeTwoTileMaxDim = 128;
// The decode kernel is chosen when seqlen_q · group is at most this (and for every
// paged cache, whatever its rows): up to 4 row chunks of 16 (2 of 32), each chunk's blocks
// reading the same K/V (the later ones mostly from L2).
constexpr int kDecodeMaxRows = 4 * kDecodeRowsLarge;
// Key splits per (sequence, kv head, row chunk): one wave of resident blocks,
// each split at least kDecodeMinTilesPerWarp key tiles per warp.
constexpr int kDecodeMaxSplits = 128;
// Waves of resident blocks the splits fill (tuning builds: FLASH_DECODE_WAVES).
#ifndef FLASH_DECODE_WAVES
#define FLASH_DECODE_WAVES 1
#endif
constexpr int kDecodeWaves = FLASH_DECODE_WAVES;
constexpr int kDecodeMinTilesPerWarp = 4;
// Two-tile chunks only where a split gives each warp at least this many key tiles: at 4
// (B 1, 8k keys, Hq 64 x 4 tokens) they measured 31 % slower than 16-row chunks, at 16 (B 1,
// 32k) 2 % faster, with 64 tiles or more 20-35 % (H200, bench/RESULTS.md, session 25).
constexpr int kDecodeTwoTileMinTilesPerWarp = 16;
// The most splits that merge through distributed shared memory as one thread block
// cluster (16: a non-portable cluster size, which H100 / H200 allow).
constexpr int kDecodeMaxCluster = 16;

// Padded head dim of the decode kernel: 64, 128 or 256.
inline int decode_dim(int dim) { return dim <= 64 ? 64 : dim <= 128 ? 128 : 256; }
// Rows per block of `rows` packed rows at padded head dim `dim`: the f32 kernel takes 4 rows
// when they fit (its cost grows with the rows), else 16; the tensor-core kernel (f16/bf16)
// one m16 tile, or with `two_tiles` allowed two for a decode step of 17 to kDecodeMaxRows rows
// where dim allows (paged prefill, more rows, keeps 16-row chunks: not measured with two tiles).
inline int decode_rows(Dtype dtype, int dim, int rows, bool two_tiles) {
  if (dtype == Dtype::f32) return rows <= kDecodeRowsSmall ? kDecodeRowsSmall : kDecodeRowsLarge;
  const bool two =
      two_tiles && rows > kDecodeRowsLarge && rows <= kDecodeMaxRows && dim <= kDecodeTwoTileMaxDim;
  return two ? kDecodeRowsTwoTiles : kDecodeRowsLarge;
}

// Warps per block and shared memory of a shape (for choose() and its name).
struct DecodeShapeInfo {
  int warps, smem_bytes, tile_keys;
};
DecodeShapeInfo decode_shape_info(Dtype dtype, int dim, int rows);
// How many clusters of `cluster` blocks of the tensor-core decode kernel (f16 / bf16, head
// dim `dim`, `rows` rows per block, with the cluster merge's receive area) the current device
// runs at once; 0 where it runs none (cudaOccupancyMaxActiveClusters; the plan caches it per
// device, dim, rows and size).
int decode_max_active_clusters(int dim, int rows, int cluster);

template <Dtype kDtype>
void launch_decode(const DecodeParams& dp, int dim, int rows, int batch, cudaStream_t stream);

}  // namespace flash::cuda
