// Inputs and timing of the cuda timing tools (cuda_module_bench, cuda_backward_bench):
// random device tensors, the packed problems of FlashAttention's benchmark shapes, and the
// median time of a call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "dispatch/module_abi.h"

// The distribution of the random inputs. Normal (the default) is torch.randn's, so our
// timings and torch_sdpa.py's run on inputs of one distribution: the tensor cores' power,
// and with it the clock under the power cap, depends on the data. Uniform [-1, 1) is what
// the tools used before 2026-11-27 (--uniform reproduces those numbers).
enum class InputDist { kNormal, kUniform };

static __device__ __forceinline__ unsigned hash_index(size_t i, unsigned seed) {
  unsigned x = (unsigned)i * 2654435761u ^ seed;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return x;
}

// Values from a hash of the index (the same for every run and seed), stored as `dtype`;
// normal values by Box-Muller from two hashes.
static __global__ void fill_random(void* p, size_t n, unsigned seed, int dtype, InputDist dist) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const float u1 = (hash_index(i, seed) & 0xffffff) / float(0x1000000);
    float f = u1 * 2.f - 1.f;
    if (dist == InputDist::kNormal) {
      const float u2 =
          (hash_index(i, seed * 0x9e3779b9u + 0x7f4a7c15u) & 0xffffff) / float(0x1000000);
      f = sqrtf(-2.f * logf(1.f - u1)) * cospif(2.f * u2);  // 1 - u1 in (0, 1]
    }
    if (dtype == FLASH_F16)
      static_cast<__half*>(p)[i] = __float2half(f);
    else if (dtype == FLASH_BF16)
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(f);
    else
      static_cast<float*>(p)[i] = f;
  }
}

static __global__ void fill_value(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

// Packed [B, S, H, D] self-attention problem (seqlen_q = seqlen_kv = S, H heads for q and
// kv), softmax scale 1/sqrt(D), no window, lse written to `lse`.
inline flash_problem packed_problem(int B, int S, int H, int D, int dtype, bool causal,
                                    float* lse) {
  flash_problem p{};
  p.batch = B;
  p.seqlen_q = p.seqlen_kv = S;
  p.heads_q = p.heads_kv = H;
  p.head_dim = p.head_dim_v = D;
  p.dtype = dtype;
  p.causal = causal;
  p.scale = 1.f / std::sqrt((float)D);
  p.window_left = p.window_right = -1;
  const int64_t st[3] = {(int64_t)S * H * D, (int64_t)H * D, D};
  for (int j = 0; j < 3; ++j) p.q_stride[j] = p.k_stride[j] = p.v_stride[j] = p.o_stride[j] = st[j];
  p.lse = lse;
  return p;
}

// Median milliseconds of `iters` calls of fn (after 3 warm-up calls), each timed with CUDA
// events on the default stream.
template <class Fn>
float median_ms(int iters, Fn&& fn) {
  for (int w = 0; w < 3; ++w) fn();
  std::vector<float> t;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int it = 0; it < iters; ++it) {
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
