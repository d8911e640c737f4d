// Plain C++ (no SIMD) description of one CPU decode call: which rows and keys each
// work item covers, where each key row lives (dense, packed or paged: read in place,
// never gathered), and the per-call scratch that holds the partial results of split
// items until the deterministic combine. Shared by cpu_backend.cpp (threads) and
// decode-inl.h (the per-target kernels).
//
// Item = (sequence b, key chunk c, block of up to kDecodeHeadsPerItem kv heads). For
// each of its kv heads h an item holds the query rows of all heads of the GQA group
// times the sequence's query tokens (row r = g·Sq_b + i: head h·group + g, token i; at
// most kDecodeMaxRows per kv head), so every K/V row is read once. Taking the kv heads
// together makes an item read whole [key, heads, dim] rows: at Hkv=8, D=128, f32 one
// key of one head is 512 bytes of its own 4 KiB page, and items of one head each
// (measured: 10-11 GB/s on one dev-machine thread at 128k keys, 45% of a copy) paid a
// TLB walk per 512 bytes and defeated the hardware prefetchers.
// The chunk length depends only on the problem (never on the thread count), so results
// are bitwise identical for any OMP_NUM_THREADS.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/cpu_plan.h"
#include "dispatch/env_switch.hpp"
#include "dispatch/sequence_arrays.hpp"

namespace flash::cpu {

// Decode runs when seqlen_q · group fits an item (choose() in cpu_backend.cpp).
constexpr int64_t kDecodeMaxRows = 16;
// ... and the cache is long enough that splitting keys pays (below this, one prefill
// tile covers every key and there is nothing to split).
constexpr int64_t kDecodeMinKeys = 64;
// kv heads per item (a 4 KiB [heads, dim] row at Hkv=8, D=128, f32), fewer when the
// rows would not stay in L1: Q and O of an item are rows x (D + Dv) floats, 32 KiB at
// 32 rows and D = 128.
constexpr int64_t kDecodeHeadsPerItem = 8;
constexpr int64_t kDecodeRowsPerItem = 32;
// Aim for this many items: 8 per core of a 16-core host, so the dynamic schedule
// balances uneven sequences; a constant, not the thread count (determinism).
constexpr int64_t kDecodeTargetItems = 128;
// No chunk shorter than this: a split costs one partial (rows x head_dim_v) write and
// its combine, small next to reading 2 x 128 keys x head_dim per row of the group.
constexpr int64_t kDecodeMinChunkKeys = 128;
// Chunks are whole key blocks of the kernel (decode-inl.h: kDecodeBlock = 16 keys).
constexpr int64_t kDecodeChunkAlign = 64;
static_assert(kDecodeMaxRows >= 1 && kDecodeMaxRows <= 64, "rows of one item live in L1");
static_assert(kDecodeMinChunkKeys % kDecodeChunkAlign == 0, "chunks are whole blocks");

// Where key j of one (sequence, kv head) lives: row j of a dense/packed tensor, or row
// j % page_size of page pages[j / page_size].
struct KvRows {
  const char* base;  // dense/packed: key 0 of the sequence; paged: page 0, row 0 (head h)
  int64_t row_bytes;
  const int32_t* pages;  // the sequence's block_table row; null when not paged
  int64_t page_bytes, page_size;

  const char* Row(int64_t j) const {
    if (!pages) return base + j * row_bytes;
    return base + pages[j / page_size] * page_bytes + (j % page_size) * row_bytes;
  }
  // out[0..n) = Row(j0 .. j0+n-1), one division per call rather than per key.
  void Rows(int64_t j0, size_t n, const char** out) const {
    if (!pages) {
      for (size_t t = 0; t < n; ++t) out[t] = base + (j0 + static_cast<int64_t>(t)) * row_bytes;
      return;
    }
    int64_t page = j0 / page_size, off = j0 % page_size;
    for (size_t t = 0; t < n; ++t) {
      out[t] = base + pages[page] * page_bytes + off * row_bytes;
      if (++off == page_size) {
        off = 0;
        ++page;
      }
    }
  }
};

// Software prefetch of the K/V rows ahead (decode-inl.h, DecodeConfig), chosen per CPU
// vendor and element size. Intel (16-core device host, 16 threads, B = 8, 128k keys,
// 2026-11-24): f32 with no hints reached 0.88-0.90 of a host copy where hints into L1
// one block ahead reached 0.78-0.82; bf16 0.97-1.08 with the L1 hints and 0.87-0.89
// without; towards L2 was slower for both. (A guess at why: an f32 key row is twice the
// lines for the same arithmetic, so its hints hold more line-fill buffers per unit of
// compute, and the hardware prefetchers already follow an item's [key, heads, dim]
// rows.) AMD (dev machine): towards L2 two blocks ahead.
// FLASH_CPU_DECODE_PREFETCH=l1 / l2 / none forces one (for measuring the policies on a
// new machine; read on every call, another value is an error).
enum class DecodePrefetch { kL1Near, kL2Far, kNone };
inline DecodePrefetch DecodePrefetchPolicy(size_t element_bytes) {
  const std::string forced =
      flash::detail::env_switch("FLASH_CPU_DECODE_PREFETCH", {"l1", "l2", "none"});
  if (forced == "l1") return DecodePrefetch::kL1Near;
  if (forced == "l2") return DecodePrefetch::kL2Far;
  if (forced == "none") return DecodePrefetch::kNone;
  static const bool amd = __builtin_cpu_is("amd");
  if (amd) return DecodePrefetch::kL2Far;
  return element_bytes >= 4 ? DecodePrefetch::kNone : DecodePrefetch::kL1Near;
}

struct DecodeSequence {
  int64_t sq, sk;         // query tokens, visible keys
  int64_t q_row, kv_row;  // first packed row (0 when dense)
  int64_t chunks;         // key chunks (>= 1)
  int64_t first_item;     // items of b: first_item + c·head_blocks + kv head block
  int64_t scratch;        // offset of its partials in the scratch (chunks > 1 only)
  MaskRule mask;          // masks align per sequence (bottom-right)
};

struct DecodePlan {
  const flash_problem* p;
  const void *q, *k, *v;
  void* o;
  int64_t group;
  int64_t heads_per_item, head_blocks;  // kv heads per item, items per chunk
  int64_t chunk_keys;
  std::vector<DecodeSequence> seqs;
  int64_t items = 0;
  // Combine units: (b, h) pairs with more than one chunk, as b·heads_kv + h.
  std::vector<int64_t> combines;
  DecodePrefetch prefetch = DecodePrefetch::kL1Near;  // set by Make
  float* scratch = nullptr;  // partials: per split item, rows x (head_dim_v + 2) floats
  int64_t scratch_floats = 0;

  // Floats one item's partial takes: o (rows x head_dim_v, unnormalised), m, l.
  int64_t PartialFloats(int64_t rows) const { return rows * (p->head_dim_v + 2); }

  static DecodePlan Make(const flash_problem& p, const void* q, const void* k, const void* v,
                         void* o) {
    DecodePlan plan{};
    plan.p = &p;
    plan.q = q;
    plan.k = k;
    plan.v = v;
    plan.o = o;
    plan.group = p.heads_q / p.heads_kv;
    plan.prefetch = DecodePrefetchPolicy(ElementSize(p.dtype));
    plan.heads_per_item = std::min(
        p.heads_kv,
        std::clamp<int64_t>(kDecodeRowsPerItem / std::max<int64_t>(1, p.seqlen_q * plan.group), 1,
                            kDecodeHeadsPerItem));
    plan.head_blocks = (p.heads_kv + plan.heads_per_item - 1) / plan.heads_per_item;
    const detail::SequenceArrays arrays = detail::arrays_of(p);
    int64_t total_keys = 0;
    plan.seqs.resize(static_cast<size_t>(p.batch));
    for (int64_t b = 0; b < p.batch; ++b) {
      DecodeSequence& s = plan.seqs[static_cast<size_t>(b)];
      s.sq = detail::seq_len_q(p, arrays, b);
      s.sk = detail::seq_len_kv(p, arrays, b);
      s.q_row = p.cu_seqlens_q ? p.cu_seqlens_q[b] : 0;
      s.kv_row = p.cu_seqlens_kv ? p.cu_seqlens_kv[b] : 0;
      flash_problem one = p;
      one.seqlen_q = s.sq;
      one.seqlen_kv = s.sk;
      s.mask = MaskRule::From(one);
      if (s.sq > 0) total_keys += s.sk;
    }
    // One chunk length for the whole call, from the total work: long sequences get
    // more chunks, short ones one.
    const int64_t per_item =
        (total_keys * plan.head_blocks + kDecodeTargetItems - 1) / kDecodeTargetItems;
    plan.chunk_keys = std::max(kDecodeMinChunkKeys, (per_item + kDecodeChunkAlign - 1) /
                                                        kDecodeChunkAlign * kDecodeChunkAlign);
    for (int64_t b = 0; b < p.batch; ++b) {
      DecodeSequence& s = plan.seqs[static_cast<size_t>(b)];
      s.first_item = plan.items;
      s.chunks =
          s.sq == 0 ? 0 : std::max<int64_t>(1, (s.sk + plan.chunk_keys - 1) / plan.chunk_keys);
      plan.items += s.chunks * plan.head_blocks;
      s.scratch = plan.scratch_floats;
      if (s.chunks > 1) {
        plan.scratch_floats += s.chunks * p.heads_kv * plan.PartialFloats(s.sq * plan.group);
        for (int64_t h = 0; h < p.heads_kv; ++h) plan.combines.push_back(b * p.heads_kv + h);
      }
    }
    return plan;
  }

  // Sequence, first kv head and chunk of an item.
  void Decode(int64_t item, int64_t& b, int64_t& h, int64_t& c) const {
    const auto it =
        std::upper_bound(seqs.begin(), seqs.end(), item,
                         [](int64_t i, const DecodeSequence& s) { return i < s.first_item; });
    // The last sequence starting at or before item: a sequence without items shares
    // its first_item with the next one, so it is never the last such.
    b = static_cast<int64_t>(it - seqs.begin()) - 1;
    const DecodeSequence& s = seqs[static_cast<size_t>(b)];
    const int64_t local = item - s.first_item;
    c = local / head_blocks;
    h = local % head_blocks * heads_per_item;
  }

  // Partial of (b, h, chunk c): o, then m, then l.
  float* Partial(int64_t b, int64_t h, int64_t c) const {
    const DecodeSequence& s = seqs[static_cast<size_t>(b)];
    return scratch + s.scratch + (h * s.chunks + c) * PartialFloats(s.sq * group);
  }

  KvRows Keys(const void* base, const int64_t* stride, int64_t b, int64_t h) const {
    const DecodeSequence& s = seqs[static_cast<size_t>(b)];
    const int64_t eb = static_cast<int64_t>(ElementSize(p->dtype));
    if (p->block_table)
      return {static_cast<const char*>(At(base, p->dtype, stride, 0, 0, h)), stride[1] * eb,
              p->block_table + b * p->pages_per_seq, stride[0] * eb, p->page_size};
    const int64_t batch = p->cu_seqlens_kv ? 0 : b;
    return {static_cast<const char*>(At(base, p->dtype, stride, batch, s.kv_row, h)),
            stride[1] * eb, nullptr, 0, 1};
  }
  // Query / output row of token i, query head hq of sequence b.
  const void* QRow(int64_t b, int64_t i, int64_t hq) const {
    const DecodeSequence& s = seqs[static_cast<size_t>(b)];
    return p->cu_seqlens_q ? At(q, p->dtype, p->q_stride, 0, s.q_row + i, hq)
                           : At(q, p->dtype, p->q_stride, b, i, hq);
  }
  void* ORow(int64_t b, int64_t i, int64_t hq) const {
    const DecodeSequence& s = seqs[static_cast<size_t>(b)];
    return p->cu_seqlens_q ? At(o, p->dtype, p->o_stride, 0, s.q_row + i, hq)
                           : At(o, p->dtype, p->o_stride, b, i, hq);
  }
  // lse element: [Hq, total_q] when packed, else [B, Hq, Sq].
  float* Lse(int64_t b, int64_t i, int64_t hq) const {
    if (!p->lse) return nullptr;
    const DecodeSequence& s = seqs[static_cast<size_t>(b)];
    return p->cu_seqlens_q ? p->lse + hq * p->cu_seqlens_q[p->batch] + s.q_row + i
                           : p->lse + (b * p->heads_q + hq) * p->seqlen_q + i;
  }
};

}  // namespace flash::cpu
