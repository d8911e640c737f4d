// One sequence of a launch: where its rows start in q/k/v/o, its own lengths and mask,
// and where its lse row starts. Dense batches use the batch strides; packed batches
// (cu_seqlens_q/kv, FlashAttention's varlen) start at row cu[b] of a [total, heads, dim]
// tensor; a cache (seqlens_kv) keeps the batch stride and shortens the keys.
//
// The arrays are device memory the host has not seen: a length is clamped to
// [0, the declared maximum] and an offset to >= 0, so a garbage entry can shorten or
// shift a sequence but never makes a kernel read past seqlen maxima per sequence
// (FLASH_CHECK=1 validates the arrays on the host first).
#pragma once

#include <cstdint>

#include "kernel_params.hpp"

namespace flash::cuda {

struct SequenceRows {
  int64_t q, k, v, o;     // element offsets of (this sequence, row 0, head 0)
  int64_t q_row, kv_row;  // its row 0 in a packed q / k tensor (0 when not packed)
  int64_t lse;            // index of this (sequence, head)'s lse for row 0; row i adds i
  MaskParams mask;        // this sequence's lengths; diag_offset = seqlen_kv - seqlen_q
};

__device__ __forceinline__ int clamp_len(int64_t len, int max_len) {
  return len < 0 ? 0 : (len > max_len ? max_len : static_cast<int>(len));
}

__device__ __forceinline__ SequenceRows sequence_rows(const FwdParams& p, int64_t batch, int head) {
  SequenceRows r;
  r.mask = p.mask;
  int64_t q_row0 = 0, kv_row0 = 0;
  if (p.cu_seqlens_q) {
    const int64_t first = p.cu_seqlens_q[batch];
    q_row0 = first < 0 ? 0 : first;
    r.mask.seqlen_q = clamp_len(p.cu_seqlens_q[batch + 1] - first, p.mask.seqlen_q);
  }
  if (p.cu_seqlens_kv) {
    const int64_t first = p.cu_seqlens_kv[batch];
    kv_row0 = first < 0 ? 0 : first;
    r.mask.seqlen_kv = clamp_len(p.cu_seqlens_kv[batch + 1] - first, p.mask.seqlen_kv);
  } else if (p.seqlens_kv) {
    r.mask.seqlen_kv = clamp_len(p.seqlens_kv[batch], p.mask.seqlen_kv);
  }
  r.mask.diag_offset = r.mask.seqlen_kv - r.mask.seqlen_q;
  r.q_row = q_row0;
  r.kv_row = kv_row0;
  r.q = p.cu_seqlens_q ? q_row0 * p.q_stride[1] : batch * p.q_stride[0];
  r.o = p.cu_seqlens_q ? q_row0 * p.o_stride[1] : batch * p.o_stride[0];
  r.k = p.cu_seqlens_kv ? kv_row0 * p.k_stride[1] : batch * p.k_stride[0];
  r.v = p.cu_seqlens_kv ? kv_row0 * p.v_stride[1] : batch * p.v_stride[0];
  // lse: [heads_q, total_q] when packed, else [batch, heads_q, seqlen_q].
  r.lse = p.cu_seqlens_q ? head * static_cast<int64_t>(p.cu_seqlens_q[p.num_seqs]) + q_row0
                         : (batch * p.heads_q + head) * p.mask.seqlen_q;
  return r;
}

// The dense case of sequence_rows (no arrays): batch strides, the launch's mask.
__device__ __forceinline__ SequenceRows dense_rows(const FwdParams& p, int64_t batch, int head) {
  SequenceRows r;
  r.mask = p.mask;
  r.q_row = r.kv_row = 0;
  r.q = batch * p.q_stride[0];
  r.o = batch * p.o_stride[0];
  r.k = batch * p.k_stride[0];
  r.v = batch * p.v_stride[0];
  r.lse = (batch * p.heads_q + head) * p.mask.seqlen_q;
  return r;
}

}  // namespace flash::cuda
