// Portable backward kernels of the hip backend: FlashAttention-2 backward with plain
// FMAs, deterministic (no atomics), in two passes that both recompute P from Q, K and
// the forward's LSE:
//   dK/dV pass: a block owns kRowsPerBlock key rows of one (batch, kv head); kGroup
//     lanes own a key row (k, v, dk, dv in registers). It streams Q/dO tiles of every
//     query head of the GQA group in a fixed order, so dk/dv are summed over the group
//     in registers: dV += P^T dO, dS = P (dP - delta), dK += dS^T Q · scale.
//   dQ pass: a block owns query rows like the forward and streams K/V tiles:
//     dQ += dS K · scale.
// delta = rowsum(dO ∘ O) is recomputed where needed instead of kept in a workspace, so
// the backward allocates nothing. Softcap multiplies dS by 1 - tanh². Packed batches
// (cu_seqlens_q / kv): each block works in its sequence's rows and lengths (sequence_of,
// kernel_problem.h; caches and paged caches are forward-only, as the core validates).
// Tolerance class: f32 accumulation, inputs/outputs in the storage dtype.
// Speed: none measured on AMD hardware (none reachable). On NVIDIA it runs as the
//   hip-on-cuda build, a correctness vehicle, not tuned there; nothing measured yet.
// Run: FLASH_BACKEND=hip (AMD) or the hip-on-cuda build (backends/hip/README.md).
#include "kernels.h"
#include "portable_tiles.h"

namespace flash::hip {
namespace {

// Score and probability of (query row i, key) from the two dot products. seen = false
// where the mask hides the key or the row saw nothing in the forward (lse = -inf): the
// callers then skip the pair rather than multiply by p = 0, since dP (and k) of a hidden
// key may be NaN and 0·NaN would reach the row's gradients.
struct Prob {
  float p, slope;
  bool seen;
};
FLASH_DEVICE Prob recompute_p(const KernelProblem& p, int64_t i, int64_t key, float dot,
                              float lse2) {
  const KeyRange r = visible_keys(p, i);
  if (key < r.lo || key > r.hi || lse2 == -INFINITY) return {0.f, 0.f, false};
  const float t = logit_log2(p, dot);
  return {gpu::fast_exp2(t - lse2), softcap_slope(p, t), true};
}

template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kThreads)
    portable_dq_kernel(KernelProblem p, const T* __restrict__ q, const T* __restrict__ k,
                       const T* __restrict__ v, const T* __restrict__ o, const T* __restrict__ dout,
                       const float* __restrict__ lse, T* __restrict__ dq) {
  constexpr int G = Tile::kGroup, N = Tile::kPerLane, D = Tile::kDim, KV = Tile::kTileRows;
  __shared__ float k_tile[KV][D];
  __shared__ float v_tile[KV][D];

  const int64_t q_blocks = (p.seqlen_q + Tile::kRowsPerBlock - 1) / Tile::kRowsPerBlock;
  const int64_t block = blockIdx.x;
  const int64_t qb = block % q_blocks;
  const int64_t h = (block / q_blocks) % p.heads_q;
  const Sequence seq = sequence_of(p, block / (q_blocks * p.heads_q));
  const int64_t hk = h / p.group;
  p.seqlen_q = seq.seqlen_q;    // from here on: the sequence's lengths, and its rows from 0
  p.seqlen_kv = seq.seqlen_kv;  // (pointers rebased once, as in mfma_backward.hip)
  q = q_rows_of(q, p.q_stride, seq), o = q_rows_of(o, p.o_stride, seq);
  dout = q_rows_of(dout, p.o_stride, seq), dq = q_rows_of(dq, p.q_stride, seq);
  k = kv_rows_of(k, p.k_stride, seq), v = kv_rows_of(v, p.v_stride, seq);
  lse += seq.lse_row;
  const int64_t lse_head = seq.lse_head;

  const int lane = threadIdx.x % G;
  const int64_t row0 = qb * Tile::kRowsPerBlock;
  if (row0 >= p.seqlen_q) return;  // a sequence shorter than the longest (whole block)
  const int64_t i = row0 + threadIdx.x / G;
  const bool row_ok = i < p.seqlen_q;
  const int64_t last_row =
      row0 + Tile::kRowsPerBlock - 1 < p.seqlen_q ? row0 + Tile::kRowsPerBlock - 1 : p.seqlen_q - 1;

  float q_reg[N], do_reg[N], dq_acc[N];
  const int64_t ii = row_ok ? i : 0;
  const T* q_row = q + row_offset(p.q_stride, 0, ii, h);
  const T* o_row = o + row_offset(p.o_stride, 0, ii, h);
  const T* do_row = dout + row_offset(p.o_stride, 0, ii, h);
  float delta = 0.f;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int d = lane + G * n;
    q_reg[n] = row_ok && d < p.head_dim ? to_float(q_row[d]) : 0.f;
    do_reg[n] = row_ok && d < p.head_dim_v ? to_float(do_row[d]) : 0.f;
    delta += row_ok && d < p.head_dim_v ? do_reg[n] * to_float(o_row[d]) : 0.f;
    dq_acc[n] = 0.f;
  }
  delta = gpu::group_sum<G>(delta);
  const float lse2 = row_ok ? lse[h * lse_head + i] * kLog2e : -INFINITY;

  const int64_t kv_begin = visible_keys(p, row0).lo;
  const int64_t kv_end = visible_keys(p, last_row).hi;
  for (int64_t t0 = kv_begin; t0 <= kv_end; t0 += KV) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < KV * D; idx += Tile::kThreads) {
      const int j = idx / D, d = idx % D;
      const int64_t key = t0 + j;
      const bool key_ok = key < p.seqlen_kv;
      k_tile[j][d] =
          key_ok && d < p.head_dim ? to_float(k[row_offset(p.k_stride, 0, key, hk) + d]) : 0.f;
      v_tile[j][d] =
          key_ok && d < p.head_dim_v ? to_float(v[row_offset(p.v_stride, 0, key, hk) + d]) : 0.f;
    }
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < KV; ++j) {
      float dot = 0.f, dp = 0.f;
#pragma unroll
      for (int n = 0; n < N; ++n) {
        dot += q_reg[n] * k_tile[j][lane + G * n];
        dp += do_reg[n] * v_tile[j][lane + G * n];
      }
      dot = gpu::group_sum<G>(dot);
      dp = gpu::group_sum<G>(dp);
      const Prob pr = recompute_p(p, i, t0 + j, dot, lse2);
      if (!pr.seen) continue;
      const float ds = pr.p * (dp - delta) * pr.slope;
#pragma unroll
      for (int n = 0; n < N; ++n) dq_acc[n] += ds * k_tile[j][lane + G * n];
    }
  }
  if (!row_ok) return;
  T* dq_row = dq + row_offset(p.q_stride, 0, i, h);
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int d = lane + G * n;
    if (d < p.head_dim) dq_row[d] = from_float<T>(dq_acc[n] * p.scale);
  }
}

template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kThreads)
    portable_dkdv_kernel(KernelProblem p, const T* __restrict__ q, const T* __restrict__ k,
                         const T* __restrict__ v, const T* __restrict__ o,
                         const T* __restrict__ dout, const float* __restrict__ lse,
                         T* __restrict__ dk, T* __restrict__ dv) {
  constexpr int G = Tile::kGroup, N = Tile::kPerLane, D = Tile::kDim, QT = Tile::kTileRows;
  constexpr int kRows = Tile::kRowsPerBlock;
  __shared__ float q_tile[QT][D];
  __shared__ float do_tile[QT][D];
  __shared__ float lse2_tile[QT];
  __shared__ float delta_tile[QT];

  const int64_t kv_blocks = (p.seqlen_kv + kRows - 1) / kRows;
  const int64_t block = blockIdx.x;
  const int64_t kb = block % kv_blocks;
  const int64_t hk = (block / kv_blocks) % p.heads_kv;
  const Sequence seq = sequence_of(p, block / (kv_blocks * p.heads_kv));
  p.seqlen_q = seq.seqlen_q;    // from here on: the sequence's lengths, and its rows from 0
  p.seqlen_kv = seq.seqlen_kv;  // (pointers rebased once, as in mfma_backward.hip)
  q = q_rows_of(q, p.q_stride, seq), o = q_rows_of(o, p.o_stride, seq);
  dout = q_rows_of(dout, p.o_stride, seq), lse += seq.lse_row;
  k = kv_rows_of(k, p.k_stride, seq), v = kv_rows_of(v, p.v_stride, seq);
  dk = kv_rows_of(dk, p.k_stride, seq), dv = kv_rows_of(dv, p.v_stride, seq);
  const int64_t lse_head = seq.lse_head;

  const int lane = threadIdx.x % G;
  const int64_t key0 = kb * kRows;
  if (key0 >= p.seqlen_kv) return;  // a sequence with fewer keys than the longest
  const int64_t key = key0 + threadIdx.x / G;
  const bool key_ok = key < p.seqlen_kv;
  const int64_t last_key = key0 + kRows - 1 < p.seqlen_kv ? key0 + kRows - 1 : p.seqlen_kv - 1;

  float k_reg[N], v_reg[N], dk_acc[N], dv_acc[N];
  {
    const int64_t kk = key_ok ? key : 0;
    const T* k_row = k + row_offset(p.k_stride, 0, kk, hk);
    const T* v_row = v + row_offset(p.v_stride, 0, kk, hk);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const int d = lane + G * n;
      k_reg[n] = key_ok && d < p.head_dim ? to_float(k_row[d]) : 0.f;
      v_reg[n] = key_ok && d < p.head_dim_v ? to_float(v_row[d]) : 0.f;
      dk_acc[n] = dv_acc[n] = 0.f;
    }
  }
  const RowRange rows = rows_seeing(p, key0, last_key);

  // Fixed order over the group's query heads and query tiles: deterministic sums.
  for (int64_t h = hk * p.group; h < (hk + 1) * p.group; ++h) {
    const float* lse_h = lse + h * lse_head;
    for (int64_t t0 = rows.first; t0 <= rows.last; t0 += QT) {
      __syncthreads();
      for (int idx = threadIdx.x; idx < QT * D; idx += Tile::kThreads) {
        const int r = idx / D, d = idx % D;
        const int64_t i = t0 + r;
        const bool ok = i < p.seqlen_q;
        q_tile[r][d] =
            ok && d < p.head_dim ? to_float(q[row_offset(p.q_stride, 0, i, h) + d]) : 0.f;
        do_tile[r][d] =
            ok && d < p.head_dim_v ? to_float(dout[row_offset(p.o_stride, 0, i, h) + d]) : 0.f;
      }
      for (int r = threadIdx.x; r < QT; r += Tile::kThreads)
        lse2_tile[r] = t0 + r < p.seqlen_q ? lse_h[t0 + r] * kLog2e : -INFINITY;
      __syncthreads();
      // delta = rowsum(dO ∘ O); every group runs the same trip count (shuffles).
      for (int r0 = 0; r0 < QT; r0 += kRows) {
        const int r = r0 + threadIdx.x / G;
        const int64_t i = t0 + r;
        const bool ok = r < QT && i < p.seqlen_q;
        float part = 0.f;
        if (ok) {
          const T* o_row = o + row_offset(p.o_stride, 0, i, h);
#pragma unroll
          for (int n = 0; n < N; ++n) {
            const int d = lane + G * n;
            if (d < p.head_dim_v) part += do_tile[r][d] * to_float(o_row[d]);
          }
        }
        part = gpu::group_sum<G>(part);
        if (r < QT && lane == 0) delta_tile[r] = part;
      }
      __syncthreads();
      // Unrolled by 2 only: k, v, dk, dv already hold 4 * kPerLane registers.
#pragma unroll 2
      for (int r = 0; r < QT; ++r) {
        float dot = 0.f, dp = 0.f;
#pragma unroll
        for (int n = 0; n < N; ++n) {
          dot += q_tile[r][lane + G * n] * k_reg[n];
          dp += do_tile[r][lane + G * n] * v_reg[n];
        }
        dot = gpu::group_sum<G>(dot);
        dp = gpu::group_sum<G>(dp);
        const int64_t i = t0 + r;
        const Prob pr = key_ok && i < p.seqlen_q ? recompute_p(p, i, key, dot, lse2_tile[r])
                                                 : Prob{0.f, 0.f, false};
        if (!pr.seen) continue;
        const float ds = pr.p * (dp - delta_tile[r]) * pr.slope;
#pragma unroll
        for (int n = 0; n < N; ++n) {
          dv_acc[n] += pr.p * do_tile[r][lane + G * n];
          dk_acc[n] += ds * q_tile[r][lane + G * n];
        }
      }
    }
  }
  if (!key_ok) return;
  T* dk_row = dk + row_offset(p.k_stride, 0, key, hk);
  T* dv_row = dv + row_offset(p.v_stride, 0, key, hk);
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int d = lane + G * n;
    if (d < p.head_dim) dk_row[d] = from_float<T>(dk_acc[n] * p.scale);
    if (d < p.head_dim_v) dv_row[d] = from_float<T>(dv_acc[n]);
  }
}

template <class T>
gpu::Error launch(const KernelProblem& p, const BackwardArgs& a, gpu::Stream stream) {
  const int64_t dim = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  gpu::Error err = gpu::kSuccess;
  with_portable_tile(dim, [&](auto tile) {
    using Tile = decltype(tile);
    const T* q = static_cast<const T*>(a.q);
    const T* k = static_cast<const T*>(a.k);
    const T* v = static_cast<const T*>(a.v);
    const T* o = static_cast<const T*>(a.o);
    const T* dout = static_cast<const T*>(a.dout);
    const int64_t q_blocks = (p.seqlen_q + Tile::kRowsPerBlock - 1) / Tile::kRowsPerBlock;
    FLASH_LAUNCH(static_cast<unsigned>(q_blocks * p.heads_q * p.batch), dim3(Tile::kThreads),
                 stream, portable_dq_kernel<T, Tile>)
    (p, q, k, v, o, dout, a.lse, static_cast<T*>(a.dq));
    err = gpu::get_last_error();
    if (err != gpu::kSuccess || p.seqlen_kv == 0) return;
    const int64_t kv_blocks = (p.seqlen_kv + Tile::kRowsPerBlock - 1) / Tile::kRowsPerBlock;
    FLASH_LAUNCH(static_cast<unsigned>(kv_blocks * p.heads_kv * p.batch), dim3(Tile::kThreads),
                 stream, portable_dkdv_kernel<T, Tile>)
    (p, q, k, v, o, dout, a.lse, static_cast<T*>(a.dk), static_cast<T*>(a.dv));
    err = gpu::get_last_error();
  });
  return err;
}

}  // namespace

gpu::Error launch_portable_backward(const KernelProblem& p, int dtype, const BackwardArgs& a,
                                    gpu::Stream stream) {
  switch (dtype) {
    case FLASH_F16:
      return launch<Half>(p, a, stream);
    case FLASH_BF16:
      return launch<BFloat16>(p, a, stream);
    default:
      return launch<float>(p, a, stream);
  }
}

}  // namespace flash::hip
