// MFMA backward kernels of the hip backend (CDNA: gfx90a / gfx908, wave64).
//
// Algorithm: FlashAttention-2 backward, deterministic (no atomics), two passes that
// recompute P from Q, K and the forward's LSE; delta = rowsum(dO ∘ O) is recomputed
// in each pass, so nothing is allocated. Layouts: mfma_ops.h.
//   dK/dV pass: a block of 4 waves owns 128 keys of one (batch, kv head), a wave 32 of
//     them (K, V in registers as B operands). It streams 32-row Q/dO tiles (row-major
//     and transposed copies in LDS) of every query head of the GQA group in a fixed
//     order: S = Q·K^T and dP = dO·V^T put one key per lane column, so P and
//     dS = P∘(dP - delta) feed dV^T += dO^T·P and dK^T += Q^T·dS as B operands.
//   dQ pass: a block owns 128 query rows (Q, dO in registers) and streams 32-key K, K^T
//     and V tiles: S^T = K·Q^T, dP^T = V·dO^T, dQ^T += K^T·dS^T.
// Packed batches (cu_seqlens_q / kv): each block works in its sequence's rows and lengths
// (sequence_of, kernel_problem.h).
// Tolerance class: 16-bit inputs, P and dS rounded to the input type for the MFMA
//   products (as FlashAttention does), f32 accumulation.
// Speed: not measured — no AMD GPU is reachable; compiled for gfx90a/gfx908 and its
//   ISA checked by tests/hip only.
// Run: FLASH_BACKEND=hip, f16/bf16, head_dim and head_dim_v <= 128, on MI100/MI200.
#include "kernels.h"
#include "mfma_ops.h"
#include "mfma_tiles.h"

namespace flash::hip {
namespace {

// p and the softcap slope of (row i, key); 0 where masked or the row saw no key.
struct Prob {
  float p, slope;
};
FLASH_DEVICE Prob recompute_p(const KernelProblem& p, int64_t i, int64_t key, float dot,
                              float lse2) {
  const KeyRange r = visible_keys(p, i);
  if (i >= p.seqlen_q || key < r.lo || key > r.hi || lse2 == -INFINITY) return {0.f, 0.f};
  const float t = logit_log2(p, dot);
  return {gpu::fast_exp2(t - lse2), softcap_slope(p, t)};
}

// Loads this lane's operand of row `row` (or zeros): elements 8s + 4*half + e.
template <class T, int kSteps>
FLASH_DEVICE void load_row_operands(mfma::Operand<T> (&op)[kSteps], const T* row, bool ok,
                                    int64_t dim) {
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    mfma::Bits4 bits;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int d = s * mfma::kStepK + 4 * mfma::lane_half() + e;
      bits[e] = ok && d < dim ? row[d].bits : uint16_t{0};
    }
    op[s] = __builtin_bit_cast(mfma::Operand<T>, bits);
  }
}

template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kThreads)
    mfma_dkdv_kernel(KernelProblem p, const T* __restrict__ q, const T* __restrict__ k,
                     const T* __restrict__ v, const T* __restrict__ o, const T* __restrict__ dout,
                     const float* __restrict__ lse, T* __restrict__ dk, T* __restrict__ dv) {
  using Ops = mfma::Ops<T>;
  using Operand = mfma::Operand<T>;
  constexpr int D = Tile::kDim, QT = Tile::kDkdvRows, P = Tile::kPad;
  constexpr int kSteps = D / mfma::kStepK;
  constexpr int kDBlocks = D / mfma::kTile;
  constexpr int kRowSteps = QT / mfma::kStepK;  // k-steps over the Q tile's rows
  constexpr int kDeltaLanes = Tile::kThreads / QT;
  static_assert(kDeltaLanes == 8, "delta reduction groups of 8 lanes");
  __shared__ __attribute__((aligned(16))) uint16_t q_lds[QT][D + P];
  __shared__ __attribute__((aligned(16))) uint16_t qt_lds[D][QT + P];
  __shared__ __attribute__((aligned(16))) uint16_t do_lds[QT][D + P];
  __shared__ __attribute__((aligned(16))) uint16_t dot_lds[D][QT + P];
  __shared__ float lse2_lds[QT];
  __shared__ float delta_lds[QT];

  const int64_t kv_blocks = (p.seqlen_kv + Tile::kRowsPerBlock - 1) / Tile::kRowsPerBlock;
  const int64_t block = blockIdx.x;
  const int64_t kb = block % kv_blocks;
  const int64_t hk = (block / kv_blocks) % p.heads_kv;
  const Sequence seq = sequence_of(p, block / (kv_blocks * p.heads_kv));
  p.seqlen_q = seq.seqlen_q;    // from here on: the sequence's lengths, and its rows from 0
  p.seqlen_kv = seq.seqlen_kv;  // (pointers rebased once: fewer scalar registers per row)
  q = q_rows_of(q, p.q_stride, seq), o = q_rows_of(o, p.o_stride, seq);
  dout = q_rows_of(dout, p.o_stride, seq), lse += seq.lse_row;
  k = kv_rows_of(k, p.k_stride, seq), v = kv_rows_of(v, p.v_stride, seq);
  dk = kv_rows_of(dk, p.k_stride, seq), dv = kv_rows_of(dv, p.v_stride, seq);
  const int64_t lse_head = seq.lse_head;

  const int wave = threadIdx.x / mfma::kWave;
  const int col = mfma::lane_col(), half = mfma::lane_half();
  const int64_t key0 = kb * Tile::kRowsPerBlock;
  if (key0 >= p.seqlen_kv) return;  // a sequence with fewer keys than the longest
  const int64_t key = key0 + wave * Tile::kRowsPerWave + col;  // this lane's key
  const bool key_ok = key < p.seqlen_kv;
  const int64_t last_key = key0 + Tile::kRowsPerBlock - 1 < p.seqlen_kv
                               ? key0 + Tile::kRowsPerBlock - 1
                               : p.seqlen_kv - 1;

  Operand k_op[kSteps], v_op[kSteps];
  load_row_operands<T>(k_op, k + row_offset(p.k_stride, 0, key_ok ? key : 0, hk), key_ok,
                       p.head_dim);
  load_row_operands<T>(v_op, v + row_offset(p.v_stride, 0, key_ok ? key : 0, hk), key_ok,
                       p.head_dim_v);
  mfma::Acc dk_acc[kDBlocks], dv_acc[kDBlocks];
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db) dk_acc[db] = dv_acc[db] = mfma::zero_acc();

  const RowRange rows = rows_seeing(p, key0, last_key);
  for (int64_t h = hk * p.group; h < (hk + 1) * p.group; ++h) {
    const float* lse_h = lse + h * lse_head;
    for (int64_t t0 = rows.first; t0 <= rows.last; t0 += QT) {
      __syncthreads();
      for (int c = threadIdx.x; c < QT * D; c += Tile::kThreads) {
        const int r = c / D, d = c % D;
        const int64_t i = t0 + r;
        const bool ok = i < p.seqlen_q;
        const uint16_t qb =
            ok && d < p.head_dim ? q[row_offset(p.q_stride, 0, i, h) + d].bits : uint16_t{0};
        const uint16_t db =
            ok && d < p.head_dim_v ? dout[row_offset(p.o_stride, 0, i, h) + d].bits : uint16_t{0};
        q_lds[r][d] = qb;
        qt_lds[d][r] = qb;
        do_lds[r][d] = db;
        dot_lds[d][r] = db;
      }
      if (threadIdx.x < QT)
        lse2_lds[threadIdx.x] =
            t0 + threadIdx.x < p.seqlen_q ? lse_h[t0 + threadIdx.x] * kLog2e : -INFINITY;
      __syncthreads();
      {  // delta of the tile's rows: 8 lanes per row, fixed summation order.
        const int r = threadIdx.x / kDeltaLanes, sub = threadIdx.x % kDeltaLanes;
        const int64_t i = t0 + r;
        float part = 0.f;
        if (i < p.seqlen_q) {
          const T* o_row = o + row_offset(p.o_stride, 0, i, h);
          for (int d = sub; d < p.head_dim_v; d += kDeltaLanes)
            part += to_float(T{do_lds[r][d]}) * to_float(o_row[d]);
        }
        part = gpu::group_sum<kDeltaLanes>(part);
        if (sub == 0) delta_lds[r] = part;
      }
      __syncthreads();

      // S = Q·K^T and dP = dO·V^T: lane column = this lane's key, rows = tile rows.
      mfma::Acc s_acc = mfma::zero_acc(), dp_acc = mfma::zero_acc();
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int dcol = s * mfma::kStepK + 4 * half;
        s_acc = Ops::mma(mfma::load_operand<T>(&q_lds[col][dcol]), k_op[s], s_acc);
        dp_acc = Ops::mma(mfma::load_operand<T>(&do_lds[col][dcol]), v_op[s], dp_acc);
      }
      // dV^T += dO^T·P and dK^T += Q^T·dS, k-step s2 = accumulator registers 4*s2...
#pragma unroll
      for (int s2 = 0; s2 < kRowSteps; ++s2) {
        float pv[4], dsv[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 4 * s2 + e;
          const int row = mfma::acc_row(r);
          const Prob pr =
              key_ok ? recompute_p(p, t0 + row, key, s_acc[r], lse2_lds[row]) : Prob{0.f, 0.f};
          pv[e] = pr.p;
          dsv[e] = pr.p * (dp_acc[r] - delta_lds[row]) * pr.slope;
        }
        const Operand p_op = mfma::pack_operand<T>(pv[0], pv[1], pv[2], pv[3]);
        const Operand ds_op = mfma::pack_operand<T>(dsv[0], dsv[1], dsv[2], dsv[3]);
        const int rcol = s2 * mfma::kStepK + 4 * half;
#pragma unroll
        for (int db = 0; db < kDBlocks; ++db) {
          const int drow = db * mfma::kTile + col;
          dv_acc[db] = Ops::mma(mfma::load_operand<T>(&dot_lds[drow][rcol]), p_op, dv_acc[db]);
          dk_acc[db] = Ops::mma(mfma::load_operand<T>(&qt_lds[drow][rcol]), ds_op, dk_acc[db]);
        }
      }
    }
  }
  if (!key_ok) return;
  T* dk_row = dk + row_offset(p.k_stride, 0, key, hk);
  T* dv_row = dv + row_offset(p.v_stride, 0, key, hk);
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int d = db * mfma::kTile + mfma::acc_row(r);
      if (d < p.head_dim) dk_row[d] = from_float<T>(dk_acc[db][r] * p.scale);
      if (d < p.head_dim_v) dv_row[d] = from_float<T>(dv_acc[db][r]);
    }
}

template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kThreads)
    mfma_dq_kernel(KernelProblem p, const T* __restrict__ q, const T* __restrict__ k,
                   const T* __restrict__ v, const T* __restrict__ o, const T* __restrict__ dout,
                   const float* __restrict__ lse, T* __restrict__ dq) {
  using Ops = mfma::Ops<T>;
  using Operand = mfma::Operand<T>;
  constexpr int D = Tile::kDim, KV = Tile::kDqKeys, P = Tile::kPad;
  constexpr int kSteps = D / mfma::kStepK;
  constexpr int kDBlocks = D / mfma::kTile;
  constexpr int kKeyTiles = KV / mfma::kTile;
  __shared__ __attribute__((aligned(16))) uint16_t k_lds[KV][D + P];
  __shared__ __attribute__((aligned(16))) uint16_t kt_lds[D][KV + P];
  __shared__ __attribute__((aligned(16))) uint16_t v_lds[KV][D + P];

  const int64_t q_blocks = (p.seqlen_q + Tile::kRowsPerBlock - 1) / Tile::kRowsPerBlock;
  const int64_t block = blockIdx.x;
  const int64_t qb = block % q_blocks;
  const int64_t h = (block / q_blocks) % p.heads_q;
  const Sequence seq = sequence_of(p, block / (q_blocks * p.heads_q));
  const int64_t hk = h / p.group;
  p.seqlen_q = seq.seqlen_q;    // from here on: the sequence's lengths, and its rows from 0
  p.seqlen_kv = seq.seqlen_kv;  // (pointers rebased once: fewer scalar registers per row)
  q = q_rows_of(q, p.q_stride, seq), o = q_rows_of(o, p.o_stride, seq);
  dout = q_rows_of(dout, p.o_stride, seq), dq = q_rows_of(dq, p.q_stride, seq);
  k = kv_rows_of(k, p.k_stride, seq), v = kv_rows_of(v, p.v_stride, seq);
  lse += seq.lse_row;
  const int64_t lse_head = seq.lse_head;

  const int wave = threadIdx.x / mfma::kWave;
  const int col = mfma::lane_col(), half = mfma::lane_half();
  const int64_t row0 = qb * Tile::kRowsPerBlock;
  if (row0 >= p.seqlen_q) return;  // a sequence shorter than the longest (whole block)
  const int64_t i = row0 + wave * Tile::kRowsPerWave + col;  // this lane's query
  const bool row_ok = i < p.seqlen_q;
  const int64_t last_row =
      row0 + Tile::kRowsPerBlock - 1 < p.seqlen_q ? row0 + Tile::kRowsPerBlock - 1 : p.seqlen_q - 1;
  const int64_t ii = row_ok ? i : 0;

  Operand q_op[kSteps], do_op[kSteps];
  load_row_operands<T>(q_op, q + row_offset(p.q_stride, 0, ii, h), row_ok, p.head_dim);
  const T* do_row = dout + row_offset(p.o_stride, 0, ii, h);
  load_row_operands<T>(do_op, do_row, row_ok, p.head_dim_v);
  float delta = 0.f;  // this lane's half of rowsum(dO ∘ O), then the whole
  if (row_ok) {
    const T* o_row = o + row_offset(p.o_stride, 0, i, h);
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = s * mfma::kStepK + 4 * half + e;
        if (d < p.head_dim_v) delta += to_float(do_row[d]) * to_float(o_row[d]);
      }
  }
  delta = mfma::across_halves_sum(delta);
  const float lse2 = row_ok ? lse[h * lse_head + i] * kLog2e : -INFINITY;
  mfma::Acc dq_acc[kDBlocks];
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db) dq_acc[db] = mfma::zero_acc();

  const int64_t kv_begin = visible_keys(p, row0).lo;
  const int64_t kv_end = visible_keys(p, last_row).hi;
  for (int64_t t0 = kv_begin; t0 <= kv_end; t0 += KV) {
    __syncthreads();
    for (int c = threadIdx.x; c < KV * D; c += Tile::kThreads) {
      const int j = c / D, d = c % D;
      const int64_t key = t0 + j;
      const bool key_ok = key < p.seqlen_kv;
      const uint16_t kb =
          key_ok && d < p.head_dim ? k[row_offset(p.k_stride, 0, key, hk) + d].bits : uint16_t{0};
      k_lds[j][d] = kb;
      kt_lds[d][j] = kb;
      v_lds[j][d] =
          key_ok && d < p.head_dim_v ? v[row_offset(p.v_stride, 0, key, hk) + d].bits : uint16_t{0};
    }
    __syncthreads();
#pragma unroll
    for (int kt = 0; kt < kKeyTiles; ++kt) {
      // S^T = K·Q^T and dP^T = V·dO^T: lane column = this lane's query.
      mfma::Acc s_acc = mfma::zero_acc(), dp_acc = mfma::zero_acc();
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int krow = kt * mfma::kTile + col, dcol = s * mfma::kStepK + 4 * half;
        s_acc = Ops::mma(mfma::load_operand<T>(&k_lds[krow][dcol]), q_op[s], s_acc);
        dp_acc = Ops::mma(mfma::load_operand<T>(&v_lds[krow][dcol]), do_op[s], dp_acc);
      }
      // dQ^T += K^T·dS^T; k-step s2 takes accumulator registers 4*s2..4*s2+3.
#pragma unroll
      for (int s2 = 0; s2 < mfma::kTile / mfma::kStepK; ++s2) {
        float dsv[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 4 * s2 + e;
          const int64_t key = t0 + kt * mfma::kTile + mfma::acc_row(r);
          const Prob pr = recompute_p(p, i, key, s_acc[r], lse2);
          dsv[e] = pr.p * (dp_acc[r] - delta) * pr.slope;
        }
        const Operand ds_op = mfma::pack_operand<T>(dsv[0], dsv[1], dsv[2], dsv[3]);
        const int kcol = kt * mfma::kTile + s2 * mfma::kStepK + 4 * half;
#pragma unroll
        for (int db = 0; db < kDBlocks; ++db)
          dq_acc[db] = Ops::mma(mfma::load_operand<T>(&kt_lds[db * mfma::kTile + col][kcol]), ds_op,
                                dq_acc[db]);
      }
    }
  }
  if (!row_ok) return;
  T* dq_row = dq + row_offset(p.q_stride, 0, i, h);
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int d = db * mfma::kTile + mfma::acc_row(r);
      if (d < p.head_dim) dq_row[d] = from_float<T>(dq_acc[db][r] * p.scale);
    }
}

template <class T>
gpu::Error launch(const KernelProblem& p, const BackwardArgs& a, gpu::Stream stream) {
  const int64_t dim = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  gpu::Error err = gpu::kSuccess;
  with_mfma_tile(dim, [&](auto tile) {
    using Tile = decltype(tile);
    const T* q = static_cast<const T*>(a.q);
    const T* k = static_cast<const T*>(a.k);
    const T* v = static_cast<const T*>(a.v);
    const T* o = static_cast<const T*>(a.o);
    const T* dout = static_cast<const T*>(a.dout);
    const int64_t q_blocks = (p.seqlen_q + Tile::kRowsPerBlock - 1) / Tile::kRowsPerBlock;
    FLASH_LAUNCH(static_cast<unsigned>(q_blocks * p.heads_q * p.batch), dim3(Tile::kThreads),
                 stream, mfma_dq_kernel<T, Tile>)
    (p, q, k, v, o, dout, a.lse, static_cast<T*>(a.dq));
    err = gpu::get_last_error();
    if (err != gpu::kSuccess || p.seqlen_kv == 0) return;
    const int64_t kv_blocks = (p.seqlen_kv + Tile::kRowsPerBlock - 1) / Tile::kRowsPerBlock;
    FLASH_LAUNCH(static_cast<unsigned>(kv_blocks * p.heads_kv * p.batch), dim3(Tile::kThreads),
                 stream, mfma_dkdv_kernel<T, Tile>)
    (p, q, k, v, o, dout, a.lse, static_cast<T*>(a.dk), static_cast<T*>(a.dv));
    err = gpu::get_last_error();
  });
  return err;
}

}  // namespace

gpu::Error launch_mfma_backward(const KernelProblem& p, int dtype, const BackwardArgs& a,
                                gpu::Stream stream) {
  return dtype == FLASH_BF16 ? launch<BFloat16>(p, a, stream) : launch<Half>(p, a, stream);
}

}  // namespace flash::hip
