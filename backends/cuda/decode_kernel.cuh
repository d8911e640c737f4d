// Split-KV decode forward (flash-decoding) for few query rows against long, possibly
// paged, KV caches: the f32 kernel (plain FMAs) and what both decode kernels share
// (DecodeParams, the block epilogue, the split merge). choose() takes the decode path
// when seqlen_q x (heads_q / heads_kv) <= kDecodeMaxRows and for paged caches that the
// Hopper forward does not take (cuda_backend.cu, fwd_paged_wgmma);
// f16/bf16 run decode_mma_kernel.cuh.
//
// Algorithm. A block owns (split, kv head, row chunk, sequence): the keys of one split
// of the sequence and up to kM query rows, which are the query heads sharing the kv head
// times the query tokens (GQA packing: each K/V byte is read once for all of them).
// Each warp streams its own 32-key tiles of K and V through a two-stage cp.async ring
// (16-byte copies, rows padded by 16 bytes so lane-per-row reads are conflict-free);
// lane j computes the scores of key j against the kM rows (Q in shared memory as f32),
// the warp keeps an online softmax per row, and P·V is accumulated with each lane
// owning head_dim/32 output columns. The block's warps are combined in shared memory;
// with one split the block writes o and lse, else an f32 partial (o normalised, lse),
// and the last block of the (sequence, kv head, row chunk) to finish merges the splits
// (decode_merge_if_last: one kernel per call, no host round trip). On sm_90 the tensor-core
// kernel runs a unit's splits as one thread block cluster when they fit in one wave, and
// the splits merge through distributed shared memory instead (decode_cluster_merge).
// Paged K/V: lane j looks up the page of key j once per tile and the warp shares the
// row offsets through shuffles; page ids outside [0, num_pages) read nothing (the key is
// masked), lengths are clamped to the declared maxima (sequence.cuh).
// Tolerance class: f32 scores and accumulation, exact exponent form (s - max)·scale·log2e
// as the forward kernels; one rounding of o to the storage dtype.
// Speed: not measured for f32 (bf16/f16: bench/RESULTS.md, issue 14).
// Run: FLASH_LOG=1 names decode_fma_* kernels; flashattn-decode-bench --dtype f32.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cuda/atomic>
#include <type_traits>

#include "cluster_ops.cuh"
#include "decode.hpp"
#include "decode_trace.cuh"
#include "device_ops.cuh"
#include "kernel_params.hpp"
#include "mask.cuh"
#include "sequence.cuh"

namespace flash::cuda {

// Shapes of one decode instantiation: kDim (padded head dim), kM query rows per block.
template <class T, int kDim_, int kM_>
struct DecodeShape {
  static constexpr int kDim = kDim_;
  static constexpr int kM = kM_;
  static constexpr int kKeys = 32;                         // keys per warp tile: one per lane
  static constexpr int kVec = 16 / sizeof(T);              // elements per 16-byte copy
  static constexpr int kChunks = kDim / kVec;              // 16-byte copies per row
  static constexpr int kRowBytes = kDim * sizeof(T) + 16;  // +16: conflict-free row reads
  static constexpr int kTileBytes = kKeys * kRowBytes;
  static constexpr int kStages = 2;
  static constexpr int kWarpBytes = kStages * 2 * kTileBytes;  // K and V rings
  // As many warps as fit in ~160 KiB of ring (1 to 4): bytes in flight per SM.
  static constexpr int kWarps =
      kWarpBytes * 4 <= 160 * 1024 ? 4 : (kWarpBytes * 2 <= 160 * 1024 ? 2 : 1);
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kCols = kDim / 32;  // output columns per lane
  static constexpr int kQBytes = kM * kDim * 4;
  static constexpr int kPBytes = kWarps * kKeys * kM * 4;
  static constexpr int kCombineBytes = kWarps * kM * (kDim + 2) * 4;
  static constexpr int kRingBytes = kWarps * kWarpBytes;
  static constexpr int kSmemBytes =
      kQBytes + kPBytes + (kRingBytes > kCombineBytes ? kRingBytes : kCombineBytes);
  static_assert(kDim % 32 == 0 && kDim <= 256, "columns split evenly over a warp");
  static_assert(kM % 4 == 0, "P rows are read as float4");
  static_assert((kKeys * kChunks) % 32 == 0, "whole copies per lane");
};

struct DecodeParams {
  FwdParams f;             // q, k, v, o, lse, strides, heads, mask maxima, packed/cache arrays
  const int* block_table;  // null: contiguous K/V
  int64_t page_size, pages_per_seq, num_pages;
  int heads_kv;
  int splits;       // key splits per (sequence, kv head, row chunk)
  int row_chunks;   // ceil(seqlen_q * group / kM)
  float* part_o;    // splits > 1, cluster 1: [batch, heads_kv, row_chunks, splits, kM, kDim]
  float* part_lse;  // [batch, heads_kv, row_chunks, splits, kM], natural log
  int* split_done;  // splits > 1, cluster 1: splits finished per (sequence, kv head, row chunk);
                    // zero between calls (the last block resets its counter)
  int cluster;      // > 1: the splits (= cluster) of a unit are one cluster and merge in
                    // distributed shared memory (no part_o / split_done); else 1
};

// A block's receive area for the cluster merge (past its ring, decode_mma_kernel.cuh):
// an mbarrier, then the partials of its column slice (DecodeSlice) from every split s of
// the unit, floats [s][row][column], then every split's lse, floats [s][row].
template <int D, int M>
struct DecodeRecv {
  static constexpr int kBarBytes = 16;
  // cluster · M · (columns of a slice <= D / cluster + 1) floats of partials.
  static constexpr int kLseOffset = M * (D + kDecodeMaxCluster);
  static constexpr int kBytes = kBarBytes + (kLseOffset + M * kDecodeMaxCluster) * 4;
};

// The columns of the padded head dim D that cluster rank r owns in the cluster merge:
// [first(r), first(r + 1)) with first(r) = ⌊r·D / cluster⌋ (any cluster size: the slices
// differ by at most one column), and the owner of column d, the largest r with first(r) <= d.
struct DecodeSlice {
  int D, cluster;
  __device__ __forceinline__ int first(int r) const { return r * D / cluster; }
  __device__ __forceinline__ int cols(int r) const { return first(r + 1) - first(r); }
  __device__ __forceinline__ int owner(int d) const { return ((d + 1) * cluster - 1) / D; }
};

// Where row r (0 .. seqlen_q·group − 1) of a kv head's packed rows is: query token
// r / group of query head kv_head·group + r % group.
struct DecodeRow {
  int i, head;
};
__device__ __forceinline__ DecodeRow decode_row(int r, int kv_head, int group) {
  return {r / group, kv_head * group + r % group};
}

template <class T>
__device__ __forceinline__ float to_f32(T x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return static_cast<float>(x);
}
template <class T>
__device__ __forceinline__ T from_f32(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else
    return __float2bfloat16_rn(x);
}

// kVec storage elements of a 16-byte shared-memory chunk as f32.
template <class T, int kVec>
__device__ __forceinline__ void chunk_to_f32(uint4 raw, float (&out)[kVec]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec; ++i) out[i] = to_f32(e[i]);
}

// n consecutive storage elements from shared memory as f32, in one 4/8/16-byte load
// when n·sizeof(T) allows (the V row slice a lane owns).
template <class T, int n>
__device__ __forceinline__ void load_f32(const T* src, float (&out)[n]) {
  constexpr int kBytes = n * sizeof(T);
  if constexpr (kBytes == 16 || kBytes == 8 || kBytes == 4) {
    using Word =
        std::conditional_t<kBytes == 16, uint4, std::conditional_t<kBytes == 8, uint2, uint32_t>>;
    const Word w = *reinterpret_cast<const Word*>(src);
    const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
    for (int i = 0; i < n; ++i) out[i] = to_f32(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < n; ++i) out[i] = to_f32(src[i]);
  }
}

// max that keeps NaN (a merge with a NaN part gives NaN, not the other parts' result).
__device__ __forceinline__ float nan_max(float a, float b) {
  return isnan(a) || isnan(b) ? NAN : fmaxf(a, b);
}

// The weight exp(lse_s − max) of a split in a merge whose largest lse is mx: 0 for a split
// that saw no key (lse = −inf; its partial o holds zeros) and when no split saw a key.
__device__ __forceinline__ float split_weight(float lse, float mx) {
  return mx == -INFINITY || lse == -INFINITY ? 0.f : __expf(lse - mx);
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The page id of key `key` of sequence b in a paged cache (a global load: callers that
// stream tiles look it up tiles ahead, off the copy-issue path); -1 without a block
// table or for keys at or past k_end.
__device__ __forceinline__ int key_page(const DecodeParams& dp, int64_t b, int key, int k_end) {
  if (!dp.block_table || key >= k_end) return -1;
  return dp.block_table[b * dp.pages_per_seq + key / dp.page_size];
}

// Element offsets of the K and V rows of key `key` of kv head `kv_head` in sequence b
// (paged: row key % page_size of page `page` = key_page(...)).
// ok is false for keys at or past k_end and for page ids outside [0, num_pages): such a
// key reads nothing (the caller zero-fills its row and masks it).
struct KeyRowOffsets {
  int64_t k, v;
  bool ok;
};
__device__ __forceinline__ KeyRowOffsets key_row_offsets(const DecodeParams& dp,
                                                         const SequenceRows& seq, int kv_head,
                                                         int key, int k_end, int64_t page) {
  const FwdParams& p = dp.f;
  KeyRowOffsets r{0, 0, key < k_end};
  if (dp.block_table) {
    r.ok = r.ok && page >= 0 && page < dp.num_pages;  // a bad page id reads nothing
    const int64_t in_page = key % dp.page_size;
    r.k = page * p.k_stride[0] + in_page * p.k_stride[1] + kv_head * p.k_stride[2];
    r.v = page * p.v_stride[0] + in_page * p.v_stride[1] + kv_head * p.v_stride[2];
  } else {
    r.k = seq.k + (int64_t)key * p.k_stride[1] + kv_head * p.k_stride[2];
    r.v = seq.v + (int64_t)key * p.v_stride[1] + kv_head * p.v_stride[2];
  }
  return r;
}
__device__ __forceinline__ KeyRowOffsets key_row_offsets(const DecodeParams& dp,
                                                         const SequenceRows& seq, int64_t b,
                                                         int kv_head, int key, int k_end) {
  return key_row_offsets(dp, seq, kv_head, key, k_end,
                         static_cast<int64_t>(key_page(dp, b, key, k_end)));
}

// The split merge, folded into the split kernel (threadFenceReduction pattern; measured
// against a second, programmatically dependent merge kernel: +2 % at B = 1, 8k keys,
// equal elsewhere, bench/RESULTS.md): every block of a (sequence, kv head, row chunk)
// publishes its partial, then counts itself done; the block that counts last merges all
// the unit's splits, lse = ln Σ exp(lse_s) and o = Σ exp(lse_s − lse)·o_s, and resets the
// counter for the next call on the stream.
// Publishing is one acq_rel increment by thread 0 after a block barrier (the pattern of
// cooperative groups' grid sync): the barrier orders every thread's partial stores before
// thread 0's release, which is cumulative at gpu scope; in the last block the second
// barrier orders every thread's reads after thread 0's acquire. (One fence per block, not
// one per thread: the whole tail of a B = 1 decode is a few such round trips.)
// One warp per row: lane s holds split s's lse (kDecodeMaxSplits / 32 per lane), the
// weights go to shared memory (`scratch`, the block's combine area, free by now), and
// the lanes own 32-column slices of o. The first batch of o slices is loaded together
// with the lse, before either is used, and each later batch before any of it is used:
// independent L2 round trips, not a chain (splits <= the batch: one round trip). Partials
// are read with ld.global.cg: L1 is not coherent and may still hold a previous call's
// lines of the same workspace.
constexpr int kMergeLoadsPerLane = 64;  // o values in flight per lane (registers)
template <class T, int D, int M, int W>
__device__ __forceinline__ void decode_merge_if_last(const DecodeParams& dp, float* scratch,
                                                     const SequenceRows& seq, int64_t b,
                                                     int kv_head, int chunk, int rows_total) {
  static_assert(M * (D + 2) >= kDecodeMaxSplits, "a warp's weights fit in its combine area");
  constexpr int kPerLane = kDecodeMaxSplits / 32, kCols = D / 32;
  constexpr int kBatch = kMergeLoadsPerLane / kCols;  // splits per batch of o loads
  static_assert(kBatch >= 1 && kDecodeMaxSplits % 32 == 0, "whole batches, whole lanes");
  __shared__ bool is_last;
  const FwdParams& p = dp.f;
  const int64_t unit = (b * dp.heads_kv + kv_head) * dp.row_chunks + chunk;
  __syncthreads();  // every partial store (and combine-area read) precedes the release
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<int, ::cuda::thread_scope_device> done(dp.split_done[unit]);
    is_last = done.fetch_add(1, ::cuda::memory_order_acq_rel) == dp.splits - 1;
    if (is_last) done.store(0, ::cuda::memory_order_relaxed);  // every split has counted
  }
  __syncthreads();
  decode_trace(DecodeMark::counted);
  if (!is_last) return;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, splits = dp.splits;
  const int64_t part0 = unit * splits;
  float* weight = scratch + warp * M * (D + 2);
  for (int m = warp; m < M && chunk * M + m < rows_total; m += W) {
    const float* part_o = dp.part_o + (part0 * M + m) * D + lane;
    float v[kBatch][kCols];
    const auto load_batch = [&](int s0) {
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
#pragma unroll
        for (int c = 0; c < kCols; ++c)
          v[j][c] = s0 + j < splits ? __ldcg(part_o + (int64_t)(s0 + j) * M * D + 32 * c) : 0.f;
    };
    float l[kPerLane], mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int s = lane + 32 * i;
      l[i] = s < splits ? __ldcg(dp.part_lse + (part0 + s) * M + m) : -INFINITY;
    }
    load_batch(0);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) mx = nan_max(mx, l[i]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mx = nan_max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const bool empty = mx == -INFINITY;  // no split saw a key: o = 0, lse = −inf
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const float w = split_weight(l[i], mx);
      if (lane + 32 * i < splits) weight[lane + 32 * i] = w;
      sum += w;
    }
    sum = warp_sum(sum);
    __syncwarp();
    float o[kCols] = {};
    for (int s0 = 0; s0 < splits && !empty; s0 += kBatch) {
      if (s0 > 0) load_batch(s0);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const float w = s0 + j < splits ? weight[s0 + j] : 0.f;
#pragma unroll
        for (int c = 0; c < kCols; ++c) o[c] = fmaf(w, v[j][c], o[c]);
      }
    }
    __syncwarp();  // weights read before the next row overwrites them
    const DecodeRow row = decode_row(chunk * M + m, kv_head, p.group);
    T* out = static_cast<T*>(p.o) + seq.o + (int64_t)row.i * p.o_stride[1] +
             (int64_t)row.head * p.o_stride[2];
    const float inv = empty ? 0.f : 1.f / sum;
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      if (32 * c + lane < p.head_dim_v) out[32 * c + lane] = from_f32<T>(o[c] * inv);
    if (lane == 0 && p.lse)
      p.lse[sequence_rows(p, b, row.head).lse + row.i] = empty ? -INFINITY : mx + logf(sum);
  }
}

// The cluster merge's receive barrier: initialised by thread 0 to expect every split's
// rows of this block's column slice, then the block arrives on the cluster barrier (its
// wait, in decode_block_epilogue, comes before the first store into another block). Called
// by every thread of a block of a cluster launch (dp.cluster > 1), before the key loop.
template <int D, int M>
__device__ __forceinline__ void decode_cluster_prologue(const DecodeParams& dp, unsigned char* recv,
                                                        int rows_here) {
  if (threadIdx.x == 0) {
    const uint32_t bar = smem_addr(recv);
    const int cols = DecodeSlice{D, dp.cluster}.cols(blockIdx.x);  // rank = split = blockIdx.x
    mbar_init(bar, 1);
    mbar_arrive_expect_tx(bar, static_cast<uint32_t>(dp.cluster * rows_here * (cols + 1) * 4));
    mbar_init_fence();
  }
  cluster_arrive();
}

// The split merge of a cluster launch, in the block that owns the unit's columns
// DecodeSlice{D, cluster}.first(split) .. first(split + 1) − 1: once every split's slice
// and lse have landed in `recv` (the barrier counts their bytes), lse = ln Σ exp(lse_s) and
// o = Σ exp(lse_s − lse)·o_s, as decode_merge_if_last. No global round trip: the tail of a
// decode is a store into the owners' shared memory and this wait.
template <class T, int D, int M, int W>
__device__ __forceinline__ void decode_cluster_merge(const DecodeParams& dp, unsigned char* recv,
                                                     const SequenceRows& seq, int64_t b,
                                                     int kv_head, int chunk, int split,
                                                     int rows_here) {
  using R = DecodeRecv<D, M>;
  const FwdParams& p = dp.f;
  const int splits = dp.cluster;
  const DecodeSlice slice{D, splits};
  const int cols = slice.cols(split), first = slice.first(split);
  const float* part = reinterpret_cast<const float*>(recv + R::kBarBytes);
  mbar_wait(smem_addr(recv), 0);
  decode_trace(DecodeMark::counted);
  for (int idx = threadIdx.x; idx < rows_here * cols; idx += W * 32) {
    const int m = idx / cols, c = idx % cols, d = first + c;
    float mx = -INFINITY;
    for (int s = 0; s < splits; ++s) mx = nan_max(mx, part[R::kLseOffset + s * M + m]);
    float sum = 0.f, o = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float w = split_weight(part[R::kLseOffset + s * M + m], mx);
      sum += w;
      o = fmaf(w, part[(s * M + m) * cols + c], o);
    }
    const bool empty = mx == -INFINITY;  // no split saw a key: o = 0, lse = −inf
    const DecodeRow row = decode_row(chunk * M + m, kv_head, p.group);
    if (d < p.head_dim_v)
      static_cast<T*>(
          p.o)[seq.o + (int64_t)row.i * p.o_stride[1] + (int64_t)row.head * p.o_stride[2] + d] =
          from_f32<T>(empty ? 0.f : o / sum);
    if (d == 0 && p.lse)
      p.lse[sequence_rows(p, b, row.head).lse + row.i] = empty ? -INFINITY : mx + logf(sum);
  }
}

// The block's last step, shared by the decode kernels: comb holds, per warp and row,
// the unnormalised O (kDim floats), the row max (raw score units) and the row sum.
// Combines the warps; one split writes o and lse, more write the split's f32 partial
// (global memory, or in a cluster launch the owners' slices of `recv`).
template <class T, int D, int M, int W>
__device__ __forceinline__ void decode_block_epilogue(const DecodeParams& dp, float* comb,
                                                      const SequenceRows& seq, int64_t b,
                                                      int kv_head, int chunk, int split,
                                                      int rows_total, float mult,
                                                      unsigned char* recv = nullptr) {
  using R = DecodeRecv<D, M>;
  const FwdParams& p = dp.f;
  const int tid = threadIdx.x, row0 = chunk * M;
  const bool in_cluster = dp.cluster > 1;
  const DecodeSlice slice{D, dp.cluster};
  decode_trace(DecodeMark::joined);
  // Every block of the cluster has initialised its receive barrier (and still runs: a block
  // exits only after its own slices have landed).
  if (in_cluster) cluster_wait();
  const uint32_t recv_base = in_cluster ? smem_addr(recv) : 0u;
  for (int idx = tid; idx < M * D; idx += (W * 32)) {
    const int m = idx / D, d = idx % D, r = row0 + m;
    if (r >= rows_total) continue;
    float mx = -INFINITY;
    for (int w = 0; w < W; ++w) mx = fmaxf(mx, comb[(w * M + m) * (D + 2) + D]);
    // A warp whose visible scores were all NaN has max −inf and a NaN sum: its weight 0
    // times NaN keeps the row NaN, as the reference does.
    float l = 0.f, o = 0.f;
    for (int w = 0; w < W; ++w) {
      const float* src = comb + (w * M + m) * (D + 2);
      const float scale_w = src[D] == -INFINITY ? 0.f : exp2f((src[D] - mx) * mult);
      l += src[D + 1] * scale_w;
      o += src[d] * scale_w;
    }
    // Natural-log lse of this split; −inf where no key was seen (l == 0), NaN stays NaN.
    const bool empty = l == 0.f;
    const float lse = empty ? -INFINITY : (mx * mult + log2f(l)) * kLn2;
    const float out = empty ? 0.f : o / l;
    if (dp.splits == 1) {
      const DecodeRow row = decode_row(r, kv_head, p.group);
      if (d < p.head_dim_v)
        static_cast<T*>(
            p.o)[seq.o + (int64_t)row.i * p.o_stride[1] + (int64_t)row.head * p.o_stride[2] + d] =
            from_f32<T>(out);
      if (d == 0 && p.lse) p.lse[sequence_rows(p, b, row.head).lse + row.i] = lse;
    } else if (in_cluster) {
      // Column d to its owner; the row's lse to every owner.
      const int owner = slice.owner(d), cols = slice.cols(owner);
      const uint32_t slot =
          recv_base + R::kBarBytes + 4 * ((split * M + m) * cols + d - slice.first(owner));
      st_async_f32(cluster_map(slot, owner), out, cluster_map(recv_base, owner));
      if (d == 0)
        for (int o = 0; o < dp.cluster; ++o)
          st_async_f32(
              cluster_map(recv_base + R::kBarBytes + 4 * (R::kLseOffset + split * M + m), o), lse,
              cluster_map(recv_base, o));
    } else {
      const int64_t part =
          ((b * dp.heads_kv + kv_head) * dp.row_chunks + chunk) * dp.splits + split;
      dp.part_o[(part * M + m) * D + d] = out;
      if (d == 0) dp.part_lse[part * M + m] = lse;
    }
  }
  if (dp.splits == 1)
    decode_trace(DecodeMark::counted);
  else if (in_cluster)
    decode_cluster_merge<T, D, M, W>(dp, recv, seq, b, kv_head, chunk, split,
                                     min(M, rows_total - row0));
  else
    decode_merge_if_last<T, D, M, W>(dp, comb, seq, b, kv_head, chunk, rows_total);
}

template <class T, class S>
__global__ void __launch_bounds__(S::kThreads) decode_split_kernel(const DecodeParams dp) {
  constexpr int D = S::kDim, M = S::kM, W = S::kWarps, KT = S::kKeys, C = S::kCols;
  const FwdParams& p = dp.f;
  extern __shared__ __align__(16) unsigned char smem[];
  float* q_s = reinterpret_cast<float*>(smem);           // [M][D] f32
  float* p_all = q_s + M * D;                            // [W][KT][M] probabilities
  unsigned char* ring = smem + S::kQBytes + S::kPBytes;  // [W][stage][K|V][KT rows]

  const int split = blockIdx.x;
  const int kv_head = blockIdx.y % dp.heads_kv, chunk = blockIdx.y / dp.heads_kv;
  const int64_t b = (int64_t)blockIdx.z + p.batch_offset;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const SequenceRows seq = sequence_rows(p, b, 0);
  const MaskParams& mask = seq.mask;
  const int rows_total = mask.seqlen_q * p.group, row0 = chunk * M;
  if (row0 >= rows_total) return;  // this sequence has fewer rows (block-uniform)
  decode_trace(DecodeMark::start);

  // Keys of this split (a multiple of the tile), narrowed to what the chunk's rows see.
  const int skv = mask.seqlen_kv;
  const int per_split = ((skv + dp.splits - 1) / dp.splits + KT - 1) / KT * KT;
  const int row_last = min(row0 + M, rows_total) - 1;
  const KeyRange seen = visible_keys(mask, row0 / p.group, row_last / p.group);
  const int k_begin = max(split * per_split, seen.begin);
  const int k_end = min(min(split * per_split + per_split, skv), seen.end);

  // Q rows (f32, zero past head_dim and past the sequence's rows) and each row's keys.
  for (int idx = tid; idx < M * D; idx += S::kThreads) {
    const int m = idx / D, d = idx % D, r = row0 + m;
    float x = 0.f;
    if (r < rows_total && d < p.head_dim) {
      const DecodeRow row = decode_row(r, kv_head, p.group);
      x = to_f32(static_cast<const T*>(
          p.q)[seq.q + (int64_t)row.i * p.q_stride[1] + (int64_t)row.head * p.q_stride[2] + d]);
    }
    q_s[idx] = x;
  }
  int lo[M], hi[M];  // visible keys [lo, hi) of each row; empty for rows past the end
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int r = row0 + m;
    const KeyRange kr =
        r < rows_total ? visible_keys(mask, r / p.group, r / p.group) : KeyRange{0, 0};
    lo[m] = kr.begin;
    hi[m] = kr.end;
  }
  __syncthreads();

  // Softmax in raw score units: p = exp2((x − max)·mult) keeps f32's relative precision
  // at large logits (the exact form of the forward kernels).
  const bool use_softcap = p.softcap > 0.f;
  const float mult = use_softcap ? kLog2e : p.scale * kLog2e;
  const float cap_in = use_softcap ? p.scale / p.softcap : 0.f;

  float run_max[M], l_part[M], acc[M][C];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    run_max[m] = -INFINITY;
    l_part[m] = 0.f;
#pragma unroll
    for (int c = 0; c < C; ++c) acc[m][c] = 0.f;
  }

  // This warp's tiles: t0 = k_begin + (warp + W·n)·KT.
  const int tiles = k_begin < k_end ? (k_end - k_begin + KT - 1) / KT : 0;
  const int my_tiles = tiles > warp ? (tiles - warp + W - 1) / W : 0;
  const T* kg = static_cast<const T*>(p.k);
  const T* vg = static_cast<const T*>(p.v);
  unsigned char* my_ring = ring + warp * S::kWarpBytes;
  float* p_s = p_all + warp * KT * M;

  // Issues the copies of the warp's n-th tile into stage n % kStages.
  auto load_tile = [&](int n) {
    const int t0 = k_begin + (warp + W * n) * KT;
    const KeyRowOffsets row = key_row_offsets(dp, seq, b, kv_head, t0 + lane, k_end);
    const bool ok = row.ok;
    const int64_t k_off = row.k, v_off = row.v;
    const uint32_t ks = smem_addr(my_ring + (n % S::kStages) * 2 * S::kTileBytes);
    const uint32_t vs = ks + S::kTileBytes;
#pragma unroll
    for (int it = 0; it < KT * S::kChunks / 32; ++it) {
      const int idx = it * 32 + lane, r = idx / S::kChunks, c = idx % S::kChunks;
      const bool row_ok = __shfl_sync(0xffffffffu, ok, r);
      const int64_t kr = __shfl_sync(0xffffffffu, k_off, r);
      const int64_t vr = __shfl_sync(0xffffffffu, v_off, r);
      const int e = c * S::kVec;
      const uint32_t dst = r * S::kRowBytes + c * 16;
      cp_async_16(ks + dst, kg + (row_ok && e < p.head_dim ? kr + e : 0), row_ok && e < p.head_dim);
      cp_async_16(vs + dst, vg + (row_ok && e < p.head_dim_v ? vr + e : 0),
                  row_ok && e < p.head_dim_v);
    }
  };

  if (my_tiles > 0) load_tile(0);
  cp_async_commit();
  for (int n = 0; n < my_tiles; ++n) {
    if (n + 1 < my_tiles) load_tile(n + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncwarp();
    const unsigned char* ktile = my_ring + (n % S::kStages) * 2 * S::kTileBytes;
    const unsigned char* vtile = ktile + S::kTileBytes;
    const int key = k_begin + (warp + W * n) * KT + lane;

    // ---- scores of key `key` (this lane) against the M rows ---------------------------
    float s[M];
#pragma unroll
    for (int m = 0; m < M; ++m) s[m] = 0.f;
    const unsigned char* krow = ktile + lane * S::kRowBytes;
#pragma unroll 4
    for (int c = 0; c < S::kChunks; ++c) {
      float kv[S::kVec];
      chunk_to_f32<T, S::kVec>(*reinterpret_cast<const uint4*>(krow + c * 16), kv);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float* qm = q_s + m * D + c * S::kVec;
#pragma unroll
        for (int e = 0; e < S::kVec; e += 4) {
          const float4 q4 = *reinterpret_cast<const float4*>(qm + e);
          s[m] = fmaf(q4.x, kv[e], s[m]);
          s[m] = fmaf(q4.y, kv[e + 1], s[m]);
          s[m] = fmaf(q4.z, kv[e + 2], s[m]);
          s[m] = fmaf(q4.w, kv[e + 3], s[m]);
        }
      }
    }
    // ---- online softmax per row -------------------------------------------------------
    float pr[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float x = use_softcap ? p.softcap * tanhf(s[m] * cap_in) : s[m];
      const bool visible = key < k_end && key >= lo[m] && key < hi[m];
      x = visible ? x : -INFINITY;  // a hidden key's NaN score never reaches the row
      const float new_max = fmaxf(run_max[m], warp_max(x));
      // While the row has only −inf scores, subtract 0 (−inf − −inf would be NaN).
      const float max_used = new_max == -INFINITY ? 0.f : new_max;
      const float alpha = exp2f((run_max[m] - max_used) * mult);
      pr[m] = visible ? exp2f((x - max_used) * mult) : 0.f;
      run_max[m] = new_max;
      l_part[m] = l_part[m] * alpha + pr[m];
#pragma unroll
      for (int c = 0; c < C; ++c) acc[m][c] *= alpha;
    }
    // A masked row keeps 0 only where p is 0 for a hidden key: skipped below, so a NaN or
    // inf in a hidden key's V never multiplies it.
#pragma unroll
    for (int m = 0; m < M; m += 4)
      *reinterpret_cast<float4*>(p_s + lane * M + m) =
          make_float4(pr[m], pr[m + 1], pr[m + 2], pr[m + 3]);
    __syncwarp();
    // ---- O += P·V: lane owns columns lane·C .. lane·C + C − 1 ----------------------------
#pragma unroll 2
    for (int j = 0; j < KT; ++j) {
      float vv[C];
      load_f32<T, C>(reinterpret_cast<const T*>(vtile + j * S::kRowBytes) + lane * C, vv);
#pragma unroll
      for (int m = 0; m < M; m += 4) {
        const float4 p4 = *reinterpret_cast<const float4*>(p_s + j * M + m);
        const float pm[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
        for (int u = 0; u < 4; ++u)
          if (pm[u] != 0.f)
#pragma unroll
            for (int c = 0; c < C; ++c) acc[m + u][c] = fmaf(pm[u], vv[c], acc[m + u][c]);
      }
    }
    __syncwarp();  // p_s and this stage are reused by the next tiles
  }
  cp_async_wait<0>();
  decode_trace(DecodeMark::streamed);

  // ---- combine the warps: max, sum and O of each row ----------------------------------
  __syncthreads();                               // every warp is done with its ring: reuse it
  float* comb = reinterpret_cast<float*>(ring);  // [W][M][D + 2]: O, then max, sum
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float l = warp_sum(l_part[m]);
    float* dst = comb + (warp * M + m) * (D + 2);
#pragma unroll
    for (int c = 0; c < C; ++c) dst[lane * C + c] = acc[m][c];
    if (lane == 0) {
      dst[D] = run_max[m];
      dst[D + 1] = l;
    }
  }
  __syncthreads();
  decode_block_epilogue<T, D, M, W>(dp, comb, seq, b, kv_head, chunk, split, rows_total, mult);
  decode_trace(DecodeMark::end);
}

}  // namespace flash::cuda
