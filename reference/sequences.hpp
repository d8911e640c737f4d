// Packed batches, cache lengths and paged caches, plainly: a problem with inference
// fields (cu_seqlens_q/kv, seqlens_kv, block_table) is split into one dense batch-1
// problem per sequence, paged keys gathered into a contiguous copy, and each dense
// result placed back in the caller's layout. The oracle and the naive-in-dtype
// attention both run through it, so neither needs its own varlen or paging code.
//
// Result layouts (packed, double):
//   o, dq: [rows_q, heads_q, dim] with rows_q = total_q (cu_seqlens_q) or batch*seqlen_q;
//   dk, dv: [rows_kv, heads_kv, dim] with rows_kv = total_kv (cu_seqlens_kv) or
//           batch*seqlen_kv (dense or seqlens_kv; rows past a cache's length stay 0);
//   lse: [heads_q, total_q] with cu_seqlens_q, else [batch, heads_q, seqlen_q].
// Arrays must be host memory (the oracle runs on the host).
#pragma once

#include <cstdint>
#include <functional>

#include "dispatch/module_abi.h"
#include "reference/reference.hpp"

namespace flash::reference {

using DenseForward =
    std::function<ForwardResult(const flash_problem&, const void*, const void*, const void*)>;
using DenseBackward = std::function<BackwardResult(const flash_problem&, const void*, const void*,
                                                   const void*, const void*)>;

// Rows of q/o (and of k/v) in the packed result layout above.
int64_t rows_q(const flash_problem& p);
int64_t rows_kv(const flash_problem& p);
// Index of lse entry (sequence b, head h, row i of that sequence).
int64_t lse_index(const flash_problem& p, int64_t b, int64_t h, int64_t i);

// Runs `dense` once per sequence and assembles the result. Dense problems (no
// inference field) call `dense` once with p itself.
ForwardResult forward_per_sequence(const flash_problem& p, const void* q, const void* k,
                                   const void* v, const DenseForward& dense);
BackwardResult backward_per_sequence(const flash_problem& p, const void* q, const void* k,
                                     const void* v, const void* dout, const DenseBackward& dense);

// merge_partials in double: o packed [rows_q, heads_q, head_dim_v], lse in p's layout.
ForwardResult merge(const flash_problem& p, int64_t parts, const void* o_parts,
                    const float* lse_parts);

}  // namespace flash::reference
