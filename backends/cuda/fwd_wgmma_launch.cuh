// Host launch of the Hopper forward (fwd_wgmma_kernel.cuh): the Q / K / V tensor maps
// (dense, packed or paged), the device-side patch of a packed batch's maps, the work-tile
// numbering and the grid (persistent or one block per work tile).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "device_buffers.hpp"
#include "fwd_wgmma_kernel.cuh"

namespace flash::cuda {

static_assert(sizeof(CUtensorMap) == 128, "the packed maps buffer holds 3 x 128 bytes");

// Writes the three maps of a packed batch to `out` with their row extents set to the
// totals cu_seqlens_q / cu_seqlens_kv[batch], which only the device knows (one thread
// per map; the launch before the forward on the same stream).
// (static: each forward .cu file that includes this header has its own copy.)
static __global__ void fwd_patch_packed_maps(const __grid_constant__ FwdTmaParams tp,
                                             CUtensorMap* out) {
  const int m = threadIdx.x;
  if (m >= 3) return;
  const CUtensorMap* src = m == 0 ? &tp.q_map : m == 1 ? &tp.k_map : &tp.v_map;
  const uint4* from = reinterpret_cast<const uint4*>(src);
  uint4* to = reinterpret_cast<uint4*>(out + m);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(CUtensorMap) / 16); ++i) to[i] = from[i];
  const int* cu = m == 0 ? tp.p.cu_seqlens_q : tp.p.cu_seqlens_kv;
  // A row extent of 0 is not a valid map; with total 0 no tile is loaded anyway.
  if (cu != nullptr) tma_map_set_rows(out + m, max(cu[tp.p.num_seqs], 1));
  tma_maps_release();
}

template <class T, class C>
void launch_fwd_wgmma(const FwdParams& params, int batch, cudaStream_t stream) {
  using Dv = FwdWgmmaDerived<C>;
  const bool sequences =
      params.cu_seqlens_q || params.cu_seqlens_kv || params.seqlens_kv || params.block_table;
  auto kernel = sequences ? fwd_wgmma_kernel<T, C, true> : fwd_wgmma_kernel<T, C, false>;
  set_max_dynamic_smem_once<fwd_wgmma_kernel<T, C, true>>(Dv::kSmemBytes);
  set_max_dynamic_smem_once<fwd_wgmma_kernel<T, C, false>>(Dv::kSmemBytes);
  FwdTmaParams tp{};
  tp.p = params;
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  const int heads_kv = params.heads_q / params.group;
  // Dense batches: [batch, rows, heads, cols] (caches: rows up to the capacity seqlen_kv).
  // A packed tensor is one sequence of all the rows, whose count (cu_seqlens[batch]) only
  // the device knows: its map is built here with the longest sequence's rows, and
  // fwd_patch_packed_maps sets the total before the forward runs.
  const bool packed_q = params.cu_seqlens_q != nullptr;
  const bool packed_kv = params.cu_seqlens_kv != nullptr;
  // A packed tensor whose sequences are all empty (total 0) may be null, but a map needs
  // an address: the maps buffer stands in. Nothing is copied from it (a tile of a sequence
  // without query rows or keys issues no copy).
  const auto address = [&](const void* t) { return t != nullptr ? t : params.packed_maps; };
  tp.q_map =
      make_tile_map({address(params.q), bf16, params.head_dim, params.mask.seqlen_q, params.heads_q,
                     packed_q ? 1 : batch, params.q_stride[1], params.q_stride[2],
                     packed_q ? 0 : params.q_stride[0], Dv::kConsumerRows});
  if (params.block_table) {  // [num_pages, page_size, heads, cols] in boxes of box_rows
    // The widest box that tiles both a K/V tile and a page: fewer copies per tile (8-row
    // boxes on 176-key tiles, 44 copies per K/V tile at D 128, ran at 0.57x of contiguous).
    int box_rows = kPagedBoxRows;
    while (C::kBlockN % (2 * box_rows) == 0 && params.page_size % (2 * box_rows) == 0)
      box_rows *= 2;
    tp.paged_box_rows = box_rows;
    tp.k_map = make_tile_map({params.k, bf16, params.head_dim, params.page_size, heads_kv,
                              params.num_pages, params.k_stride[1], params.k_stride[2],
                              params.k_stride[0], box_rows});
    tp.v_map = make_tile_map({params.v, bf16, params.head_dim_v, params.page_size, heads_kv,
                              params.num_pages, params.v_stride[1], params.v_stride[2],
                              params.v_stride[0], box_rows});
  } else {
    tp.k_map = make_tile_map({address(params.k), bf16, params.head_dim, params.mask.seqlen_kv,
                              heads_kv, packed_kv ? 1 : batch, params.k_stride[1],
                              params.k_stride[2], packed_kv ? 0 : params.k_stride[0], C::kBlockN});
    tp.v_map = make_tile_map({address(params.v), bf16, params.head_dim_v, params.mask.seqlen_kv,
                              heads_kv, packed_kv ? 1 : batch, params.v_stride[1],
                              params.v_stride[2], packed_kv ? 0 : params.v_stride[0], C::kBlockN});
  }
  if (!sequences)  // the epilogue's TMA stores (fwd_wgmma_kernel.cuh: staged O, dense only)
    tp.o_map = make_tile_map({params.o, bf16, params.head_dim_v, params.mask.seqlen_q,
                              params.heads_q, batch, params.o_stride[1], params.o_stride[2],
                              params.o_stride[0], Dv::kConsumerRows});
  if (packed_q || packed_kv) {
    CUtensorMap* maps = static_cast<CUtensorMap*>(params.packed_maps);
    fwd_patch_packed_maps<<<1, 32, 0, stream>>>(tp, maps);
    tp.packed_maps = maps;
  }
  const int num_qblocks = (params.mask.seqlen_q + Dv::kBlockM - 1) / Dv::kBlockM;
  tp.num_qblocks = num_qblocks;
  tp.tile_counter = params.tile_counter;
  // Sequences per launch: a grid's z is at most 65535 and tile numbers are ints.
  const int64_t tiles_per_seq = static_cast<int64_t>(num_qblocks) * params.heads_q;
  const int per_launch = static_cast<int>(
      std::min<int64_t>(65535, std::max<int64_t>(1, (INT32_MAX / 2) / tiles_per_seq)));
  for (int b0 = 0; b0 < batch; b0 += per_launch) {
    const int n = std::min(batch - b0, per_launch);
    tp.p.batch_offset = b0;
    tp.total_tiles = static_cast<int>(tiles_per_seq * n);
    tp.section_pairs = work_tile_section_pairs(
        params.l2_section_bytes, params.mask.seqlen_kv, params.head_dim, params.head_dim_v,
        static_cast<int>(sizeof(T)), params.group, static_cast<int64_t>(params.heads_q) * n);
    tp.tail_pairs = params.tail_blocks > 0
                        ? work_tile_tail_pairs(num_qblocks, params.heads_q * n, params.tail_blocks)
                        : 0;
    const dim3 grid = tp.tile_counter
                          ? dim3(std::min(tp.total_tiles, std::max(1, params.persistent_blocks)))
                          : dim3(num_qblocks, params.heads_q, n);
    // The split tail (fwd_tail_split.cuh): unmasked dense tiles all take ceil(keys / BN) steps.
    tp.tail = FwdTailSplit{};
    LockedBuffer partials;
    if (tp.tile_counter && !sequences && !params.mask.bounded && params.tail_split > 0 &&
        params.mask.seqlen_kv > 0) {
      tp.tail = fwd_tail_plan(tp.total_tiles, (params.mask.seqlen_kv + C::kBlockN - 1) / C::kBlockN,
                              static_cast<int>(grid.x), params.tail_split == 2);
      static_assert(Dv::kConsumers <= kFwdTailMaxConsumers, "the tail counters' region");
      if (tp.tail.ranges > 0) {
        partials = lock_device_buffer(
            stream, BufferPurpose::workspace,
            fwd_tail_partials_bytes(tp.tail, tp.total_tiles, Dv::kConsumers, C::kDim));
        tp.tail.partials = static_cast<float4*>(partials.ptr);
        tp.tail.counts = params.tail_counts;
      }
    }
    phase_trace_before_launch(stream);
    kernel<<<grid, Dv::kThreads, Dv::kSmemBytes, stream>>>(tp);
    phase_trace_after_launch(stream, C::kName, kFwdTraceRoleNames, kFwdTracePhaseNames);
  }
}

}  // namespace flash::cuda
