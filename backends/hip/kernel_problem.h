// What every hip kernel receives: the resolved problem as a plain struct (passed by
// value), plus the mask and score arithmetic that all kernels share, so the portable
// and MFMA paths cannot disagree on which keys a row sees or how a logit is formed.
#pragma once

#include <cstdint>

#include "portability.h"

namespace flash::hip {

struct KernelProblem {
  int64_t batch, seqlen_q, seqlen_kv, heads_q, heads_kv, head_dim, head_dim_v;
  int64_t group;  // heads_q / heads_kv: q head h reads kv head h / group
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];  // [batch, seq, head]
  // -1 = unbounded; to_kernel_problem stores windows >= seqlen_q + seqlen_kv as -1, so
  // diag ± window stays far from overflow whatever the optimiser re-associates.
  int64_t window_left, window_right;
  int causal;
  float scale;       // softmax scale
  float softcap;     // 0 = off
  float scale_log2;  // scale * log2(e), used when softcap is off
  // Inference arrays (device memory; null when unused) and the paged layout. With them
  // seqlen_q / seqlen_kv are the launch's maxima; sequence_of() gives a sequence's own.
  const int32_t* cu_seqlens_q;   // q, o, dout, dq (and lse) packed: [total_q, heads, dim]
  const int32_t* cu_seqlens_kv;  // k, v, dk, dv packed: [total_kv, heads, dim]
  const int32_t* seqlens_kv;     // cache lengths: keys 0 .. seqlens_kv[b]-1 of row b
  const int32_t* block_table;    // paged k / v: [num_pages, page_size, heads, dim]
  int64_t page_size, pages_per_seq, num_pages;
  // Split-KV forward (split_kv.h): with kv_splits > 1, the grid's blocks are kv_splits
  // copies of the usual grid; copy s sees only keys [s * split_keys, (s + 1) * split_keys)
  // and writes f32 partials that launch_split_merge combines. 1 / 0: no split.
  int64_t kv_splits, split_keys;
  // Every K/V row 16-byte aligned (pointers and strides) and both head dims whole 16-byte
  // pieces: the portable kernels stage K/V tiles with 16-byte loads (portable_kv_tile.h).
  int vector_kv;
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Offset of element (b, s, h, 0) for a [batch, seq, head] stride triple (64-bit).
FLASH_HOST_DEVICE int64_t row_offset(const int64_t* stride, int64_t b, int64_t s, int64_t h) {
  return b * stride[0] + s * stride[1] + h * stride[2];
}

// Where sequence b's rows live and how long it is. The arrays are device memory the
// host has not checked (unless FLASH_CHECK=1): an offset is clamped to [0, total] and a
// length to [0, min(declared maximum, rows left in the packed tensor)], so garbage can
// shorten or move a sequence but never sends a kernel past its tensors' declared rows.
struct Sequence {
  int64_t seqlen_q, seqlen_kv;  // this sequence's lengths (its masks align on them)
  int64_t q_batch, q_row;       // q / o row i: row_offset(stride, q_batch, q_row + i, h)
  int64_t kv_batch, kv_row;     // likewise k / v (contiguous caches and packed keys)
  int64_t index;                // b: its block_table row
  int64_t lse_row, lse_head;    // lse of (head h, row i): lse_row + h * lse_head + i
};

FLASH_HOST_DEVICE int64_t clamp_rows(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

FLASH_DEVICE Sequence sequence_of(const KernelProblem& p, int64_t b) {
  Sequence s{p.seqlen_q, p.seqlen_kv, b, 0, b, 0, b, b * p.heads_q * p.seqlen_q, p.seqlen_q};
  if (p.cu_seqlens_q) {  // [heads_q, total_q] lse (FlashAttention's varlen layout)
    const int64_t total = clamp_rows(p.cu_seqlens_q[p.batch], 0, INT32_MAX);
    s.q_batch = 0;
    s.q_row = clamp_rows(p.cu_seqlens_q[b], 0, total);
    s.seqlen_q = clamp_rows(int64_t{p.cu_seqlens_q[b + 1]} - s.q_row, 0,
                            p.seqlen_q < total - s.q_row ? p.seqlen_q : total - s.q_row);
    s.lse_row = s.q_row;
    s.lse_head = total;
  }
  if (p.cu_seqlens_kv) {
    const int64_t total = clamp_rows(p.cu_seqlens_kv[p.batch], 0, INT32_MAX);
    s.kv_batch = 0;
    s.kv_row = clamp_rows(p.cu_seqlens_kv[b], 0, total);
    s.seqlen_kv = clamp_rows(int64_t{p.cu_seqlens_kv[b + 1]} - s.kv_row, 0,
                             p.seqlen_kv < total - s.kv_row ? p.seqlen_kv : total - s.kv_row);
  } else if (p.seqlens_kv) {
    s.seqlen_kv = clamp_rows(p.seqlens_kv[b], 0, p.seqlen_kv);
  }
  return s;
}

// Element offset of (row i, head h) of q, o, dout or dq of sequence s.
FLASH_HOST_DEVICE int64_t q_row_offset(const int64_t* stride, const Sequence& s, int64_t i,
                                       int64_t h) {
  return row_offset(stride, s.q_batch, s.q_row + i, h);
}

// Row 0 of sequence s in a q-shaped tensor (q, o, dout, dq) or, not paged, a k-shaped one
// (k, v, dk, dv): kernels that rebase their pointers once keep fewer registers per row.
template <class P>
FLASH_HOST_DEVICE P* q_rows_of(P* t, const int64_t* stride, const Sequence& s) {
  return t + row_offset(stride, s.q_batch, s.q_row, 0);
}
template <class P>
FLASH_HOST_DEVICE P* kv_rows_of(P* t, const int64_t* stride, const Sequence& s) {
  return t + row_offset(stride, s.kv_batch, s.kv_row, 0);
}

// Element offset of key `key` (< s.seqlen_kv) of kv head hk in k, v, dk or dv; -1 when the
// paged cache's block table names a page outside [0, num_pages) (the key is then hidden).
FLASH_DEVICE int64_t kv_row_offset(const KernelProblem& p, const int64_t* stride, const Sequence& s,
                                   int64_t key, int64_t hk) {
  if (p.block_table == nullptr) return row_offset(stride, s.kv_batch, s.kv_row + key, hk);
  const int64_t page = p.block_table[s.index * p.pages_per_seq + key / p.page_size];
  if (page < 0 || page >= p.num_pages) return -1;
  return row_offset(stride, page, key % p.page_size, hk);
}

// Inclusive key range [lo, hi] that query row i sees (empty when lo > hi):
// diag = i + seqlen_kv - seqlen_q; causal caps at diag, the window at
// [diag - window_left, diag + window_right]. lo and hi never decrease with i, which
// the tile loops use to bound a block of rows by its first and last row.
struct KeyRange {
  int64_t lo, hi;
};
FLASH_HOST_DEVICE KeyRange visible_keys(const KernelProblem& p, int64_t i) {
  const int64_t diag = i + p.seqlen_kv - p.seqlen_q;
  int64_t lo = 0, hi = p.seqlen_kv - 1;
  // Compare distances (|hi - diag|, |diag - lo| <= seqlen_q + seqlen_kv): windows may be
  // as large as INT64_MAX, and diag +- window would overflow.
  if (p.causal && diag < hi) hi = diag;
  if (p.window_right >= 0 && p.window_right < hi - diag) hi = diag + p.window_right;
  if (p.window_left >= 0 && p.window_left < diag - lo) lo = diag - p.window_left;
  return {lo, hi};
}

// r narrowed to the keys of split `split` (the whole range when the forward is not split).
FLASH_HOST_DEVICE KeyRange keys_of_split(const KernelProblem& p, int64_t split, KeyRange r) {
  if (p.kv_splits <= 1) return r;
  const int64_t lo = split * p.split_keys, hi = lo + p.split_keys - 1;
  return {r.lo > lo ? r.lo : lo, r.hi < hi ? r.hi : hi};
}

// Where a split-KV forward keeps the partial result of (split, sequence b, head h), row 0
// (rows follow at partial_o_row_stride / 1): o as f32 [split][batch][seqlen_q][heads_q]
// [head_dim_v], lse as f32 [split][batch][heads_q][seqlen_q], with the launch's seqlen_q
// (the longest sequence's: call these before a kernel narrows p to its sequence).
FLASH_HOST_DEVICE int64_t partial_o_rows(const KernelProblem& p, int64_t split, int64_t b,
                                         int64_t h) {
  return ((split * p.batch + b) * p.seqlen_q * p.heads_q + h) * p.head_dim_v;
}
FLASH_HOST_DEVICE int64_t partial_o_row_stride(const KernelProblem& p) {
  return p.heads_q * p.head_dim_v;
}
FLASH_HOST_DEVICE int64_t partial_lse_rows(const KernelProblem& p, int64_t split, int64_t b,
                                           int64_t h) {
  return ((split * p.batch + b) * p.heads_q + h) * p.seqlen_q;
}

// Inclusive range of query rows that see at least one key of [j0, j1] (inverse of
// visible_keys, from its monotonicity); empty when first > last.
struct RowRange {
  int64_t first, last;
};
FLASH_HOST_DEVICE RowRange rows_seeing(const KernelProblem& p, int64_t j0, int64_t j1) {
  const int64_t shift = p.seqlen_kv - p.seqlen_q;  // diag = i + shift
  int64_t first = 0, last = p.seqlen_q - 1;
  // hi(i) = min(seqlen_kv - 1, diag + cap) when causal or window_right bound it, so
  // hi(i) >= j0  <=>  i >= j0 - shift - cap (j0 <= seqlen_kv - 1 always).
  if (p.causal || p.window_right >= 0) {
    const int64_t cap = p.causal ? 0 : p.window_right;       // window_right >= 0 never lowers 0
    if (cap < j0 - shift - first) first = j0 - shift - cap;  // no overflow for huge cap
  }
  // lo(i) <= j1  <=>  i + shift - window_left <= j1.
  if (p.window_left >= 0 && p.window_left < last - (j1 - shift)) last = j1 - shift + p.window_left;
  return {first, last};
}

// Logit in log2 units: scale (and softcap) applied, multiplied by log2(e) so the
// kernels use exp2. With softcap, t = c * tanh(scale * dot / c).
FLASH_DEVICE float logit_log2(const KernelProblem& p, float dot) {
  if (p.softcap > 0.f) return p.softcap * tanhf(dot * p.scale / p.softcap) * kLog2e;
  return dot * p.scale_log2;
}

// d(logit)/d(scale * dot) given the logit in log2 units: 1 without softcap, else
// 1 - tanh^2 = 1 - (t / c)^2.
FLASH_DEVICE float softcap_slope(const KernelProblem& p, float logit2) {
  if (p.softcap > 0.f) {
    const float th = logit2 / (kLog2e * p.softcap);
    return 1.f - th * th;
  }
  return 1.f;
}

}  // namespace flash::hip
