// The one vendor header of the hip backend: everything that differs between HIP
// (hipcc, AMD) and CUDA (nvcc, the "hip-on-cuda" build of the portable path) lives
// here — runtime calls, device properties, sub-wave shuffles and 16-bit float
// conversions. Kernels and host code include only this, never hip_runtime.h or
// cuda_runtime.h directly, so the portable kernels compile unchanged with nvcc.
// Deliberately not Debian's HIP NVIDIA headers: those (HIP 5.2) do not compile with
// CUDA 13.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(FLASH_HIP_CPU_EMULATOR)
// Tests only (tests/hip/emulator): a CDNA wave64 emulated on the CPU that provides the
// HIP runtime calls and device built-ins used here, so the AMD code paths, MFMA
// kernels included, run on a machine without an AMD GPU.
#include FLASH_HIP_CPU_EMULATOR
#define FLASH_HIP_ON_AMD 1
#elif defined(__HIP__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define FLASH_HIP_ON_AMD 1
#elif defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define FLASH_HIP_ON_CUDA 1
#else
#error "backends/hip sources are compiled by hipcc (AMD) or nvcc (hip-on-cuda build)"
#endif

// Kernel launch: FLASH_LAUNCH(grid, block, stream, kernel<T, Tile>)(args...). The kernel
// is the variadic tail so template arguments may contain commas.
#ifndef FLASH_LAUNCH
#define FLASH_LAUNCH(grid, block, stream, ...) __VA_ARGS__<<<(grid), (block), 0, (stream)>>>
#endif

#define FLASH_DEVICE __device__ __forceinline__
#define FLASH_HOST_DEVICE __host__ __device__ __forceinline__

namespace flash::hip::gpu {

// ---- runtime -----------------------------------------------------------------
#if FLASH_HIP_ON_AMD
using Error = hipError_t;
using Stream = hipStream_t;
constexpr Error kSuccess = hipSuccess;
constexpr const char* kRuntime = "HIP";
inline const char* error_string(Error e) { return hipGetErrorString(e); }
inline Error get_last_error() { return hipGetLastError(); }
inline Error device_count(int* n) { return hipGetDeviceCount(n); }
inline Error current_device(int* d) { return hipGetDevice(d); }
inline Error malloc_device(void** p, size_t bytes) { return hipMalloc(p, bytes); }
inline Error free_device(void* p) { return hipFree(p); }
inline Error copy_to_device(void* dst, const void* src, size_t n, Stream s) {
  return hipMemcpyAsync(dst, src, n, hipMemcpyHostToDevice, s);
}
inline Error copy_to_host(void* dst, const void* src, size_t n, Stream s) {
  return hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToHost, s);
}
inline Error synchronize(Stream s) { return hipStreamSynchronize(s); }
#else
using Error = cudaError_t;
using Stream = cudaStream_t;
constexpr Error kSuccess = cudaSuccess;
constexpr const char* kRuntime = "CUDA (hip-on-cuda build)";
inline const char* error_string(Error e) { return cudaGetErrorString(e); }
inline Error get_last_error() { return cudaGetLastError(); }
inline Error device_count(int* n) { return cudaGetDeviceCount(n); }
inline Error current_device(int* d) { return cudaGetDevice(d); }
inline Error malloc_device(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
inline Error free_device(void* p) { return cudaFree(p); }
inline Error copy_to_device(void* dst, const void* src, size_t n, Stream s) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s);
}
inline Error copy_to_host(void* dst, const void* src, size_t n, Stream s) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s);
}
inline Error synchronize(Stream s) { return cudaStreamSynchronize(s); }
#endif

// What choose() needs to know about the device.
struct DeviceInfo {
  std::string name;
  std::string arch;  // "gfx90a" (feature suffixes such as ":sramecc+" dropped) / "sm_90"
  int wave_size = 0;
  int compute_units = 0;  // CUs (AMD) / SMs (hip-on-cuda)
};

inline Error device_info(int device, DeviceInfo* info) {
#if FLASH_HIP_ON_AMD
  hipDeviceProp_t prop;
  Error e = hipGetDeviceProperties(&prop, device);
  if (e != kSuccess) return e;
  info->arch = prop.gcnArchName;
  info->arch = info->arch.substr(0, info->arch.find(':'));
#else
  cudaDeviceProp prop;
  Error e = cudaGetDeviceProperties(&prop, device);
  if (e != kSuccess) return e;
  info->arch = "sm_" + std::to_string(prop.major * 10 + prop.minor);
#endif
  info->name = prop.name;
  info->wave_size = prop.warpSize;
  info->compute_units = prop.multiProcessorCount;
  return kSuccess;
}

// True for memory the device can address directly (device or managed allocations).
inline bool is_device_pointer(const void* p) {
#if FLASH_HIP_ON_AMD
  hipPointerAttribute_t attr;
  if (hipPointerGetAttributes(&attr, p) != hipSuccess) {
    (void)hipGetLastError();  // an unregistered host pointer is an answer, not an error
    return false;
  }
  return attr.memoryType == hipMemoryTypeDevice || attr.isManaged;
#else
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
#endif
}

// ---- device: shuffles within a sub-group of `width` lanes ----------------------
// Kernels of the portable path reduce over groups of 8 or 16 lanes, which divide both
// wave64 (AMD) and warp32 (NVIDIA), so nothing depends on the hardware wave size.
FLASH_DEVICE float shuffle_xor(float v, int lane_mask, int width) {
#if FLASH_HIP_ON_AMD
  return __shfl_xor(v, lane_mask, width);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
#endif
}

// Sum over an aligned group of `kWidth` consecutive lanes; every lane gets the result,
// always added in the same order (deterministic).
template <int kWidth>
FLASH_DEVICE float group_sum(float v) {
  static_assert((kWidth & (kWidth - 1)) == 0 && kWidth <= 32, "group must divide any wave");
#pragma unroll
  for (int m = kWidth / 2; m > 0; m /= 2) v += shuffle_xor(v, m, kWidth);
  return v;
}

// exp2 with exp2(-inf) = 0, which masked scores rely on.
FLASH_DEVICE float fast_exp2(float x) { return exp2f(x); }
// NaN test that needs no <cmath> declaration on either compiler (x != x only for NaN;
// nothing here is built with fast-math).
FLASH_DEVICE bool is_nan(float x) { return x != x; }

}  // namespace flash::hip::gpu

namespace flash::hip {

// ---- storage types -------------------------------------------------------------
// 16-bit floats are carried as their bit patterns so that no vendor half type leaks
// into kernel signatures; conversions below are the only place that knows them.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

FLASH_DEVICE float to_float(float x) { return x; }
FLASH_DEVICE float to_float(Half x) {
#if FLASH_HIP_ON_AMD
  return static_cast<float>(__builtin_bit_cast(_Float16, x.bits));
#else
  return __half2float(__ushort_as_half(x.bits));
#endif
}
FLASH_DEVICE float to_float(BFloat16 x) {
  return __uint_as_float(static_cast<uint32_t>(x.bits) << 16);
}

template <class T>
FLASH_DEVICE T from_float(float f);
template <>
FLASH_DEVICE float from_float<float>(float f) {
  return f;
}
template <>
FLASH_DEVICE Half from_float<Half>(float f) {
#if FLASH_HIP_ON_AMD
  return {__builtin_bit_cast(uint16_t, static_cast<_Float16>(f))};
#else
  return {__half_as_ushort(__float2half_rn(f))};
#endif
}
template <>
FLASH_DEVICE BFloat16 from_float<BFloat16>(float f) {
  // Round to nearest even; NaN stays a (quiet) NaN instead of rounding to infinity.
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};
  return {static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

}  // namespace flash::hip
