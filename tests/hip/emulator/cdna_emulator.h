// A CPU emulation of the HIP pieces the hip backend uses, for tests only: the kernels
// of backends/hip (MFMA ones included) compiled by the host clang and run with one
// fiber per GPU thread, so their indexing, masking, LDS use, barriers, shuffles and
// MFMA operand layouts are exercised on a machine without an AMD GPU.
//
// What it models: a block runs as kThreads cooperative fibers (ucontext) on one OS
// thread; __syncthreads and every cross-lane operation are barriers over the block or
// the wave (a barrier that cannot complete aborts: divergent collectives are bugs).
// __shfl_xor and the three MFMA instructions exchange operands through per-wave slots,
// using the CDNA operand/result layouts documented in backends/hip/mfma_ops.h — so this
// checks the kernels against that understanding of the hardware, not the hardware.
// Device memory is host memory ("hipMalloc" is malloc, but only its pointers count as
// device memory, so host-memory staging is exercised too). Blocks run one after another,
// so __shared__ can be a function-local static.
// Environment: FLASH_EMU_ARCH (gfx90a|gfx908, default from the build), FLASH_EMU_WAVE
// (64 or 32: the wave size reported to choose() and used for wave barriers).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

// ---- language ---------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(n)
#ifndef __HIP_DEVICE_COMPILE__
#define __HIP_DEVICE_COMPILE__ 1  // select the device branches of mfma_ops.h
#endif

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace flash_emu {

using f16x4 = _Float16 __attribute__((ext_vector_type(4)));
using s16x4 = short __attribute__((ext_vector_type(4)));
using s16x2 = short __attribute__((ext_vector_type(2)));
using f32x16 = float __attribute__((ext_vector_type(16)));

struct ThreadState {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};
ThreadState& current();  // of the running fiber

void syncthreads();
float shfl_xor(float v, int lane_mask, int width);
f32x16 mfma_32x32x8_f16(f16x4 a, f16x4 b, f32x16 c);
f32x16 mfma_32x32x8_bf16(s16x4 a, s16x4 b, f32x16 c);  // gfx90a _1k
f32x16 mfma_32x32x4_bf16(s16x2 a, s16x2 b, f32x16 c);  // gfx908

// Runs body once per thread of each block of grid (fibers), blocks one after another.
void run_grid(dim3 grid, dim3 block, const std::function<void()>& body);
int wave_size();

template <class... P>
struct Launcher {
  dim3 grid, block;
  void (*kernel)(P...);
  Launcher(dim3 g, dim3 b, void (*k)(P...)) : grid(g), block(b), kernel(k) {}
  template <class... A>
  void operator()(A... args) const {
    auto k = kernel;
    run_grid(grid, block, [=] { k(args...); });
  }
};

}  // namespace flash_emu

#define threadIdx (::flash_emu::current().thread_idx)
#define blockIdx (::flash_emu::current().block_idx)
#define blockDim (::flash_emu::current().block_dim)
#define gridDim (::flash_emu::current().grid_dim)
#define FLASH_LAUNCH(grid, block, stream, ...) ::flash_emu::Launcher((grid), (block), __VA_ARGS__)

inline void __syncthreads() { ::flash_emu::syncthreads(); }
inline float __shfl_xor(float v, int lane_mask, int width = 64) {
  return ::flash_emu::shfl_xor(v, lane_mask, width);
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
#define __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, c, x, y, z) \
  ::flash_emu::mfma_32x32x8_f16((a), (b), (c))
#define __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, x, y, z) \
  ::flash_emu::mfma_32x32x8_bf16((a), (b), (c))
#define __builtin_amdgcn_mfma_f32_32x32x4bf16(a, b, c, x, y, z) \
  ::flash_emu::mfma_32x32x4_bf16((a), (b), (c))

// ---- runtime ----------------------------------------------------------------------
enum hipError_t { hipSuccess = 0, hipErrorNoDevice = 100, hipErrorInvalidValue = 1 };
using hipStream_t = void*;
enum hipMemcpyKind { hipMemcpyHostToDevice = 1, hipMemcpyDeviceToHost = 2 };
enum hipMemoryType { hipMemoryTypeHost = 0, hipMemoryTypeDevice = 1 };
struct hipDeviceProp_t {
  char name[256];
  char gcnArchName[256];
  int warpSize;
  int multiProcessorCount;
};
struct hipPointerAttribute_t {
  hipMemoryType memoryType;
  int isManaged;
};
const char* hipGetErrorString(hipError_t e);
hipError_t hipGetLastError();
hipError_t hipGetDeviceCount(int* n);
hipError_t hipGetDevice(int* d);
hipError_t hipGetDeviceProperties(hipDeviceProp_t* prop, int device);
hipError_t hipPointerGetAttributes(hipPointerAttribute_t* attr, const void* p);
hipError_t hipMalloc(void** p, size_t bytes);
hipError_t hipFree(void* p);
hipError_t hipMemcpyAsync(void* dst, const void* src, size_t n, hipMemcpyKind, hipStream_t);
hipError_t hipStreamSynchronize(hipStream_t);
