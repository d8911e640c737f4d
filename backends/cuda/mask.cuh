// Mask geometry shared by every kernel: which keys a row sees, which key tiles a
// block of rows must visit, and which of those tiles need per-element masking.
#pragma once

#include <cstdint>

#include "kernel_params.hpp"

namespace flash::cuda {

// Keys [begin, end) that any row of [row_first, row_last] may see.
struct KeyRange {
  int begin, end;
};

__host__ __device__ inline KeyRange visible_keys(const MaskParams& m, int row_first, int row_last) {
  if (!m.bounded) return {0, m.seqlen_kv};
  // int64: row + offset + right may exceed 2^31 before clamping.
  int64_t lo = (int64_t)row_first + m.diag_offset - m.left;
  int64_t hi = (int64_t)row_last + m.diag_offset + m.right + 1;
  lo = lo < 0 ? 0 : lo;
  hi = hi > m.seqlen_kv ? m.seqlen_kv : hi;
  return {(int)lo, (int)(hi < lo ? lo : hi)};
}

// Query rows [begin, end) that see any key of [key_first, key_last] (the band inverted:
// row i sees key j iff i ∈ [j - offset - right, j - offset + left]).
__host__ __device__ inline KeyRange visible_rows(const MaskParams& m, int key_first, int key_last) {
  if (key_last >= m.seqlen_kv) key_last = m.seqlen_kv - 1;
  if (key_first > key_last) return {0, 0};
  if (!m.bounded) return {0, m.seqlen_q};
  int64_t lo = (int64_t)key_first - m.diag_offset - m.right;
  int64_t hi = (int64_t)key_last - m.diag_offset + m.left + 1;
  lo = lo < 0 ? 0 : lo;
  hi = hi > m.seqlen_q ? m.seqlen_q : hi;
  return {(int)lo, (int)(hi < lo ? lo : hi)};
}

// True when every (row, key) of the tile is visible, so masking can be skipped.
__host__ __device__ inline bool tile_fully_visible(const MaskParams& m, int row_first, int row_last,
                                                   int key_first, int key_last) {
  if (key_last >= m.seqlen_kv) return false;
  if (!m.bounded) return true;
  // Hardest rows: the last row for the left bound, the first for the right bound.
  int64_t lo = (int64_t)row_last + m.diag_offset - m.left;
  int64_t hi = (int64_t)row_first + m.diag_offset + m.right;
  return key_first >= lo && key_last <= hi;
}

// Rows [lo, hi] that see every key of [key_first, key_last] (lo > hi: none), as two ints: a
// loop over row tiles against fixed keys then tests a tile with two compares (the answer of
// tile_fully_visible, which keeps four 64-bit sums and the key count).
struct RowInterval {
  int lo, hi;
  __host__ __device__ bool holds(int row_first, int row_last) const {
    return row_first >= lo && row_last <= hi;
  }
};
__host__ __device__ inline RowInterval rows_seeing_all_keys(const MaskParams& m, int key_first,
                                                            int key_last) {
  if (key_last >= m.seqlen_kv) return {INT32_MAX, INT32_MIN};
  if (!m.bounded) return {INT32_MIN, INT32_MAX};
  // Row i sees key j iff j - i - offset ∈ [-left, right] (key_visible), for every key of the
  // range iff i ∈ [key_last - offset - right, key_first - offset + left].
  const int64_t lo = (int64_t)key_last - m.diag_offset - m.right;
  const int64_t hi = (int64_t)key_first - m.diag_offset + m.left;
  // Clamped to int: rows are ints, so a bound past either end keeps the same rows.
  auto clamp = [](int64_t x) {
    return (int)(x < INT32_MIN ? (int64_t)INT32_MIN : x > INT32_MAX ? (int64_t)INT32_MAX : x);
  };
  return {clamp(lo), clamp(hi)};
}

__host__ __device__ inline bool key_visible(const MaskParams& m, int row, int key) {
  if (key >= m.seqlen_kv) return false;
  if (!m.bounded) return true;
  const int rel = key - row - m.diag_offset;  // |rel| < 2^31: all terms < 2^30
  return rel <= m.right && rel >= -m.left;
}

}  // namespace flash::cuda
