// Plain structs passed by value to the CUDA kernels, and the launcher declarations
// (one per dtype x head-dim instantiation, each defined in its own .cu file).
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace flash::cuda {

enum class Dtype { f32 = 0, f16 = 1, bf16 = 2 };

// Which keys row i may see, in the form every kernel uses:
// diag = i + diag_offset, visible iff key < seqlen_kv && diag - left <= key <= diag + right.
// left/right are clamped to kUnbounded when there is no bound (so int arithmetic never
// overflows: seqlens are checked to be < 2^30 on the host).
struct MaskParams {
  static constexpr int kUnbounded = 1 << 30;
  int seqlen_q, seqlen_kv;
  int diag_offset;  // seqlen_kv - seqlen_q
  int left, right;
  bool bounded;  // false: only the key < seqlen_kv bound applies
};

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;                                                  // may be null
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];  // batch, seq, head
  int heads_q, group;                                          // group = heads_q / heads_kv
  int head_dim, head_dim_v;                                    // runtime (<= the tile's)
  int batch_offset;  // first batch of this launch (grids hold at most 65535)
  float scale;       // softmax scale
  float softcap;     // 0 = off
  MaskParams mask;   // lengths are the maxima; sequence.cuh narrows them per sequence
  // Packed batches (FlashAttention's varlen) and cache lengths: device arrays, null when
  // unused (see sequence.cuh). num_seqs = batch, so total_q = cu_seqlens_q[num_seqs].
  const int* cu_seqlens_q;
  const int* cu_seqlens_kv;
  const int* seqlens_kv;
  int num_seqs;
  // Paged K/V (block_table, device memory; null: none) on the Hopper forward: k / v are
  // [num_pages, page_size, heads_kv, dim] (k_stride[0] / v_stride[0] the page stride), key j
  // of sequence b row j % page_size of page block_table[b * pages_per_seq + j / page_size].
  const int* block_table;
  int page_size, pages_per_seq, num_pages;
  bool wgmma;      // the Hopper forward (fwd_wgmma_kernel.cuh), chosen by choose()
  bool band_tile;  // on it, FwdWgmmaBandConfig's tile (banded masks, few keys), by choose()
  // Its persistent grid: two ints of the per-stream counter buffer (zero between
  // launches) and the blocks to launch (one per SM); null: one block per work tile.
  int* tile_counter;
  int persistent_blocks;
  // On it, unmasked dense problems whose tiles end in a partial round split that round into
  // key ranges (fwd_tail_split.cuh): 0 never, 1 where fwd_tail_plan's limits say it pays, 2
  // wherever a range gets a step (tests). The split's per-tile counters:
  // fwd_tail_max_counts(persistent_blocks) ints of the counter buffer.
  int tail_split;
  int* tail_counts;
  // Packed batches on it: 3 x 128 bytes of device memory where the q, k and v tensor maps
  // are written with their row extents set on the device (fwd_patch_packed_maps).
  void* packed_maps;
  // Causal / banded: K/V bytes the tiles in flight may share in L2 (the work-tile order,
  // work_tile_order.cuh); 0 = one head after another.
  int64_t l2_section_bytes;
  // Causal / banded: the blocks resident at once, for the longest-first tail of the order
  // (work_tile_tail_pairs); 0 = no tail run.
  int tail_blocks;
};

// Backward: dq/dk/dv use q/k/v strides, dout uses o_stride.
struct BwdParams {
  FwdParams f;  // q, k, v, o, lse (required), strides, mask
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  float* delta;  // f32 workspace [batch, heads_q, seqlen_q]: rowsum(dO * O)
  int heads_kv;
  // dQ of the f16/bf16 kernel: f32 partial sums [dq_slices][batch, heads_q, rows_pad, tile
  // dim], zeroed per call. dq_splits blocks per (batch, kv head) each walk a fixed set of
  // key blocks; with dq_exclusive, block `split` adds only into slice `split` (one writer
  // per element, program order: deterministic), else every block adds into slice 0.
  float* dq_accum;
  int64_t dq_slice_floats;
  int dq_splits, dq_slices;
  int dq_row_floats;  // floats per dQ row in a slice (tile dim + the kernel's padding)
  bool dq_exclusive;
  // Ordered mode (sm_90a kernel, deterministic): one slice; the adds into each query tile
  // happen in key-block order, counted per (batch, head, query tile) in dq_counters.
  bool dq_ordered;
  unsigned* dq_counters;
  bool wgmma;  // sm_90a kernel (bwd_wgmma_usable), else the mma.sync one
  // Grid order: split (key block) fastest, so that the blocks of a head run together and
  // share its Q, dO and dQ tiles in L2; else split slowest (see BwdBlock).
  bool grid_kv_fastest;
  // No mask band, at most sms / 2 key blocks per head: the key blocks walk the query
  // tiles from staggered starts and (ordered mode) add in arrival order
  // (bwd_wgmma_kernel.cuh); else every block walks from the last tile and adds in
  // key-block order.
  bool dq_rotate;
  // Mask band (wgmma kernel): each key block walks its query tiles upward from its first
  // one. In the ordered mode the grid dispatches a head's key blocks from the last one and
  // a tile's adds go from the highest key block that sees it down: a block waits only for
  // blocks dispatched before it, each about two steps ahead under a causal mask, so a
  // head's blocks can run side by side (sharing its tiles in L2) without the chain of
  // turn waits that walking down from the shared last tile made (block j waited for j
  // adds in turn, so the ordered mode used to put the key block slowest in the grid).
  // The atomic mode walks the same way (its dK, dV equal the ordered mode's bitwise) but
  // dispatches the first key block first (the longest walk under a causal mask).
  bool walk_up;
  // Ordered mode under a mask band, key blocks of two query tiles each (D 128, D 64 softcap;
  // bwd_configs.hpp, bwd_dq_group), dq_group > 0: a head's key blocks are dispatched in
  // groups of at most dq_group (<= sms / 2, by default 32) consecutive key blocks, the groups from
  // the last key blocks to the first, each group's blocks from its first (the longest walk under a
  // causal mask), every head's group i before any head's group i + 1 (BwdBlock); dq_group >=
  // dq_splits: one group, each head's key blocks first one first, as the atomic mode dispatches
  // them. So the longest walks do not all start last (the grid's tail). A block waits for lighter
  // ones dispatched after it only inside the group being dispatched, whose blocks all fit on the
  // GPU beside the earlier groups' (which never wait for an undispatched block): no cycle. 0: each
  // head's key blocks last one first.
  int dq_group;
};

// Launchers. Each returns nothing and reports launch errors through cudaGetLastError.
// `dim` is the compiled tile head dim (max(head_dim, head_dim_v)). Config names for
// FLASH_LOG come from choose() in cuda_backend.cu, which reads tile_configs.hpp.
template <Dtype kDtype, int kDim>
void launch_forward(const FwdParams& p, int batch, cudaStream_t stream);
template <Dtype kDtype, int kDim>
void launch_backward(const BwdParams& p, int batch, cudaStream_t stream);

}  // namespace flash::cuda
