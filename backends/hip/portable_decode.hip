// Decode kernel of the hip backend: few query rows per kv head over a long KV cache, plain
// FMAs, any wave size (the portable path's lane groups).
//
// Algorithm: one block = up to kRows query rows that share one kv head — the GQA group's
// heads times the query tokens, packed (row r is query r / group of head hk·group + r %
// group), so each K/V byte is staged once for all of them. K/V tiles of kTileRows keys
// are staged in shared memory as f32 (as the portable forward does); the block's row
// slots (kGroup lanes each: a dot product is kPerLane FMAs plus a shuffle sum) are split
// into kSlots key slots, slot s taking keys s, s + kSlots, ... of every tile with an online
// softmax of its own (log2 domain), so that every lane works on a decode's 1-16 rows.
// Tiles are staged by stage_kv_tile (portable_kv_tile.h), as in portable_forward.hip.
// The slots' (max, sum, o) merge in shared memory at the end. Split-KV (split_kv.h): a
// block sees only its split's keys and writes f32 partials. Packed batches, cache
// lengths and paged caches as in portable_forward.hip (sequence_of, kv_row_offset).
// Tolerance class: f32 accumulation everywhere, inputs/outputs in the storage dtype.
// Speed (H200, hip-on-cuda build, bf16, Hq 32 / Hkv 8, D 128, one token): 370-715 GB/s of
//   K/V, 8-17 % of a device copy (main's forward kernels: 6-48 GB/s); bench/RESULTS.md,
//   session 46. None measured on AMD hardware (none reachable).
// Run: FLASH_BACKEND=hip; FLASH_LOG=1 names portable_decode_d<D>_r<rows>.
#include "kernels.h"
#include "portable_kv_tile.h"
#include "portable_tiles.h"

namespace flash::hip {
namespace {

template <class T, class Tile, int kRows>
__global__ void __launch_bounds__(Tile::kThreads)
    portable_decode_kernel(KernelProblem p, const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, T* __restrict__ o, float* __restrict__ lse,
                           float* __restrict__ o_partial, float* __restrict__ lse_partial) {
  constexpr int G = Tile::kGroup, N = Tile::kPerLane, D = Tile::kDim, KV = Tile::kTileRows;
  constexpr int kSlots = Tile::kRowsPerBlock / kRows;  // key slots
  static_assert(Tile::kRowsPerBlock % kRows == 0 && KV % kSlots == 0,
                "every key slot takes the same number of keys of a tile");
  // K and V tiles while streaming, then the slots' states: (m, l) and o per (slot, row).
  constexpr int kTileFloats = 2 * KV * D, kMergeFloats = Tile::kRowsPerBlock * (D + 2);
  __shared__ float smem[kTileFloats > kMergeFloats ? kTileFloats : kMergeFloats];
  float* const k_tile = smem;             // [KV][D]
  float* const v_tile = smem + KV * D;    // [KV][D]
  __shared__ int64_t k_at[KV], v_at[KV];  // the tile's key rows (stage_kv_tile)

  const int64_t unit_rows = p.seqlen_q * p.group;  // the launch's longest sequence
  const int64_t chunks = (unit_rows + kRows - 1) / kRows;
  const int64_t split_blocks = chunks * p.heads_kv * p.batch;
  const int64_t split = blockIdx.x / split_blocks, block = blockIdx.x % split_blocks;
  const int64_t chunk = block % chunks, hk = (block / chunks) % p.heads_kv;
  const int64_t b = block / (chunks * p.heads_kv);
  const int lane = threadIdx.x % G, row = (threadIdx.x / G) % kRows;
  const int slot = threadIdx.x / G / kRows;
  // This thread's packed row: query i of head h.
  const int64_t r = chunk * kRows + row, i = r / p.group, h = hk * p.group + r % p.group;
  const int64_t o_part = partial_o_rows(p, split, b, h),
                lse_part = partial_lse_rows(p, split, b, h);
  const Sequence seq = sequence_of(p, b);
  p.seqlen_q = seq.seqlen_q;  // from here on: the sequence's lengths
  p.seqlen_kv = seq.seqlen_kv;
  const int64_t rows = p.seqlen_q * p.group;
  if (chunk * kRows >= rows) return;  // a sequence shorter than the longest (whole block)
  const bool row_ok = r < rows;
  // The block's first and last query (rows are query-major, so their key ranges bound it).
  const int64_t r_last = (chunk + 1) * kRows < rows ? (chunk + 1) * kRows - 1 : rows - 1;
  const int64_t i_first = chunk * kRows / p.group, i_last = r_last / p.group;

  float q_reg[N], o_acc[N];
  const T* q_row = q + q_row_offset(p.q_stride, seq, row_ok ? i : 0, h);
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int d = lane + G * n;
    q_reg[n] = row_ok && d < p.head_dim ? to_float(q_row[d]) : 0.f;
    o_acc[n] = 0.f;
  }
  const KeyRange mine = row_ok ? keys_of_split(p, split, visible_keys(p, i)) : KeyRange{1, 0};
  const KeyRange block_keys =
      keys_of_split(p, split, {visible_keys(p, i_first).lo, visible_keys(p, i_last).hi});

  float m = -INFINITY, l = 0.f;  // this slot's running max (log2 units) and sum
  for (int64_t t0 = block_keys.lo; t0 <= block_keys.hi; t0 += KV) {
    stage_kv_tile<Tile>(p, seq, hk, t0, k, v, k_tile, v_tile, k_at, v_at);

    // This slot's keys of the tile: j = slot + kSlots * u.
    constexpr int kKeys = KV / kSlots;
    float s[kKeys];
    float tile_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      const int j = slot + kSlots * u;
      float dot = 0.f;
#pragma unroll
      for (int n = 0; n < N; ++n) dot += q_reg[n] * k_tile[j * D + lane + G * n];
      dot = gpu::group_sum<G>(dot);
      const int64_t key = t0 + j;
      s[u] = key >= mine.lo && key <= mine.hi && k_at[j] >= 0 ? logit_log2(p, dot) : -INFINITY;
      // fmaxf drops NaN; a NaN score must poison the row (as the reference does).
      tile_max = gpu::is_nan(s[u]) || gpu::is_nan(tile_max) ? NAN : fmaxf(tile_max, s[u]);
    }
    const bool has_nan = gpu::is_nan(tile_max) || gpu::is_nan(m);
    const float m_new = has_nan ? NAN : fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;               // nothing visible yet (uniform per group)
    const float alpha = gpu::fast_exp2(m - m_new);  // m = -inf gives 0
    l *= alpha;
#pragma unroll
    for (int n = 0; n < N; ++n) o_acc[n] *= alpha;
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      // A hidden key is skipped, not multiplied by p = 0: its v may hold NaN or inf.
      const int j = slot + kSlots * u;
      const int64_t key = t0 + j;
      if (key < mine.lo || key > mine.hi || k_at[j] < 0) continue;
      const float pj = gpu::fast_exp2(s[u] - m_new);
      l += pj;
#pragma unroll
      for (int n = 0; n < N; ++n) o_acc[n] += pj * v_tile[j * D + lane + G * n];
    }
    m = m_new;
  }

  // Merge the slots of each row: slot 0's threads combine every slot's (m, l, o).
  __syncthreads();                                             // the tiles are no longer read
  float* const state = smem + (slot * kRows + row) * (D + 2);  // [m, l, o[D]]
  if (lane == 0) state[0] = m, state[1] = l;
#pragma unroll
  for (int n = 0; n < N; ++n) state[2 + lane + G * n] = o_acc[n];
  __syncthreads();
  if (slot != 0 || !row_ok) return;
  float m_all = -INFINITY;
  for (int t = 0; t < kSlots; ++t) {
    const float mt = smem[(t * kRows + row) * (D + 2)];
    m_all = gpu::is_nan(mt) || gpu::is_nan(m_all) ? NAN : fmaxf(m_all, mt);
  }
  float l_all = 0.f;
#pragma unroll
  for (int n = 0; n < N; ++n) o_acc[n] = 0.f;
  if (m_all != -INFINITY) {
    for (int t = 0; t < kSlots; ++t) {
      const float* st = smem + (t * kRows + row) * (D + 2);
      if (st[0] == -INFINITY) continue;  // a slot that saw no key adds nothing
      const float w = gpu::fast_exp2(st[0] - m_all);
      l_all += w * st[1];
#pragma unroll
      for (int n = 0; n < N; ++n) o_acc[n] += w * st[2 + lane + G * n];
    }
  }
  const float inv_l = l_all > 0.f ? 1.f / l_all : 0.f;  // rows that see no key: o = 0
  const float row_lse = l_all == 0.f ? -INFINITY : (m_all + log2f(l_all)) * kLn2;
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

template <class T, int kRows>
gpu::Error launch(const KernelProblem& p, const ForwardArgs& a, gpu::Stream stream) {
  const int64_t dim = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  with_portable_tile(dim, [&](auto tile) {
    using Tile = decltype(tile);
    const int64_t chunks = (p.seqlen_q * p.group + kRows - 1) / kRows;
    const int64_t blocks = chunks * p.heads_kv * p.batch * (p.kv_splits > 1 ? p.kv_splits : 1);
    FLASH_LAUNCH(static_cast<unsigned>(blocks), dim3(Tile::kThreads), stream,
                 portable_decode_kernel<T, Tile, kRows>)
    (p, static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
     static_cast<T*>(a.o), a.lse, a.o_partial, a.lse_partial);
  });
  return gpu::get_last_error();
}

template <class T>
gpu::Error launch_rows(const KernelProblem& p, int rows, const ForwardArgs& a, gpu::Stream stream) {
  return rows == kDecodeRowsSmall ? launch<T, kDecodeRowsSmall>(p, a, stream)
                                  : launch<T, kDecodeRowsLarge>(p, a, stream);
}

}  // namespace

gpu::Error launch_portable_decode(const KernelProblem& p, int dtype, int rows, const ForwardArgs& a,
                                  gpu::Stream stream) {
  switch (dtype) {
    case FLASH_F16:
      return launch_rows<Half>(p, rows, a, stream);
    case FLASH_BF16:
      return launch_rows<BFloat16>(p, rows, a, stream);
    default:
      return launch_rows<float>(p, rows, a, stream);
  }
}

}  // namespace flash::hip
