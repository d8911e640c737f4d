// Device helpers of the backward kernels only: the rows a key tile is seen by, the
// per-element gradient of one score (shared by the tensor-core and the f32 kernels),
// and small loaders. Builds on device_ops.cuh / mask.cuh without changing them.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "bwd_configs.hpp"
#include "bwd_dq_order.cuh"
#include "device_ops.cuh"
#include "kernel_params.hpp"
#include "mask.cuh"
#include "sequence.cuh"

namespace flash::cuda {

constexpr float kBwdLog2e = 1.4426950408889634f;

// 2^x on the special-function unit (ex2.approx.ftz; -inf -> +0). Arguments are
// s·scale·log2e − lse·log2e <= ~0, so flushed subnormal results lose nothing visible.
__device__ __forceinline__ float bwd_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Query rows [begin, end) that see at least one key of [key_first, key_last]: the
// mirror of visible_keys(). Row i sees key j iff diag - left <= j <= diag + right
// with diag = i + diag_offset.
struct RowRange {
  int begin, end;
};
__host__ __device__ inline RowRange bwd_visible_rows(const MaskParams& m, int key_first,
                                                     int key_last) {
  if (!m.bounded) return {0, m.seqlen_q};
  int64_t lo = (int64_t)key_first - m.diag_offset - m.right;
  int64_t hi = (int64_t)key_last - m.diag_offset + m.left + 1;
  lo = lo < 0 ? 0 : lo;
  hi = hi > m.seqlen_q ? m.seqlen_q : hi;
  return {(int)lo, (int)(hi < lo ? lo : hi)};
}

// Non-finite keys. dQ += dS·K multiplies the keys a row does not see (dS = 0) by their k
// rows, and 0·NaN = NaN: a NaN in k of a masked key would reach that row's dq. So each
// key block checks its K tile once after loading it (smem_nonfinite, layout-agnostic). A
// block that finds a NaN or inf (real data never does) zeroes those values in shared
// memory and writes a NaN into the V row of each such key instead: dPᵀ = V·dOᵀ of that key
// is then NaN, which the masked entries drop (dS = 0 by selection) and the visible ones
// carry into dS, dQ and dK, as the reference's NaN score would; dV of the key, which
// would come out finite from the zeroed K, is set to NaN where its dK is (the rows that
// see it). Nothing changes in the element-wise loop. A NaN in v itself needs nothing.
// The block-wide step of the above, after a barrier that made this key block's K and V
// tiles visible; sK spans k_bytes, v_row_addr(r) is the shared address of V row r's first
// element. Returns whether K held a NaN/inf (the same on every thread); then K is zeroed
// there and V rows of those keys hold a NaN, and the caller makes the writes visible
// (a barrier; under wgmma also the async-proxy fence).
template <class T, int BK, class VRowAddr>
__device__ __forceinline__ bool quarantine_nonfinite_keys(uint32_t sK, int k_bytes,
                                                          VRowAddr v_row_addr, const T* k,
                                                          int64_t k_stride, int k0, int skv,
                                                          int head_dim) {
  if (!__syncthreads_or(smem_nonfinite<T>(sK, k_bytes))) return false;
  smem_zero_nonfinite<T>(sK, k_bytes);
  for (int r = threadIdx.x; r < BK; r += blockDim.x)
    if (k0 + r < skv && row_nonfinite(k + (int64_t)(k0 + r) * k_stride, head_dim))
      smem_store_nan<T>(v_row_addr(r));
  return true;
}
// dV of a key whose k held a NaN (nan_key): NaN where its dK is, i.e. where a row that sees
// the key contributed (the zeroed K left dV itself finite).
__device__ __forceinline__ float dv_of_key(bool nan_key, float dk, float dv) {
  return nan_key && isnan(dk) ? NAN : dv;
}

// Softcap and scale folded into three constants (computed once per kernel):
//   no softcap: x = s·mult,                       mult = scale·log2(e)   (tensor cores)
//   softcap c:  x = c·tanh(s·cap_in)·mult,        cap_in = scale/c, mult = log2(e)
// p = exp2(x − lse2) with lse2 = lse·log2(e) (log_scale 1 in the f32 kernels, exp).
// dS = p·(dP − Δ), times dtanh = 1 − tanh² under softcap; the caller multiplies the
// finished dQ / dK by scale (d(s·scale)/ds).
struct ScoreGrad {
  float mult, cap_in, softcap;
  bool use_softcap;
  __device__ __forceinline__ ScoreGrad(float scale, float cap, float log_scale) {
    use_softcap = cap > 0.f;
    mult = use_softcap ? log_scale : scale * log_scale;
    cap_in = use_softcap ? scale / cap : 0.f;
    softcap = cap;
  }
  // In: raw dot product s, dP, the row's lse2 and Δ. Out: p (returned) and ds. kSoftcap
  // must equal use_softcap: the tensor-core kernels take it as a template parameter, so
  // that the common path is one FFMA, one ex2, an FADD and an FMUL per score, without the
  // tanh code (measured: the run-time branch inside the loop cost registers and issue slots).
  template <bool kNaturalExp, bool kSoftcap>
  __device__ __forceinline__ float eval(float s, float dp, float lse2, float delta,
                                        float& ds) const {
    if constexpr (kSoftcap) {
      const float t = tanhf(s * cap_in);
      const float x = softcap * t * mult;
      const float p = kNaturalExp ? expf(x - lse2) : bwd_exp2(x - lse2);
      ds = p * (dp - delta) * (1.f - t * t);
      return p;
    } else {
      const float p = kNaturalExp ? expf(s * mult - lse2) : bwd_exp2(fmaf(s, mult, -lse2));
      ds = p * (dp - delta);
      return p;
    }
  }
  template <bool kNaturalExp>
  __device__ __forceinline__ float operator()(float s, float dp, float lse2, float delta,
                                              float& ds) const {
    return use_softcap ? eval<kNaturalExp, true>(s, dp, lse2, delta, ds)
                       : eval<kNaturalExp, false>(s, dp, lse2, delta, ds);
  }
};

// The (split, batch, kv head) a block of the dK/dV/dQ kernels works on, and the base
// pointers of its tensors. Grid: x = split * (batches * kv heads) + (batch, kv head), the
// split slowest: under a causal mask the first key blocks, the heaviest, start first, and
// a block waits (ordered dQ) only for lower-numbered blocks.
template <class T>
struct BwdBlock {
  int split, kv_head;
  int64_t batch;
  MaskParams mask;    // this sequence's lengths (packed batches: sequence.cuh)
  const T* k;         // this kv head's K rows
  const T* v;         // V rows
  const T* q_batch;   // this batch's Q (all heads)
  const T* do_batch;  // this batch's dO (all heads)
  T* dk;
  T* dv;
  __device__ __forceinline__ explicit BwdBlock(const BwdParams& p) {
    const FwdParams& f = p.f;
    const int bh_count = gridDim.x / p.dq_splits;
    // Ordered mode under a mask band: the key-block groups of dq_group, or the last key block
    // first (kernel_params.hpp, walk_up, dq_group).
    BwdDispatchSlot slot;
    if (p.walk_up && p.dq_ordered && p.dq_group > 0) {
      slot = bwd_group_slot(blockIdx.x, p.dq_splits, p.dq_group, bh_count);
    } else {
      const int i = p.grid_kv_fastest ? blockIdx.x % p.dq_splits : blockIdx.x / bh_count;
      slot.head = p.grid_kv_fastest ? blockIdx.x / p.dq_splits : blockIdx.x % bh_count;
      slot.key_block = p.walk_up && p.dq_ordered ? p.dq_splits - 1 - i : i;
    }
    const int bh = slot.head;
    split = slot.key_block;
    kv_head = bh % p.heads_kv;
    batch = (int64_t)(bh / p.heads_kv) + f.batch_offset;
    const SequenceRows seq = sequence_rows(f, batch, 0);
    mask = seq.mask;
    k = static_cast<const T*>(f.k) + seq.k + kv_head * f.k_stride[2];
    v = static_cast<const T*>(f.v) + seq.v + kv_head * f.v_stride[2];
    q_batch = static_cast<const T*>(f.q) + seq.q;
    do_batch = static_cast<const T*>(p.dout) + seq.o;
    dk = static_cast<T*>(p.dk) + seq.k + kv_head * f.k_stride[2];
    dv = static_cast<T*>(p.dv) + seq.v + kv_head * f.v_stride[2];
  }
};

// Launches a dK/dV/dQ kernel over the grid BwdBlock decodes: dq_splits x (batches x kv
// heads) one-dimensional blocks, in launches of < 2^31 blocks (batch_offset set per
// launch). Softcap is a template parameter of these kernels (its tanh code stays out of
// the common path): kPlain or kSoftcap runs as params.f.softcap says.
// `extra`: arguments after rows_pad that a kernel takes (the wgmma kernel's tensor maps).
template <auto kPlain, auto kSoftcap, class... Extra>
void launch_bwd_blocks(const BwdParams& params, int batch, int threads, int smem_bytes,
                       const float* lse2, const float* delta, int rows_pad, cudaStream_t stream,
                       const Extra&... extra) {
  set_max_dynamic_smem_once<kPlain>(smem_bytes);
  set_max_dynamic_smem_once<kSoftcap>(smem_bytes);
  const auto kernel = params.f.softcap > 0.f ? kSoftcap : kPlain;
  const int64_t per_batch = (int64_t)params.dq_splits * params.heads_kv;
  const int chunk = (int)std::max<int64_t>(1, std::min<int64_t>(batch, INT32_MAX / per_batch));
  BwdParams p = params;
  for (int b0 = 0; b0 < batch; b0 += chunk) {
    p.f.batch_offset = b0;
    const int64_t blocks = per_batch * std::min(batch - b0, chunk);
    kernel<<<(unsigned)blocks, threads, smem_bytes, stream>>>(p, lse2, delta, rows_pad, extra...);
  }
}

// Loads n floats (n a multiple of 4, 16-byte aligned source) into shared memory with
// cp.async, one 16-byte chunk per thread of the first n/4 threads past `first_thread`.
__device__ __forceinline__ void load_floats_async(float* dst, const float* src, int n,
                                                  int first_thread) {
  const int t = (int)threadIdx.x - first_thread;
  if (t >= 0 && t < n / 4) cp_async_16(smem_addr(dst + 4 * t), src + 4 * t, true);
}

// Loads rows [row0, row0 + kRows) (first `ncols` columns, rest zero) of an f32 matrix
// into a tile with rows of kRowFloats floats.
template <int kRows, int kDim, int kRowFloats, int kThreads>
__device__ __forceinline__ void load_f32_tile(float* tile, const float* g, int64_t stride, int row0,
                                              int nrows, int ncols) {
  constexpr int kChunks = kDim / 4;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = (row0 + r < nrows) && (c * 4 < ncols);
    const float* src = valid ? g + (int64_t)(row0 + r) * stride + c * 4 : g;
    cp_async_16(smem_addr(tile + r * kRowFloats + c * 4), src, valid);
  }
}

}  // namespace flash::cuda
