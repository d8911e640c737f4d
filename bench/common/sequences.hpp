// Where each sequence's rows lie in a problem's tensors, read from the descriptor's
// inference fields: dense [batch, seq, heads, dim]; packed batches (cu_seqlens_q/kv:
// [total, heads, dim]); caches with lengths (seqlens_kv: each sequence sees the first
// seqlens_kv[b] of its seqlen_kv rows); paged caches (block_table: k/v are [num_pages,
// page_size, heads, dim]). The arrays must be host memory here: the oracle, the FLOP and
// byte counts and the workload's buffer sizes read them (the workload uploads copies).
#pragma once

#include <cstdint>

#include "flash/flash.hpp"

namespace bench {

// Any of cu_seqlens_q/kv, seqlens_kv, block_table set.
bool has_sequence_arrays(const flash::AttentionDesc& d);

// Rows of the q/o buffers ([rows, heads_q, dim]) and of the k/v buffers.
int64_t q_rows(const flash::AttentionDesc& d);
int64_t kv_rows(const flash::AttentionDesc& d);

struct SequenceRows {
  int64_t q_begin;  // row of the sequence's first query in the q/o buffers
  int64_t q_len;    // its queries (Sq_b)
  int64_t kv_len;   // the keys it has (Sk_b): the mask aligns to them, diag = i + Sk_b - Sq_b
};
SequenceRows sequence_rows(const flash::AttentionDesc& d, int64_t b);

// Row of key j (< kv_len) of sequence b in the k/v buffers (through the page table
// for a paged cache).
int64_t key_row(const flash::AttentionDesc& d, int64_t b, int64_t j);

// Sequence b as a dense batch-1 problem of its own lengths, no inference fields: its
// mask, FLOPs and reference solution are those of the sequence.
flash::AttentionDesc dense_sequence(const flash::AttentionDesc& d, int64_t b);

// Keys of sequence b that at least one of its query rows sees under the mask: the key
// rows a kernel must read (the rest of a cache's capacity is never touched).
int64_t keys_read(const flash::AttentionDesc& d, int64_t b);

}  // namespace bench
