// bf16 operand packing shared by the bf16 forward kernels (forward_avx512bf16.cpp:
// vdpbf16ps; forward_amx.cpp: AMX tiles). Both multiply bf16 pairs: two consecutive
// elements along the reduction dimension share one 32-bit word, low half first, so
// every packed operand here is an array of such words.
//
// Include inside the kernel region of a file compiled for Highway's AVX3 target with
// avx512bf16 added to its attributes (HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512bf16"));
// everything is in an unnamed namespace, so each including file has its own copy.
#pragma once

#if HWY_TARGET != HWY_AVX3
#error "avx512bf16_pack.h is AVX3-only code: include it in an HWY_TARGET == HWY_AVX3 region"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_plan.h"
#include "hwy/aligned_allocator.h"

namespace flash::cpu::HWY_NAMESPACE {
namespace {

constexpr size_t kBf16Lanes = 16;  // f32 lanes of a zmm register = bf16 pairs per vector

// bf16 bits as f32 (exact).
HWY_INLINE float Bf16ToF32(uint16_t bits) {
  const uint32_t u = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Interleaves the 16-bit halves [a0..a15 | b0..b15] into pairs (a_i, b_i), a low.
HWY_INLINE __m512i InterleaveHalves(__m512i ab) {
  alignas(64) static constexpr uint16_t kIdx[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                    21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                    11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_load_si512(kIdx), ab);
}

// bf16 pairs (lo_i, hi_i) of two f32 vectors, rounded to nearest even.
HWY_INLINE __m512i PairF32(__m512 lo, __m512 hi) {
  return InterleaveHalves((__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

// Pairs (a_i, b_i) of 16 bf16 elements of two rows.
HWY_INLINE __m512i PairRows(const uint16_t* a, const uint16_t* b) {
  const __m512i ab = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
  return InterleaveHalves(ab);
}

// n elements of a bf16/f16 row as bf16 bits, zero-padded to n_pad (f16 rounded to
// bf16; bf16 copied).
HWY_INLINE void RowToBf16(int32_t dtype, const void* src, size_t n, size_t n_pad, uint16_t* dst) {
  if (dtype == FLASH_BF16) {
    std::memcpy(dst, src, n * 2);
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(src);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512 lo =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i)));
      const __m512 hi =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i + 16)));
      _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    for (; i < n; ++i) dst[i] = Bf16FromF32(F32FromF16(h[i]));
  }
  std::fill(dst + n, dst + n_pad, uint16_t{0});
}

// Transposes a 16 x 16 matrix of 32-bit words held as 16 rows (x[i] = row i).
HWY_INLINE void Transpose16x16(__m512i x[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // pairs of rows: 32-bit interleave per 128-bit block
    t[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // groups of 4 rows: block b of x[i + k] = column 4b + k
    x[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    x[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    x[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    x[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int k = 0; k < 4; ++k) {  // gather block b of the 4 groups into column 4b + k
    const __m512i v0 = _mm512_shuffle_i32x4(x[k], x[4 + k], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(x[k], x[4 + k], 0xee);
    const __m512i v2 = _mm512_shuffle_i32x4(x[8 + k], x[12 + k], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(x[8 + k], x[12 + k], 0xee);
    t[k] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    t[4 + k] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    t[8 + k] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    t[12 + k] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
  for (int i = 0; i < 16; ++i) x[i] = t[i];
}

// out[k·ld_out + r] = in[r·ld_in + k] for r < rows (a multiple of 16), k < words:
// 16 x 16 blocks through registers, the last words % 16 columns word by word.
HWY_INLINE void TransposeWords(const uint32_t* in, size_t ld_in, size_t rows, size_t words,
                               uint32_t* out, size_t ld_out) {
  const size_t whole = words / kBf16Lanes * kBf16Lanes;
  for (size_t r0 = 0; r0 < rows; r0 += kBf16Lanes) {
    for (size_t k0 = 0; k0 < whole; k0 += kBf16Lanes) {
      __m512i x[kBf16Lanes];
      for (size_t r = 0; r < kBf16Lanes; ++r) x[r] = _mm512_loadu_si512(in + (r0 + r) * ld_in + k0);
      Transpose16x16(x);
      for (size_t k = 0; k < kBf16Lanes; ++k)
        _mm512_storeu_si512(out + (k0 + k) * ld_out + r0, x[k]);
    }
    for (size_t r = r0; r < r0 + kBf16Lanes; ++r)
      for (size_t k = whole; k < words; ++k) out[k * ld_out + r] = in[r * ld_in + k];
  }
}

// bf16 scratch of one thread (packed Q, K, V and P), grown and reused like Workspace.
struct PackBuffers {
  hwy::AlignedFreeUniquePtr<uint32_t[]> buffer;
  size_t capacity = 0;
  uint32_t* Reset(size_t n) {
    if (n > capacity) {
      buffer = hwy::AllocateAligned<uint32_t>(n);
      capacity = n;
    }
    return buffer.get();
  }
};

// The stacked rows of an item (row r: query position row_index[r], -1 for padding, of
// head hkv·group + r / rows_per_head) of q or dO (tensor `base`, `width` elements per
// row) as bf16 pairs along the row, transposed: out[k·R + r] = (X[r][2k], X[r][2k+1])
// for k < w2_pad (pairs past the width and padding rows are 0). R is a multiple of 16;
// rows16: scratch of 16 rows of 2·w2_pad bf16.
HWY_INLINE void PackStackedPairs(const Plan& plan, const void* base, const int64_t* stride,
                                 size_t width, int64_t b, int64_t hkv, const int64_t* row_index,
                                 size_t R, size_t w2_pad, uint16_t* rows16, uint32_t* out) {
  const flash_problem& p = *plan.a.p;
  for (size_t r0 = 0; r0 < R; r0 += kBf16Lanes) {
    for (size_t r = r0; r < r0 + kBf16Lanes; ++r) {
      uint16_t* row = rows16 + (r - r0) * 2 * w2_pad;
      if (row_index[r] < 0) {
        std::fill(row, row + 2 * w2_pad, uint16_t{0});
        continue;
      }
      const int64_t h = hkv * plan.group + static_cast<int64_t>(r) / plan.rows_per_head;
      RowToBf16(p.dtype, At(base, p.dtype, stride, b, row_index[r], h), width, 2 * w2_pad, row);
    }
    TransposeWords(reinterpret_cast<const uint32_t*>(rows16), w2_pad, kBf16Lanes, w2_pad, out + r0,
                   R);
  }
}

// Qᵀ of an item's stacked rows as bf16 pairs along head_dim: qpack[k·R + r] =
// (Q[r][2k], Q[r][2k+1]) for k < d2_pad (rows16 as in PackStackedPairs).
HWY_INLINE void PackQPairs(const Plan& plan, int64_t b, int64_t hkv, const int64_t* row_index,
                           size_t R, size_t d2_pad, uint16_t* rows16, uint32_t* qpack) {
  const flash_problem& p = *plan.a.p;
  PackStackedPairs(plan, plan.a.q, p.q_stride, static_cast<size_t>(p.head_dim), b, hkv, row_index,
                   R, d2_pad, rows16, qpack);
}

// Rows [s0, s0 + n) of head h of a strided [b, s, h, d] tensor as bf16 rows of
// row_elems elements (the first `width` from the tensor, the rest 0); rows [n, n_pad)
// zero.
HWY_INLINE void PackRowsBf16(int32_t dtype, const void* base, const int64_t* stride, int64_t b,
                             int64_t h, int64_t s0, size_t n, size_t n_pad, size_t width,
                             size_t row_elems, uint16_t* out) {
  for (size_t j = 0; j < n_pad; ++j) {
    uint16_t* dst = out + j * row_elems;
    if (j < n)
      RowToBf16(dtype, At(base, dtype, stride, b, s0 + static_cast<int64_t>(j), h), width,
                row_elems, dst);
    else
      std::fill(dst, dst + row_elems, uint16_t{0});
  }
}

// K rows [j0, j0 + kb) of kv head hkv as bf16, d2_pad pairs each (row stride d2_pad
// words), rows [kb, k_rows) zero.
HWY_INLINE void PackKRows(const Plan& plan, int64_t b, int64_t hkv, int64_t j0, size_t kb,
                          size_t k_rows, size_t d2_pad, uint32_t* kpack) {
  const flash_problem& p = *plan.a.p;
  PackRowsBf16(p.dtype, plan.a.k, p.k_stride, b, hkv, j0, kb, k_rows,
               static_cast<size_t>(p.head_dim), 2 * d2_pad, reinterpret_cast<uint16_t*>(kpack));
}

// V rows [j0, j0 + kb) as bf16 rows of dv_pad elements (row stride dv_pad), rows
// [kb, v_rows) zero. With kCheckFinite, returns false when a row holds inf or NaN
// (exponent all ones): such a tile needs the exact-keys P·V on boundary tiles, where
// a blocked product would multiply a masked key's V by P = 0 (0·NaN is NaN).
template <bool kCheckFinite>
HWY_INLINE bool PackVRows(const Plan& plan, int64_t b, int64_t hkv, int64_t j0, size_t kb,
                          size_t v_rows, size_t dv_pad, uint16_t* vrows) {
  const flash_problem& p = *plan.a.p;
  const size_t Dv = static_cast<size_t>(p.head_dim_v);
  const __m512i exponent = _mm512_set1_epi16(0x7f80);
  __mmask32 nonfinite = 0;
  for (size_t j = 0; j < v_rows; ++j) {
    uint16_t* dst = vrows + j * dv_pad;
    if (j >= kb) {
      std::fill(dst, dst + dv_pad, uint16_t{0});
      continue;
    }
    RowToBf16(p.dtype, At(plan.a.v, p.dtype, p.v_stride, b, j0 + static_cast<int64_t>(j), hkv), Dv,
              dv_pad, dst);
    if (!kCheckFinite) continue;
    // dv_pad is a multiple of 16 elements: whole 256-bit halves, the last zero-padded.
    for (size_t c = 0; c < dv_pad; c += 2 * kBf16Lanes) {
      const __mmask32 in_row = c + 2 * kBf16Lanes <= dv_pad ? ~__mmask32{0} : 0xffffu;
      const __m512i x = _mm512_maskz_loadu_epi16(in_row, dst + c);
      nonfinite |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, exponent), exponent);
    }
  }
  return nonfinite == 0;
}

// Pᵀ (f32, [key][row], `rows` columns) as bf16 pairs of keys: ppack[k·rows + r] =
// (P[r][2k], P[r][2k+1]) for k < kb2 = ceil(kb / 2); the key after an odd kb is 0 (st
// may hold anything there), rounded to nearest even.
HWY_INLINE void PackPPairs(const float* st, size_t rows, size_t kb, uint32_t* ppack) {
  const size_t kb2 = (kb + 1) / 2;
  for (size_t pr = 0; pr < kb2; ++pr)
    for (size_t c = 0; c < rows; c += kBf16Lanes) {
      const __m512 lo = _mm512_loadu_ps(st + 2 * pr * rows + c);
      const __m512 hi =
          2 * pr + 1 < kb ? _mm512_loadu_ps(st + (2 * pr + 1) * rows + c) : _mm512_setzero_ps();
      _mm512_storeu_si512(ppack + pr * rows + c, PairF32(lo, hi));
    }
}

}  // namespace
}  // namespace flash::cpu::HWY_NAMESPACE
