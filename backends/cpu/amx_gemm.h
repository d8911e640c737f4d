// AMX tile GEMM shared by the amx target's kernels (forward_amx.cpp, backward_amx.cpp):
// C (+)= A·B on tdpbf16ps tiles in 2 x 2 blocks, the item-scoped tile configuration,
// and the one packing only tiles need (pairs of rows transposed: the A operand that
// multiplies a pair-of-keys B).
//
// Operand layout (all 32-bit words, AmxTiles in amx.h):
//   A  rows of bf16 pairs along the reduction dimension, lda words apart;
//   B  pair-major: B(p, n) = b[p·ldb + n] is the pair (B[2p][n], B[2p+1][n]);
//   C  f32 rows, ldc floats apart.
// M and N are multiples of 16, the pairs multiples of 16 (one product step): operands
// are zero-padded to whole tiles by their packers.
//
// Include inside the kernel region of a file compiled for Highway's AVX3 target with
// avx512bf16 added to its attributes (see avx512bf16_pack.h), after the standard headers.
#pragma once

#if HWY_TARGET != HWY_AVX3
#error "amx_gemm.h is AVX3-only code: include it in an HWY_TARGET == HWY_AVX3 region"
#endif

#include <immintrin.h>

#include "backends/cpu/amx.h"
#include "backends/cpu/amx_tile_ops.h"
#include "backends/cpu/avx512bf16_pack.h"

namespace flash::cpu::HWY_NAMESPACE {
namespace {

using AT = AmxTiles;
constexpr size_t kTileWords = AT::kWordsPerRow;             // f32 per C row, bf16 pairs per A row
constexpr size_t kBlockRows = AT::kBlockM * AT::kTileRows;  // C rows per block
constexpr size_t kBlockCols = AT::kBlockN * AT::kWordsPerRow;  // C columns per block
// Tile indices: C(m, n) = m·kBlockN + n, A(m) = kFirstA + m, B(n) = kFirstB + n.
constexpr int kC00 = 0, kC01 = 1, kC10 = AT::kBlockN, kC11 = AT::kBlockN + 1;
constexpr int kA0 = AT::kFirstA, kA1 = AT::kFirstA + 1, kB0 = AT::kFirstB, kB1 = AT::kFirstB + 1;
static_assert(AT::kBlockM == 2 && AT::kBlockN == 2, "TileBlock below is written for 2 x 2 C tiles");
static_assert(kTileWords == kBf16Lanes, "a C tile row is one AVX-512 f32 vector");

// Tile state is per thread: an item configures every tile at its largest shape on the
// thread that runs it (one ldtilecfg serves every product) and releases the tiles when
// it ends, so a kernel switch need not save 8 KiB of tile data.
struct AmxItemTiles {
  AmxItemTiles() {
    static constexpr AmxTileConfig kConfig = AmxFullTiles();
    amx::Configure(kConfig);
  }
  ~AmxItemTiles() { amx::Release(); }
  AmxItemTiles(const AmxItemTiles&) = delete;
  AmxItemTiles& operator=(const AmxItemTiles&) = delete;
};

// C (+)= Σ_s A(s)·B(s) for MB x NB C tiles (MB, NB <= 2), s < steps.
// A(m, s) = a + m·16·lda + s·16 words (rows lda words apart), B(s, n) = b + s·16·ldb + n·16
// (rows ldb words apart), C(m, n) = c + m·16·ldc + n·16 floats (rows ldc apart).
// accumulate: C starts from memory, else from zero.
template <size_t MB, size_t NB>
HWY_INLINE void TileBlock(const uint32_t* a, size_t lda, const uint32_t* b, size_t ldb,
                          size_t steps, float* c, size_t ldc, bool accumulate) {
  const size_t sa = lda * 4, sb = ldb * 4, sc = ldc * 4;  // strides in bytes
  // C tiles past the block's MB x NB are never addressed.
  float* c01 = c + kTileWords;
  float* c10 = c + (MB > 1 ? AT::kTileRows * ldc : 0);
  float* c11 = c10 + kTileWords;
  if (accumulate) {
    amx::Load<kC00>(c, sc);
    if (NB > 1) amx::Load<kC01>(c01, sc);
    if (MB > 1) amx::Load<kC10>(c10, sc);
    if (MB > 1 && NB > 1) amx::Load<kC11>(c11, sc);
  } else {
    amx::Zero<kC00>();
    if (NB > 1) amx::Zero<kC01>();
    if (MB > 1) amx::Zero<kC10>();
    if (MB > 1 && NB > 1) amx::Zero<kC11>();
  }
  for (size_t s = 0; s < steps; ++s) {
    const size_t ao = s * kTileWords, bo = s * AT::kPairsPerStep * ldb;
    amx::Load<kA0>(a + ao, sa);
    amx::Load<kB0>(b + bo, sb);
    amx::DotBf16<kC00, kA0, kB0>();
    if (NB > 1) {
      amx::Load<kB1>(b + bo + kTileWords, sb);
      amx::DotBf16<kC01, kA0, kB1>();
    }
    if (MB > 1) {
      amx::Load<kA1>(a + AT::kTileRows * lda + ao, sa);
      amx::DotBf16<kC10, kA1, kB0>();
      if (NB > 1) amx::DotBf16<kC11, kA1, kB1>();
    }
  }
  amx::Store<kC00>(c, sc);
  if (NB > 1) amx::Store<kC01>(c01, sc);
  if (MB > 1) amx::Store<kC10>(c10, sc);
  if (MB > 1 && NB > 1) amx::Store<kC11>(c11, sc);
}

// C[M x N] (+)= A·B over `steps` tile steps (16 pairs each), M and N multiples of 16,
// in 2 x 2 tile blocks (1-tile edges where M or N is an odd number of tiles). Operand
// layout as in TileBlock.
HWY_INLINE void TileGemm(size_t M, size_t N, size_t steps, const uint32_t* a, size_t lda,
                         const uint32_t* b, size_t ldb, float* c, size_t ldc, bool accumulate) {
  for (size_t m = 0; m < M; m += kBlockRows) {
    const bool two_m = m + kBlockRows <= M;
    for (size_t n = 0; n < N; n += kBlockCols) {
      const bool two_n = n + kBlockCols <= N;
      const uint32_t* am = a + m * lda;
      const uint32_t* bn = b + n;
      float* cmn = c + m * ldc + n;
      if (two_m && two_n)
        TileBlock<2, 2>(am, lda, bn, ldb, steps, cmn, ldc, accumulate);
      else if (two_m)
        TileBlock<2, 1>(am, lda, bn, ldb, steps, cmn, ldc, accumulate);
      else if (two_n)
        TileBlock<1, 2>(am, lda, bn, ldb, steps, cmn, ldc, accumulate);
      else
        TileBlock<1, 1>(am, lda, bn, ldb, steps, cmn, ldc, accumulate);
    }
  }
}

// Columns [0, cols) of 2·pairs bf16 rows (row stride ld elements) as pairs of rows per
// column, column-major: out[c·pairs + k] = (X[2k][c], X[2k+1][c]) for c < cols, k <
// pairs (both multiples of 16): the A operand of Oᵀ += Vᵀ·Pᵀ (X = V) and of dQᵀ +=
// Kᵀ·dSᵀ (X = K), whose B are pairs of keys. With kZeroNonFinite, inf and NaN elements
// become 0 (the dQ product multiplies masked keys by dS = 0, and 0·NaN is NaN).
// Interleave + 16 x 16 word transposes.
template <bool kZeroNonFinite = false>
HWY_INLINE void PackPairsTransposed(const uint16_t* x, size_t ld, size_t cols, size_t pairs,
                                    uint32_t* out) {
  const __m512i exponent = _mm512_set1_epi16(0x7f80);
  for (size_t k0 = 0; k0 < pairs; k0 += kTileWords)
    for (size_t c0 = 0; c0 < cols; c0 += kTileWords) {
      __m512i w[kTileWords];
      for (size_t k = 0; k < kTileWords; ++k) {
        const uint16_t* lo = x + 2 * (k0 + k) * ld + c0;
        w[k] = PairRows(lo, lo + ld);  // w[k][c] = (X[2(k0+k)][c0+c], X[..+1][c0+c])
        if (kZeroNonFinite) {
          const __mmask32 bad = _mm512_cmpeq_epi16_mask(_mm512_and_si512(w[k], exponent), exponent);
          w[k] = _mm512_maskz_mov_epi16(~bad, w[k]);
        }
      }
      Transpose16x16(w);
      for (size_t c = 0; c < kTileWords; ++c)
        _mm512_storeu_si512(out + (c0 + c) * pairs + k0, w[c]);
    }
}

}  // namespace
}  // namespace flash::cpu::HWY_NAMESPACE
