// Thin wrappers over the PTX instructions the tensor-core kernels are built from:
// cp.async (global -> shared, 16 bytes, zero-filled when out of range), ldmatrix
// (shared -> mma fragments, plain and transposed) and mma.sync m16n8k16 with f32
// accumulators. Also the shared-memory swizzle every tile uses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace flash::cuda {

// exp(x) = exp2(x * log2(e)): the kernels fold log2(e) into the softmax scale once.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes when `valid`, else writes 16 zero bytes (src-size 0 reads nothing).
// Zero fill matters: rows past seqlen_kv must be 0, not garbage, because P·V multiplies
// them by p = 0 and 0 * NaN would poison the output.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Stores four 8x8 b16 matrices: register i of each thread is its fragment of matrix i
// (row lane / 4, columns 2 (lane % 4) ..+1: the mma accumulator layout), and lane l gives
// the address of row l % 8 of matrix l / 8 (sm_90).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#endif
}

// d += a·b for one m16n8k16 tile; a: 4 regs (row-major 16x16), b: 2 regs (col-major 16x8).
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 2^x on the special-function unit (ex2.approx.ftz: 2 ulp, -inf -> +0). Softmax
// arguments are <= 0, so flushing subnormal results to zero loses nothing visible.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats -> one register holding two T (low half = first).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half22float2(*reinterpret_cast<__half2*>(&v));
  } else {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&v));
  }
}

// Lane-wise a·b + c (the f32 kernels' dot products keep one partial sum per lane).
__device__ __forceinline__ float4 fma4(float4 a, float4 b, float4 c) {
  return make_float4(fmaf(a.x, b.x, c.x), fmaf(a.y, b.y, c.y), fmaf(a.z, b.z, c.z),
                     fmaf(a.w, b.w, c.w));
}

// Exponent bits of T: all ones = NaN or ±inf.
template <class T>
constexpr uint32_t kExpBits = std::is_same_v<T, __half> ? 0x7c00u : 0x7f80u;
// NaN or ±inf in either of the two T of w; in any of the eight T of a 16-byte chunk.
template <class T>
__device__ __forceinline__ bool has_nonfinite(uint32_t w) {
  return (w & kExpBits<T>) == kExpBits<T> || ((w >> 16) & kExpBits<T>) == kExpBits<T>;
}
template <class T>
__device__ __forceinline__ bool has_nonfinite(uint4 w) {
  return has_nonfinite<T>(w.x) | has_nonfinite<T>(w.y) | has_nonfinite<T>(w.z) |
         has_nonfinite<T>(w.w);
}
// One 4-byte shared-memory load.
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t w;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w) : "r"(addr));
  return w;
}
// One 16-byte shared-memory load.
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 w;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
               : "r"(addr));
  return w;
}

// Asks for the 128-byte line at p to be brought into L2 (no register waits on it).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Whole-tile versions, layout-agnostic (the tile's bytes in any order): every thread of
// the block takes 16-byte chunks tid, tid + blockDim.x, ... of [base, base + bytes).
// Call after a barrier that made the tile visible. smem_nonfinite returns this thread's
// part (combine with __syncthreads_or); smem_zero_nonfinite replaces NaN/inf by 0.
template <class T>
__device__ __forceinline__ bool smem_nonfinite(uint32_t base, int bytes) {
  bool bad = false;
  for (int off = threadIdx.x * 16; off < bytes; off += blockDim.x * 16)
    bad |= has_nonfinite<T>(lds128(base + off));
  return bad;
}
template <class T>
__device__ __forceinline__ void smem_zero_nonfinite(uint32_t base, int bytes) {
  auto clean = [](uint32_t w) {
    if ((w & kExpBits<T>) == kExpBits<T>) w &= 0xffff0000u;
    if (((w >> 16) & kExpBits<T>) == kExpBits<T>) w &= 0xffffu;
    return w;
  };
  for (int off = threadIdx.x * 16; off < bytes; off += blockDim.x * 16) {
    const uint4 w = lds128(base + off);
    asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(base + off), "r"(clean(w.x)),
                 "r"(clean(w.y)), "r"(clean(w.z)), "r"(clean(w.w))
                 : "memory");
  }
}
// Stores a quiet NaN of T at a shared-memory address.
template <class T>
__device__ __forceinline__ void smem_store_nan(uint32_t addr) {
  const unsigned short nan = std::is_same_v<T, __half> ? 0x7e00 : 0x7fc0;
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(addr), "h"(nan) : "memory");
}
// True when one of the first n (a multiple of 8) elements of a device row is NaN/inf.
template <class T>
__device__ __forceinline__ bool row_nonfinite(const T* row, int n) {
  bool bad = false;
  for (int c = 0; c < n; c += 8) bad |= has_nonfinite<T>(*reinterpret_cast<const uint4*>(row + c));
  return bad;
}

// Swizzle of 16-byte chunks inside a row-major [rows][kChunks] tile of 16-byte chunks.
// ldmatrix reads one chunk column from 8 consecutive rows; without a swizzle rows whose
// byte offsets differ by a multiple of 128 share banks. XOR-ing the chunk index with
// row bits spreads the 8 reads over 8 distinct 16-byte bank groups:
//  - rows of 8k chunks (128k bytes): chunk ^ (row & 7), inside aligned groups of 8;
//  - rows of 8k+4 chunks (an odd multiple of 64 bytes): odd rows already sit 64 bytes
//    over, so chunk ^ ((row >> 1) & 3), inside aligned groups of 4.
template <int kChunks>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(kChunks % 4 == 0, "rows must be a multiple of 64 bytes");
  if constexpr (kChunks % 8 == 0) {
    return chunk ^ (row & 7);
  } else {
    return chunk ^ ((row >> 1) & 3);
  }
}

// Address (shared window) of chunk `chunk` of row `row` in a swizzled tile.
template <int kChunks>
__device__ __forceinline__ uint32_t tile_addr(uint32_t base, int row, int chunk) {
  return base + (row * kChunks + swizzle<kChunks>(row, chunk)) * 16;
}

// ldmatrix addresses for one access pattern: lane reads row (row0 + lane_row), chunk
// (chunk0 + lane_chunk) of a swizzled tile, with row0 a multiple of 8 and chunk0 even,
// both compile-time in unrolled loops. The swizzle then depends on the lane only through
// a few values, precomputed here, so each address is one register plus an immediate
// (otherwise the compiler hoists one register per (row0, chunk0) out of the main loop).
template <int kChunks>
struct LdsmAddr {
  static constexpr int kVariants = kChunks % 8 == 0 ? 4 : 2;
  uint32_t lane_addr[kVariants];
  __device__ __forceinline__ LdsmAddr(uint32_t base, int lane_row, int lane_chunk) {
    const int x = kChunks % 8 == 0 ? (lane_row & 7) : ((lane_row >> 1) & 3);
#pragma unroll
    for (int i = 0; i < kVariants; ++i)
      lane_addr[i] = base + lane_row * kChunks * 16 + (((2 * i) | lane_chunk) ^ x) * 16;
  }
  __device__ __forceinline__ uint32_t operator()(int row0, int chunk0) const {
    const int v = chunk0 % (2 * kVariants);
    return lane_addr[v / 2] + row0 * kChunks * 16 + (chunk0 - v) * 16;
  }
};

// Loads rows [row0, row0 + kRows) x columns [0, kChunks*8) of a global row-major
// matrix (row stride `stride` elements) into a swizzled tile with cp.async.
// Rows >= nrows and columns >= ncols are zero-filled.
template <int kRows, int kChunks, int kThreads, class T>
__device__ __forceinline__ void load_tile_async(uint32_t smem_base, const T* g, int64_t stride,
                                                int row0, int nrows, int ncols) {
  constexpr int kTotal = kRows * kChunks;
  static_assert(kTotal % kThreads == 0, "tile chunks must split evenly over threads");
  if constexpr (kThreads % kChunks == 0) {
    // Each thread keeps one column chunk and walks rows kRowsPerPass apart: one running
    // pointer instead of a 64-bit address per copy (those would live in registers).
    constexpr int kRowsPerPass = kThreads / kChunks;
    const int r = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
    const bool col_ok = c * 8 < ncols;
    const T* src = g + (int64_t)(row0 + r) * stride + c * 8;
    const int64_t pass_stride = (int64_t)kRowsPerPass * stride;
#pragma unroll
    for (int it = 0; it < kRows / kRowsPerPass; ++it) {
      const int row = r + it * kRowsPerPass;
      const bool valid = col_ok && row0 + row < nrows;
      cp_async_16(tile_addr<kChunks>(smem_base, row, c), valid ? src : g, valid);
      src += pass_stride;
    }
  } else {
#pragma unroll
    for (int it = 0; it < kTotal / kThreads; ++it) {
      const int idx = it * kThreads + threadIdx.x;
      const int r = idx / kChunks, c = idx % kChunks;
      const bool valid = (row0 + r < nrows) && (c * 8 < ncols);
      const T* src = valid ? g + (int64_t)(row0 + r) * stride + c * 8 : g;
      cp_async_16(tile_addr<kChunks>(smem_base, r, c), src, valid);
    }
  }
}

// Raises a kernel's dynamic shared-memory limit once per device (host side; the call
// is not free, and every launch would otherwise repeat it). Keyed by the kernel itself
// (a template argument), so each kernel has its own flag. Devices 0..63.
template <auto kKernel>
inline void set_max_dynamic_smem_once(int bytes) {
  static std::atomic<uint64_t> done{0};
  int device = 0;
  cudaGetDevice(&device);
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (done.load(std::memory_order_acquire) & bit) return;
  cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  done.fetch_or(bit, std::memory_order_acq_rel);
}

}  // namespace flash::cuda
