// Staging of one K/V tile in shared memory, shared by the portable forward and decode
// kernels: keys [t0, t0 + KV) of kv head hk of sequence seq, as f32 [KV][D] (columns past
// the head dims and keys past the sequence zero), and each key's row offset (-1: past the
// sequence, or a paged key whose page id is out of range: hidden from every row).
#pragma once

#include "kernel_problem.h"

namespace flash::hip {

// 16 bytes of a K or V row (one load instruction).
template <class T>
struct alignas(16) Row16 {
  T e[16 / sizeof(T)];
};

// Block-wide (every thread calls it; it synchronises before and after). With
// p.vector_kv and kVectorLoads (a caller's register budget allows it; the host found every K/V row
// 16-byte aligned and the head dims whole 16-byte pieces) a thread loads 16 bytes at a time, else
// one element. (Loading all of a thread's elements into registers before storing any ran 1.7x
// slower on the H200, forward and decode alike: bench/RESULTS.md, session 46.)
template <class Tile, bool kVectorLoads = true, class T>
FLASH_DEVICE void stage_kv_tile(const KernelProblem& p, const Sequence& seq, int64_t hk, int64_t t0,
                                const T* __restrict__ k, const T* __restrict__ v, float* k_tile,
                                float* v_tile, int64_t* k_at, int64_t* v_at) {
  constexpr int KV = Tile::kTileRows, D = Tile::kDim;
  __syncthreads();  // the previous tile fully consumed
  for (int j = threadIdx.x; j < KV; j += Tile::kThreads) {
    const int64_t key = t0 + j;
    k_at[j] = key < p.seqlen_kv ? kv_row_offset(p, p.k_stride, seq, key, hk) : -1;
    v_at[j] = key < p.seqlen_kv ? kv_row_offset(p, p.v_stride, seq, key, hk) : -1;
  }
  __syncthreads();
  if (kVectorLoads && p.vector_kv) {
    constexpr int W = 16 / sizeof(T);
    static_assert(D % W == 0, "a tile row is whole 16-byte pieces");
    for (int idx = threadIdx.x * W; idx < KV * D; idx += Tile::kThreads * W) {
      const int j = idx / D, d = idx % D;
      Row16<T> kr{}, vr{};  // zeros: a hidden key, columns past the head dims
      if (k_at[j] >= 0 && d < p.head_dim) kr = *reinterpret_cast<const Row16<T>*>(k + k_at[j] + d);
      if (v_at[j] >= 0 && d < p.head_dim_v)
        vr = *reinterpret_cast<const Row16<T>*>(v + v_at[j] + d);
#pragma unroll
      for (int e = 0; e < W; ++e) {
        k_tile[idx + e] = to_float(kr.e[e]);
        v_tile[idx + e] = to_float(vr.e[e]);
      }
    }
    __syncthreads();
    return;
  }
  for (int idx = threadIdx.x; idx < KV * D; idx += Tile::kThreads) {
    const int j = idx / D, d = idx % D;
    k_tile[idx] = k_at[j] >= 0 && d < p.head_dim ? to_float(k[k_at[j] + d]) : 0.f;
    v_tile[idx] = v_at[j] >= 0 && d < p.head_dim_v ? to_float(v[v_at[j] + d]) : 0.f;
  }
  __syncthreads();
}

}  // namespace flash::hip
