// The attention problem a benchmark measures: a flash::AttentionDesc without strides
// (packed [batch, seq, heads, dim], or the inference layouts of sequences.hpp with their
// arrays in host memory) plus the sizes derived from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/sequences.hpp"
#include "flash/flash.hpp"

namespace bench {

// head_dim_v as the library resolves it (0 means "same as head_dim").
inline int64_t value_dim(const flash::AttentionDesc& d) {
  return d.head_dim_v > 0 ? d.head_dim_v : d.head_dim;
}

// Element counts of the packed tensors (k/v: the whole cache or page pool).
inline size_t q_elements(const flash::AttentionDesc& d) {
  return static_cast<size_t>(q_rows(d) * d.heads_q * d.head_dim);
}
inline size_t k_elements(const flash::AttentionDesc& d) {
  return static_cast<size_t>(kv_rows(d) * d.heads_kv * d.head_dim);
}
inline size_t v_elements(const flash::AttentionDesc& d) {
  return static_cast<size_t>(kv_rows(d) * d.heads_kv * value_dim(d));
}
inline size_t o_elements(const flash::AttentionDesc& d) {
  return static_cast<size_t>(q_rows(d) * d.heads_q * value_dim(d));
}
inline size_t lse_elements(const flash::AttentionDesc& d) {
  return static_cast<size_t>(q_rows(d) * d.heads_q);
}

// A problem that owns its inference arrays (host memory). desc() sets the pointers on
// each call, so copies and moves of a Problem stay valid.
struct Problem {
  flash::AttentionDesc shape;  // every scalar field; its array pointers are ignored
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_kv, seqlens_kv, block_table;  // empty: unset
  flash::AttentionDesc desc() const;
};

// 0, l0, l0 + l1, ...: the cu_seqlens of a packed batch with these lengths.
std::vector<int32_t> cumulative_lengths(const std::vector<int64_t>& lengths);

// Page ids 0 .. count-1 in a seeded random order: a block table whose neighbouring
// entries are not neighbouring pages, as in a cache that has served many requests.
std::vector<int32_t> shuffled_pages(int64_t count, uint64_t seed);

// "paged 64, seqlens_kv, varlen" for the inference fields set, or "" when none.
std::string layout_label(const flash::AttentionDesc& d);

// Does query row i see key j? The descriptor's mask, bottom-right aligned: with
// diag = i + Sk - Sq, (!causal || j <= diag) && (wl < 0 || j >= diag - wl)
// && (wr < 0 || j <= diag + wr).
inline bool visible(const flash::AttentionDesc& d, int64_t i, int64_t j) {
  const int64_t diag = i + d.seqlen_kv - d.seqlen_q;
  return (!d.causal || j <= diag) && (d.window_left < 0 || j >= diag - d.window_left) &&
         (d.window_right < 0 || j <= diag + d.window_right);
}

// "B1_Hq8_Hkv8_Sq1024_Sk1024_D64" (+ "_Dv32" when head_dim_v differs). Stable: the
// Google Benchmark names and the CI filter are built from it.
std::string shape_label(const flash::AttentionDesc& d);

// "causal", "window(L,R)", "softcap(x)" joined with '+', or "none".
std::string mask_label(const flash::AttentionDesc& d);

}  // namespace bench
