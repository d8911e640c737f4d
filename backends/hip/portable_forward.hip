// Portable forward kernel of the hip backend: FlashAttention-2 forward with plain FMAs.
//
// Algorithm: one block = PortableTile::kRowsPerBlock query rows of one (batch, head);
// kGroup lanes own a row (q and the o accumulator in registers, split over the head
// dim). K/V tiles of kTileRows keys are staged in shared memory as f32; per tile each
// row computes its scores (shuffle-summed dot products), a tile max, rescales o and
// its running sum by exp2(m_old - m_new) and adds p·V (online softmax, log2 domain).
// Tiles outside the block's visible key range (causal, window) are skipped. Split-KV
// (split_kv.h): a block sees only its split's keys and writes f32 partials. Packed
// batches, cache lengths and paged caches: each block works in its sequence's rows and
// lengths (sequence_of, kernel_problem.h); a paged key is read through the block table.
// Tolerance class: f32 accumulation everywhere, inputs/outputs in the storage dtype.
// Speed: none measured on AMD hardware (none reachable). On NVIDIA it runs as the
//   hip-on-cuda build, a correctness vehicle, not tuned there: B 2, H 16, D 128 bf16 at
//   1k / 4k keys 8.8 / 9.2 TFLOP/s (bench/RESULTS.md, session 46).
// Run: FLASH_BACKEND=hip on a machine with an AMD GPU, or the hip-on-cuda build on
//   NVIDIA (backends/hip/README.md).
#include "kernels.h"
#include "portable_kv_tile.h"
#include "portable_tiles.h"

namespace flash::hip {
namespace {

template <class T, class Tile>
__global__ void __launch_bounds__(Tile::kThreads)
    portable_forward_kernel(KernelProblem p, const T* __restrict__ q, const T* __restrict__ k,
                            const T* __restrict__ v, T* __restrict__ o, float* __restrict__ lse,
                            float* __restrict__ o_partial, float* __restrict__ lse_partial) {
  constexpr int G = Tile::kGroup, N = Tile::kPerLane, D = Tile::kDim, KV = Tile::kTileRows;
  __shared__ float k_tile[KV][D];
  __shared__ float v_tile[KV][D];
  __shared__ int64_t k_at[KV], v_at[KV];  // the tile's key rows (stage_kv_tile)

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
  // From here on p's lengths are the sequence's (masks, bounds).
  p.seqlen_q = seq.seqlen_q;
  p.seqlen_kv = seq.seqlen_kv;

  const int lane = threadIdx.x % G;
  const int64_t row0 = qb * Tile::kRowsPerBlock;
  if (row0 >= p.seqlen_q) return;  // a sequence shorter than the longest (whole block)
  const int64_t i = row0 + threadIdx.x / G;
  const bool row_ok = i < p.seqlen_q;
  const int64_t last_row =
      row0 + Tile::kRowsPerBlock - 1 < p.seqlen_q ? row0 + Tile::kRowsPerBlock - 1 : p.seqlen_q - 1;

  float q_reg[N], o_acc[N];
  const T* q_row = q + q_row_offset(p.q_stride, seq, row_ok ? i : 0, h);
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int d = lane + G * n;
    q_reg[n] = row_ok && d < p.head_dim ? to_float(q_row[d]) : 0.f;
    o_acc[n] = 0.f;
  }
  // Rows past seqlen_q see nothing but still run every shuffle with their group.
  // (Split-KV: only this split's keys, for the rows and for the block.)
  const KeyRange mine = row_ok ? keys_of_split(p, split, visible_keys(p, i)) : KeyRange{1, 0};
  const KeyRange block_keys =
      keys_of_split(p, split, {visible_keys(p, row0).lo, visible_keys(p, last_row).hi});
  const int64_t kv_begin = block_keys.lo, kv_end = block_keys.hi;  // inclusive

  float m = -INFINITY, l = 0.f;  // running max (log2 units) and partial-free row sum
  for (int64_t t0 = kv_begin; t0 <= kv_end; t0 += KV) {
    // 16-byte loads only on tiles of <= 32 keys: on the 64-key tiles (scores of 64 keys in
    // registers) they made the 16-bit kernels spill on gfx90a.
    stage_kv_tile<Tile, (KV <= 32)>(p, seq, hk, t0, k, v, &k_tile[0][0], &v_tile[0][0], k_at, v_at);

    float s[KV];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < KV; ++j) {
      float dot = 0.f;
#pragma unroll
      for (int n = 0; n < N; ++n) dot += q_reg[n] * k_tile[j][lane + G * n];
      dot = gpu::group_sum<G>(dot);
      const int64_t key = t0 + j;
      s[j] = key >= mine.lo && key <= mine.hi && k_at[j] >= 0 ? logit_log2(p, dot) : -INFINITY;
      tile_max = gpu::is_nan(s[j]) || gpu::is_nan(tile_max) ? NAN : fmaxf(tile_max, s[j]);
    }
    // fmaxf drops NaN; a NaN score must poison the row (as the reference does).
    const bool has_nan = gpu::is_nan(tile_max) || gpu::is_nan(m);
    const float m_new = has_nan ? NAN : fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;               // nothing visible yet; no shuffles below
    const float alpha = gpu::fast_exp2(m - m_new);  // m = -inf gives 0
    l *= alpha;
#pragma unroll
    for (int n = 0; n < N; ++n) o_acc[n] *= alpha;
#pragma unroll
    for (int j = 0; j < KV; ++j) {
      // A key the row does not see is skipped, not multiplied by p = 0: a NaN or inf in
      // its v must not reach the row (0·NaN = NaN).
      const int64_t key = t0 + j;
      if (key < mine.lo || key > mine.hi || k_at[j] < 0) continue;
      const float pj = gpu::fast_exp2(s[j] - m_new);
      l += pj;
#pragma unroll
      for (int n = 0; n < N; ++n) o_acc[n] += pj * v_tile[j][lane + G * n];
    }
    m = m_new;
  }

  if (!row_ok) return;
  const float inv_l = l > 0.f ? 1.f / l : 0.f;  // rows that see no key: o = 0
  const float row_lse = l == 0.f ? -INFINITY : (m + log2f(l)) * kLn2;
  if (p.kv_splits > 1) {  // this split's partial, in f32 (launch_split_merge combines them)
    float* o_row = o_partial + o_part + i * partial_o_row_stride(p);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const int d = lane + G * n;
      if (d < p.head_dim_v) o_row[d] = o_acc[n] * inv_l;
    }
    if (lane == 0) lse_partial[lse_part + i] = row_lse;
    return;
  }
  T* o_row = o + q_row_offset(p.o_stride, seq, i, h);
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int d = lane + G * n;
    if (d < p.head_dim_v) o_row[d] = from_float<T>(o_acc[n] * inv_l);
  }
  if (lse != nullptr && lane == 0) lse[seq.lse_row + h * seq.lse_head + i] = row_lse;
}

template <class T>
gpu::Error launch(const KernelProblem& p, const ForwardArgs& a, gpu::Stream stream) {
  const int64_t dim = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  with_portable_tile(dim, [&](auto tile) {
    using Tile = decltype(tile);
    const int64_t q_blocks = (p.seqlen_q + Tile::kRowsPerBlock - 1) / Tile::kRowsPerBlock;
    const int64_t blocks = q_blocks * p.heads_q * p.batch * (p.kv_splits > 1 ? p.kv_splits : 1);
    FLASH_LAUNCH(static_cast<unsigned>(blocks), dim3(Tile::kThreads), stream,
                 portable_forward_kernel<T, Tile>)
    (p, static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
     static_cast<T*>(a.o), a.lse, a.o_partial, a.lse_partial);
  });
  return gpu::get_last_error();
}

}  // namespace

gpu::Error launch_portable_forward(const KernelProblem& p, int dtype, const ForwardArgs& a,
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
