// MFMA forward kernel of the hip backend (CDNA: gfx90a / gfx908, wave64).
//
// Algorithm: FlashAttention-2 forward in the transposed form that suits the MFMA
// layouts (mfma_ops.h). A block of 4 waves owns 128 query rows of one (batch, head);
// each wave owns 32 rows, one per lane column. K and V^T tiles of 64 keys are staged
// in LDS as 16-bit values. Per tile a wave computes S^T = K·Q^T (Q^T lives in
// registers as the B operand), so each lane holds one query's 32 scores per key tile:
// the row max is a register max plus one swap between wave halves, and the rescale
// factor is a per-lane scalar. P^T = exp2(S^T - m) is already laid out as the B operand
// of O^T += V^T·P^T. Online softmax in f32 registers, normalised once at the end.
// Split-KV (split_kv.h): a block sees only its split's keys and writes f32 partials.
// Packed batches, cache lengths and paged caches: each block works in its sequence's rows
// and lengths (sequence_of, kernel_problem.h); a paged key is read through the block table.
// Tolerance class: 16-bit inputs, P rounded to the input type for the P·V product (as
//   FlashAttention does), f32 accumulation and softmax statistics.
// Speed: not measured — no AMD GPU is reachable from this project's machines; the
//   kernel is compiled for gfx90a/gfx908 and its ISA checked (tests/hip) only.
// Run: FLASH_BACKEND=hip with f16/bf16 tensors and head_dim, head_dim_v <= 128 on
//   an MI100/MI200-class GPU; FLASH_LOG=1 shows "mfma" as the chosen kernel.
#include "kernels.h"
#include "mfma_ops.h"
#include "mfma_tiles.h"

namespace flash::hip {
namespace {

template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kThreads)
    mfma_forward_kernel(KernelProblem p, const T* __restrict__ q, const T* __restrict__ k,
                        const T* __restrict__ v, T* __restrict__ o, float* __restrict__ lse,
                        float* __restrict__ o_partial, float* __restrict__ lse_partial) {
  using Ops = mfma::Ops<T>;
  using Operand = mfma::Operand<T>;
  constexpr int D = Tile::kDim, KV = Tile::kFwdKeys, P = Tile::kPad;
  constexpr int kSteps = D / mfma::kStepK;     // k-steps of S^T = K·Q^T
  constexpr int kKeyTiles = KV / mfma::kTile;  // 32-key accumulators per K/V tile
  constexpr int kDBlocks = D / mfma::kTile;    // 32-column blocks of O^T
  __shared__ __attribute__((aligned(16))) uint16_t k_lds[KV][D + P];
  __shared__ __attribute__((aligned(16))) uint16_t vt_lds[D][KV + P];
  // Row offsets of the tile's keys in k / v, looked up once per tile; -1: past the sequence,
  // or a paged key whose page id is out of range (hidden: it takes no part in any row).
  __shared__ int64_t k_at[KV], v_at[KV];

  const int64_t q_blocks = (p.seqlen_q + Tile::kRowsPerBlock - 1) / Tile::kRowsPerBlock;
  const int64_t split_blocks = q_blocks * p.heads_q * p.batch;  // the grid of one key split
  const int64_t split = blockIdx.x / split_blocks, block = blockIdx.x % split_blocks;
  const int64_t qb = block % q_blocks;
  const int64_t h = (block / q_blocks) % p.heads_q;
  const int64_t b = block / (q_blocks * p.heads_q);
  const Sequence seq = sequence_of(p, b);
  const int64_t hk = h / p.group;
  // Split-KV: this block's rows of the partials (offsets from the launch's lengths).
  const int64_t o_part = partial_o_rows(p, split, b, h),
                lse_part = partial_lse_rows(p, split, b, h);
  p.seqlen_q = seq.seqlen_q;  // from here on: the sequence's lengths
  p.seqlen_kv = seq.seqlen_kv;

  const int wave = threadIdx.x / mfma::kWave;
  const int col = mfma::lane_col(), half = mfma::lane_half();
  const int64_t row0 = qb * Tile::kRowsPerBlock;
  if (row0 >= p.seqlen_q) return;  // a sequence shorter than the longest (whole block)
  const int64_t i = row0 + wave * Tile::kRowsPerWave + col;  // this lane's query
  const bool row_ok = i < p.seqlen_q;
  const int64_t last_row =
      row0 + Tile::kRowsPerBlock - 1 < p.seqlen_q ? row0 + Tile::kRowsPerBlock - 1 : p.seqlen_q - 1;

  // Q^T as B operand: lane holds Q[i][8s + 4*half + e].
  Operand q_op[kSteps];
  {
    const T* q_row = q + q_row_offset(p.q_stride, seq, row_ok ? i : 0, h);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      mfma::Bits4 bits;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = s * mfma::kStepK + 4 * half + e;
        bits[e] = row_ok && d < p.head_dim ? q_row[d].bits : uint16_t{0};
      }
      q_op[s] = __builtin_bit_cast(Operand, bits);
    }
  }
  mfma::Acc o_acc[kDBlocks];
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db) o_acc[db] = mfma::zero_acc();

  // (Split-KV: only this split's keys, for the rows and for the block.)
  const KeyRange mine = row_ok ? keys_of_split(p, split, visible_keys(p, i)) : KeyRange{1, 0};
  const KeyRange block_keys =
      keys_of_split(p, split, {visible_keys(p, row0).lo, visible_keys(p, last_row).hi});
  const int64_t kv_begin = block_keys.lo, kv_end = block_keys.hi;  // inclusive
  float m = -INFINITY;  // running max of this lane's query (log2 units)
  float l = 0.f;        // this lane's share of the row sum (halves added at the end)

  for (int64_t t0 = kv_begin; t0 <= kv_end; t0 += KV) {
    __syncthreads();
    // Stage K (row-major) and V^T; keys past seqlen_kv and columns past the head dim
    // are zero, so padded products add nothing and P·V never sees garbage.
    for (int j = threadIdx.x; j < KV; j += Tile::kThreads) {
      const int64_t key = t0 + j;
      k_at[j] = key < p.seqlen_kv ? kv_row_offset(p, p.k_stride, seq, key, hk) : -1;
      v_at[j] = key < p.seqlen_kv ? kv_row_offset(p, p.v_stride, seq, key, hk) : -1;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < KV * D; c += Tile::kThreads) {
      const int j = c / D, d = c % D;
      k_lds[j][d] = k_at[j] >= 0 && d < p.head_dim ? k[k_at[j] + d].bits : uint16_t{0};
      vt_lds[d][j] = v_at[j] >= 0 && d < p.head_dim_v ? v[v_at[j] + d].bits : uint16_t{0};
    }
    __syncthreads();

    // S^T = K·Q^T, then logits (log2 units) with the mask applied.
    mfma::Acc s_acc[kKeyTiles];
    float tile_max = -INFINITY;
#pragma unroll
    for (int kt = 0; kt < kKeyTiles; ++kt) {
      s_acc[kt] = mfma::zero_acc();
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const Operand a =
            mfma::load_operand<T>(&k_lds[kt * mfma::kTile + col][s * mfma::kStepK + 4 * half]);
        s_acc[kt] = Ops::mma(a, q_op[s], s_acc[kt]);
      }
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const int j = kt * mfma::kTile + mfma::acc_row(r);
        const int64_t key = t0 + j;
        const float x = key >= mine.lo && key <= mine.hi && k_at[j] >= 0
                            ? logit_log2(p, s_acc[kt][r])
                            : -INFINITY;
        s_acc[kt][r] = x;
        tile_max = fmaxf(tile_max, x);
      }
    }
    tile_max = mfma::across_halves_max(tile_max);
    const float m_new = fmaxf(m, tile_max);
    // No branch around the MFMAs (they are wave-wide): a row with nothing visible yet
    // uses 0 as its max, so every p is exp2(-inf) = 0 and alpha is 0 or 1.
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    const float alpha = gpu::fast_exp2(m - m_use);
    l *= alpha;
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
      for (int r = 0; r < 16; ++r) o_acc[db][r] *= alpha;

        // O^T += V^T·P^T; k-step s2 of a key tile takes accumulator registers 4*s2..4*s2+3.
#pragma unroll
    for (int kt = 0; kt < kKeyTiles; ++kt) {
#pragma unroll
      for (int s2 = 0; s2 < mfma::kTile / mfma::kStepK; ++s2) {
        float pv[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          pv[e] = gpu::fast_exp2(s_acc[kt][4 * s2 + e] - m_use);
          l += pv[e];
        }
        const Operand p_op = mfma::pack_operand<T>(pv[0], pv[1], pv[2], pv[3]);
        const int key_col = kt * mfma::kTile + s2 * mfma::kStepK + 4 * half;
#pragma unroll
        for (int db = 0; db < kDBlocks; ++db) {
          const Operand a = mfma::load_operand<T>(&vt_lds[db * mfma::kTile + col][key_col]);
          o_acc[db] = Ops::mma(a, p_op, o_acc[db]);
        }
      }
    }
    m = m_new;
  }

  const float l_row = mfma::across_halves_sum(l);
  if (!row_ok) return;
  const float inv_l = l_row > 0.f ? 1.f / l_row : 0.f;  // rows that see no key: o = 0
  const float row_lse = l_row > 0.f ? (m + log2f(l_row)) * kLn2 : -INFINITY;
  if (p.kv_splits > 1) {  // this split's partial, in f32 (launch_split_merge combines them)
    float* o_row = o_partial + o_part + i * partial_o_row_stride(p);
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const int d = db * mfma::kTile + mfma::acc_row(r);
        if (d < p.head_dim_v) o_row[d] = o_acc[db][r] * inv_l;
      }
    if (half == 0) lse_partial[lse_part + i] = row_lse;
    return;
  }
  T* o_row = o + q_row_offset(p.o_stride, seq, i, h);
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int d = db * mfma::kTile + mfma::acc_row(r);
      if (d < p.head_dim_v) o_row[d] = from_float<T>(o_acc[db][r] * inv_l);
    }
  if (lse != nullptr && half == 0) lse[seq.lse_row + h * seq.lse_head + i] = row_lse;
}

template <class T>
gpu::Error launch(const KernelProblem& p, const ForwardArgs& a, gpu::Stream stream) {
  const int64_t dim = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  with_mfma_tile(dim, [&](auto tile) {
    using Tile = decltype(tile);
    const int64_t q_blocks = (p.seqlen_q + Tile::kRowsPerBlock - 1) / Tile::kRowsPerBlock;
    const int64_t blocks = q_blocks * p.heads_q * p.batch * (p.kv_splits > 1 ? p.kv_splits : 1);
    FLASH_LAUNCH(static_cast<unsigned>(blocks), dim3(Tile::kThreads), stream,
                 mfma_forward_kernel<T, Tile>)
    (p, static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
     static_cast<T*>(a.o), a.lse, a.o_partial, a.lse_partial);
  });
  return gpu::get_last_error();
}

}  // namespace

gpu::Error launch_mfma_forward(const KernelProblem& p, int dtype, const ForwardArgs& a,
                               gpu::Stream stream) {
  return dtype == FLASH_BF16 ? launch<BFloat16>(p, a, stream) : launch<Half>(p, a, stream);
}

}  // namespace flash::hip
