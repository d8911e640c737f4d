// Thread block clusters (sm_90): the cluster barrier, addresses in another block's shared
// memory (distributed shared memory), and asynchronous stores into it that count their
// bytes on that block's mbarrier (tma_ops.cuh). The decode kernels merge their key splits
// this way (decode_kernel.cuh, decode_cluster_merge).
//
// Compiled only for the sm_90a target, as the mbarrier wrappers of tma_ops.cuh; elsewhere
// the wrappers are empty and the host launches no cluster (it does only on compute
// capability 9.0 with sm_90a code built: FLASHATTN_CUDA_SM90A).
#pragma once

#include <cstdint>

#include "tma_ops.cuh"

namespace flash::cuda {

// The cluster barrier in two halves: arrive (release: this thread's earlier writes,
// mbarrier initialisations included, are visible to every thread of the cluster that
// waits) and wait (acquire). Every thread of every block of the cluster arrives once
// before any thread's wait returns.
__device__ __forceinline__ void cluster_arrive() {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if FLASH_WGMMA_AVAILABLE
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

// The address, in the cluster's shared window, of the shared-memory byte at `local` (this
// block's address of it) in the block of cluster rank `rank`.
__device__ __forceinline__ uint32_t cluster_map(uint32_t local, int rank) {
  uint32_t remote = 0;
#if FLASH_WGMMA_AVAILABLE
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
#endif
  return remote;
}

// Stores x at `remote` (a cluster_map address) and, once it has landed, counts its four
// bytes on the mbarrier at `remote_bar` (same block): the owner waits on that barrier.
__device__ __forceinline__ void st_async_f32(uint32_t remote, float x, uint32_t remote_bar) {
#if FLASH_WGMMA_AVAILABLE
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(remote),
      "r"(__float_as_uint(x)), "r"(remote_bar)
      : "memory");
#endif
}

}  // namespace flash::cuda
