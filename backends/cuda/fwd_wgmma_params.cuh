// Parameters of the Hopper forward (fwd_wgmma_kernel.cuh), shared by the kernel and its
// host launch (fwd_wgmma_launch.cuh): the descriptor's fields, the tensor maps, the
// numbering of work tiles (query block, head, sequence); and the kernel's compile-time
// constants (consumer barrier ids, the softmax's exponent switch) and phase-trace
// vocabulary (phase_trace.cuh).
#pragma once

#include <cuda.h>  // CUtensorMap

#include "fwd_tail_split.cuh"
#include "kernel_params.hpp"
#include "phase_trace.cuh"
#include "tma_ops.cuh"
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
  // The persistent grid's last partial round of unmasked dense tiles cut into one key range
  // per block (fwd_tail_split.cuh; ranges = 0: none). The counter then hands out
  // fwd_tail_items items.
  FwdTailSplit tail;
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

// Named barrier of consumer c's own 128 threads (the exact-path vote, the O staging; 0 is
// __syncthreads').
constexpr int kConsumerBarrier0 = 1;
// Named barrier of consumer c's exponent turn (both consumers' threads; after the consumers'
// own barriers, at most three).
constexpr int kTurnBarrier0 = kConsumerBarrier0 + 3;

// Exponent turns of two consumers (FwdWgmmaDerived::kExpTurns, tile_configs.hpp): consumer c
// runs each softmax's exponent loop only on its turn (take: named barrier kTurnBarrier0 + c,
// both consumers' 256 threads) and passes the turn on once the loop is issued. Invariant: both
// consumers run the same number of softmaxes (every work tile's K/V steps are the same for
// both; an idle consumer takes and passes one turn per step), so the turns alternate
// strictly; consumer 1 passes one first (start), consumer 0 takes that pass's match when it
// leaves (finish). kOn = false: every call is empty.
template <bool kOn>
struct FwdExpTurns {
  int c;  // this consumer (0 or 1), warp-uniform
  __device__ __forceinline__ void take() const {
    if constexpr (kOn) named_barrier_sync(kTurnBarrier0 + c, 2 * 128);
  }
  __device__ __forceinline__ void pass() const {
    if constexpr (kOn) named_barrier_arrive(kTurnBarrier0 + (1 - c), 2 * 128);
  }
  __device__ __forceinline__ void start() const {
    if (c == 1) pass();
  }
  __device__ __forceinline__ void finish() const {
    if (c == 0) take();
  }
};
// Largest |row max · scale · log2 e| for which the softmax takes the one-FFMA exponent
// (the rounding of max·mult then moves p by at most 2⁻¹⁶ relative). The variant build
// FLASH_FWD_WGMMA_EXACT_EXP=1 turns the FFMA form off (A/B).
#if FLASH_FWD_WGMMA_EXACT_EXP
constexpr float kFfmaExpBound = -1.f;
#else
constexpr float kFfmaExpBound = 256.f;
#endif

// Phase trace (phase_trace.cuh, -DFLASH_PHASE_TRACE): thread 0 of each consumer (role c) and
// the producer's thread 0 (role kFwdTraceProducer) mark the end of the phases they run.
constexpr int kFwdTraceProducer = 3;
enum FwdTracePhase : int {
  kFwdPhQWait,      // consumer: its Q to land (and the work tile to start); producer: a Q slot
  kFwdPhFirstS,     // consumer: K(0) to land, S(0) issued and waited for; producer: a K/V stage
  kFwdPhFirstSoft,  // consumer: tile 0's softmax and P
  kFwdPhKvWait,     // consumer: K(i) and V(i−1) to land; producer: a staged O to be read
  kFwdPhS,          // consumer: S(i) and P(i−1)·V(i−1) issued, S(i) waited for
  kFwdPhSoftmax,    // consumer: tile i's softmax (P(i−1)·V(i−1) still on the tensor cores)
  kFwdPhPv,         // consumer: P(i−1)·V(i−1) waited for, O rescaled, P packed
  kFwdPhLastPv,     // consumer: V(last) to land, the last P·V
  kFwdPhEpilogue,   // consumer: O normalised, lse, O staged and stored
  kFwdPhIssue,      // producer: copies issued, the next work tile taken
};
static_assert(kFwdTraceProducer < kTraceRoles, "consumers 0..2 and the producer");
// Their names in the printout (nullptr ends each list).
inline constexpr const char* kFwdTraceRoleNames[] = {"consumer 0", "consumer 1", "consumer 2",
                                                     "producer", nullptr};
inline constexpr const char* kFwdTracePhaseNames[] = {"Q wait | Q slot",
                                                      "S(0) | K/V stage",
                                                      "softmax(0)",
                                                      "K/V wait | O read",
                                                      "S(i) [+ P·V(i-1)]",
                                                      "softmax(i)",
                                                      "P·V(i-1) wait",
                                                      "last P·V",
                                                      "epilogue",
                                                      "issue",
                                                      nullptr};

}  // namespace flash::cuda
