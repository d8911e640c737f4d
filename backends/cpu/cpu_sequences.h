// Packed batches, cache lengths and paged caches on the cpu backend: each sequence of
// the call becomes a dense batch-1 problem over its own rows (pointers offset into the
// caller's tensors; nothing copied), and the work items of all sequences run in one
// parallel loop, so short sequences do not leave threads idle between sequences.
//
// Two things do not map onto a dense problem by pointer arithmetic alone:
//  - lse with packed queries is [heads_q, total_q], a head stride the kernels do not
//    take: they write (forward) or read (backward) a per-sequence [heads_q, Sq_b] scratch
//    that is scattered / gathered here;
//  - paged K/V: the sequence's pages are gathered into one contiguous [Sk_b, Hkv, D]
//    copy (per sequence, reused: O(seqlen_kv) memory), then it runs dense. This costs a
//    copy of the keys a sequence reads; the kernels themselves stay page-agnostic.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_plan.h"
#include "dispatch/sequence_arrays.hpp"

namespace flash::cpu {

// One sequence as a dense batch-1 problem (pointers of the caller's tensors, offset).
struct SequenceCall {
  flash_problem p;
  int64_t b;           // sequence index
  int64_t q_row0;      // first packed q row (lse scatter/gather), 0 when dense
  int64_t lse_offset;  // offset of this sequence's [Hq, Sq_b] block in the lse scratch
  const void *q, *k, *v, *o_in, *dout;
  void *o, *dq, *dk, *dv;
};

inline const char* Offset(const void* base, int32_t dtype, int64_t elements) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(ElementSize(dtype));
}

// Splits p into its sequences. Pointers that are null stay null. Paged K/V pointers are
// left null here (GatherPages fills them per sequence).
inline std::vector<SequenceCall> SplitSequences(const flash_problem& p, const void* q,
                                                const void* k, const void* v, const void* o_in,
                                                void* o, const void* dout, void* dq, void* dk,
                                                void* dv) {
  const detail::SequenceArrays arrays = detail::arrays_of(p);
  std::vector<SequenceCall> calls;
  calls.reserve(static_cast<size_t>(p.batch));
  int64_t lse_offset = 0;
  const auto at = [&](const void* base, const int64_t* stride, bool packed, int64_t row0,
                      int64_t b) -> const void* {
    if (!base) return nullptr;
    return Offset(base, p.dtype, packed ? row0 * stride[1] : b * stride[0]);
  };
  for (int64_t b = 0; b < p.batch; ++b) {
    SequenceCall c{};
    c.b = b;
    c.p = p;
    c.p.batch = 1;
    c.p.seqlen_q = detail::seq_len_q(p, arrays, b);
    c.p.seqlen_kv = detail::seq_len_kv(p, arrays, b);
    c.p.cu_seqlens_q = c.p.cu_seqlens_kv = c.p.seqlens_kv = c.p.block_table = nullptr;
    c.p.page_size = c.p.pages_per_seq = c.p.num_pages = 0;
    c.p.total_q = c.p.total_kv = -1;
    const bool packed_q = p.cu_seqlens_q != nullptr, packed_kv = p.cu_seqlens_kv != nullptr;
    c.q_row0 = packed_q ? p.cu_seqlens_q[b] : 0;
    const int64_t kv_row0 = packed_kv ? p.cu_seqlens_kv[b] : 0;
    c.lse_offset = lse_offset;
    lse_offset += p.heads_q * c.p.seqlen_q;
    c.q = at(q, p.q_stride, packed_q, c.q_row0, b);
    c.o_in = at(o_in, p.o_stride, packed_q, c.q_row0, b);
    c.o = const_cast<void*>(at(o, p.o_stride, packed_q, c.q_row0, b));
    c.dout = at(dout, p.o_stride, packed_q, c.q_row0, b);
    c.dq = const_cast<void*>(at(dq, p.q_stride, packed_q, c.q_row0, b));
    if (!p.block_table) {
      c.k = at(k, p.k_stride, packed_kv, kv_row0, b);
      c.v = at(v, p.v_stride, packed_kv, kv_row0, b);
      c.dk = const_cast<void*>(at(dk, p.k_stride, packed_kv, kv_row0, b));
      c.dv = const_cast<void*>(at(dv, p.v_stride, packed_kv, kv_row0, b));
    }
    calls.push_back(c);
  }
  return calls;
}

// Paged K/V of one sequence gathered into contiguous [Sk_b, Hkv, D] buffers (resized,
// reused across sequences); points c.k / c.v and their strides at them. Rows are copied
// page run by page run, in parallel over pages through `parallel_for(n, fn)`.
template <class ParallelForFn>
void GatherPages(const flash_problem& full, const void* k, const void* v, SequenceCall& c,
                 std::vector<char>& k_buf, std::vector<char>& v_buf,
                 const ParallelForFn& parallel_for) {
  const int64_t keys = c.p.seqlen_kv, hk = full.heads_kv;
  const int64_t d = full.head_dim, dv = full.head_dim_v;
  const size_t eb = ElementSize(full.dtype);
  k_buf.resize(static_cast<size_t>(std::max<int64_t>(keys, 1) * hk * d) * eb);
  v_buf.resize(static_cast<size_t>(std::max<int64_t>(keys, 1) * hk * dv) * eb);
  const int64_t pages = (keys + full.page_size - 1) / full.page_size;
  parallel_for(pages, [&](int64_t j) {
    const int64_t page = full.block_table[c.b * full.pages_per_seq + j];
    const int64_t first = j * full.page_size;
    const int64_t rows = std::min(full.page_size, keys - first);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < hk; ++h) {
        std::memcpy(&k_buf[static_cast<size_t>(((first + r) * hk + h) * d) * eb],
                    At(k, full.dtype, full.k_stride, page, r, h), static_cast<size_t>(d) * eb);
        std::memcpy(&v_buf[static_cast<size_t>(((first + r) * hk + h) * dv) * eb],
                    At(v, full.dtype, full.v_stride, page, r, h), static_cast<size_t>(dv) * eb);
      }
  });
  c.k = k_buf.data();
  c.v = v_buf.data();
  c.p.k_stride[2] = d;
  c.p.k_stride[1] = hk * d;
  c.p.k_stride[0] = keys * hk * d;
  c.p.v_stride[2] = dv;
  c.p.v_stride[1] = hk * dv;
  c.p.v_stride[0] = keys * hk * dv;
}

// Work items of many plans as one index space: item i of the whole is item
// i - first[s] of plan s, with s the last plan whose first <= i.
struct ItemSpace {
  std::vector<int64_t> first;  // size plans + 1
  template <class Count>
  ItemSpace(size_t plans, const Count& count) : first(plans + 1, 0) {
    for (size_t s = 0; s < plans; ++s) first[s + 1] = first[s] + count(s);
  }
  int64_t total() const { return first.back(); }
  size_t plan_of(int64_t item) const {
    return static_cast<size_t>(std::upper_bound(first.begin(), first.end(), item) - first.begin() -
                               1);
  }
};

}  // namespace flash::cpu
