// Hopper asynchronous copies and their synchronisation (sm_90a): mbarriers in shared
// memory, the bulk tensor copy engine (TMA: cp.async.bulk.tensor, one thread moves a
// whole 2-D box of a tensor map into shared memory and the mbarrier counts its bytes),
// and setmaxnreg (registers moved between warpgroups of a warp-specialised kernel).
//
// Compiled only for the sm_90a target (FLASH_WGMMA_AVAILABLE, wgmma_ops.cuh); elsewhere
// the wrappers are empty and the kernels that use them trap (the host chooses them only
// on compute capability 9.0 with sm_90a code built).
#pragma once

#include <cuda.h>  // CUtensorMap (a 128-byte opaque struct; no driver library needed)

#include <cstdint>

#include "wgmma_ops.cuh"

namespace flash::cuda {

// ---- mbarrier ---------------------------------------------------------------------------
// An mbarrier completes a phase when `count` arrivals have happened and every byte it
// expects (expect_tx) has landed. Waiters name the phase by its parity: wait(parity p)
// returns once the phase with parity p is complete. A fresh barrier is in phase 0, so
// wait(1) returns at once ("the previous phase is complete"): producers start waiting on
// their empty barriers with parity 1.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#endif
}
// Makes the initialised barriers visible to the other threads and to the copy engine
// (then a __syncthreads).
__device__ __forceinline__ void mbar_init_fence() {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// One arrival that also announces `bytes` more to land before the phase completes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// One arrival once every cp.async this thread issued before has landed (counted against
// the barrier's init count: no pending arrival is added).
__device__ __forceinline__ void mbar_arrive_on_cp_async(uint32_t bar) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
#if FLASH_WGMMA_AVAILABLE
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// ---- TMA ----------------------------------------------------------------------------------
// Copies the box at coordinates (c0 = column, c1 = row, c2 = head, c3 = batch) of a 4-D
// tensor map (tma_map.hpp) into shared memory at dst; completion is counted in bytes on
// bar. Out-of-range elements arrive as zeros (and still count).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
#endif
}
// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared
// memory; completion is counted in bytes on bar.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#endif
}
// Brings a tensor map's 128 bytes into the constant cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}

// ---- bulk stores and reductions: shared -> global (bulk groups) ---------------------------
// Shared-memory writes made by the threads must be ordered before the async proxy reads
// them: each writer fences, then a barrier, then one thread issues the copy. A copy is
// one bulk group of its thread; the thread waits on its groups before it writes the
// shared source again (wait_read) or before the kernel ends (wait_all).
__device__ __forceinline__ void bulk_fence_writes() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Waits until at most kPending bulk groups are still reading their shared source.
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Waits until every bulk group of this thread has completed (its writes performed).
__device__ __forceinline__ void bulk_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

// Stores the box at coordinates (c0 = column, c1 = row, c2 = head, c3 = batch) of a 4-D
// tensor map from shared memory at src (the layout tma_load_4d writes) as one bulk group;
// elements outside the tensor's extents are not written.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1,
                                             int c2, int c3) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
      "cp.async.bulk.commit_group;\n" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#endif
}

// ---- tensor maps written on the device --------------------------------------------------
// A map in global memory whose row extent (dimension 1) is set on the device, for sizes
// the host does not know (packed batches: cu_seqlens[batch] lives in device memory).
// The writer copies the host-built map, replaces the extent and releases the writes to
// the tensor-map proxy; a later kernel acquires each map before its first copy.
__device__ __forceinline__ void tma_map_set_rows(CUtensorMap* map, int rows) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 1, %1;\n" ::"l"(
                   __cvta_generic_to_global(map)),
               "r"(rows)
               : "memory");
#endif
}
__device__ __forceinline__ void tma_maps_release() {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("fence.proxy.tensormap::generic.release.gpu;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void tma_map_acquire(const CUtensorMap* map) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(
                   reinterpret_cast<uint64_t>(map))
               : "memory");
#endif
}

// ---- registers ----------------------------------------------------------------------------
// The warpgroup's register budget per thread (a multiple of 8 in [24, 256]); the kernel
// must start with a cap (__launch_bounds__(threads, 1)). Every warp of the warpgroup runs it.
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_alloc() {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// ---- named barriers -------------------------------------------------------------------
// bar.sync over `threads` threads of the block on barrier `id` (0 is __syncthreads').
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// bar.arrive: counts `threads`' worth of arrivals at barrier `id` without waiting (the
// threads that wait there use bar.sync with the same count).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// bar.sync / bar.red over `threads` threads of the block on barrier `id` (0 is
// __syncthreads'). Returns whether `pred` held for any participating thread.
__device__ __forceinline__ bool named_barrier_or(int id, int threads, bool pred) {
  int any = 0;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\n"
      "bar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(static_cast<int>(pred)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}

}  // namespace flash::cuda
