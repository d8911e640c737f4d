// Tile shapes of every CUDA kernel, one named config per head dim. The launchers,
// choose() and FLASH_LOG all read these, so what is logged is what runs.
#pragma once

namespace flash::cuda {

// Forward tensor-core kernel (f16/bf16): kBlockQ query rows per block, split over
// kWarps warps (each warp owns kBlockQ / kWarps rows = 16 * m-tiles, so O needs no
// cross-warp reduction); K/V tiles of kBlockKV keys.
template <int kDim>
struct FwdMmaConfig;
#define FLASH_FWD_CONFIG(D, BQ, BKV, W)                                              \
  template <>                                                                        \
  struct FwdMmaConfig<D> {                                                           \
    static constexpr int kDim = D, kBlockQ = BQ, kBlockKV = BKV, kWarps = W;         \
    static constexpr const char* kName = "mma_fwd_d" #D "_q" #BQ "_kv" #BKV "_w" #W; \
  };
// Larger D trades query rows per warp (registers for O) against warps per block.
// (Tuning builds may override one, e.g. -DFLASH_FWD_TUNE_128=128,128,8.)
#ifndef FLASH_FWD_TUNE_32
#define FLASH_FWD_TUNE_32 128, 128, 4
#endif
#ifndef FLASH_FWD_TUNE_64
#define FLASH_FWD_TUNE_64 128, 128, 4
#endif
#ifndef FLASH_FWD_TUNE_96
#define FLASH_FWD_TUNE_96 128, 64, 4
#endif
#ifndef FLASH_FWD_TUNE_128
#define FLASH_FWD_TUNE_128 128, 64, 4
#endif
#ifndef FLASH_FWD_TUNE_160
#define FLASH_FWD_TUNE_160 64, 64, 4
#endif
#ifndef FLASH_FWD_TUNE_192
#define FLASH_FWD_TUNE_192 64, 64, 4
#endif
#ifndef FLASH_FWD_TUNE_256
#define FLASH_FWD_TUNE_256 64, 64, 4
#endif
#define FLASH_FWD_CONFIG_X(D, ...) FLASH_FWD_CONFIG(D, __VA_ARGS__)
FLASH_FWD_CONFIG_X(32, FLASH_FWD_TUNE_32)
FLASH_FWD_CONFIG_X(64, FLASH_FWD_TUNE_64)
FLASH_FWD_CONFIG_X(96, FLASH_FWD_TUNE_96)
FLASH_FWD_CONFIG_X(128, FLASH_FWD_TUNE_128)
FLASH_FWD_CONFIG_X(160, FLASH_FWD_TUNE_160)
FLASH_FWD_CONFIG_X(192, FLASH_FWD_TUNE_192)
FLASH_FWD_CONFIG_X(256, FLASH_FWD_TUNE_256)
#undef FLASH_FWD_CONFIG_X
#undef FLASH_FWD_CONFIG

template <class C>
struct FwdMmaDerived {
  static constexpr int kThreads = C::kWarps * 32;
  static constexpr int kRowsPerWarp = C::kBlockQ / C::kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kChunks = C::kDim / 8;        // 16-byte chunks per row
  // Q tile + one K tile + one V tile (K of the next tile loads while P·V runs,
  // V of this tile while Q·Kᵀ and softmax run).
  static constexpr int kSmemBytes = (C::kBlockQ + 2 * C::kBlockKV) * C::kDim * 2;
  static_assert(C::kBlockQ % (16 * C::kWarps) == 0, "each warp owns whole m16 tiles");
  static_assert(kMTiles >= 1 && kMTiles <= 2, "one or two m16 tiles per warp");
  static_assert(C::kBlockKV % 16 == 0 && C::kDim % 16 == 0, "mma k-steps are 16 wide");
  static_assert(kChunks % 4 == 0, "swizzle needs rows of a multiple of 64 bytes");
  static_assert(kSmemBytes <= 227 * 1024, "fits an sm_90 block");
};

// Paired-warp forward (fwd_mma_pair_kernel.cuh): kWarps / 2 pairs, each pair owns
// kBlockQ / (kWarps / 2) query rows (16 per m-tile); a warp computes S for half of the
// kBlockKV keys and O for half of the value columns. Needs column halves that start on
// a swizzle period (D / 16 a multiple of 8). Used for D = 256 only: at D = 128 the plain
// kernel already gives each warp 32 rows, and pairs measured 6-20% slower
// (bench/RESULTS.md, 2026-11-21).
template <int kDim>
struct FwdPairConfig;
#define FLASH_FWD_PAIR_CONFIG(D, BQ, BKV, W)                                               \
  template <>                                                                              \
  struct FwdPairConfig<D> {                                                                \
    static constexpr int kDim = D, kBlockQ = BQ, kBlockKV = BKV, kWarps = W;               \
    static constexpr const char* kName = "mma_fwd_pairs_d" #D "_q" #BQ "_kv" #BKV "_w" #W; \
  };
#ifndef FLASH_FWD_PAIR_TUNE_256
#define FLASH_FWD_PAIR_TUNE_256 64, 64, 4
#endif
#define FLASH_FWD_PAIR_CONFIG_X(D, ...) FLASH_FWD_PAIR_CONFIG(D, __VA_ARGS__)
FLASH_FWD_PAIR_CONFIG_X(256, FLASH_FWD_PAIR_TUNE_256)
#undef FLASH_FWD_PAIR_CONFIG_X
#undef FLASH_FWD_PAIR_CONFIG

template <class C>
struct FwdPairDerived {
  static constexpr int kThreads = C::kWarps * 32;
  static constexpr int kChunks = C::kDim / 8;
  static constexpr int kPairRows = C::kBlockQ / (C::kWarps / 2);
  static constexpr int kMTiles = kPairRows / 16;
  // Q, K, V tiles, then the exchange buffers: P halves as A fragments
  // ([warp][m-tiles][kBlockKV/32 k-steps][32 lanes] x 16 bytes) and one value per row
  // (max, later sum) per warp.
  static constexpr int kSmemBytes = (C::kBlockQ + 2 * C::kBlockKV) * C::kDim * 2 +
                                    C::kWarps * kMTiles * (C::kBlockKV / 32) * 32 * 16 +
                                    C::kWarps * kPairRows * 4;
  static_assert(C::kBlockQ % (8 * C::kWarps) == 0 && kMTiles >= 1 && kMTiles <= 4,
                "a pair owns whole m16 tiles");
  static_assert(C::kWarps % 2 == 0 && C::kWarps / 2 <= 2, "pair barriers 1 and 2");
  static_assert(C::kBlockKV % 32 == 0, "each warp's half of the keys is whole k16 steps");
  static_assert((C::kDim / 16) % 8 == 0, "column halves start on a swizzle period");
  static_assert(kSmemBytes <= 227 * 1024, "fits an sm_90 block");
};

// Hopper forward (fwd_wgmma_kernel.cuh, sm_90a): kConsumers warpgroups of 64 query rows
// run wgmma on K/V tiles of kBlockN keys that one producer thread streams with TMA into
// a ring of kStages shared-memory stages; Q, K and V tiles in 128-byte-swizzled shared
// memory. Three consumers at D = 64 (192-row tiles: a 64-wide product is short, more rows
// per K/V tile amortise its loads), two above.
template <int kDim>
struct FwdWgmmaConfig;
// D: the widest head dim the config runs; its tiles are kDim = D rounded up to whole 64-column
// atoms, and its products run over the kUsedDim = D columns that can be non-zero only (D = 96: S
// over 6 k16 steps instead of 8, P·V n96 instead of n128, O in 48 registers instead of 64).
#define FLASH_FWD_WGMMA_CONFIG(TEMPLATE, D, BN, ST, WG)                                   \
  template <>                                                                             \
  struct TEMPLATE<D> {                                                                    \
    static constexpr int kDim = (D + 63) / 64 * 64, kUsedDim = D;                         \
    static constexpr int kBlockN = BN, kStages = ST, kConsumers = WG;                     \
    static constexpr const char* kName = "wgmma_fwd_d" #D "_q" #WG "x64_kv" #BN "_s" #ST; \
  };
// (Stage counts alone may be set by single-value macros: nvcc splits -D values at commas.)
#ifndef FLASH_FWD_WGMMA_STAGES_64
#define FLASH_FWD_WGMMA_STAGES_64 2
#endif
#ifndef FLASH_FWD_WGMMA_STAGES_128
#define FLASH_FWD_WGMMA_STAGES_128 2
#endif
// D = 64: 128-key tiles (160 spilled at the three consumers' 160 registers and ran
// 0.74-0.80x; N = 144 has no wgmma wrapper; bench/RESULTS.md, session 18).
#ifndef FLASH_FWD_WGMMA_KV_64
#define FLASH_FWD_WGMMA_KV_64 128
#endif
#ifndef FLASH_FWD_WGMMA_TUNE_64
#define FLASH_FWD_WGMMA_TUNE_64 FLASH_FWD_WGMMA_KV_64, FLASH_FWD_WGMMA_STAGES_64, 3
#endif
// D = 128: 192-key tiles (S of 96 and P of 48 registers fit the 240 of a consumer, no
// spills): 4k and 16k keys end 64 keys into their last tile, exactly the narrow width, where
// FlashAttention-3's 176 left 48 / 16 (a full S product for them). Against 176 (bench/
// RESULTS.md, session 27): 16k +2-4 %, f16 4k +2 %, bf16 4k +0.5 %, 1k -2 %; 176 measured
// +0-6 % over 128 (2026-11-24), 192 equal to 176 then (before the narrow last tile).
#ifndef FLASH_FWD_WGMMA_KV_128
#define FLASH_FWD_WGMMA_KV_128 192
#endif
// Consumers at D = 128: two (three on 96-key tiles, 160 registers each, spilled and ran
// 0.79-0.84x, bench/RESULTS.md, session 18).
#ifndef FLASH_FWD_WGMMA_CONSUMERS_128
#define FLASH_FWD_WGMMA_CONSUMERS_128 2
#endif
#ifndef FLASH_FWD_WGMMA_TUNE_128
#define FLASH_FWD_WGMMA_TUNE_128 \
  FLASH_FWD_WGMMA_KV_128, FLASH_FWD_WGMMA_STAGES_128, FLASH_FWD_WGMMA_CONSUMERS_128
#endif
// D = 96 (also 72 .. 96): the D 128 tile, its products cut to 96 columns, for the problems the
// band tile does not take (cuda_backend.cu's fwd_band_tile: masks past kFwdBandTileMaxKeys96
// keys, unmasked past kFwdShortTileMaxKeys96, no paged cache); the band tile stays 128 wide.
#ifndef FLASH_FWD_WGMMA_TUNE_96
#define FLASH_FWD_WGMMA_TUNE_96 FLASH_FWD_WGMMA_TUNE_128
#endif
// D = 256: 80-key tiles (FlashAttention-3's choice): Q 64 KB and two stages of K and V
// (4 x 40 KB) fill 225 of the 227 KB; +2-12 % over 64-key tiles (bench/RESULTS.md, session 18).
#ifndef FLASH_FWD_WGMMA_KV_256
#define FLASH_FWD_WGMMA_KV_256 80
#endif
#ifndef FLASH_FWD_WGMMA_TUNE_256
#define FLASH_FWD_WGMMA_TUNE_256 FLASH_FWD_WGMMA_KV_256, 2, 2
#endif
// D = 192 (DeepSeek's 192 / 128 too): 112-key tiles, FlashAttention-3's choice; two stages
// of K and V (4 x 42 KB) and Q (48 KB) fill the 227 KB; O of 96, S of 56 and P of 28
// registers fit a consumer's 240. One P·V product of N = 192.
#ifndef FLASH_FWD_WGMMA_TUNE_192
#define FLASH_FWD_WGMMA_TUNE_192 112, 2, 2
#endif
#define FLASH_FWD_WGMMA_CONFIG_X(D, ...) FLASH_FWD_WGMMA_CONFIG(FwdWgmmaConfig, D, __VA_ARGS__)
FLASH_FWD_WGMMA_CONFIG_X(64, FLASH_FWD_WGMMA_TUNE_64)
FLASH_FWD_WGMMA_CONFIG_X(96, FLASH_FWD_WGMMA_TUNE_96)
FLASH_FWD_WGMMA_CONFIG_X(128, FLASH_FWD_WGMMA_TUNE_128)
FLASH_FWD_WGMMA_CONFIG_X(192, FLASH_FWD_WGMMA_TUNE_192)
FLASH_FWD_WGMMA_CONFIG_X(256, FLASH_FWD_WGMMA_TUNE_256)
#undef FLASH_FWD_WGMMA_CONFIG_X
// D = 128 problems whose keys are few: 128-key tiles, three stages (FlashAttention-3's
// causal tile; cuDNN's D 128 forward kernel, named "64x128x128", takes 232 KB of shared
// memory, which fits this shape). Named for the banded masks it first ran.
// Banded masks (causal, windows) up to kFwdBandTileMaxKeys keys: against the 176-key tile
// (bench/RESULTS.md, session 21, H200, bf16, interleaved with cuDNN) causal 0.78 / 0.90 /
// 0.98 of cuDNN at 1k / 2k / 4k (was 0.73 / 0.87 / 0.96), -1 % at 8k and 16k.
// Unmasked problems up to kFwdShortTileMaxKeys keys: against the 192-key tile (session 32,
// H200, bf16 / f16, medians of 3-10 rounds) +17-21 % at 512 keys, +6-7 % at 1k, +2 % at 2k,
// 0-1 % at 3k, -2-3 % at 4k; packed batches of 16 x 512 tokens +27 % (session 21 had -3 % at
// 1k-2k against the 176-key tile of then, before the narrow last tile and O staged in shared
// memory).
// Paged caches: always (boxes of up to 128 rows). cuda_backend.cu's fwd_band_tile decides.
template <int kDim>
struct FwdWgmmaBandConfig;
FLASH_FWD_WGMMA_CONFIG(FwdWgmmaBandConfig, 128, 128, 3, 2)
constexpr int kFwdBandTileMaxKeys = 4096, kFwdShortTileMaxKeys = 2048;
// Head dims up to 96, whose other tile is FwdWgmmaConfig<96> (a quarter fewer products): half
// those key counts. H200, session 44, D 96 bf16 / f16, in one process, the 96 config over the
// band tile: unmasked 512 / 1k / 2k 0.86-0.89 / 0.94-0.97 / 1.08, causal 2k / 4k 0.97-0.99 /
// 1.04-1.06.
constexpr int kFwdBandTileMaxKeys96 = 2048, kFwdShortTileMaxKeys96 = 1024;
#undef FLASH_FWD_WGMMA_CONFIG

// Paged caches on the Hopper forward: K / V rows arrive in boxes of kPagedBoxRows rows, one
// 128-byte swizzle atom (a box then lands on a 1024-byte boundary of the tile, where the
// swizzle pattern starts again), each from its own page; page sizes that are a multiple of
// it run there (choose(): fwd_paged_wgmma), others on the decode kernel.
constexpr int kPagedBoxRows = 8;

// The narrow last K/V tile of the Hopper forward: when every key the work tile's rows see
// ends within the first kNarrowKeys keys of its last K/V tile, that tile's softmax and P·V
// run kNarrowKeys wide instead of kBlockN (S stays kBlockN wide: narrower S products made
// ptxas serialise them). 4096 keys are 21 tiles of 192 and 64 keys: a full last tile spends
// 3 % of the exponents and products on masked keys. 0 = none. The 192-key D 128 tile
// (remainders of 64 keys at 4k and 16k), the 128-key D 64 tile (causal diagonals) and the
// 112-key D 192 tile have one; each is a second copy of the softmax and of the last P·V.
// (32 of the 80-key D 256 tile: +1 % at 1k, -1 to -8 % at 16k where it is never taken,
// through the kernel's spills; not kept, bench/RESULTS.md.) It stays the last tile: visited
// first (its short softmax then the work tile's unhidden first one, its P·V full width)
// measured 1-5 % slower at 4k, and its S narrow on an accumulator of its own serialises the
// products (C7515; session 43).
#ifndef FLASH_FWD_WGMMA_NARROW_64
#define FLASH_FWD_WGMMA_NARROW_64 64
#endif
#ifndef FLASH_FWD_WGMMA_NARROW_128
#define FLASH_FWD_WGMMA_NARROW_128 64
#endif
#ifndef FLASH_FWD_WGMMA_NARROW_192
#define FLASH_FWD_WGMMA_NARROW_192 64
#endif
template <class C>
constexpr int kFwdNarrowKeys = 0;
template <>
constexpr int kFwdNarrowKeys<FwdWgmmaConfig<64>> = FLASH_FWD_WGMMA_NARROW_64;
template <>
constexpr int kFwdNarrowKeys<FwdWgmmaConfig<96>> = FLASH_FWD_WGMMA_NARROW_128;
template <>
constexpr int kFwdNarrowKeys<FwdWgmmaConfig<128>> = FLASH_FWD_WGMMA_NARROW_128;
template <>
constexpr int kFwdNarrowKeys<FwdWgmmaConfig<192>> = FLASH_FWD_WGMMA_NARROW_192;

// Exponent turns (fwd_wgmma_kernel.cuh): the two consumer warpgroups run the exponent loops
// of their softmaxes one after the other (a named-barrier turn, cuDNN's forward order), so
// that their MUFU.EX2 phases, which share each SM sub-partition's exponent unit, never
// overlap. On the 128-key band tile (H200, session 41, interleaved with cuDNN in one process,
// D 128 causal, bf16 / f16): 1k 0.86 / 0.85 -> 0.89 / 0.89 of cuDNN, 2k 0.96 / 0.95 -> 0.98 /
// 0.97, 4k 1.01 / 1.01 -> 1.02 / 1.02; unmasked 1k / 2k unchanged. On the 192-key D 128 tile
// the same turns measured 0-2 % slower (4k / 16k), on the D 64 tile (three consumers, the
// turn going round) +2-4 % at 1k but 1-3 % slower at 16k, on the D 192 / 256 tiles 0-2.6 %
// slower: off there.
template <class C>
constexpr bool kFwdExpTurns = false;
template <>
constexpr bool kFwdExpTurns<FwdWgmmaBandConfig<128>> = true;

template <class C>
struct FwdWgmmaDerived {
  static constexpr int kConsumers = C::kConsumers;  // warpgroups of kConsumerRows query rows
  static constexpr int kConsumerRows = 64;          // one wgmma m64 tile; one Q box each
  static constexpr int kBlockM = kConsumerRows * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);  // + the producer warpgroup
  // setmaxnreg budgets: the producer keeps 24 registers per thread, the consumers share
  // the rest of the 64K-register file (rounded down to a multiple of 8, at most 240).
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegsFit = (65536 / 128 - kProducerRegs) / kConsumers / 8 * 8;
  static constexpr int kConsumerRegs = kConsumerRegsFit > 240 ? 240 : kConsumerRegsFit;
  // setmaxnreg only moves registers within the block's launch allocation: under
  // __launch_bounds__(kThreads, 1) ptxas gives each thread the cap, a multiple of 8 (168 for
  // two consumers: 24 + 2 x 240 is all of 3 x 168). Budgets above it hang the consumers'
  // increase (a producer of 32 did, session 26).
  static constexpr int kLaunchRegsCap = 65536 / kThreads / 8 * 8;
  static constexpr int kLaunchRegs = kLaunchRegsCap > 248 ? 248 : kLaunchRegsCap;
  static_assert(kProducerRegs + kConsumers * kConsumerRegs <= (kConsumers + 1) * kLaunchRegs,
                "the setmaxnreg budgets fit the block's launch allocation");
  static constexpr int kTileQBytes = kBlockM * C::kDim * 2;
  static constexpr int kTileQConsumerBytes = kConsumerRows * C::kDim * 2;
  static constexpr int kTileKVBytes = C::kBlockN * C::kDim * 2;
  // mbarriers: Q full and Q empty per consumer, then K full, V full, K empty, V empty and
  // "O read" (the epilogue's stores have read a K stage: OStaging::last_k, below) per stage.
  static constexpr int kBarriers = 2 * kConsumers + 5 * C::kStages;
  // 1024 bytes of slack: the swizzled tiles need a 1024-byte aligned base.
  static constexpr int kSmemTileBytes =
      1024 + kTileQBytes + 2 * C::kStages * kTileKVBytes + 8 * kBarriers;
  // Where the epilogue stages O for its stores (each consumer's 64 x kDim block, 64-column
  // atoms of 64 rows x 128 bytes in the loads' swizzle; fwd_wgmma_kernel.cuh says how):
  //   own:    a buffer per consumer beside the tiles, when it fits (D 64);
  //   last_k: the stage of the work tile's last K tile, which S no longer reads once every
  //           consumer's last S has landed, kOPassAtoms atoms per consumer at a time (D 128
  //           in one pass; D 192 and 256 in two; FlashAttention-3 uses V's stage).
  // (kSmemLimit keeps 128 bytes for the kernel's static shared memory.)
  enum class OStaging { own, last_k };
  static constexpr int kSmemLimit = 227 * 1024 - 128;
  static constexpr int kOAtoms = C::kDim / 64;
  static constexpr int kOAtomBytes = kConsumerRows * 128;
  static constexpr int kOConsumerBytes = kOAtoms * kOAtomBytes;
  static constexpr OStaging kOStaging = kSmemTileBytes + kConsumers * kOConsumerBytes <= kSmemLimit
                                            ? OStaging::own
                                            : OStaging::last_k;
  static constexpr int kOPassFit = kTileKVBytes / (kConsumers * kOAtomBytes);
  static constexpr int kOPassAtoms = kOStaging == OStaging::own ? kOAtoms
                                     : kOPassFit < kOAtoms      ? kOPassFit
                                                                : kOAtoms;
  static_assert(kOPassAtoms >= 1, "one O atom of each consumer fits a K stage");
  static constexpr int kSmemBytes =
      kSmemTileBytes + (kOStaging == OStaging::own ? kConsumers * kOConsumerBytes : 0);
  static_assert(kConsumers >= 1 && kConsumers <= 3 && kBlockM <= 256,
                "named barriers 1..3; a TMA box has at most 256 rows");
  static_assert(C::kDim % 64 == 0, "tiles are whole 64-column (128-byte) swizzle atoms");
  static_assert(C::kUsedDim % 16 == 0 && C::kUsedDim <= C::kDim && C::kUsedDim > C::kDim - 64,
                "the used columns: whole k16 steps of S, within the tile's last atom");
  static_assert(C::kBlockN % 16 == 0 && C::kBlockN <= 256,
                "S = Q·Kᵀ is one m64nNk16 chain (N <= 256, whole k16 steps of P·V); a TMA "
                "box has at most 256 rows");
  static_assert(C::kBlockN * C::kDim * 2 % (16 * 128) == 0,
                "the V tile splits into whole 16-byte chunks per consumer thread");
  static_assert(C::kUsedDim <= 128 || C::kUsedDim % 128 == 0 || C::kUsedDim == 192,
                "P·V in products of N <= 128, or one of N = 192");
  static_assert(C::kStages >= 2, "a ring needs two stages");
  static_assert(C::kBlockN % kPagedBoxRows == 0 && C::kBlockN / kPagedBoxRows <= 32,
                "a paged K/V tile is whole boxes, one per lane of the producer warp");
  static_assert(kConsumerRegs >= 128, "room for the S and O accumulators");
  static constexpr int kNarrowKeys = kFwdNarrowKeys<C>;
  static constexpr bool kExpTurns = kFwdExpTurns<C>;
  static_assert(!kExpTurns || kConsumers == 2, "exponent turns pass between two consumers");
  static_assert(kNarrowKeys == 0 || (kNarrowKeys % 16 == 0 && kNarrowKeys < C::kBlockN),
                "the narrow last tile is whole k16 steps of P·V, narrower than the tile");
  static_assert(kSmemBytes <= 227 * 1024, "fits an sm_90 block");
};

// f32 forward (SIMT FMA): kRowsPerWarp query rows per warp, kBlockKV = 32 keys (one
// per lane) per tile, kWarps warps per block.
#ifndef FLASH_F32_ROWS_PER_WARP
#define FLASH_F32_ROWS_PER_WARP 8  // 8: +15% over 4 (bench/RESULTS.md); 16: slower
#endif
#ifndef FLASH_F32_WARPS
#define FLASH_F32_WARPS 4
#endif
struct FwdF32Config {
  static constexpr int kWarps = FLASH_F32_WARPS, kRowsPerWarp = FLASH_F32_ROWS_PER_WARP,
                       kBlockKV = 32;
  static constexpr int kBlockQ = kWarps * kRowsPerWarp;
  static constexpr const char* kName = "simt_f32_fwd_q32_kv32_w4";
};
template <int kDim>
struct FwdF32Smem {
  // Q rows, K tile and V tile, each row padded by 4 floats (16 bytes): lanes reading
  // 16 bytes of consecutive K rows then hit distinct bank groups (row length in
  // 16-byte units is odd).
  static constexpr int kRowFloats = kDim + 4;
  static constexpr int kBytes =
      (FwdF32Config::kBlockQ + 2 * FwdF32Config::kBlockKV) * kRowFloats * 4;
};

}  // namespace flash::cuda
