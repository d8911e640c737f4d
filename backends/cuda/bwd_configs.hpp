// Tile shapes of the backward kernels, one named config per head dim. The launchers,
// choose() and FLASH_LOG all read these, so what is logged is what runs.
//
// The backward is three launches (see bwd_launch.cuh):
//  1. bwd_preprocess: Δ = rowsum(dO∘O) and the log-sum-exp rescaled for exp2, per row;
//  2. bwd_kv (dK, dV, dQ partials): blocks own key tiles of one (batch, kv head); each
//     warp owns 16 key rows, so its slices of dK and dV stay in registers for the whole
//     query loop; dQ partials go to an f32 accumulator (bwd_dq_plan below);
//  3. bwd_dq_convert: dQ = scale · Σ slices, in the output dtype.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "bwd_dq_order.cuh"
#include "dispatch/env_switch.hpp"

namespace flash::cuda {

// dK/dV kernel (f16/bf16): kBlockKV = 16 * kWarps * kMTiles key rows; the block walks
// query tiles of kBlockQ rows (two shared-memory stages, the next loading while this
// one computes).
template <int kDim>
struct BwdKvConfig;

// kMTiles: m16 tiles per warp. Two halve the shared-memory traffic per mma (each B
// fragment feeds both) but double the accumulator registers.
#define FLASH_BWD_KV_CONFIG(D, W, MT, BQ, MINB)                                               \
  template <>                                                                                 \
  struct BwdKvConfig<D> {                                                                     \
    static constexpr int kDim = D, kWarps = W, kMTiles = MT, kBlockQ = BQ;                    \
    static constexpr int kMinBlocks = MINB; /* per SM: caps registers per thread */           \
    static constexpr int kBlockKV = 16 * W * MT;                                              \
    static constexpr const char* kName = "mma_bwd_d" #D "_w" #W "_m" #MT "_q" #BQ "_b" #MINB; \
  };
// Values: warps, m16 tiles per warp, the other side's tile, min blocks per SM. The
// backward is latency bound at 8 warps per SM (ncu: "wait" and short-scoreboard
// stalls, 30% issue slots), so the defaults trade per-warp tile size for occupancy:
// min blocks caps registers (4 blocks x 128 threads -> 128 registers). Sweep of
// 2026-11-21 in bench/RESULTS.md. A tuning build may predefine one of these
// macros (in a header: nvcc splits command-line -D values at commas), or pick a set.
// 2026-11-22, dQ fused: 128-key blocks (8 warps) beat 64-key blocks by 1.15-1.5x at
// D = 64 and 128 (half the dQ partials per FLOP); sets 2 and 3 are the runners-up.
#if defined(FLASH_BWD_TUNE_SET) && FLASH_BWD_TUNE_SET == 2  // 64-query tiles
#define FLASH_BWD_KV_TUNE_64 4, 1, 64, 2
#define FLASH_BWD_KV_TUNE_128 8, 1, 64, 1
#define FLASH_BWD_WGMMA_TUNE_128 2, 32, 1, false
#elif defined(FLASH_BWD_TUNE_SET) && FLASH_BWD_TUNE_SET == 3  // fewer blocks per SM
#define FLASH_BWD_KV_TUNE_64 4, 1, 32, 3
#define FLASH_BWD_KV_TUNE_128 4, 1, 32, 1
#endif
#ifndef FLASH_BWD_KV_TUNE_32
#define FLASH_BWD_KV_TUNE_32 4, 1, 32, 4
#endif
#ifndef FLASH_BWD_KV_TUNE_64
#define FLASH_BWD_KV_TUNE_64 8, 1, 32, 2
#endif
#ifndef FLASH_BWD_KV_TUNE_96
#define FLASH_BWD_KV_TUNE_96 4, 1, 32, 2
#endif
#ifndef FLASH_BWD_KV_TUNE_128
#define FLASH_BWD_KV_TUNE_128 8, 1, 32, 1
#endif
// Past 128 (two dK/dV passes): 4 warps, small query / key tiles to keep two blocks per SM
// within the register and shared-memory budgets (load_tile_async needs rows x D/8
// chunks to split over 128 threads: D=160 takes 32-row tiles).
#ifndef FLASH_BWD_KV_TUNE_160
#define FLASH_BWD_KV_TUNE_160 4, 1, 32, 2
#endif
#ifndef FLASH_BWD_KV_TUNE_192
#define FLASH_BWD_KV_TUNE_192 4, 1, 16, 2
#endif
#ifndef FLASH_BWD_KV_TUNE_256
#define FLASH_BWD_KV_TUNE_256 4, 1, 16, 2
#endif
#define FLASH_BWD_CONFIG_X(M, D, ...) M(D, __VA_ARGS__)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 32, FLASH_BWD_KV_TUNE_32)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 64, FLASH_BWD_KV_TUNE_64)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 96, FLASH_BWD_KV_TUNE_96)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 128, FLASH_BWD_KV_TUNE_128)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 160, FLASH_BWD_KV_TUNE_160)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 192, FLASH_BWD_KV_TUNE_192)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 256, FLASH_BWD_KV_TUNE_256)
#undef FLASH_BWD_KV_CONFIG

// Largest tile head dim whose dK and dV accumulators (16 rows x D f32 each per warp,
// plus Sᵀ and dPᵀ) fit 255 registers together; larger dims run dV and dK as two passes.
constexpr int kBwdMaxUnsplitDim = 128;

// Rows of the per-row workspace (lse, Δ) are padded to this multiple, so kernels read
// whole tiles without bounds checks (padding: lse = +inf -> p = 0, Δ = 0).
constexpr int kBwdRowPad = 128;

template <class C>
struct BwdKvDerived {
  static constexpr int kThreads = C::kWarps * 32;
  static constexpr int kChunks = C::kDim / 8;  // 16-byte chunks per row
  static constexpr int kTileQBytes = C::kBlockQ * C::kDim * 2;
  // One stage: Q tile, dO tile, lse and Δ of its rows.
  static constexpr int kStageBytes = 2 * kTileQBytes + 2 * C::kBlockQ * 4;
  // K tile + V tile (resident), two stages, then the dSᵀ tile [kBlockKV][kBlockQ] of dQ,
  // rows padded by 16 bytes: an odd number of 16-byte chunks per row puts the 8 rows an
  // ldmatrix reads, and the 8 rows a warp's fragment stores touch, in distinct banks.
  static constexpr int kDsRowBytes = (C::kBlockQ + 8) * 2;
  static_assert((kDsRowBytes / 16) % 2 == 1, "odd chunks per dSᵀ row (kBlockQ % 16 == 0)");
  static constexpr int kDsOffset = 2 * C::kBlockKV * C::kDim * 2 + 2 * kStageBytes;
  // dQ partials: f32 rows of kDqRowFloats (the accumulator's layout too; 8 floats of
  // padding spread a fragment store's 8 rows over the banks), kDqStages staging tiles
  // for the bulk reduction (2: one fills while the copy engine reads the other; past
  // D = 192 no room, per-thread atomics instead).
  static constexpr int kDqRowFloats = C::kDim + 8;
  static constexpr int kDqStages = C::kDim <= 128 ? 2 : C::kDim <= 192 ? 1 : 0;
  static constexpr int kDqOffset = kDsOffset + C::kBlockKV * kDsRowBytes;
  static constexpr int kSmemBytes = kDqOffset + kDqStages * C::kBlockQ * kDqRowFloats * 4;
  static_assert(C::kBlockQ % 16 == 0 && C::kBlockQ <= kBwdRowPad, "whole k16 steps");
  static_assert(kBwdRowPad % C::kBlockQ == 0, "padded rows hold whole query tiles");
  static_assert(C::kDim % 16 == 0 && kChunks % 4 == 0, "swizzle needs 64-byte rows");
  static_assert(C::kMTiles == 1 || C::kMTiles == 2, "one or two m16 tiles per warp");
  static_assert(kSmemBytes <= 227 * 1024, "fits an sm_90 block");
};

// sm_90a backward (bwd_wgmma_kernel.cuh), configs for head dims 64, 96, 128, 192 and 256 (96 and
// 192: the 128 and 256 tiles with the products cut to their columns; other dims and sm_80: the
// mma.sync kernel above): kWarpGroups warpgroups per block own kBlockKV = 64·kWarpGroups
// keys (wgmma's m64 each; kSplitD: 64 shared keys); query tiles of kBlockQ rows (a multiple of
// 16; dSᵀ tiles in 64-query panels, 32 in one 64-byte panel). kMinBlocks per SM caps the
// registers (dK, dV: D/2 each per thread). Past D = 128 that is more than a thread has (kSplitD):
// the warpgroups share 64 keys and split the columns of dK, dV (D/2 per warpgroup: D/4 registers
// each) and the query columns of Sᵀ, dPᵀ; Pᵀ and dSᵀ go through shared tiles. One more
// warpgroup (after the MMA ones) hands each step's dQ partial to the copy engine, in turn in the
// ordered mode, so that no MMA warp waits for another block's add. Registers are per warpgroup: it
// gives its own away (setmaxnreg, kBwdDqWarpRegs) and the MMA warps get kBwdMmaRegs each (D = 128
// then spills 28 bytes, 44 at 255 without it). Measured 2026-11-26 (H100, deterministic): +4-16 %
// at D = 64, +0-5 % at D = 128 over thread 0 doing it.
// Two configs per head dim: BwdWgmmaConfig for plain problems, BwdWgmmaSoftcapConfig for softcap
// ones (the tanh takes registers and lengthens the element-wise phase), chosen together with
// the kernel (with_wgmma_config).
template <int kDim>
struct BwdWgmmaConfig;
template <int kDim>
struct BwdWgmmaSoftcapConfig;
// setmaxnreg budgets with the dQ warpgroup: the block (two MMA warpgroups and it) starts at
// 65536 / 384 registers per thread, rounded down to 8; what the dQ warpgroup gives back is
// exactly what the two MMA warpgroups take.
constexpr int kBwdDqWarpRegs = 24, kBwdMmaRegs = 240;
constexpr int kBwdLaunchRegs = 65536 / (3 * 128) / 8 * 8;
// Past this head dim a warpgroup's dK + dV (64 keys x D f32 each) exceed its registers: the
// warpgroups share 64 keys and split the columns (kSplitD).
constexpr int kBwdWgmmaMaxOwnKeysDim = 128;
static_assert(2 * 128 * (kBwdMmaRegs - kBwdLaunchRegs) == 128 * (kBwdLaunchRegs - kBwdDqWarpRegs),
              "setmaxnreg.inc takes only registers that setmaxnreg.dec released");
// D: the widest head dim the config runs. Its tiles are kDim wide: D rounded up to whole
// 64-column atoms, past kBwdWgmmaMaxOwnKeysDim to one atom per warpgroup (kSplitD's column
// halves); the products run over the kUsedDim = D columns that can be non-zero only (D = 96:
// Sᵀ / dPᵀ over 6 k16 steps instead of 8, dK / dV n96 instead of n128, a dQ row of 96 + 4 floats).
#define FLASH_BWD_WGMMA_CONFIG(TEMPLATE, D, WG, BQ, MINB, REGS)                                 \
  template <>                                                                                   \
  struct TEMPLATE<D> {                                                                          \
    static constexpr int kDim = D <= kBwdWgmmaMaxOwnKeysDim                                     \
                                    ? (D + 63) / 64 * 64                                        \
                                    : (D + 64 * WG - 1) / (64 * WG) * (64 * WG);                \
    static constexpr int kUsedDim = D;                                                          \
    static constexpr int kWarpGroups = WG, kBlockQ = BQ;                                        \
    static constexpr bool kSplitD = kDim > kBwdWgmmaMaxOwnKeysDim; /* shared 64 keys */         \
    static constexpr int kBlockKV = kSplitD ? 64 : 64 * WG;                                     \
    static constexpr int kMinBlocks = MINB;                                                     \
    /* REGS: K / V rows as register A operands of Sᵀ / dPᵀ (see below) */                   \
    static constexpr bool kKvInRegs = REGS;                                                     \
    /* the mask-free test of a warp's query tiles on two row bounds (see below) */              \
    static constexpr bool kMaskRowBounds = BQ == 128;                                           \
    static constexpr int kMmaThreads = WG * 128, kThreads = kMmaThreads + 128; /* + dQ */       \
    static constexpr const char* kName = REGS ? "wgmma_bwd_d" #D "_wg" #WG "_q" #BQ "_b" #MINB  \
                                                "_rs"                                           \
                                              : "wgmma_bwd_d" #D "_wg" #WG "_q" #BQ "_b" #MINB; \
  };
// Query tiles: 2026-11-22 (H200, same call) 64 rows 1.16-1.25x over 32 (wider n64 products,
// half the per-step barriers and dQ hand-overs per FLOP). D = 64: 128 rows 1.06-1.12x over
// 64 (session 37, H200: n128 Sᵀ / dPᵀ / dQᵀ products, half the steps; they replaced 64-row
// tiles in an overlapped order, step i−1's dV / dK / dQᵀ under step i's element-wise phase,
// with K / V and Pᵀ / dSᵀ register fragments, which no longer fit). D = 128: 80 rows
// (FlashAttention-3's non-causal tile; one dQ staging tile) measured 1.04-1.21x slower than 64
// (more spills, session 37); 128 rows do not fit the registers (dK and dV alone take 128).
// REGS: at n64 a product reading both operands from shared memory needs as many bytes per
// cycle as shared memory delivers (4 KB per m64n64k16): with 64-row tiles D = 64 was bound by
// it and kept its K and V rows in registers (32 registers; +3-7 %, H100, session 19). Softcap
// at D = 64 still runs that tile: on the 128-row one the tanh spills (300 bytes; 1.24-1.27x
// slower, session 37). With 128-row tiles plain D = 64 spills too with them (1.55-1.65x).
// kMaskRowBounds: which query tiles skip the per-element masks, tested per step either on
// mask.cuh's rows_seeing_all_keys for the warp's 16 keys (two bounds held over the walk) or
// with tile_fully_visible (64-bit sums, which ptxas hoists and spills). H200, session 38, bf16,
// 2k-16k: the bounds 1.6-4.1 % faster on D 64's 128-query tile, 2-4 % slower on D 128's
// 64-query tile (the two registers move its spill reloads into the step), 3-4 % slower on
// D 64's softcap tile under a causal mask (1 % faster without one).
#ifndef FLASH_BWD_WGMMA_TUNE_64
#define FLASH_BWD_WGMMA_TUNE_64 2, 128, 1, false
#endif
#ifndef FLASH_BWD_WGMMA_SOFTCAP_TUNE_64
#define FLASH_BWD_WGMMA_SOFTCAP_TUNE_64 2, 64, 1, true
#endif
#ifndef FLASH_BWD_WGMMA_TUNE_128
#define FLASH_BWD_WGMMA_TUNE_128 2, 64, 1, false
#endif
// D = 96 (also 72 .. 96): the 128 tile's shape with the products cut to 96 columns (a fifth
// less tensor work, dK / dV in 96 registers instead of 128): 0.86-0.88x the time of the 128
// config it ran on before (H200, session 44, bf16 2k-16k, causal and not).
#ifndef FLASH_BWD_WGMMA_TUNE_96
#define FLASH_BWD_WGMMA_TUNE_96 FLASH_BWD_WGMMA_TUNE_128
#endif
// D = 256 (kSplitD): 64 keys, 64-query tiles; the dQ staging tile lives in the step's Q / dO
// stage once dK / dV have read it (BwdWgmmaLayout::kDqInStage: no room for both).
#ifndef FLASH_BWD_WGMMA_TUNE_256
#define FLASH_BWD_WGMMA_TUNE_256 2, 64, 1, false
#endif
// D = 192 (also 136 .. 192; DeepSeek's 192 / 128): the 256 tile's shape, Sᵀ / dPᵀ over 12 k16
// steps instead of 16 and a dQ row of 192 + 4 floats (dK / dV / dQᵀ stay 128 columns per
// warpgroup: whole 64-column atoms each): 0.77-0.90x the time of the 256 config (192 / 128:
// 0.81-0.86x; H200, session 44).
#ifndef FLASH_BWD_WGMMA_TUNE_192
#define FLASH_BWD_WGMMA_TUNE_192 FLASH_BWD_WGMMA_TUNE_256
#endif
#define FLASH_BWD_WGMMA_CONFIG_X(TEMPLATE, D, ...) FLASH_BWD_WGMMA_CONFIG(TEMPLATE, D, __VA_ARGS__)
FLASH_BWD_WGMMA_CONFIG_X(BwdWgmmaConfig, 64, FLASH_BWD_WGMMA_TUNE_64)
FLASH_BWD_WGMMA_CONFIG_X(BwdWgmmaConfig, 96, FLASH_BWD_WGMMA_TUNE_96)
FLASH_BWD_WGMMA_CONFIG_X(BwdWgmmaConfig, 128, FLASH_BWD_WGMMA_TUNE_128)
FLASH_BWD_WGMMA_CONFIG_X(BwdWgmmaConfig, 192, FLASH_BWD_WGMMA_TUNE_192)
FLASH_BWD_WGMMA_CONFIG_X(BwdWgmmaConfig, 256, FLASH_BWD_WGMMA_TUNE_256)
FLASH_BWD_WGMMA_CONFIG_X(BwdWgmmaSoftcapConfig, 64, FLASH_BWD_WGMMA_SOFTCAP_TUNE_64)
template <>
struct BwdWgmmaSoftcapConfig<96> : BwdWgmmaConfig<96> {};
template <>
struct BwdWgmmaSoftcapConfig<128> : BwdWgmmaConfig<128> {};
template <>
struct BwdWgmmaSoftcapConfig<192> : BwdWgmmaConfig<192> {};
template <>
struct BwdWgmmaSoftcapConfig<256> : BwdWgmmaConfig<256> {};
// The config a problem of head dim D runs, with or without softcap.
template <int D, bool kSoftcap>
using BwdWgmmaConfigFor = std::conditional_t<kSoftcap, BwdWgmmaSoftcapConfig<D>, BwdWgmmaConfig<D>>;
#undef FLASH_BWD_WGMMA_CONFIG_X
#undef FLASH_BWD_WGMMA_CONFIG
#undef FLASH_BWD_CONFIG_X

// Shared memory of the wgmma kernel (byte offsets from a 1024-aligned base): K, V (SW128
// [D/64][BK rows][64]), two stages of Q, dO (SW128 [D/64][BQ][64]) + lse, Δ, a dSᵀ tile
// (SW64 [BK][32] or SW128 panels [BQ/64][BK][64]), two dQ staging tiles [BQ][D + 4] f32; 1024
// bytes of alignment slack. kSplitD: Pᵀ tiles
// too (both warpgroups read all 64 keys' Pᵀ), and the dQ staging tile of a step is its own
// stage (kDqInStage: 64 x 260 floats = the stage's 65 KB), written once both warpgroups'
// dK / dV products have read the stage; the stage loads again once the copy engine has read
// it ("empty").
template <class C>
struct BwdWgmmaLayout {
  static constexpr int D = C::kDim, BQ = C::kBlockQ, BK = C::kBlockKV;
  static constexpr int kTileK = BK * D * 2, kTileQ = BQ * D * 2;
  // Serial order with its own keys (D = 64, 128): the warpgroups take turns issuing their products
  // (ping-pong, bwd_wgmma_kernel.cuh) and meet on dSᵀ-tile mbarriers.
  static constexpr bool kPingPong = !C::kSplitD;
  static constexpr int kStages = 2, kDsTiles = 1;
  static constexpr bool kDqInStage = C::kSplitD, kHasPtTiles = C::kSplitD;
  static constexpr int kK = 0, kV = kTileK, kStage = 2 * kTileK;
  static constexpr int kStageBytes = (2 * kTileQ + 2 * BQ * 4 + 1023) / 1024 * 1024;
  // dSᵀ / Pᵀ tiles [BK keys][BQ queries]: rows of 64 bytes (64-byte swizzle, BQ = 32) or
  // 64-query panels [BQ/64][BK][64] of 128-byte rows (128-byte swizzle; the last partly used).
  static constexpr int kDsRowBytes = BQ == 32 ? 64 : 128, kDsPanelBytes = BK * kDsRowBytes;
  static constexpr int kDsBytes = (BQ * 2 + kDsRowBytes - 1) / kDsRowBytes * kDsPanelBytes;
  static constexpr int kDs = kStage + kStages * kStageBytes;
  // kSplitD: Pᵀ tiles too (dV reads Pᵀ from shared memory).
  static constexpr int kPt = kDs + kDsTiles * kDsBytes;
  static constexpr int kDq = kPt + (kHasPtTiles ? kDsTiles * kDsBytes : 0);
  // dQ rows padded by 4 floats: the dQᵀ fragment stores (8 d-rows x 4 pairs of q) then
  // spread over all 32 banks (the mma.sync kernel's float2 stores prefer 8); measured
  // 2-3% faster than 8 (bench/RESULTS.md, 2026-11-22). A transposed tile ([d][q], float2
  // stores: half the instructions, the same bytes) measured the same at D 128 (session 43):
  // what the staging costs is shared-memory bandwidth.
  // Two dQ staging tiles: the MMA warps may run one step ahead of the copy engine's read
  // (four at D = 64 measured the same as two, 2026-11-26); kDqInStage: the two stages.
  static constexpr int kDqRowFloats = C::kUsedDim + 4, kDqStages = 2;
  static constexpr int kDqTileBytes = BQ * kDqRowFloats * 4;
  static_assert(!kDqInStage || (kDqStages == kStages && kDqTileBytes <= kStageBytes),
                "a stage holds its step's dQ staging tile");
  // mbarriers: per dQ staging tile "full" (every MMA warp wrote its part) and "empty" (the
  // copy engine read it), then per Q / dO stage "full" (the loader warps' copies landed)
  // and "empty" (every MMA thread is done reading it); kPingPong: per dSᵀ tile "full" (both
  // warpgroups wrote their rows) and "empty" (both warpgroups' dQᵀ products read it).
  static constexpr int kBars = kDq + (kDqInStage ? 0 : kDqStages * kDqTileBytes);
  static constexpr int kBarCount = 2 * kDqStages + 2 * kStages + (kPingPong ? 2 * kDsTiles : 0);
  static constexpr int kSmemBytes = kBars + kBarCount * 8 + 1024;
  static_assert(BK == (C::kSplitD ? 64 : 64 * C::kWarpGroups) && BQ % 16 == 0 && BQ <= 128 &&
                    kBwdRowPad % BQ == 0,
                "m64 per warpgroup; whole k16 steps of queries, at most two dSᵀ panels; padded "
                "rows hold whole query tiles (lse / Δ loads, dQ adds and counters stay in a head)");
  static_assert(D % 64 == 0 && (D <= 128 || (C::kSplitD && D % (64 * C::kWarpGroups) == 0)),
                "whole 64-column atoms; dK + dV in registers (kSplitD: D/2 columns each)");
  static_assert(kTileK % 1024 == 0 && kTileQ % 1024 == 0 && kDs % 1024 == 0 && kDsBytes % 1024 == 0,
                "swizzle bases");
  static_assert(kSmemBytes <= 227 * 1024, "fits an sm_90 block");
};

// The wgmma kernel runs where its sm_90a code exists: compute capability 9.0 and a build
// with the 90a target (FLASHATTN_CUDA_SM90A). FLASH_CUDA_BWD=mma forces the mma.sync kernel
// (to test the path other GPUs take; =wgmma or unset: the default; checked in every build).
inline bool bwd_forced_mma() {
  return flash::detail::env_switch("FLASH_CUDA_BWD", {"mma", "wgmma"}) == "mma";
}
inline bool bwd_wgmma_usable(bool is_f32, int dim, int cc_major, int cc_minor) {
  const bool forced_mma = bwd_forced_mma();
#ifdef FLASHATTN_CUDA_SM90A
  return !is_f32 && (dim == 64 || dim == 96 || dim == 128 || dim == 192 || dim == 256) &&
         cc_major == 9 && cc_minor == 0 && !forced_mma;
#else
  (void)is_f32, (void)dim, (void)cc_major, (void)cc_minor, (void)forced_mma;
  return false;
#endif
}
// Calls fn(config{}) with the config a problem of this head dim runs on the wgmma kernel
// (bwd_wgmma_usable): BwdWgmmaSoftcapConfig<dim> with softcap, else BwdWgmmaConfig<dim>.
template <class Fn>
auto with_wgmma_config(int dim, bool softcap, Fn&& fn) {  // dim: 64, 96, 128, 192, 256 (else 256)
  auto for_dim = [&](auto soft) {
    constexpr bool kSoftcap = decltype(soft)::value;
    return dim == 64    ? fn(BwdWgmmaConfigFor<64, kSoftcap>{})
           : dim == 96  ? fn(BwdWgmmaConfigFor<96, kSoftcap>{})
           : dim == 128 ? fn(BwdWgmmaConfigFor<128, kSoftcap>{})
           : dim == 192 ? fn(BwdWgmmaConfigFor<192, kSoftcap>{})
                        : fn(BwdWgmmaConfigFor<256, kSoftcap>{});
  };
  return softcap ? for_dim(std::true_type{}) : for_dim(std::false_type{});
}

// Ordered wgmma backward under a mask band: the key-block groups of the dispatch order
// (kernel_params.hpp, dq_group), heaviest first inside each, when a key block spans at
// least two query tiles, so that the next key block, dispatched after it, walks two steps
// ahead of it (at D 256 the key blocks span one tile and heaviest-first measured 6-12 %
// slower, bench/RESULTS.md, session 30; D 64's span one 128-query tile and groups measured
// 0.6-1.3 % slower, session 37). A head's key blocks are cut into equal groups of at most
// kBwdDqGroupKeyBlocks, never more than sms / 2 (other streams' kernels may hold SMs; the
// no-cycle argument needs a group resident at once). H200, session 35, bf16 causal, in one
// process (bench/RESULTS.md): at 16k (128 key blocks a head) groups of 32 ran 1-4 % faster
// at D 128 than the last-first order that a head of more than sms / 2 key blocks took
// before (D 64, then on 64-query tiles, -1 to +2 %; an A/A run reads +-2 %), groups of 64
// within noise of 32; at 8k (64 key blocks) the same as one group.
// FLASH_CUDA_BWD_HEAVY_FIRST=0 keeps the last-first order (0), FLASH_CUDA_BWD_DQ_GROUP=<n>
// caps the groups at n key blocks instead (tests: several groups on small problems; A/B).
constexpr int kBwdDqGroupKeyBlocks = 32;
inline int bwd_dq_group(int dim, bool softcap, int64_t key_blocks, int sms) {
  const bool off = flash::detail::env_switch("FLASH_CUDA_BWD_HEAVY_FIRST", {"0", "1"}) == "0";
  const long long cap_env = flash::detail::env_positive_int("FLASH_CUDA_BWD_DQ_GROUP");
  const bool two_tiles = with_wgmma_config(dim, softcap, [](auto config) {
    using C = decltype(config);
    return C::kBlockKV >= 2 * C::kBlockQ;
  });
  if (off || !two_tiles || key_blocks < 1) return 0;
  const int64_t cap = std::max<int64_t>(
      1, std::min<int64_t>(cap_env > 0 ? cap_env : kBwdDqGroupKeyBlocks, sms / 2));
  return bwd_equal_group(static_cast<int>(key_blocks), static_cast<int>(cap));
}

// f32 backward (SIMT FMA, no TF32): kRows rows per warp (query rows for dQ, key rows
// for dK/dV), the other side in tiles of 32 (one per lane), kWarps warps per block.
struct BwdSimtConfig {
  static constexpr int kWarps = 4, kRows = 4, kTile = 32;
  static constexpr int kBlockRows = kWarps * kRows;
  static constexpr const char* kName = "simt_f32_bwd_r16_t32_w4";
};
template <int kDim>
struct BwdSimtSmem {
  // Two row tiles (Q,dO or K,V) of kBlockRows and two of kTile rows, each row padded by
  // 4 floats so lanes reading 16 bytes of consecutive rows hit distinct bank groups.
  static constexpr int kRowFloats = kDim + 4;
  static constexpr int kBytes =
      2 * (BwdSimtConfig::kBlockRows + BwdSimtConfig::kTile) * kRowFloats * 4;
};

// ---- host-side questions choose() and the launcher ask ---------------------------------

inline int64_t bwd_rows_pad(int64_t seqlen_q) {
  return (seqlen_q + kBwdRowPad - 1) / kBwdRowPad * kBwdRowPad;
}

// Deterministic mode: the f32 dQ slices (one per split) may take at most this much
// workspace; past it fewer splits run (less parallelism when batch · kv heads is small).
constexpr int64_t kBwdDqSliceCapBytes = int64_t{2} << 30;

// How the f16/bf16 backward accumulates dQ (see bwd_kv_kernel.cuh): splits = blocks per
// (batch, kv head), slices = f32 partial-sum copies of dQ [batch, heads_q, rows_pad, dim].
struct BwdDqPlan {
  int splits = 1, slices = 0;
  int64_t slice_floats = 0;
  bool ordered = false;  // one slice, adds per query tile in key-block order (counters)
  int64_t counters = 0;  // one per (batch, head, query tile)
  int row_floats = 0;    // floats per dQ row in a slice (tile dim + padding)
};
template <class C>
BwdDqPlan bwd_dq_plan_for(bool deterministic, int64_t batch, int64_t heads_q, int64_t heads_kv,
                          int64_t seqlen_q, int64_t seqlen_kv, int sms, int row_floats) {
  BwdDqPlan plan;
  const int64_t kv_blocks = std::max<int64_t>(1, (seqlen_kv + C::kBlockKV - 1) / C::kBlockKV);
  plan.row_floats = row_floats;
  plan.slice_floats = batch * heads_q * bwd_rows_pad(seqlen_q) * row_floats;
  if (!deterministic) {  // one block per key block, all adding into one slice
    plan.splits = (int)kv_blocks;
    plan.slices = 1;
    return plan;
  }
  // Enough blocks to fill the GPU once (sms x resident blocks), no more: each extra split
  // costs a slice to zero, fill and sum.
  const int64_t resident = (int64_t)sms * C::kMinBlocks;
  const int64_t bh = batch * heads_kv;
  int64_t splits = std::min<int64_t>(kv_blocks, std::max<int64_t>(1, resident / bh));
  const int64_t slice_bytes = std::max<int64_t>(1, plan.slice_floats * 4);
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, kBwdDqSliceCapBytes / slice_bytes));
  plan.splits = plan.slices = (int)splits;
  return plan;
}
// f32 (SIMT path) needs no dQ accumulator: slices = 0.
inline BwdDqPlan bwd_dq_plan(bool is_f32, bool wgmma, int dim, bool softcap, bool deterministic,
                             int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q,
                             int64_t seqlen_kv, int sms) {
  if (is_f32) return {};
  if (wgmma) {  // both modes: one block per key block, one slice; ordered if deterministic
    return with_wgmma_config(dim, softcap, [&](auto config) {
      using C = decltype(config);
      BwdDqPlan plan = bwd_dq_plan_for<C>(false, batch, heads_q, heads_kv, seqlen_q, seqlen_kv, sms,
                                          BwdWgmmaLayout<C>::kDqRowFloats);
      plan.ordered = deterministic;
      plan.counters = deterministic ? batch * heads_q * (bwd_rows_pad(seqlen_q) / C::kBlockQ) : 0;
      return plan;
    });
  }
  switch (dim) {
#define FLASH_BWD_PLAN(D)                                                                     \
  case D:                                                                                     \
    return bwd_dq_plan_for<BwdKvConfig<D>>(deterministic, batch, heads_q, heads_kv, seqlen_q, \
                                           seqlen_kv, sms,                                    \
                                           BwdKvDerived<BwdKvConfig<D>>::kDqRowFloats);
    FLASH_BWD_PLAN(32)
    FLASH_BWD_PLAN(64)
    FLASH_BWD_PLAN(96)
    FLASH_BWD_PLAN(128) FLASH_BWD_PLAN(160) FLASH_BWD_PLAN(192) FLASH_BWD_PLAN(256)
#undef FLASH_BWD_PLAN
  }
  return {};
}

// Workspace floats: Δ and lse, [batch, heads_q, rows_pad] each, then the dQ slices, then
// the ordered mode's counters (4 bytes each).
// O(rows · dim · slices), never N².
inline int64_t bwd_workspace_floats(int64_t batch, int64_t heads_q, int64_t seqlen_q,
                                    const BwdDqPlan& plan) {
  return 2 * batch * heads_q * bwd_rows_pad(seqlen_q) + plan.slices * plan.slice_floats +
         plan.counters;
}

// Kernel names and shared memory of the backward for a tile head dim; is_f32 picks the
// SIMT path. Past kBwdMaxUnsplitDim the kernel runs twice (dV pass, dK + dQ pass).
inline std::string bwd_config_name(bool is_f32, bool wgmma, int dim, bool softcap) {
  if (is_f32) return BwdSimtConfig::kName;
  if (wgmma)
    return with_wgmma_config(dim, softcap, [](auto c) { return std::string(decltype(c)::kName); });
  const char* passes = dim > kBwdMaxUnsplitDim ? " (dv, dk+dq passes)" : "";
  switch (dim) {
#define FLASH_BWD_NAME(D) \
  case D:                 \
    return std::string(BwdKvConfig<D>::kName) + passes;
    FLASH_BWD_NAME(32)
    FLASH_BWD_NAME(64)
    FLASH_BWD_NAME(96)
    FLASH_BWD_NAME(128) FLASH_BWD_NAME(160) FLASH_BWD_NAME(192) FLASH_BWD_NAME(256)
#undef FLASH_BWD_NAME
  }
  return "";
}
inline int bwd_smem_bytes(bool is_f32, bool wgmma, int dim, bool softcap) {
  if (!is_f32 && wgmma)
    return with_wgmma_config(dim, softcap,
                             [](auto c) { return BwdWgmmaLayout<decltype(c)>::kSmemBytes; });
  switch (dim) {
#define FLASH_BWD_SMEM(D) \
  case D:                 \
    return is_f32 ? BwdSimtSmem<D>::kBytes : BwdKvDerived<BwdKvConfig<D>>::kSmemBytes;
    FLASH_BWD_SMEM(32)
    FLASH_BWD_SMEM(64)
    FLASH_BWD_SMEM(96)
    FLASH_BWD_SMEM(128) FLASH_BWD_SMEM(160) FLASH_BWD_SMEM(192) FLASH_BWD_SMEM(256)
#undef FLASH_BWD_SMEM
  }
  return 0;
}

}  // namespace flash::cuda
