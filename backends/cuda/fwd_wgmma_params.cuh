// Parameters of the Hopper forward (fwd_wgmma_kernel.cuh), shared by the kernel and its
// host launch (fwd_wgmma_launch.cuh): the descriptor's fields, the tensor maps, and the
// numbering of work tiles (query block, head, sequence).
#pragma once

#include <cuda.h>  // CUtensorMap

#include "kernel_params.hpp"
#include "work_tile_order.cuh"

namespace flash::cuda {

// The kernel's parameters: the descriptor's and the tensor maps (read by the copy
// engine from parameter space: __grid_constant__).
struct FwdTmaParams {
  FwdParams p;
  CUtensorMap q_map, k_map, v_map;
  // O in boxes of kConsumerRows rows (dense kernels: the epilogue's TMA stores).
  CUtensorMap o_map;
  // Work tiles (query block, head, sequence), numbered as work_tile_order.cuh says; a
  // block runs tile blockIdx (linear) and, when tile_counter is set (the persistent
  // grid), then the tiles it takes from that counter (zero between launches: the last
  // block resets it).
  int num_qblocks, total_tiles;
  int* tile_counter;  // [0]: tiles taken past the first wave, [1]: blocks done
  // Causal / banded masks: (head, sequence) pairs per L2 section and in the longest-first
  // tail (work_tile_slot).
  int section_pairs, tail_pairs;
  // Packed batches: q, k, v maps in global memory with the row extents of the packed
  // tensors (fwd_patch_packed_maps); null: the maps above.
  const CUtensorMap* packed_maps;
  // Paged caches: rows of one K / V box (launch_fwd_wgmma: a power of two from
  // kPagedBoxRows up that divides both the tile's keys and the page size).
  int paged_box_rows;
};

// Query block, head and sequence of work tile t, in the order of work_tile_order.cuh.
struct FwdWorkTile {
  int qblock, head, batch;
};
__device__ __forceinline__ FwdWorkTile fwd_work_tile(const FwdTmaParams& tp, int t) {
  const WorkTileSlot w = work_tile_slot(t, tp.num_qblocks, tp.total_tiles / tp.num_qblocks,
                                        tp.p.mask.bounded, tp.section_pairs, tp.tail_pairs);
  return {w.qblock, w.pair % tp.p.heads_q, w.pair / tp.p.heads_q + tp.p.batch_offset};
}

}  // namespace flash::cuda
