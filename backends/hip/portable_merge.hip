// merge_partials on the hip backend (flash.hpp): o = Σ exp(lse_i − lse) o_i with
// lse = ln Σ exp(lse_i), over `parts` partial results of the same queries; and the same
// merge as the second launch of a split-KV forward (f32 partials, split_kv.h).
// One block of 64 threads per (query row, head): the threads stride over head_dim_v,
// each recomputing the row's max and sum of the parts' lse (parts is small; every
// thread reads the same few floats, which the cache serves). Parts with lse = −inf add
// nothing; a row with every part −inf gets o = 0, lse = −inf.
// Tolerance class: f32 arithmetic, one rounding to the storage dtype.
// Speed: bandwidth-bound; none measured on AMD hardware (none reachable).
// Run: FLASH_BACKEND=hip, flash::merge_partials.
#include "kernels.h"

namespace flash::hip {
namespace {

constexpr int kMergeThreads = 64;

// One row's merge over `parts` parts, part t's lse given by lse_of(t): the largest lse and
// lse = ln Σ exp(lse_t) (−inf when every part is −inf; a NaN part makes both NaN).
struct MergeTotals {
  float max, total;
};
template <class LseOf>
FLASH_DEVICE MergeTotals merge_totals(int64_t parts, const LseOf& lse_of) {
  float max = -INFINITY;
  for (int64_t t = 0; t < parts; ++t) {
    const float l = lse_of(t);
    max = max != max || l != l ? max + l : fmaxf(max, l);  // x != x: NaN
  }
  float total = -INFINITY, sum = 0.f;
  if (max != -INFINITY) {
    for (int64_t t = 0; t < parts; ++t) sum += expf(lse_of(t) - max);
    total = max + logf(sum);
  }
  return {max, total};
}

// Σ exp(lse_t − total) · o_t for one element (o_of(t): part t's value); 0 when every part
// is −inf. A part with lse = −inf adds nothing (its o is not read: 0 · NaN would be NaN).
template <class LseOf, class OOf>
FLASH_DEVICE float merged_element(int64_t parts, MergeTotals w, const LseOf& lse_of,
                                  const OOf& o_of) {
  float acc = 0.f;
  if (w.max != -INFINITY)
    for (int64_t t = 0; t < parts; ++t) {
      const float l = lse_of(t);
      if (l == -INFINITY) continue;
      acc += expf(l - w.total) * o_of(t);
    }
  return acc;
}

template <class T>
__global__ void __launch_bounds__(kMergeThreads)
    portable_merge_kernel(MergeProblem p, const T* __restrict__ o_parts,
                          const float* __restrict__ lse_parts, T* __restrict__ o,
                          float* __restrict__ lse) {
  const int64_t rows = p.cu_seqlens_q ? p.cu_seqlens_q[p.batch] : p.batch * p.seqlen_q;
  const int64_t row = blockIdx.x, h = blockIdx.y;  // packed row (sequence-major)
  if (row >= rows) return;
  // Row -> (sequence b, row i in b): packed rows come from cu_seqlens_q, dense rows are
  // b * seqlen_q + i.
  int64_t b = 0, i = row;
  if (p.cu_seqlens_q) {
    while (b + 1 < p.batch && p.cu_seqlens_q[b + 1] <= row) ++b;
    i = row - p.cu_seqlens_q[b];
  } else {
    b = row / p.seqlen_q;
    i = row % p.seqlen_q;
  }
  const int64_t lse_at = p.cu_seqlens_q ? h * rows + row : (b * p.heads_q + h) * p.seqlen_q + i;
  const int64_t part_lse = rows * p.heads_q;
  const int64_t part_o = part_lse * p.head_dim_v;
  const auto lse_of = [&](int64_t t) { return lse_parts[t * part_lse + lse_at]; };
  const MergeTotals w = merge_totals(p.parts, lse_of);
  T* o_row = o + row_offset(p.o_stride, p.cu_seqlens_q ? 0 : b, p.cu_seqlens_q ? row : i, h);
  const T* o_first = o_parts + (row * p.heads_q + h) * p.head_dim_v;
  for (int64_t d = threadIdx.x; d < p.head_dim_v; d += kMergeThreads)
    o_row[d] = from_float<T>(merged_element(
        p.parts, w, lse_of, [&](int64_t t) { return to_float(o_first[t * part_o + d]); }));
  if (lse != nullptr && threadIdx.x == 0) lse[lse_at] = w.total;
}

// The split-KV forward's merge: one block per (launch row b * seqlen_q + i, head h); rows
// past their sequence's length were not computed and are not written.
template <class T>
__global__ void __launch_bounds__(kMergeThreads)
    portable_split_merge_kernel(KernelProblem p, const float* __restrict__ o_partial,
                       const float* __restrict__ lse_partial, T* __restrict__ o,
                       float* __restrict__ lse) {
  const int64_t b = blockIdx.x / p.seqlen_q, i = blockIdx.x % p.seqlen_q, h = blockIdx.y;
  const Sequence seq = sequence_of(p, b);
  if (i >= seq.seqlen_q) return;
  const int64_t lse_split = partial_lse_rows(p, 1, 0, 0), o_split = partial_o_rows(p, 1, 0, 0);
  const float* lse_first = lse_partial + partial_lse_rows(p, 0, b, h) + i;
  const float* o_first = o_partial + partial_o_rows(p, 0, b, h) + i * partial_o_row_stride(p);
  const auto lse_of = [&](int64_t t) { return lse_first[t * lse_split]; };
  const MergeTotals w = merge_totals(p.kv_splits, lse_of);
  T* o_row = o + q_row_offset(p.o_stride, seq, i, h);
  for (int64_t d = threadIdx.x; d < p.head_dim_v; d += kMergeThreads)
    o_row[d] = from_float<T>(merged_element(p.kv_splits, w, lse_of,
                                            [&](int64_t t) { return o_first[t * o_split + d]; }));
  if (lse != nullptr && threadIdx.x == 0) lse[seq.lse_row + h * seq.lse_head + i] = w.total;
}

template <class T>
gpu::Error launch(const MergeProblem& p, const MergeArgs& a, gpu::Stream stream) {
  // Grid rows: the packed row count bounds it; with cu_seqlens_q the host passes the
  // largest it may be (batch * seqlen_q) and blocks past the real total return.
  const int64_t rows = p.batch * p.seqlen_q;
  if (rows == 0 || p.heads_q == 0) return gpu::kSuccess;
  FLASH_LAUNCH(dim3(static_cast<unsigned>(rows), static_cast<unsigned>(p.heads_q)),
               dim3(kMergeThreads), stream, portable_merge_kernel<T>)
  (p, static_cast<const T*>(a.o_parts), a.lse_parts, static_cast<T*>(a.o), a.lse);
  return gpu::get_last_error();
}

template <class T>
gpu::Error launch_split(const KernelProblem& p, const ForwardArgs& a, gpu::Stream stream) {
  const int64_t rows = p.batch * p.seqlen_q;
  if (rows == 0 || p.heads_q == 0) return gpu::kSuccess;
  FLASH_LAUNCH(dim3(static_cast<unsigned>(rows), static_cast<unsigned>(p.heads_q)),
               dim3(kMergeThreads), stream, portable_split_merge_kernel<T>)
  (p, a.o_partial, a.lse_partial, static_cast<T*>(a.o), a.lse);
  return gpu::get_last_error();
}

}  // namespace

gpu::Error launch_portable_merge(const MergeProblem& p, int dtype, const MergeArgs& a,
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

gpu::Error launch_split_merge(const KernelProblem& p, int dtype, const ForwardArgs& a,
                              gpu::Stream stream) {
  switch (dtype) {
    case FLASH_F16:
      return launch_split<Half>(p, a, stream);
    case FLASH_BF16:
      return launch_split<BFloat16>(p, a, stream);
    default:
      return launch_split<float>(p, a, stream);
  }
}

}  // namespace flash::hip
