// Forward attention on Hopper (sm_90a, f16 / bf16): warp-specialised wgmma + TMA.
//
// Algorithm (FlashAttention-3's structure): a block works through work tiles (query block,
// head, sequence): on the persistent grid (the default: one block per SM, cuda_backend.cu's
// fwd_wgmma_persistent) the tiles it takes from a counter, the next tile's Q (each consumer's
// rows once its own last S no longer reads them) and K/V loading while the consumers finish
// this one; otherwise one tile per block. kConsumers + 1 warpgroups (tile_configs.hpp).
// Warpgroup 0 is the producer: it gives its registers away (setmaxnreg) and one thread issues
// bulk tensor copies (TMA) of the Q tile and of each visible K and V tile into a ring of
// kStages shared-memory stages, each guarded by a "full" mbarrier (bytes landed) and an
// "empty" one (every consumer done with it); each consumer's rows of Q have a full / empty
// pair of their own, so a consumer starts its next work tile without waiting for the others'
// last S.
// The other warpgroups consume 64 query rows each: S = Q·Kᵀ on wgmma (m64 x kBlockN, both
// operands in shared memory), the online softmax on the accumulators (fwd_tile_ops.cuh; masks
// only on boundary tiles), then O += P·V on wgmma with P from registers (S's n8 blocks 2kk,
// 2kk+1 are A fragment kk) and V as an MN-major shared-memory operand. S(i) is issued before
// P(i-1)·V(i-1), so the softmax of S(i) runs under that product; the consumers interleave on
// the SM by themselves (an explicit ping-pong measured neutral: bench/RESULTS.md), taking
// turns only for the exponent loops on the 128-key band tile (Dv::kExpTurns).
// A work tile whose keys end within the first kNarrowKeys keys of its last K/V tile runs
// that tile's softmax and P·V narrow (tile_configs.hpp). O is divided by the row sum at the
// end and leaves through shared memory: stmatrix into a buffer of its own (D 64) or into the
// tile's last K stage once every consumer's last S has read it (an "O read" mbarrier holds the
// producer), then one TMA store per 64-column atom (sequence kernels: 16-byte thread stores).
// lse = ln Σ exp is written when asked. Tiles outside the causal / window band are never
// loaded; packed batches and cache lengths narrow each work tile to its sequence
// (sequence.cuh); a paged cache has the producer warp load each K/V tile as kPagedBoxRows-row
// boxes, lane l the box of rows 8l.. from its own page.
//
// Tolerance class: f32 accumulation; P rounded to the input dtype before P·V (as the
// mma.sync kernels and FlashAttention). A boundary tile whose V holds a NaN or inf takes
// the exact scalar P·V over visible keys (pv_visible_keys_only), so a hidden key's V
// never reaches a row.
// Measured (H200, FlashAttention's shapes, interleaved with torch in one process): of cuDNN at
// S >= 4k 0.93-1.23 (D 128: 4k 0.98 / 0.99 bf16 / f16, causal 1.02, 16k 1.04-1.10; session 41;
// D 96: 1.00-1.23, session 44); 1.1-3.0x torch's FlashAttention-2.
// Run: FLASH_LOG=1 names wgmma_fwd_*; FLASH_CUDA_FWD=mma forces the mma.sync kernels;
// tests/cuda/device_hopper.sh (A/B, checks). What changed what: bench/RESULTS.md.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "device_ops.cuh"
#include "fwd_tile_ops.cuh"
#include "fwd_wgmma_params.cuh"
#include "kernel_params.hpp"
#include "mask.cuh"
#include "phase_trace.cuh"
#include "sequence.cuh"
#include "tile_configs.hpp"
#include "tma_map.hpp"
#include "tma_ops.cuh"
#include "wgmma_ops.cuh"
#include "work_tile_order.cuh"

namespace flash::cuda {

template <class T, class C, bool kSequences>
__global__ void __launch_bounds__(FwdWgmmaDerived<C>::kThreads, 1)
    fwd_wgmma_kernel(const __grid_constant__ FwdTmaParams tp) {
#if FLASH_WGMMA_AVAILABLE
  using Dv = FwdWgmmaDerived<C>;
  constexpr int D = C::kDim, BM = Dv::kBlockM, BN = C::kBlockN, ST = C::kStages;
  constexpr int CR = Dv::kConsumerRows;                      // query rows of one consumer
  constexpr int NT = BN / 8;                                 // n8 blocks of S
  constexpr int DU = C::kUsedDim, OT = DU / 8;               // columns S, O use (<= D); O's n8s
  constexpr int KS = BN / 16;                                // k16 steps of P·V
  constexpr int kON = DU > 128 && DU % 128 == 0 ? 128 : DU;  // N of one P·V product
  constexpr int kConsumerThreads = 128 * Dv::kConsumers;
  const FwdParams& p = tp.p;

  extern __shared__ unsigned char fwd_wgmma_smem[];
  const uint32_t sQ = (smem_addr(fwd_wgmma_smem) + 1023) & ~1023u;
  const uint32_t sK0 = sQ + Dv::kTileQBytes;  // stage s at + s * kTileKVBytes
  const uint32_t sV0 = sK0 + ST * Dv::kTileKVBytes;
  using OStaging = typename Dv::OStaging;
  // The epilogue's O staging (tile_configs.hpp). Dense O leaves shared memory by TMA stores;
  // the sequence kernels' O (packed rows, whose boxes would run into the next sequence) by
  // 16-byte stores of the threads.
  constexpr bool kTmaStoreO = !kSequences;
  constexpr bool kOwnO = Dv::kOStaging == OStaging::own;
  constexpr bool kOInK = Dv::kOStaging == OStaging::last_k;
  // OStaging::own: consumer c's O buffer at sO0 + c * kOConsumerBytes.
  const uint32_t sO0 = sV0 + ST * Dv::kTileKVBytes;
  const uint32_t bars =
      sO0 + (Dv::kOStaging == OStaging::own ? Dv::kConsumers * Dv::kOConsumerBytes : 0);
  constexpr int WG = Dv::kConsumers;
  // Consumer c's 64 rows of Q have their own full / empty pair: a consumer that finishes
  // its work tile first starts the next one (its Q loaded as soon as its own last S has
  // read the old one) instead of waiting for the others' last S, so the consumers' per-tile
  // bubbles (the first S and softmax, the last P·V, the epilogue) need not line up.
  // (Each consumer's pair side by side: one address register and an immediate offset.)
  const auto full_q = [&](int c) { return bars + 16 * c; };
  const auto empty_q = [&](int c) { return bars + 16 * c + 8; };
  const auto full_k = [&](int s) { return bars + 8 * (2 * WG + s); };
  const auto full_v = [&](int s) { return bars + 8 * (2 * WG + ST + s); };
  const auto empty_k = [&](int s) { return bars + 8 * (2 * WG + 2 * ST + s); };
  const auto empty_v = [&](int s) { return bars + 8 * (2 * WG + 3 * ST + s); };
  // OStaging::last_k: one arrival per consumer once its O stores have read stage s (the
  // producer waits for it before it loads stage s again).
  const auto o_read = [&](int s) { return bars + 8 * (2 * WG + 4 * ST + s); };
  // The work tile, handed from the producer to consumer c in shared memory (written before
  // full_q(c)'s arrival, read before c's empty_q(c) arrival: one slot per consumer).
  __shared__ int tile_slot[WG];
  __shared__ int tail_last[WG];  // the split tail: whether consumer c's segment merges

  // What work slot t covers (a whole tile, or a split tail segment's steps: piece_slot = t);
  // the producer and the consumers derive it alike, so both count the same K/V tiles.
  struct TileSpan {
    SequenceRows seq;
    MaskParams mask;
    int head, batch, q0, q_last, tile_begin, n_tiles, piece_slot;
  };
  const auto span_of = [&](int t) {
    const bool piece = t >= tp.total_tiles;
    const FwdTailSegment seg =
        piece ? fwd_tail_segment_of_slot(tp.tail, tp.total_tiles, t) : FwdTailSegment{t, 0, 0};
    const FwdWorkTile w = fwd_work_tile(tp, seg.tile);
    TileSpan sp;
    sp.head = w.head;
    sp.batch = w.batch;
    sp.seq = kSequences ? sequence_rows(p, w.batch, w.head) : dense_rows(p, w.batch, w.head);
    sp.mask = kSequences ? sp.seq.mask : p.mask;
    sp.q0 = w.qblock * BM;
    sp.q_last = min(sp.q0 + BM, sp.mask.seqlen_q) - 1;
    sp.tile_begin = sp.n_tiles = 0;
    if (sp.q0 < sp.mask.seqlen_q) {
      const KeyRange keys = visible_keys(sp.mask, sp.q0, sp.q_last);
      sp.tile_begin = keys.begin / BN;
      const int tile_end = keys.end > keys.begin ? (keys.end + BN - 1) / BN : sp.tile_begin;
      sp.n_tiles = tile_end - sp.tile_begin;
    }
    sp.piece_slot = piece ? t : -1;
    if (piece) sp.tile_begin += seg.step_begin, sp.n_tiles = seg.steps;  // unmasked: all steps
    return sp;
  };
  const int first_tile = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int items = fwd_tail_items(tp.tail, tp.total_tiles);

  const int tid = threadIdx.x;
  if (tid == 0) {
#pragma unroll
    for (int c = 0; c < WG; ++c) {
      mbar_init(full_q(c), 1);
      mbar_init(empty_q(c), kConsumerThreads / WG);
    }
#pragma unroll
    for (int s = 0; s < ST; ++s) {
      mbar_init(full_k(s), 1);
      mbar_init(full_v(s), 1);
      mbar_init(empty_k(s), kConsumerThreads);
      mbar_init(empty_v(s), kConsumerThreads);
      mbar_init(o_read(s), WG);
    }
    mbar_init_fence();
  }
  __syncthreads();  // the last block-wide barrier: the producer's other threads leave

  const int wg = tid / 128;
  if (wg == 0) {
    // ---- producer: one thread issues every copy (a paged cache: one warp) ----------------
    warpgroup_reg_dealloc<Dv::kProducerRegs>();
    // Paged K/V: lane l of warp 0 loads rows l·box_rows.. of each K and V tile, a box from
    // its own page (its key's block-table entry, looked up one tile ahead so that the
    // lookup's latency hides under the stage waits); thread 0 still does the rest alone.
    const bool paged = kSequences && p.block_table != nullptr;
    if (tid >= 32 || (!paged && tid != 0)) return;
    const bool leader = tid == 0;
    PhaseClock clk(leader, kFwdTraceProducer);
    const CUtensorMap* q_map = tp.packed_maps ? tp.packed_maps : &tp.q_map;
    const CUtensorMap* k_map = tp.packed_maps ? tp.packed_maps + 1 : &tp.k_map;
    const CUtensorMap* v_map = tp.packed_maps ? tp.packed_maps + 2 : &tp.v_map;
    if (tp.packed_maps) {  // written by fwd_patch_packed_maps: acquire before the first copy
      tma_map_acquire(q_map);
      tma_map_acquire(k_map);
      tma_map_acquire(v_map);
    }
    if (leader) {
      tma_prefetch_map(q_map);
      tma_prefetch_map(k_map);
      tma_prefetch_map(v_map);
    }
    // Coordinates: packed tensors are one [total rows, heads, dim] "sequence" (their map's
    // batch extent is 1) in which sequence b starts at row cu_seqlens[b].
    const bool packed_q = p.cu_seqlens_q != nullptr, packed_kv = p.cu_seqlens_kv != nullptr;
    // This lane's box of the paged tile at key k0: (row in its page, page). A box never
    // straddles two pages (its rows divide the page size and the tile's keys). A box whose
    // first key lies past the sequence, or whose page id is out of range, takes page
    // coordinate num_pages: the copy engine fills it with zeros (the bytes still count) and
    // reads nothing. Keys past the sequence inside a box are read from its page and masked.
    const int box_rows = tp.paged_box_rows, boxes = paged ? BN / box_rows : 0;
    const auto paged_box = [&](const TileSpan& sp, int k0) {
      const int key = k0 + tid * box_rows;
      int2 box = make_int2(0, p.num_pages);
      if (tid < boxes && key < sp.mask.seqlen_kv) {
        const int page =
            p.block_table[static_cast<int64_t>(sp.batch) * p.pages_per_seq + key / p.page_size];
        if (page >= 0 && page < p.num_pages) box = make_int2(key % p.page_size, page);
      }
      return box;
    };
    int ring = 0;  // K/V tiles issued so far: stage ring % ST, phase ring / ST
    // OStaging::last_k: bit s of o_state = stage s holds a work tile's staged O until o_read(s)
    // completes the phase whose parity is bit 8 + s (one register: the producer has 24).
    uint32_t o_state = 0;
    for (int t = fwd_tail_slot_of_item(tp.tail, tp.total_tiles, first_tile), n = 0;; ++n) {
      const int q_parity = (n & 1) ^ 1;  // empty_q: a consumer is done with its previous Q
      if (t < 0) {
#pragma unroll
        for (int c = 0; c < WG; ++c) {
          mbar_wait(empty_q(c), q_parity);
          if (leader) {
            tile_slot[c] = -1;
            mbar_arrive(full_q(c));  // no copy: the phase completes on this arrival
          }
        }
        break;
      }
      const TileSpan sp = span_of(t);
      // Consumer c's kConsumerRows rows of Q (one box per 64-column atom). A box wholly past
      // the tensor's rows (an idle consumer's) is valid: the copy engine fills it with zeros.
      const auto load_q = [&](int c) {
        mbar_wait(empty_q(c), q_parity);
        clk.mark(kFwdPhQWait);
        if (!leader) return;
        tile_slot[c] = t;
        if (sp.n_tiles == 0) {
          mbar_arrive(full_q(c));  // nothing to load: the consumers write o = 0 or skip
          return;
        }
        mbar_arrive_expect_tx(full_q(c), Dv::kTileQConsumerBytes);
#pragma unroll
        for (int a = 0; a < D / 64; ++a)
          tma_load_4d(sQ + a * BM * 128 + c * CR * 128, q_map, full_q(c), a * 64,
                      static_cast<int>(sp.seq.q_row) + sp.q0 + c * CR, sp.head,
                      packed_q ? 0 : sp.batch);
      };
      const auto load_all_q = [&] {
#pragma unroll
        for (int c = 0; c < WG; ++c) load_q(c);
      };
      const int kv_head = sp.head / p.group, kv_batch = packed_kv ? 0 : sp.batch;
      // Paged: this lane's box of K/V tile i (kept for its V) and of tile i + 1 (looked up
      // one tile ahead).
      int2 box{}, next_box = paged && sp.n_tiles > 0 ? paged_box(sp, sp.tile_begin * BN) : int2{};
      // K or V of tile i into its stage: one box per lane when paged (the leader counts the
      // whole tile's bytes), else one copy per 64-column atom from the leader.
      const auto load_kv = [&](int i, uint32_t tile0, const CUtensorMap* map, const auto& full_of,
                               const auto& empty_of) {
        const int s = (ring + i) % ST, parity = ((ring + i) / ST) & 1;
        const int k0 = (sp.tile_begin + i) * BN;
        const uint32_t tile = tile0 + s * Dv::kTileKVBytes;
        mbar_wait(empty_of(s), parity ^ 1);  // every consumer is done with ring slot ring + i - ST
        clk.mark(kFwdPhFirstS);
        if (leader) mbar_arrive_expect_tx(full_of(s), Dv::kTileKVBytes);
        if (paged) {
          if (tid < boxes)
#pragma unroll
            for (int a = 0; a < D / 64; ++a)
              tma_load_4d(tile + a * BN * 128 + tid * box_rows * 128, map, full_of(s), a * 64,
                          box.x, kv_head, box.y);
        } else {
#pragma unroll
          for (int a = 0; a < D / 64; ++a)
            tma_load_4d(tile + a * BN * 128, map, full_of(s), a * 64,
                        static_cast<int>(sp.seq.kv_row) + k0, kv_head, kv_batch);
        }
        clk.mark(kFwdPhIssue);
      };
      const auto load_k = [&](int i) {
        if (paged) {
          box = next_box;
          if (i + 1 < sp.n_tiles) next_box = paged_box(sp, (sp.tile_begin + i + 1) * BN);
        }
        if (kOInK) {  // the stage's staged O has been read by its stores
          const int s = (ring + i) % ST;
          if (o_state >> s & 1u) {
            mbar_wait(o_read(s), o_state >> (8 + s) & 1u);
            clk.mark(kFwdPhKvWait);
            o_state ^= 0x101u << s;  // released; the next phase's parity
          }
        }
        load_kv(i, sK0, k_map, full_k, empty_k);
      };
      const auto load_v = [&](int i) { load_kv(i, sV0, v_map, full_v, empty_v); };
      // K(0) goes before the Qs: its stage was freed by the previous tile's S products,
      // while each Q waits for its own consumer's last S. V(0) after them (tile 0's P·V
      // comes last). (Tile 0 is peeled: Q's coordinates are not held through the loop.)
      if (sp.n_tiles == 0) {
        load_all_q();
      } else {
        load_k(0);
        load_all_q();
        load_v(0);
      }
      for (int i = 1; i < sp.n_tiles; ++i) {
        load_k(i);
        load_v(i);
      }
      if (kOInK && sp.n_tiles > 0) o_state |= 1u << ((ring + sp.n_tiles - 1) % ST);
      ring += sp.n_tiles;
      // The next tile is taken once this one's copies are issued (its consumers are then
      // within kStages K/V tiles of its end), not when it starts: a block that took its
      // next tile at the start held it through a long causal tile while blocks that
      // finished short ones found the counter further on (the grid then ended unevenly).
      if (fwd_tail_has_second(tp.tail, tp.total_tiles, t)) {
        ++t;  // a range's second segment follows its first
      } else if (leader) {
        const int item =
            tp.tile_counter ? atomicAdd(tp.tile_counter, 1) + static_cast<int>(gridDim.x) : items;
        t = item < items ? fwd_tail_slot_of_item(tp.tail, tp.total_tiles, item) : -1;
      }
      if (paged) t = __shfl_sync(0xffffffffu, t, 0);
    }
    // Every block stops after taking an index past the last tile; once all have, the
    // counter is free: the last block to finish resets it for the next launch on this
    // stream (the kernel boundary publishes the reset).
    if (leader && tp.tile_counter) {
      __threadfence();  // this block's last take precedes its count (different words)
      if (atomicAdd(tp.tile_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
        __threadfence();  // every block's takes precede the reset
        tp.tile_counter[0] = 0;
        tp.tile_counter[1] = 0;
      }
    }
    return;
  }

  // ---- consumers: 64 query rows each ------------------------------------------------------
  warpgroup_reg_alloc<Dv::kConsumerRegs>();
  // (c through a warp reduction: ptxas then knows it is warp-uniform and keeps what derives
  // from it, such as this consumer's Q barriers and tile slot, in uniform registers.)
  const int c = __reduce_max_sync(0xffffffffu, wg - 1);
  const int ct = tid % 128, warp_in_wg = ct / 32, lane = ct % 32;
  const int g = lane / 4, tig = lane % 4;
  PhaseClock clk(ct == 0, c);
  // Exponent turns (fwd_wgmma_params.cuh): consumer 1 passes the first one.
  const FwdExpTurns<Dv::kExpTurns> turns{c};
  turns.start();

  const bool use_softcap = p.softcap > 0.f;
  const float mult = use_softcap ? kLog2e : p.scale * kLog2e;
  const float cap_in = use_softcap ? p.scale / p.softcap : 0.f;

  // The current work tile (set at the top of each pass of the tile loop below; the
  // lambdas read it by reference), this lane's first row, and the K/V tiles consumed
  // before it (the ring position of its tile 0).
  TileSpan sp{};
  int ring_base = 0, row0 = 0;  // this lane's rows: row0, row0 + 8
  const MaskParams& mask = sp.mask;

  float acc_o[1][OT][4];
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  float(&acc_flat)[OT * 4] = reinterpret_cast<float(&)[OT * 4]>(acc_o);
  float s_acc[1][NT][4];  // S of the newest tile, then its P (f32)
  float(&s_flat)[BN / 2] = reinterpret_cast<float(&)[BN / 2]>(s_acc);
  // P of the tile whose P·V is next, as A fragments. (A second buffer, so that P(i) is
  // packed while P(i-1)·V(i-1) still runs, measured no faster: bench/RESULTS.md.)
  uint32_t pf[KS][4] = {};
  // OStaging::last_k: the K stage holding this consumer's staged O, whose o_read arrival
  // (thread 0, once its stores have read it) is still due (-1: none).
  int o_pending = -1;
  const auto release_o_stage = [&] {
    if constexpr (kOInK) {
      if (o_pending >= 0) {
        if (ct == 0) {
          bulk_wait_read<0>();
          mbar_arrive(o_read(o_pending));
        }
        o_pending = -1;
      }
    }
  };

  // Q: this warpgroup's 64 rows of the K-major SW128 tile; k16 step kk is 32 bytes into
  // column atom kk / 4. K likewise (all BN rows).
  const uint64_t q_desc = gmma_desc(sQ + c * CR * 128, 16, 1024, kGmmaSwizzle128);
  const auto stage_of = [&](int i) { return (ring_base + i) % ST; };
  const auto parity_of = [&](int i) { return ((ring_base + i) / ST) & 1; };
  const auto key0_of = [&](int i) { return (sp.tile_begin + i) * BN; };
  const auto tile_masked = [&](int i) {
    return !tile_fully_visible(mask, sp.q0, sp.q_last, key0_of(i), key0_of(i) + BN - 1);
  };

  // The width of a K/V tile's softmax and P·V: BN keys, or the narrow last tile's first
  // Dv::kNarrowKeys (tile_configs.hpp). S is always BN wide: a narrow S product, or a
  // second copy of the tile step, made ptxas serialise the products (C7515), while a
  // branch inside the softmax and around the last P·V does not.
  using FullWidth = std::integral_constant<int, BN>;
  using NarrowWidth = std::integral_constant<int, Dv::kNarrowKeys>;
  // Issues S = Q·K(i)ᵀ (64 x BN) on the tensor cores (not committed).
  const auto issue_qk = [&](int i) {
    const uint64_t k_desc =
        gmma_desc(sK0 + stage_of(i) * Dv::kTileKVBytes, 16, 1024, kGmmaSwizzle128);
#pragma unroll
    for (int kk = 0; kk < DU / 16; ++kk)
      wgmma_ss<T, BN, 0, 0>(s_flat, gmma_desc_add(q_desc, (kk / 4) * BM * 128 + (kk % 4) * 32),
                            gmma_desc_add(k_desc, (kk / 4) * BN * 128 + (kk % 4) * 32), kk > 0);
  };
  // Whether tile i's P·V must take the exact scalar path: a boundary tile whose V holds a
  // NaN or inf in the row of a key that some row of the block does not see (block-uniform
  // condition; the warpgroup votes on named barrier 1 + c). Keys every row sees need no
  // scan (their NaN reaches every row in the reference too), nor rows outside the tensor
  // map, which the copy engine fills with zeros: the last tile of a dense non-causal row
  // block scans nothing, a causal diagonal tile only the BM − 1 keys of the triangle.
  const auto needs_exact_pv = [&](int i) {
    if (!tile_masked(i)) return false;
    const int k0 = key0_of(i);
    int all_lo = visible_keys(mask, sp.q_last, sp.q_last).begin;  // every row sees
    int all_hi = visible_keys(mask, sp.q0, sp.q0).end;            // [all_lo, all_hi)
    if (all_hi <= all_lo) all_lo = all_hi = INT_MAX;
    // Rows of the map: [0, capacity) of each sequence when dense; a packed tensor's other
    // sequences are real rows (its total is not known here: no upper bound); a paged
    // tile's last box with keys brings page rows up to the next multiple of the box rows
    // (up to 128 rows past the keys), the boxes after it are zero-filled.
    const int box_rows = tp.paged_box_rows;
    const int mem_hi = p.cu_seqlens_kv != nullptr ? INT_MAX
                       : p.block_table != nullptr
                           ? (p.mask.seqlen_kv + box_rows - 1) / box_rows * box_rows
                           : p.mask.seqlen_kv;
    const int lo1 = k0, hi1 = min(min(k0 + BN, all_lo), mem_hi);  // keys below [all_lo, all_hi)
    const int lo2 = max(k0, all_hi), hi2 = min(k0 + BN, mem_hi);  // and above it
    const int rows1 = max(hi1 - lo1, 0), rows = rows1 + max(hi2 - lo2, 0);
    bool bad = false;
    if (rows > 0) {
      // Every 16-byte chunk of each such V row (the swizzle only permutes a row's chunks):
      // thread ct reads chunk ct % kRowChunks of every kRowsPerPass-th row.
      // (D = 192: 24 chunks a row, 5 rows a pass; threads 120..127 re-read row 5 on.)
      constexpr int kRowChunks = D / 8, kRowsPerPass = 128 / kRowChunks;
      static_assert(kRowsPerPass >= 1, "a pass covers whole rows");
      const int chunk = ct % kRowChunks;
      const uint32_t sV = sV0 + stage_of(i) * Dv::kTileKVBytes + (chunk / 8) * BN * 128 +
                          (chunk % 8) * 16 - k0 * 128;
#pragma unroll 4
      for (int r = ct / kRowChunks; r < rows; r += kRowsPerPass)
        bad |= has_nonfinite<T>(lds128(sV + (r < rows1 ? lo1 + r : lo2 + r - rows1) * 128));
      bad = named_barrier_or(kConsumerBarrier0 + c, 128, bad);
    }
    // The vote's result is the same in every thread; __any_sync makes that visible to
    // ptxas (a wgmma under a branch it cannot prove warp-uniform is serialised, C7520).
    return __any_sync(0xffffffffu, bad) != 0;
  };
  // O += P(i)·V(i) with scalar FMAs over the keys each row sees (the exact path). Runs
  // only while no product is in flight: a non-wgmma write of O inside a wgmma pipeline
  // stage would make ptxas serialise every product (C7515).
  const auto pv_exact = [&](int i) {
    const uint32_t sV = sV0 + stage_of(i) * Dv::kTileKVBytes;
    const auto frag = [&](int, int kk, int reg, int src) {
      return __shfl_sync(0xffffffffu, pf[kk][reg], src);
    };
    const auto v_chunk = [&](int key, int chunk) { return sw128_addr<BN>(sV, key, chunk); };
    pv_visible_keys_only<T, 1, KS, OT>(acc_o, frag, v_chunk, mask, row0, key0_of(i));
  };
  // Issues O += P(i)·V(i) on the tensor cores (not committed), over the first `width` keys.
  const auto issue_pv = [&](int i, auto width) {
    constexpr int kSteps = decltype(width)::value / 16;
    const uint32_t sV = sV0 + stage_of(i) * Dv::kTileKVBytes;
#pragma unroll
    for (int part = 0; part < DU / kON; ++part) {
      // V as the MN-major B operand: k16 step = 16 key rows (2048 bytes); LBO = the next
      // 64-column atom, BN rows further.
      const uint64_t v_desc =
          gmma_desc(sV + part * (kON / 64) * BN * 128, BN * 128, 1024, kGmmaSwizzle128);
      float(&acc_part)[kON / 2] = reinterpret_cast<float(&)[kON / 2]>(acc_o[0][part * kON / 8]);
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk)
        wgmma_rs<T, kON, 1>(acc_part, pf[kk], gmma_desc_add(v_desc, kk * 2048), 1);
    }
  };
  // Softcap, mask and the online softmax of S(i) in place (P in f32); updates the row
  // max and sum and returns in alpha the factor O must be scaled by before P(i)·V(i).
  // The exponent of each p is (score − max)·mult (online_softmax_max says why) unless
  // every row of the warp has |max·mult| ≤ kFfmaExpBound: then the one-FFMA form
  // score·mult − round(max·mult) differs from it by at most kFfmaExpBound·2⁻²⁴ = 2⁻¹⁶,
  // a relative 1e-5 in p, far under the half ulp of bf16 / f16 that P is rounded to —
  // one instruction less per score on the path that real logits take.
  // Only the first `width` keys are taken (a narrow tile: the rest get p = 0).
  const auto softmax = [&](int i, float(&alpha)[2], auto width) {
    constexpr int WT = decltype(width)::value / 8;  // n8 blocks of this width
    float(&s_w)[1][WT][4] = reinterpret_cast<float(&)[1][WT][4]>(s_acc);
    softcap_and_mask(s_w, p.softcap, mask, use_softcap, cap_in, tile_masked(i), row0,
                     key0_of(i) + tig * 2);
    float max_used[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_half_max(s_w[0], h);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      online_softmax_max(row_max[h], mx, mult, max_used[h], alpha[h]);
    }
    const bool ffma_exp = __all_sync(0xffffffffu, fabsf(max_used[0] * mult) <= kFfmaExpBound &&
                                                      fabsf(max_used[1] * mult) <= kFfmaExpBound);
    float sum[2] = {0.f, 0.f};
    turns.take();
    if (ffma_exp) {
      const float neg_max[2] = {-max_used[0] * mult, -max_used[1] * mult};
#pragma unroll
      for (int nt = 0; nt < WT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float x = fmaf(s_w[0][nt][e], mult, neg_max[e / 2]);
          s_w[0][nt][e] = fast_exp2(x);
          sum[e / 2] += s_w[0][nt][e];
        }
    } else {
#pragma unroll
      for (int nt = 0; nt < WT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s_w[0][nt][e] = softmax_p(s_w[0][nt][e], max_used[e / 2], mult);
          sum[e / 2] += s_w[0][nt][e];
        }
    }
    turns.pass();
    // A narrow tile's other columns get p = 0 (P is packed full width: the same register
    // flow on both paths).
#pragma unroll
    for (int nt = WT; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s_acc[0][nt][e] = 0.f;
    // Per-thread partial sums; reduced across the quad at the end.
    row_sum[0] = row_sum[0] * alpha[0] + sum[0];
    row_sum[1] = row_sum[1] * alpha[1] + sum[1];
  };
  // O *= alpha per row, skipped when no row max of this warp moved (after the first tiles
  // a new maximum is rare; the warp's rows are its own, so the vote is per warp). Raising
  // the max only when it grows by more than 2^8 (FlashAttention-4), so that this almost
  // never runs, measured the same at D 128 (bench/RESULTS.md, session 14).
  const auto rescale_o = [&](const float(&alpha)[2]) {
    if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
    for (int nt = 0; nt < OT; ++nt) {
      acc_o[0][nt][0] *= alpha[0];
      acc_o[0][nt][1] *= alpha[0];
      acc_o[0][nt][2] *= alpha[1];
      acc_o[0][nt][3] *= alpha[1];
    }
  };
  // P in the input dtype, laid out as the A operand: the accumulators of S's n8 blocks
  // 2kk and 2kk + 1 (keys 16kk .. 16kk + 15) form A fragment kk.
  const auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {  // (a narrow tile's other keys: p = 0 from softmax)
      pf[kk][0] = pack2<T>(s_acc[0][2 * kk][0], s_acc[0][2 * kk][1]);
      pf[kk][1] = pack2<T>(s_acc[0][2 * kk][2], s_acc[0][2 * kk][3]);
      pf[kk][2] = pack2<T>(s_acc[0][2 * kk + 1][0], s_acc[0][2 * kk + 1][1]);
      pf[kk][3] = pack2<T>(s_acc[0][2 * kk + 1][2], s_acc[0][2 * kk + 1][3]);
    }
  };

  for (int n = 0;; ++n) {
    mbar_wait(full_q(c), n & 1);
    clk.mark(kFwdPhQWait);
    // (c is warp-uniform to ptxas, so is t: a wgmma under a branch on a value ptxas cannot
    // prove uniform is serialised, C7520.)
    const int t = tile_slot[c];
    if (t < 0) {
      release_o_stage();
      if (kTmaStoreO && ct == 0) bulk_wait_all();  // the O stores are done
      turns.finish();                              // consumer 1's first pass
      break;
    }
    sp = span_of(t);
    const int n_tiles = sp.n_tiles;
    row0 = sp.q0 + c * CR + warp_in_wg * 16 + g;
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[0][nt][e] = 0.f;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
    if (n_tiles == 0) {
      mbar_arrive(empty_q(c));  // no Q was loaded
      release_o_stage();        // (else after the first S is issued)
    }
    if (sp.q0 >= mask.seqlen_q) continue;  // a packed sequence shorter than this block
    // A consumer whose 64 rows all lie past the sequence (the last query block of a length
    // that is not a multiple of BM: 4096 = 21⅓ blocks of 192 rows at D = 64) computes
    // nothing and leaves the tensor cores to the others: it hands Q and each K / V stage
    // back to the producer once that stage's tile has landed (an arrival before then could
    // count towards a later phase of the stage). Warp-uniform vote: see needs_exact_pv.
    if (__any_sync(0xffffffffu, sp.q0 + c * CR >= mask.seqlen_q)) {
      release_o_stage();
      if (n_tiles > 0) mbar_arrive(empty_q(c));
      for (int i = 0; i < n_tiles; ++i) {
        turns.take();  // the turn of the other consumer's softmax i
        turns.pass();
        mbar_wait(full_k(stage_of(i)), parity_of(i));
        mbar_arrive(empty_k(stage_of(i)));
        mbar_wait(full_v(stage_of(i)), parity_of(i));
        mbar_arrive(empty_v(stage_of(i)));
      }
      // Its share of the last K stage's o_read (no stores). Not before that stage has landed:
      // the arrival then cannot count towards the stage's previous staged O.
      if (kOInK && n_tiles > 0 && ct == 0) mbar_arrive(o_read(stage_of(n_tiles - 1)));
      ring_base += n_tiles;
      continue;
    }
    if (n_tiles > 0) {
      // The narrow last tile: every key the rows see lies in the first kNarrowKeys keys of
      // tile n_tiles - 1 (block-uniform; __any_sync shows ptxas that it is warp-uniform, as
      // in needs_exact_pv).
      const bool narrow = Dv::kNarrowKeys > 0 &&
                          __any_sync(0xffffffffu, visible_keys(mask, sp.q0, sp.q_last).end <=
                                                      key0_of(n_tiles - 1) + Dv::kNarrowKeys);
      // The softmax of tile i, narrow when it is the narrow last tile.
      const auto softmax_at = [&](int i, float(&alpha)[2], bool narrow_here) {
        if constexpr (Dv::kNarrowKeys > 0) {
          if (narrow_here) return softmax(i, alpha, NarrowWidth{});
        }
        softmax(i, alpha, FullWidth{});
      };
      // Tile 0: S, softmax, P (O is still 0: no rescale).
      const auto first_tile = [&] {
        float alpha[2];
        mbar_wait(full_k(stage_of(0)), parity_of(0));
        wgmma_fence();
        issue_qk(0);
        wgmma_commit();
        release_o_stage();  // the previous work tile's O stores, under S(0)
        wgmma_wait<0>();
        wgmma_fence_operands(s_flat);
        clk.mark(kFwdPhFirstS);
        mbar_arrive(empty_k(stage_of(0)));
        // Q is read by S = Q·Kᵀ only: after this consumer's last S the producer may load its
        // rows of the next work tile's Q while this one finishes.
        if (n_tiles == 1) mbar_arrive(empty_q(c));
        softmax_at(0, alpha, n_tiles == 1 && narrow);
        pack_p();
        clk.mark(kFwdPhFirstSoft);
      };
      // Tile i: S(i) is issued before P(i-1)·V(i-1), and the softmax of S(i) runs while
      // that product is still on the tensor cores (FlashAttention-3's intra-warpgroup
      // overlap); O is rescaled once the product has landed. Tile i - 1 is never the last,
      // so its P·V is full width.
      const auto step = [&](int i) {
        float alpha[2];
        mbar_wait(full_k(stage_of(i)), parity_of(i));
        mbar_wait(full_v(stage_of(i - 1)), parity_of(i - 1));
        clk.mark(kFwdPhKvWait);
        const bool exact = needs_exact_pv(i - 1);
        if (exact) pv_exact(i - 1);
        wgmma_fence();  // pf and O were written by ordinary instructions
        issue_qk(i);
        wgmma_commit();
        // Each branch commits and waits for its own groups. (One commit after the branch
        // joined made ptxas close the group with a dummy HGMMA after the P·V products: the
        // wait for "all but one group" then waited for P(i-1)·V(i-1) too, and the softmax
        // below no longer overlapped it — ncu, bench/RESULTS.md.)
        if (!exact) {
          issue_pv(i - 1, FullWidth{});
          wgmma_commit();
          wgmma_wait<1>();  // S(i) has landed; P(i-1)·V(i-1) may still run
        } else {
          wgmma_wait<0>();  // S(i) has landed (P(i-1)·V(i-1) was done by pv_exact)
        }
        wgmma_fence_operands(s_flat);
        clk.mark(kFwdPhS);
        mbar_arrive(empty_k(stage_of(i)));
        if (i == n_tiles - 1) mbar_arrive(empty_q(c));
        softmax_at(i, alpha, i == n_tiles - 1 && narrow);
        clk.mark(kFwdPhSoftmax);
        wgmma_wait<0>();
        wgmma_fence_operands(acc_flat);
        mbar_arrive(empty_v(stage_of(i - 1)));
        rescale_o(alpha);
        pack_p();
        clk.mark(kFwdPhPv);
      };
      // The last tile's P·V.
      const auto last_pv = [&](auto width) {
        wgmma_fence();
        issue_pv(n_tiles - 1, width);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(acc_flat);
      };
      first_tile();
      for (int i = 1; i < n_tiles; ++i) step(i);
      const int last = n_tiles - 1;
      mbar_wait(full_v(stage_of(last)), parity_of(last));
      // (pv_exact needs no width: keys past the narrow part are hidden from every row.)
      if (needs_exact_pv(last)) {
        pv_exact(last);
      } else if constexpr (Dv::kNarrowKeys > 0) {
        if (narrow)
          last_pv(NarrowWidth{});
        else
          last_pv(FullWidth{});
      } else {
        last_pv(FullWidth{});
      }
      mbar_arrive(empty_v(stage_of(last)));
      clk.mark(kFwdPhLastPv);
    }

    // ---- normalise, store O and lse ------------------------------------------------------------
#pragma unroll
    for (float& l : row_sum) l += __shfl_xor_sync(0xffffffffu, l, 1);  // the quad's partial sums
#pragma unroll
    for (float& l : row_sum) l += __shfl_xor_sync(0xffffffffu, l, 2);
    // A segment of the split tail leaves its partial; the tile's last segment merges them all
    // and finishes the tile, the others hand the last K stage back (as an idle consumer).
    if (sp.piece_slot >= 0 &&
        !fwd_tail_merge<OT>(tp.tail, tp.total_tiles, sp.piece_slot, c, WG, kConsumerBarrier0 + c,
                            acc_flat, row_max, row_sum, mult, &tail_last[c])) {
      if (kOInK && ct == 0) mbar_arrive(o_read(stage_of(n_tiles - 1)));
      ring_base += n_tiles;
      continue;
    }
    float inv[2];  // 1 / row sum of this lane's two rows
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = row_sum[h];
      inv[h] = l == 0.f ? 0.f : 1.f / l;  // rows that see no key: o = 0
      const int row = row0 + 8 * h;
      if (p.lse != nullptr && tig == 0 && row < mask.seqlen_q)
        p.lse[sp.seq.lse + row] = row_lse(row_max[h], l, mult);
    }
    const auto o_pair = [&](int nt, int h) {  // columns 8nt + 2tig, +1 of row row0 + 8h
      return pack2<T>(acc_o[0][nt][2 * h] * inv[h], acc_o[0][nt][2 * h + 1] * inv[h]);
    };
    // Staged (Dv::kOStaging): this consumer's 64 x D block of O goes to shared memory in 64-column
    // atoms (stmatrix, in the loads' swizzle), kOPassAtoms at a time, and leaves in one TMA store
    // per atom from thread 0 (rows past the sequence, columns past head_dim_v dropped). Direct
    // stores (store_o_rows) took ~3400 cycles a D 128 work tile, staged ~1500 (session 27).
    const auto stage_o = [&](uint32_t sO) {
      uint32_t packed[OT][2];  // before any wait: the conversions need no shared memory
#pragma unroll
      for (int nt = 0; nt < OT; ++nt) packed[nt][0] = o_pair(nt, 0), packed[nt][1] = o_pair(nt, 1);
      static_assert(Dv::kOAtomBytes == kOAtomBytes && CR == 64, "fwd_tile_ops.cuh's O atoms");
      constexpr int kPass = Dv::kOPassAtoms;
#pragma unroll
      for (int a0 = 0; a0 < Dv::kOAtoms; a0 += kPass) {
        const int a1 = min(a0 + kPass, Dv::kOAtoms);
        if (a0 > 0) {  // the previous pass's stores have read the buffer
          if (kTmaStoreO && ct == 0) bulk_wait_read<0>();
          named_barrier_sync(kConsumerBarrier0 + c, 128);
        } else if (kOInK) {  // every consumer's last S has read the K stage
          mbar_wait(empty_k(stage_of(sp.n_tiles - 1)), parity_of(sp.n_tiles - 1));
        }
        stage_o_atoms(sO, packed, a0, a1, warp_in_wg, lane);
        if constexpr (kTmaStoreO) {
          bulk_fence_writes();
          named_barrier_sync(kConsumerBarrier0 + c, 128);
          if (ct == 0)
#pragma unroll
            for (int a = a0; a < a1; ++a)
              tma_store_4d(&tp.o_map, sO + (a - a0) * Dv::kOAtomBytes, a * 64, sp.q0 + c * CR,
                           sp.head, sp.batch);
        } else {
          named_barrier_sync(kConsumerBarrier0 + c, 128);
          T* o = static_cast<T*>(p.o) + sp.seq.o + sp.head * p.o_stride[2] +
                 (int64_t)(sp.q0 + c * CR) * p.o_stride[1];
          copy_o_atoms<kPass>(o, p.o_stride[1], sO, a0, a1,
                              min(CR, mask.seqlen_q - (sp.q0 + c * CR)), p.head_dim_v, ct);
        }
      }
    };
    bool staged = false;
    if constexpr (kOwnO) {
      // Its own buffer: written again once the previous work tile's stores have read it.
      if (kTmaStoreO && ct == 0) bulk_wait_read<0>();
      named_barrier_sync(kConsumerBarrier0 + c, 128);
      stage_o(sO0 + c * Dv::kOConsumerBytes);
      staged = true;
    } else if constexpr (kOInK) {
      // The last K tile's stage (the producer loads it again only after o_read: TMA stores
      // read it after this; the threads' own copies are done at the barrier below).
      if (n_tiles > 0) {
        stage_o(sK0 + stage_of(n_tiles - 1) * Dv::kTileKVBytes +
                c * Dv::kOPassAtoms * Dv::kOAtomBytes);
        if constexpr (kTmaStoreO) {
          o_pending = stage_of(n_tiles - 1);
        } else {
          named_barrier_sync(kConsumerBarrier0 + c, 128);
          if (ct == 0) mbar_arrive(o_read(stage_of(n_tiles - 1)));
        }
        staged = true;
      }
    }
    if (!staged)
      store_o_rows<OT>(static_cast<T*>(p.o) + sp.seq.o + sp.head * p.o_stride[2] + tig * 2,
                       p.o_stride[1], row0, mask.seqlen_q, p.head_dim_v, tig, o_pair);
    clk.mark(kFwdPhEpilogue);
    ring_base += n_tiles;
  }
#else
  __trap();
#endif
}

}  // namespace flash::cuda
