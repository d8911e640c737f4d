#include "common/sequences.hpp"

#include <algorithm>

#include "common/problem.hpp"

namespace bench {

bool has_sequence_arrays(const flash::AttentionDesc& d) {
  return d.cu_seqlens_q || d.cu_seqlens_kv || d.seqlens_kv || d.block_table;
}

int64_t q_rows(const flash::AttentionDesc& d) {
  return d.cu_seqlens_q ? d.cu_seqlens_q[d.batch] : d.batch * d.seqlen_q;
}

int64_t kv_rows(const flash::AttentionDesc& d) {
  if (d.block_table) return d.num_pages * d.page_size;
  return d.cu_seqlens_kv ? d.cu_seqlens_kv[d.batch] : d.batch * d.seqlen_kv;
}

SequenceRows sequence_rows(const flash::AttentionDesc& d, int64_t b) {
  SequenceRows s{b * d.seqlen_q, d.seqlen_q, d.seqlen_kv};
  if (d.cu_seqlens_q) {
    s.q_begin = d.cu_seqlens_q[b];
    s.q_len = d.cu_seqlens_q[b + 1] - d.cu_seqlens_q[b];
  }
  if (d.cu_seqlens_kv) s.kv_len = d.cu_seqlens_kv[b + 1] - d.cu_seqlens_kv[b];
  if (d.seqlens_kv) s.kv_len = d.seqlens_kv[b];
  return s;
}

int64_t key_row(const flash::AttentionDesc& d, int64_t b, int64_t j) {
  if (d.block_table)
    return d.block_table[b * d.pages_per_seq + j / d.page_size] * d.page_size + j % d.page_size;
  if (d.cu_seqlens_kv) return d.cu_seqlens_kv[b] + j;
  return b * d.seqlen_kv + j;  // dense, or a cache of seqlen_kv rows per sequence
}

flash::AttentionDesc dense_sequence(const flash::AttentionDesc& d, int64_t b) {
  const SequenceRows s = sequence_rows(d, b);
  flash::AttentionDesc one = d;
  one.batch = 1;
  one.seqlen_q = s.q_len;
  one.seqlen_kv = s.kv_len;
  one.cu_seqlens_q = one.cu_seqlens_kv = one.seqlens_kv = one.block_table = nullptr;
  one.page_size = one.pages_per_seq = one.num_pages = 0;
  return one;
}

int64_t keys_read(const flash::AttentionDesc& d, int64_t b) {
  const flash::AttentionDesc one = dense_sequence(d, b);
  // Each row sees one interval of keys, and the intervals move right by one key per row,
  // so their union runs from the first row's first key to the last row's last one.
  int64_t first = one.seqlen_kv, last = -1;
  for (int64_t i = 0; i < one.seqlen_q; ++i) {
    const int64_t diag = i + one.seqlen_kv - one.seqlen_q;
    int64_t lo = 0, hi = one.seqlen_kv - 1;
    if (one.causal) hi = std::min(hi, diag);
    if (one.window_right >= 0) hi = std::min(hi, diag + one.window_right);
    if (one.window_left >= 0) lo = std::max<int64_t>(lo, diag - one.window_left);
    if (lo > hi) continue;
    first = std::min(first, lo);
    last = std::max(last, hi);
    if (first == 0 && last == one.seqlen_kv - 1) break;  // every key already
  }
  return last >= first ? last - first + 1 : 0;
}

}  // namespace bench
