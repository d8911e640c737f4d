// The attention problem a benchmark measures: a packed flash::AttentionDesc
// ([batch, seq, heads, dim], no strides) plus the sizes derived from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "flash/flash.hpp"

namespace bench {

// head_dim_v as the library resolves it (0 means "same as head_dim").
inline int64_t value_dim(const flash::AttentionDesc& d) {
  return d.head_dim_v > 0 ? d.head_dim_v : d.head_dim;
}

// Element counts of the packed tensors.
inline size_t q_elements(const flash::AttentionDesc& d) {
  return static_cast<size_t>(d.batch * d.seqlen_q * d.heads_q * d.head_dim);
}
inline size_t k_elements(const flash::AttentionDesc& d) {
  return static_cast<size_t>(d.batch * d.seqlen_kv * d.heads_kv * d.head_dim);
}
inline size_t v_elements(const flash::AttentionDesc& d) {
  return static_cast<size_t>(d.batch * d.seqlen_kv * d.heads_kv * value_dim(d));
}
inline size_t o_elements(const flash::AttentionDesc& d) {
  return static_cast<size_t>(d.batch * d.seqlen_q * d.heads_q * value_dim(d));
}
inline size_t lse_elements(const flash::AttentionDesc& d) {
  return static_cast<size_t>(d.batch * d.heads_q * d.seqlen_q);
}

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
