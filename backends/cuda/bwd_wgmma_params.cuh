// Compile-time pieces of the wgmma backward (bwd_wgmma_kernel.cuh) shared with its launch
// (bwd_wgmma_launch.cuh): the loader's tensor maps, the MMA warps' named barrier and the
// phase-trace vocabulary (phase_trace.cuh).
#pragma once

#include <cuda.h>  // CUtensorMap

namespace flash::cuda {

// Named barrier of the MMA warps when the dQ warpgroup runs apart (0 is __syncthreads').
constexpr int kBwdMmaBarrier = 1;
// Ping-pong order (BwdWgmmaLayout::kPingPong): warpgroup wg issues its products on its turn,
// named barrier kBwdTurnBarrier0 + wg (the other warpgroup's arrival passes it).
constexpr int kBwdTurnBarrier0 = 2;

// Phase trace (phase_trace.cuh, -DFLASH_PHASE_TRACE): thread 0 of each MMA warpgroup, the dQ
// thread and the loader thread each mark the end of the phases they run.
enum BwdTraceRole : int { kBwdTraceMma0, kBwdTraceMma1, kBwdTraceDq, kBwdTraceLoader };
enum BwdTracePhase : int {
  kBwdPhPrologue,    // MMA: block start to the first step (K / V loads, quarantine, barrier)
  kBwdPhStageWait,   // MMA: the step's Q / dO stage to land; loader: a stage to empty
  kBwdPhBarrier,     // MMA: the step's first barrier (the other warpgroup)
  kBwdPhSdp,         // MMA: Sᵀ / dPᵀ issued and waited for
  kBwdPhGrads,       // MMA: element-wise Pᵀ / dSᵀ, packing, the dSᵀ tile stores
  kBwdPhDvDk,        // MMA: dV / dK issued and waited for; dQ thread: the add's issue and read
  kBwdPhDsBarrier,   // MMA: the barrier before dQᵀ (the whole dSᵀ tile written)
  kBwdPhDq,          // MMA: dQᵀ issued and waited for; dQ thread: its turn (ordered mode)
  kBwdPhStageDq,     // MMA: the dQ staging stores and the hand-over (after kBwdPhDqTileWait)
  kBwdPhEpilogue,    // MMA: dK / dV stores; dQ thread: each add's completion (ordered mode)
  kBwdPhIssue,       // dQ thread: the staging tile to be full; loader: a stage's copies issued
  kBwdPhDqTileWait,  // MMA: the dQ staging tile's read by the copy engine (before the stores)
};
// Their names in the printout (nullptr ends each list).
inline constexpr const char* kBwdTraceRoleNames[] = {"mma warpgroup 0", "mma warpgroup 1",
                                                     "dQ thread", "loader thread", nullptr};
inline constexpr const char* kBwdTracePhaseNames[] = {
    "prologue",     "stage wait",          "barrier",    "S/dP products",
    "element-wise", "dV/dK | dQ add",      "dS barrier", "dQ products | turn",
    "stage dQ",     "epilogue | add done", "issue",      "dQ tile wait",
    nullptr};

// Tensor maps of Q and dO (tma_map.hpp; a box is kBlockQ rows x 64 columns) for the loader's
// TMA copies. use = false (packed batches): the loader's threads copy with cp.async instead,
// which zero-fills a tile's rows past its sequence (a TMA box would bring the next
// sequence's rows there).
struct BwdLoadMaps {
  CUtensorMap q, dout;
  bool use;
};

}  // namespace flash::cuda
