// Host plan of the split-KV decode (decode_kernel.cuh): whether a forward takes it, its
// shape, its key splits and whether they merge inside a thread block cluster; the
// FLASH_CUDA_DECODE_CLUSTER switch.
#pragma once

#include "decode.hpp"
#include "dispatch/module_abi.h"
#include "kernel_params.hpp"

namespace flash::cuda {

// What the plan needs of the current device.
struct DecodeDevice {
  int device, cc_major, cc_minor, sms, smem_optin;
};

// The split-KV decode kernel's plan for a problem: chosen for every paged cache and
// whenever seqlen_q · group <= kDecodeMaxRows (if its shared memory fits). (choose() gives
// paged prefill to the Hopper forward where it takes it: cuda_backend.cu, fwd_paged_wgmma.)
struct DecodePlan {
  bool use = false;
  int dim = 0, rows = 0, row_chunks = 0, splits = 1;
  int cluster = 1;  // > 1: the splits of a unit run as one cluster (DecodeParams::cluster)
  DecodeShapeInfo shape{};
};
DecodePlan decode_plan(const flash_problem& p, const DecodeDevice& device);

// FLASH_CUDA_DECODE_CLUSTER: 1 (default) the cluster merge where it fits, 0 the merge
// through global memory (A/B), any a cluster whenever one fits, however few splits that
// leaves (A/B of the plan's least share). Other values raise flash::Error.
enum class DecodeClusterMode { off, on, any };
DecodeClusterMode decode_cluster_mode();

// FLASH_CUDA_DECODE_ROWS: unset (default) a decode step of 17-64 packed rows at head dims
// <= 128 runs as 32-row chunks, two m16 tiles sharing each K/V tile (decode.hpp), when each
// warp still streams kDecodeTwoTileMinTilesPerWarp key tiles per split, else as 16-row
// chunks; 32 two tiles wherever they apply, 16 one m16 tile always (A/B). Other values raise
// flash::Error (validated on every call: cuda_backend.cu's validate_switches).
enum class DecodeRowsMode { automatic, one_tile, two_tiles };
DecodeRowsMode decode_rows_mode();

}  // namespace flash::cuda
