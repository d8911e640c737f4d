// Hopper warpgroup matrix multiply (wgmma, sm_90a) for the backward: shared-memory matrix
// descriptors, the 128- and 64-byte swizzled tile layouts they read, fences, and the
// m64nNk16 products (f32 accumulators; A from shared memory or registers, B from shared
// memory). A warpgroup is 4 consecutive warps starting at a multiple of 4; each warp holds
// 16 rows of the 64-row accumulator, in the same per-warp fragment layout as mma.sync
// m16n8 (n8 block j: d[4j..4j+3] = rows g, g+8 x cols 8j + 2·tig, +1), so the element-wise
// code of the mma.sync kernels applies unchanged.
//
// Compiled only for the sm_90a target (FLASH_WGMMA_AVAILABLE); other targets trap, and
// the host chooses these kernels only on compute capability 9.0 with sm_90a code built
// (FLASHATTN_CUDA_SM90A). Layout facts are checked on the GPU by tests/cuda/wgmma_check.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "device_ops.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASH_WGMMA_AVAILABLE 1
#else
#define FLASH_WGMMA_AVAILABLE 0
#endif

namespace flash::cuda {

// ---- layouts -----------------------------------------------------------------------------
// SW128: a tile of kRows rows x (multiple of 64) 16-bit columns, stored as column atoms
// of 64 (128 bytes) outermost, then rows (128 bytes each), 16-byte chunks XOR-ed with
// row % 8 (the hardware's 128-byte swizzle; tile base 1024-byte aligned). Read as a
// K-major operand (rows = M or N, columns = K) or an MN-major one (rows = K).
template <int kRows>
__device__ __forceinline__ uint32_t sw128_addr(uint32_t base, int row, int chunk) {
  return base + (chunk >> 3) * (kRows * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}
// SW64: kRows rows x 32 16-bit columns (64 bytes), chunks XOR-ed with (row / 2) % 4 (the
// 64-byte swizzle; base 512-byte aligned).
__device__ __forceinline__ uint32_t sw64_addr(uint32_t base, int row, int chunk) {
  return base + row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
}

// Rows [row0, row0 + kRows) x the first kChunks 16-byte chunks of a global row-major
// matrix into an SW128 tile with cp.async (zero-filled past nrows / ncols).
template <int kRows, int kChunks, int kThreads, class T>
__device__ __forceinline__ void load_sw128_async(uint32_t base, const T* g, int64_t stride,
                                                 int row0, int nrows, int ncols) {
  static_assert(kThreads % kChunks == 0 && (kRows * kChunks) % kThreads == 0, "even split");
  constexpr int kRowsPerPass = kThreads / kChunks;
  const int r = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
  const bool col_ok = c * 8 < ncols;
  const T* src = g + (int64_t)(row0 + r) * stride + c * 8;
#pragma unroll
  for (int it = 0; it < kRows / kRowsPerPass; ++it) {
    const int row = r + it * kRowsPerPass;
    const bool valid = col_ok && row0 + row < nrows;
    cp_async_16(sw128_addr<kRows>(base, row, c), valid ? src : g, valid);
    src += (int64_t)kRowsPerPass * stride;
  }
}

// ---- descriptors ---------------------------------------------------------------------------
// Shared-memory matrix descriptor: start address, leading / stride byte offsets (LBO:
// between core-matrix groups along the leading dimension; SBO: between 8-row groups),
// swizzle (1 = 128 B, 2 = 64 B). For K-major swizzled operands the K extent of one
// instruction lies inside the swizzle row and LBO is unused.
enum : uint32_t { kGmmaSwizzle128 = 1, kGmmaSwizzle64 = 2 };
__device__ __forceinline__ uint64_t gmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo,
                                              uint32_t swizzle) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | ((uint64_t)swizzle << 62);
}

// The descriptor `desc` with its start address moved by `bytes` (a multiple of 16): one
// add to the 14-bit address field, which cannot carry (shared addresses are < 2^18). Hot
// loops build a tile's descriptor once and step it (instead of re-encoding each address).
__device__ __forceinline__ uint64_t gmma_desc_add(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// ---- ordering ---------------------------------------------------------------------------
// Before the first wgmma reading registers written by ordinary instructions.
__device__ __forceinline__ void wgmma_fence() {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Pins accumulator registers in program order around the asynchronous products: the
// compiler sees each wgmma write its accumulators at issue, so reads placed after a
// wait must not move above it.
template <int kN>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Shared memory written by ordinary stores (or cp.async) that wgmma reads next: each
// writing thread fences, then a barrier.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// ---- products (operand lists are mechanical: generated) ------------------------------
// wgmma_ss<T, N, kTransA, kTransB>(d, desc_a, desc_b, scale_d) and
// wgmma_rs<T, N, kTransB>(d, a, desc_b, scale_d) for N in gen_wgmma_products.py's SHAPES.
#include "wgmma_products.inc"

}  // namespace flash::cuda
