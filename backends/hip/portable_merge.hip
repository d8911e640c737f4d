// merge_partials on the hip backend (flash.hpp): o = Σ exp(lse_i − lse) o_i with
// lse = ln Σ exp(lse_i), over `parts` partial results of the same queries.
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
  float max = -INFINITY;
  // A NaN part makes the row NaN (max keeps NaN, then every weight is NaN).
  for (int64_t t = 0; t < p.parts; ++t) {
    const float l = lse_parts[t * part_lse + lse_at];
    max = max != max || l != l ? max + l : fmaxf(max, l);  // x != x: NaN
  }
  float total = -INFINITY;
  float sum = 0.f;
  if (max != -INFINITY) {
    for (int64_t t = 0; t < p.parts; ++t) sum += expf(lse_parts[t * part_lse + lse_at] - max);
    total = max + logf(sum);
  }
  T* o_row = o + row_offset(p.o_stride, p.cu_seqlens_q ? 0 : b, p.cu_seqlens_q ? row : i, h);
  for (int64_t d = threadIdx.x; d < p.head_dim_v; d += kMergeThreads) {
    float acc = 0.f;
    if (max != -INFINITY)
      for (int64_t t = 0; t < p.parts; ++t) {
        const float l = lse_parts[t * part_lse + lse_at];
        if (l == -INFINITY) continue;
        acc += expf(l - total) *
               to_float(o_parts[t * part_o + (row * p.heads_q + h) * p.head_dim_v + d]);
      }
    o_row[d] = from_float<T>(acc);
  }
  if (lse != nullptr && threadIdx.x == 0) lse[lse_at] = total;
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

}  // namespace flash::hip
