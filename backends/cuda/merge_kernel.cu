// merge_partials on the cuda backend (flash.hpp): o = Σ exp(lse_i − lse)·o_i with
// lse = ln Σ exp(lse_i) over `parts` partial results of the same queries. One block of
// 128 threads per (query row, head), threads striding over head_dim_v; each recomputes
// the row's max and sum over the parts' lse (parts is small; the cache serves the
// repeated reads). Parts with lse = −inf add nothing; all −inf gives o = 0, lse = −inf.
// Tolerance class: f32 arithmetic, one rounding to the storage dtype.
// Speed: bandwidth-bound, not tuned (the decode path merges its own splits in
// decode_merge_if_last in decode_kernel.cuh). Run: flash::merge_partials with device pointers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "merge.hpp"

namespace flash::cuda {
namespace {

constexpr int kMergeThreads = 128;

template <class T>
__device__ __forceinline__ float load_f32(const T* p) {
  if constexpr (std::is_same_v<T, float>)
    return *p;
  else
    return static_cast<float>(*p);
}

template <class T>
__device__ __forceinline__ T store_t(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else
    return __float2bfloat16_rn(x);
}

template <class T>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const MergeParams m) {
  const int64_t rows = m.cu_seqlens_q ? m.cu_seqlens_q[m.batch] : m.batch * m.seqlen_q;
  const int64_t row = blockIdx.x, h = blockIdx.y;  // packed row, sequence-major
  if (row >= rows) return;
  int64_t b = 0, i = row;
  if (m.cu_seqlens_q) {
    // The sequence holding this row: the last b with cu[b] <= row (binary search).
    int64_t lo = 0, hi = m.batch - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (m.cu_seqlens_q[mid] <= row)
        lo = mid;
      else
        hi = mid - 1;
    }
    b = lo;
    i = row - m.cu_seqlens_q[b];
  } else {
    b = row / m.seqlen_q;
    i = row % m.seqlen_q;
  }
  const int64_t lse_at = m.cu_seqlens_q ? h * rows + row : (b * m.heads_q + h) * m.seqlen_q + i;
  const int64_t part_lse = rows * m.heads_q, part_o = part_lse * m.head_dim_v;
  float mx = -INFINITY;
  // A NaN part makes the row NaN (max keeps NaN, then every weight is NaN).
  for (int64_t t = 0; t < m.parts; ++t) {
    const float l = m.lse_parts[t * part_lse + lse_at];
    mx = isnan(mx) || isnan(l) ? NAN : fmaxf(mx, l);
  }
  float total = -INFINITY;
  if (mx != -INFINITY) {
    float sum = 0.f;
    for (int64_t t = 0; t < m.parts; ++t) sum += expf(m.lse_parts[t * part_lse + lse_at] - mx);
    total = mx + logf(sum);
  }
  const int64_t o_at = m.cu_seqlens_q ? row * m.o_stride[1] + h * m.o_stride[2]
                                      : b * m.o_stride[0] + i * m.o_stride[1] + h * m.o_stride[2];
  const T* parts = static_cast<const T*>(m.o_parts);
  for (int64_t d = threadIdx.x; d < m.head_dim_v; d += kMergeThreads) {
    float acc = 0.f;
    if (mx != -INFINITY)
      for (int64_t t = 0; t < m.parts; ++t) {
        const float l = m.lse_parts[t * part_lse + lse_at];
        if (l == -INFINITY) continue;
        acc += expf(l - total) *
               load_f32(parts + t * part_o + (row * m.heads_q + h) * m.head_dim_v + d);
      }
    static_cast<T*>(m.o)[o_at + d] = store_t<T>(acc);
  }
  if (m.lse != nullptr && threadIdx.x == 0) m.lse[lse_at] = total;
}

}  // namespace

void launch_merge(const MergeParams& m, Dtype dtype, cudaStream_t stream) {
  // Grid rows bound the packed row count (blocks past cu_seqlens_q[batch] return).
  const dim3 grid(static_cast<unsigned>(m.batch * m.seqlen_q), static_cast<unsigned>(m.heads_q));
  if (grid.x == 0 || grid.y == 0) return;
  switch (dtype) {
    case Dtype::f32:
      merge_kernel<float><<<grid, kMergeThreads, 0, stream>>>(m);
      break;
    case Dtype::f16:
      merge_kernel<__half><<<grid, kMergeThreads, 0, stream>>>(m);
      break;
    case Dtype::bf16:
      merge_kernel<__nv_bfloat16><<<grid, kMergeThreads, 0, stream>>>(m);
      break;
  }
}

}  // namespace flash::cuda
