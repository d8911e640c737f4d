// Ordered dQ accumulation of the wgmma backward (deterministic mode): the per-query-tile
// counters its dQ warp waits on and releases around each bulk add (bwd_wgmma_kernel.cuh).
#pragma once

namespace flash::cuda {

// Ordered mode under a mask band, key-block groups (kernel_params.hpp, dq_group): block x of
// a grid of heads · n blocks (n key blocks a head, groups of `group`, the last one `tail`):
// group g = 0, 1, ... holds key blocks [n − (g + 1)·group, n − g·group) (the last from 0),
// every head's group g before any head's group g + 1, a group's key blocks from its first.
// Host and device (tests/cuda/bwd_dispatch_order_test.cu checks the no-cycle property).
struct BwdDispatchSlot {
  int head, key_block;
};
// The size of the equal groups (the last one no larger) that cut n >= 1 key blocks into
// groups of at most cap >= 1 (bwd_configs.hpp, bwd_dq_group).
__host__ __device__ constexpr int bwd_equal_group(int n, int cap) {
  return (n + (n + cap - 1) / cap - 1) / ((n + cap - 1) / cap);
}
__host__ __device__ inline BwdDispatchSlot bwd_group_slot(int x, int n, int group, int heads) {
  const int groups = (n + group - 1) / group, tail = n - (groups - 1) * group;
  const int whole = (groups - 1) * heads * group;  // blocks of the full groups
  const int g = x < whole ? x / (heads * group) : groups - 1;
  const int size = x < whole ? group : tail, offset = x - g * heads * group;
  return {offset / size, (g == groups - 1 ? 0 : n - (g + 1) * group) + offset % size};
}

// Adds into query tile t happen in a fixed order: block j waits until the tile's counter
// equals its rank among the key blocks that see t, adds, and after the add has completed
// increments the counter. Two orders:
//  - key-block order (mask band: causal or window, p.walk_up): every block walks upward
//    from its first query tile and the adds into a tile go from the highest key block that
//    sees it down; the grid dispatches a head's last key block first, so a block waits only
//    for higher-numbered blocks of its head, dispatched earlier (and arriving at the tile
//    about two steps earlier under a causal mask), or in key-block groups (p.dq_group,
//    kernel_params.hpp), where a block may also wait for the rest of its own group,
//    dispatched right after it and resident beside it;
//  - arrival order (no mask band, p.dq_rotate): the grid has the key block fastest (a
//    head's blocks run side by side and share its tiles in L2) and a head has at most
//    half as many key blocks as the GPU has SMs (all resident together); block i starts
//    its walk i·d positions further (d = steps / key blocks), so the blocks reach each
//    tile d steps apart, and rank = arrival order (rotated_rank). A block then waits only
//    for blocks that reached the tile at an earlier step, which release before they wait
//    themselves (the dQ warp releases each counter once its add completed), so the waits
//    never form a cycle.
// A spin limit traps instead of hanging if that ever fails.
// The counter is read one step ahead (load_counter, relaxed: nothing waits on it until it
// is compared), so the common case costs no round trip. Ordering of the adds themselves:
// the releasing block increments only after its add has completed (bulk_wait_all), and
// both adds are reductions performed in L2, so an add issued after the counter was seen
// lands after the add it waited for; the proxy fences order the counter accesses
// (generic proxy) with the bulk adds (async proxy).
__device__ __forceinline__ unsigned load_counter(const unsigned* counter) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(counter));
  return v;
}
__device__ __forceinline__ void wait_counter(const unsigned* counter, unsigned value,
                                             unsigned seen) {
  for (long spins = 0; seen != value; ++spins) {
    if (spins > (1l << 30)) __trap();
    __nanosleep(32);
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
  }
  asm volatile("fence.proxy.async.global;\n" ::: "memory");  // then the bulk add
}
__device__ __forceinline__ void release_counter(unsigned* counter) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");  // the completed bulk add first
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;\n" ::"l"(counter) : "memory");
}

}  // namespace flash::cuda
