// The oracle: exact attention with plain scalar loops and double accumulation, one
// row of scores at a time. Every backend is tested against it. It shares no code
// with the backends; any head_dim >= 1, every descriptor field, every dtype.
#pragma once

#include <cstdint>
#include <vector>

#include "dispatch/module_abi.h"

namespace flash::reference {

// Results in double, packed: o [batch, seqlen_q, heads_q, head_dim_v],
// lse [batch, heads_q, seqlen_q] (natural log; -inf for rows that see no key).
// Problems with inference fields (packed batches, cache lengths, paged caches) use the
// layouts of reference/sequences.hpp: o [total_q, heads_q, head_dim_v], lse
// [heads_q, total_q] with cu_seqlens_q.
struct ForwardResult {
  std::vector<double> o, lse;
};

// Packed like their inputs: dq [B, Sq, Hq, D], dk [B, Sk, Hkv, D], dv [B, Sk, Hkv, Dv].
struct BackwardResult {
  std::vector<double> dq, dk, dv;
};

// Does query row i (0-based) see key j? The descriptor's mask, bottom-right aligned.
bool visible(const flash_problem& p, int64_t i, int64_t j);

ForwardResult forward(const flash_problem& p, const void* q, const void* k, const void* v);

// Exact gradients of sum(o * dout). Recomputes softmax statistics in double rather
// than trusting a caller's f32 lse, so the oracle depends only on q, k, v, dout.
BackwardResult backward(const flash_problem& p, const void* q, const void* k, const void* v,
                        const void* dout);

}  // namespace flash::reference
