// Checks the wgmma building blocks of backends/cuda/wgmma_ops.cuh on the GPU against
// host matrix products: the 128-byte-swizzled tile layout read K-major (the backward's
// Sᵀ = K·Qᵀ) and MN-major (dV += Pᵀ·dO with Pᵀ from registers; dQᵀ = Kᵀ·dSᵀ with dSᵀ in
// the 64-byte-swizzled layout), with the descriptor byte offsets the kernels use.
// Exit 0 = pass, 1 = fail, 77 = skipped (no sm_90 device or no sm_90a code).
//   wgmma_check
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "wgmma_ops.cuh"

namespace fc = flash::cuda;
using bf16 = __nv_bfloat16;

namespace {

__device__ uint32_t aligned_smem(unsigned char* smem) {  // 1024-byte aligned window
  const uint32_t a = fc::smem_addr(smem);
  return (a + 1023) & ~1023u;
}

// Writes a 64 x N accumulator (per-warp m16n8 fragment layout) to row-major C.
template <int N>
__device__ void store_acc(const float (&d)[N / 2], float* c) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      c[(warp * 16 + g + (e >= 2 ? 8 : 0)) * N + 8 * j + 2 * tig + (e & 1)] = d[4 * j + e];
}

__global__ void probe_kernel(int* out) { *out = FLASH_WGMMA_AVAILABLE; }

// C[64][32] = A[64][128] · B[32][128]ᵀ, both K-major SW128.
template <class T>
__global__ void kmajor_kernel(const T* a, const T* b, float* c) {
  extern __shared__ unsigned char smem[];
  const uint32_t sa = aligned_smem(smem), sb = sa + 64 * 256;
  fc::load_sw128_async<64, 16, 128>(sa, a, 128, 0, 64, 128);
  fc::load_sw128_async<32, 16, 128>(sb, b, 128, 0, 32, 128);
  fc::cp_async_commit();
  fc::cp_async_wait<0>();
  fc::fence_proxy_async_smem();
  __syncthreads();
  float d[16];
  fc::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const uint64_t da = fc::gmma_desc(sa + (kk / 4) * 64 * 128 + (kk % 4) * 32, 16, 1024, 1);
    const uint64_t db = fc::gmma_desc(sb + (kk / 4) * 32 * 128 + (kk % 4) * 32, 16, 1024, 1);
    fc::wgmma_ss<T, 32, 0, 0>(d, da, db, kk > 0);
  }
  fc::wgmma_commit();
  fc::wgmma_wait<0>();
  fc::wgmma_fence_operands(d);
  store_acc<32>(d, c);
}

// C[64][128] = A[64][32] (registers) · B[32][128] (MN-major SW128, rows = K).
__global__ void rs_kernel(const bf16* a, const bf16* b, float* c, uint32_t lbo, uint32_t sbo) {
  extern __shared__ unsigned char smem[];
  const uint32_t sb = aligned_smem(smem);
  fc::load_sw128_async<32, 16, 128>(sb, b, 128, 0, 32, 128);
  fc::cp_async_commit();
  fc::cp_async_wait<0>();
  fc::fence_proxy_async_smem();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
  auto pair = [&](int row, int col) {
    const uint16_t lo = *reinterpret_cast<const uint16_t*>(a + row * 32 + col);
    const uint16_t hi = *reinterpret_cast<const uint16_t*>(a + row * 32 + col + 1);
    return (uint32_t)lo | ((uint32_t)hi << 16);
  };
  float d[64];
  fc::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const int r = warp * 16 + g, k = kk * 16 + 2 * tig;
    const uint32_t frag[4] = {pair(r, k), pair(r + 8, k), pair(r, k + 8), pair(r + 8, k + 8)};
    const uint64_t db = fc::gmma_desc(sb + kk * 16 * 128, lbo, sbo, 1);
    fc::wgmma_rs<bf16, 128, 1>(d, frag, db, kk > 0);
  }
  fc::wgmma_commit();
  fc::wgmma_wait<0>();
  fc::wgmma_fence_operands(d);
  store_acc<128>(d, c);
}

// C_h[64][32] = At[64][128]ᵀ (rows 64h.. of Aᵀ's columns; MN-major SW128, rows = K)
//             · B[64][32] (MN-major SW64, rows = K), h = 0, 1 -> c[h][64][32].
__global__ void mn_kernel(const bf16* at, const bf16* b, float* c, uint32_t lbo_a, uint32_t sbo_a,
                          uint32_t lbo_b, uint32_t sbo_b) {
  extern __shared__ unsigned char smem[];
  const uint32_t sa = aligned_smem(smem), sb = sa + 64 * 256;
  fc::load_sw128_async<64, 16, 128>(sa, at, 128, 0, 64, 128);
  {  // B: 64 rows x 4 chunks, SW64
    for (int i = threadIdx.x; i < 64 * 4; i += 128) {
      const int r = i / 4, ch = i % 4;
      fc::cp_async_16(fc::sw64_addr(sb, r, ch), b + r * 32 + ch * 8, true);
    }
  }
  fc::cp_async_commit();
  fc::cp_async_wait<0>();
  fc::fence_proxy_async_smem();
  __syncthreads();
  for (int h = 0; h < 2; ++h) {
    float d[16];
    fc::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t da = fc::gmma_desc(sa + h * 64 * 128 + kk * 16 * 128, lbo_a, sbo_a, 1);
      const uint64_t db = fc::gmma_desc(sb + kk * 16 * 64, lbo_b, sbo_b, 2);
      fc::wgmma_ss<bf16, 32, 1, 1>(d, da, db, kk > 0);
    }
    fc::wgmma_commit();
    fc::wgmma_wait<0>();
    fc::wgmma_fence_operands(d);
    store_acc<32>(d, c + h * 64 * 32);
  }
}

template <class T>
std::vector<T> random_matrix(size_t n, std::mt19937& rng, std::vector<double>& values) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<T> m(n);
  values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    m[i] = T(u(rng));
    values[i] = (double)(float)m[i];
  }
  return m;
}

template <class T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  cudaMalloc(&d, h.size() * sizeof(T));
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

double max_error(const float* dev, const std::vector<double>& ref) {
  std::vector<float> got(ref.size());
  cudaMemcpy(got.data(), dev, ref.size() * 4, cudaMemcpyDeviceToHost);
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i) e = std::fmax(e, std::fabs(got[i] - ref[i]));
  return cudaGetLastError() == cudaSuccess ? e : INFINITY;
}

bool report(const char* what, double err) {
  const bool pass = err < 1e-3;  // f32 accumulation of <= 128 products of |x| <= 1
  std::printf("%s %s: max |error| %.3g\n", pass ? "ok  " : "FAIL", what, err);
  return pass;
}

template <class T>
bool check_kmajor(std::mt19937& rng) {
  std::vector<double> va, vb;
  auto a = random_matrix<T>(64 * 128, rng, va), b = random_matrix<T>(32 * 128, rng, vb);
  std::vector<double> ref(64 * 32, 0.0);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 32; ++j)
      for (int k = 0; k < 128; ++k) ref[i * 32 + j] += va[i * 128 + k] * vb[j * 128 + k];
  T *da = upload(a), *db = upload(b);
  float* dc;
  cudaMalloc(&dc, ref.size() * 4);
  cudaMemset(dc, 0xff, ref.size() * 4);
  kmajor_kernel<T><<<1, 128, 96 * 256 + 1024>>>(da, db, dc);
  const bool ok =
      report(std::is_same_v<T, bf16> ? "SS K-major x K-major (bf16)" : "SS K-major x K-major (f16)",
             max_error(dc, ref));
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return ok;
}

}  // namespace

int main() {
  int count = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 ||
      cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
    std::printf("SKIP: no compute capability 9.x device\n");
    return 77;
  }
  int* flag;
  int has = 0;
  cudaMalloc(&flag, 4);
  probe_kernel<<<1, 1>>>(flag);
  cudaMemcpy(&has, flag, 4, cudaMemcpyDeviceToHost);
  if (!has) {
    std::printf("SKIP: this binary has no sm_90a code (build with CMAKE_CUDA_ARCHITECTURES=90a)\n");
    return 77;
  }
  cudaFuncSetAttribute(kmajor_kernel<bf16>, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024);
  cudaFuncSetAttribute(kmajor_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       96 * 1024);
  cudaFuncSetAttribute(rs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024);
  cudaFuncSetAttribute(mn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024);
  std::mt19937 rng(7);
  int fails = 0;
  fails += !check_kmajor<bf16>(rng);
  fails += !check_kmajor<__half>(rng);

  {  // RS: A 64x32 registers, B 32x128 MN-major.
    std::vector<double> va, vb;
    auto a = random_matrix<bf16>(64 * 32, rng, va), b = random_matrix<bf16>(32 * 128, rng, vb);
    std::vector<double> ref(64 * 128, 0.0);
    for (int i = 0; i < 64; ++i)
      for (int j = 0; j < 128; ++j)
        for (int k = 0; k < 32; ++k) ref[i * 128 + j] += va[i * 32 + k] * vb[k * 128 + j];
    bf16 *da = upload(a), *db = upload(b);
    float* dc;
    cudaMalloc(&dc, ref.size() * 4);
    // MN-major: LBO = bytes between 64-column atoms along N, SBO = between 8-row groups.
    cudaMemset(dc, 0xff, ref.size() * 4);
    rs_kernel<<<1, 128, 32 * 256 + 1024>>>(da, db, dc, 32 * 128, 1024);
    fails += !report("RS registers x MN-major SW128 B", max_error(dc, ref));
  }
  {  // SS, both MN-major: Aᵀ SW128 (two m64 halves), B SW64.
    std::vector<double> vat, vb;
    auto at = random_matrix<bf16>(64 * 128, rng, vat), b = random_matrix<bf16>(64 * 32, rng, vb);
    std::vector<double> ref(2 * 64 * 32, 0.0);
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 64; ++i)
        for (int j = 0; j < 32; ++j)
          for (int k = 0; k < 64; ++k)
            ref[(h * 64 + i) * 32 + j] += vat[k * 128 + 64 * h + i] * vb[k * 32 + j];
    bf16 *dat = upload(at), *db = upload(b);
    float* dc;
    cudaMalloc(&dc, ref.size() * 4);
    cudaMemset(dc, 0xff, ref.size() * 4);
    mn_kernel<<<1, 128, 64 * 256 + 64 * 64 + 1024>>>(dat, db, dc, 64 * 128, 1024, 64 * 64, 512);
    fails += !report("SS MN-major SW128 A x MN-major SW64 B", max_error(dc, ref));
  }
  const cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess)
    std::printf("FAIL CUDA error %s\n", cudaGetErrorString(status)), ++fails;
  std::printf("%s\n", fails ? "wgmma_check FAILED" : "wgmma_check passed");
  return fails ? 1 : 0;
}
