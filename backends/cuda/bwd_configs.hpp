// Tile shapes of the backward kernels, one named config per head dim. The launchers,
// choose() and FLASH_LOG all read these, so what is logged is what runs.
//
// The backward is three launches (see bwd_launch.cuh):
//  1. bwd_preprocess: Δ = rowsum(dO∘O) and the log-sum-exp rescaled for exp2, per row;
//  2. bwd_kv (dK, dV): one block per (key tile, kv head, batch); each warp owns 16 or
//     32 key rows, so its slices of dK and dV stay in registers for the whole query loop;
//  3. bwd_q (dQ): one block per (query tile, head, batch); each warp owns 16 or 32 query
//     rows, dQ stays in f32 registers, written once. No atomics: bitwise deterministic.
#pragma once

#include <cstdint>
#include <string>

namespace flash::cuda {

// dK/dV kernel (f16/bf16): kBlockKV = 16 * kWarps * kMTiles key rows; the block walks
// query tiles of kBlockQ rows (two shared-memory stages, the next loading while this
// one computes).
template <int kDim>
struct BwdKvConfig;
// dQ kernel (f16/bf16): kBlockQ = 16 * kWarps * kMTiles query rows; key tiles of kBlockKV.
template <int kDim>
struct BwdQConfig;

// kMTiles: m16 tiles per warp. Two halve the shared-memory traffic per mma (each B
// fragment feeds both) but double the accumulator registers.
#define FLASH_BWD_KV_CONFIG(D, W, MT, BQ, MINB)                                                  \
  template <>                                                                                    \
  struct BwdKvConfig<D> {                                                                        \
    static constexpr int kDim = D, kWarps = W, kMTiles = MT, kBlockQ = BQ;                       \
    static constexpr int kMinBlocks = MINB; /* per SM: caps registers per thread */              \
    static constexpr int kBlockKV = 16 * W * MT;                                                 \
    static constexpr const char* kName = "mma_bwd_kv_d" #D "_w" #W "_m" #MT "_q" #BQ "_b" #MINB; \
  };
#define FLASH_BWD_Q_CONFIG(D, W, MT, BKV, MINB)                                                   \
  template <>                                                                                     \
  struct BwdQConfig<D> {                                                                          \
    static constexpr int kDim = D, kWarps = W, kMTiles = MT, kBlockKV = BKV;                      \
    static constexpr int kMinBlocks = MINB;                                                       \
    static constexpr int kBlockQ = 16 * W * MT;                                                   \
    static constexpr const char* kName = "mma_bwd_q_d" #D "_w" #W "_m" #MT "_kv" #BKV "_b" #MINB; \
  };
// Values: warps, m16 tiles per warp, the other side's tile, min blocks per SM. The
// backward is latency bound at 8 warps per SM (ncu: "wait" and short-scoreboard
// stalls, 30% issue slots), so the defaults trade per-warp tile size for occupancy:
// min blocks caps registers (4 blocks x 128 threads -> 128 registers). Sweep of
// 2026-11-21 in bench/RESULTS.md. A tuning build may predefine one of these
// macros (in a header: nvcc splits command-line -D values at commas).
#ifndef FLASH_BWD_KV_TUNE_32
#define FLASH_BWD_KV_TUNE_32 4, 1, 32, 4
#endif
#ifndef FLASH_BWD_KV_TUNE_64
#define FLASH_BWD_KV_TUNE_64 4, 1, 32, 4
#endif
#ifndef FLASH_BWD_KV_TUNE_96
#define FLASH_BWD_KV_TUNE_96 4, 1, 32, 2
#endif
#ifndef FLASH_BWD_KV_TUNE_128
#define FLASH_BWD_KV_TUNE_128 4, 1, 32, 2
#endif
#ifndef FLASH_BWD_Q_TUNE_32
#define FLASH_BWD_Q_TUNE_32 4, 1, 64, 4
#endif
#ifndef FLASH_BWD_Q_TUNE_64
#define FLASH_BWD_Q_TUNE_64 4, 1, 64, 4
#endif
#ifndef FLASH_BWD_Q_TUNE_96
#define FLASH_BWD_Q_TUNE_96 4, 1, 32, 3
#endif
#ifndef FLASH_BWD_Q_TUNE_128
#define FLASH_BWD_Q_TUNE_128 4, 1, 32, 3
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
#ifndef FLASH_BWD_Q_TUNE_160
#define FLASH_BWD_Q_TUNE_160 4, 1, 32, 2
#endif
#ifndef FLASH_BWD_Q_TUNE_192
#define FLASH_BWD_Q_TUNE_192 4, 1, 16, 2
#endif
#ifndef FLASH_BWD_Q_TUNE_256
#define FLASH_BWD_Q_TUNE_256 4, 1, 16, 2
#endif
#define FLASH_BWD_CONFIG_X(M, D, ...) M(D, __VA_ARGS__)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 32, FLASH_BWD_KV_TUNE_32)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 64, FLASH_BWD_KV_TUNE_64)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 96, FLASH_BWD_KV_TUNE_96)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 128, FLASH_BWD_KV_TUNE_128)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 160, FLASH_BWD_KV_TUNE_160)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 192, FLASH_BWD_KV_TUNE_192)
FLASH_BWD_CONFIG_X(FLASH_BWD_KV_CONFIG, 256, FLASH_BWD_KV_TUNE_256)
FLASH_BWD_CONFIG_X(FLASH_BWD_Q_CONFIG, 32, FLASH_BWD_Q_TUNE_32)
FLASH_BWD_CONFIG_X(FLASH_BWD_Q_CONFIG, 64, FLASH_BWD_Q_TUNE_64)
FLASH_BWD_CONFIG_X(FLASH_BWD_Q_CONFIG, 96, FLASH_BWD_Q_TUNE_96)
FLASH_BWD_CONFIG_X(FLASH_BWD_Q_CONFIG, 128, FLASH_BWD_Q_TUNE_128)
FLASH_BWD_CONFIG_X(FLASH_BWD_Q_CONFIG, 160, FLASH_BWD_Q_TUNE_160)
FLASH_BWD_CONFIG_X(FLASH_BWD_Q_CONFIG, 192, FLASH_BWD_Q_TUNE_192)
FLASH_BWD_CONFIG_X(FLASH_BWD_Q_CONFIG, 256, FLASH_BWD_Q_TUNE_256)
#undef FLASH_BWD_CONFIG_X
#undef FLASH_BWD_KV_CONFIG
#undef FLASH_BWD_Q_CONFIG

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
  // K tile + V tile (resident), two stages.
  static constexpr int kSmemBytes = 2 * C::kBlockKV * C::kDim * 2 + 2 * kStageBytes;
  static_assert(C::kBlockQ % 16 == 0 && C::kBlockQ <= kBwdRowPad, "whole k16 steps");
  static_assert(kBwdRowPad % C::kBlockQ == 0, "padded rows hold whole query tiles");
  static_assert(C::kDim % 16 == 0 && kChunks % 4 == 0, "swizzle needs 64-byte rows");
  static_assert(C::kMTiles == 1 || C::kMTiles == 2, "one or two m16 tiles per warp");
  static_assert(kSmemBytes <= 227 * 1024, "fits an sm_90 block");
};

template <class C>
struct BwdQDerived {
  static constexpr int kThreads = C::kWarps * 32;
  static constexpr int kChunks = C::kDim / 8;
  static constexpr int kTileKvBytes = C::kBlockKV * C::kDim * 2;
  static constexpr int kStageBytes = 2 * kTileKvBytes;  // K tile + V tile
  // Q tile + dO tile (resident), two stages of K/V.
  static constexpr int kSmemBytes = 2 * C::kBlockQ * C::kDim * 2 + 2 * kStageBytes;
  static_assert(C::kBlockKV % 16 == 0, "whole k16 steps");
  static_assert(kBwdRowPad % C::kBlockQ == 0, "padded rows hold whole query tiles");
  static_assert(C::kDim % 16 == 0 && kChunks % 4 == 0, "swizzle needs 64-byte rows");
  static_assert(C::kMTiles == 1 || C::kMTiles == 2, "one or two m16 tiles per warp");
  static_assert(kSmemBytes <= 227 * 1024, "fits an sm_90 block");
};

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
// Workspace floats: Δ and lse, [batch, heads_q, rows_pad] each. O(rows), never N².
inline int64_t bwd_workspace_floats(int64_t batch, int64_t heads_q, int64_t seqlen_q) {
  return 2 * batch * heads_q * bwd_rows_pad(seqlen_q);
}

// Kernel names and shared memory of the backward for a tile head dim; is_f32 picks the
// SIMT path. Past kBwdMaxUnsplitDim the dK/dV kernel runs twice (dV pass, dK pass).
inline std::string bwd_config_name(bool is_f32, int dim) {
  if (is_f32) return BwdSimtConfig::kName;
  const char* passes = dim > kBwdMaxUnsplitDim ? " (dv, dk passes)" : "";
  switch (dim) {
#define FLASH_BWD_NAME(D) \
  case D:                 \
    return std::string(BwdKvConfig<D>::kName) + passes + " + " + BwdQConfig<D>::kName;
    FLASH_BWD_NAME(32)
    FLASH_BWD_NAME(64) FLASH_BWD_NAME(96) FLASH_BWD_NAME(128) FLASH_BWD_NAME(160)
        FLASH_BWD_NAME(192) FLASH_BWD_NAME(256)
#undef FLASH_BWD_NAME
  }
  return "";
}
template <int D>
constexpr int bwd_mma_smem_bytes() {
  constexpr int kv = BwdKvDerived<BwdKvConfig<D>>::kSmemBytes;
  constexpr int q = BwdQDerived<BwdQConfig<D>>::kSmemBytes;
  return kv > q ? kv : q;
}
inline int bwd_smem_bytes(bool is_f32, int dim) {
  switch (dim) {
#define FLASH_BWD_SMEM(D) \
  case D:                 \
    return is_f32 ? BwdSimtSmem<D>::kBytes : bwd_mma_smem_bytes<D>();
    FLASH_BWD_SMEM(32)
    FLASH_BWD_SMEM(64) FLASH_BWD_SMEM(96) FLASH_BWD_SMEM(128) FLASH_BWD_SMEM(160)
        FLASH_BWD_SMEM(192) FLASH_BWD_SMEM(256)
#undef FLASH_BWD_SMEM
  }
  return 0;
}

}  // namespace flash::cuda
