#include "common/flops.hpp"

#include <algorithm>

#include "common/dtype.hpp"
#include "common/problem.hpp"

namespace bench {
namespace {

// Backward recomputes Q·Kᵀ and P and runs four more GEMMs: FlashAttention's 2.5×.
constexpr double kBackwardWorkRatio = 2.5;
// One multiply-add counts as two floating-point operations.
constexpr double kFlopsPerMultiplyAdd = 2.0;

bool has_window(const flash::AttentionDesc& d) { return d.window_left >= 0 || d.window_right >= 0; }

}  // namespace

int64_t exact_visible_pairs(const flash::AttentionDesc& d) {
  int64_t pairs = 0;
  for (int64_t i = 0; i < d.seqlen_q; ++i) {
    // Bottom-right alignment: the diagonal of row i is key i + Sk - Sq.
    const int64_t diag = i + d.seqlen_kv - d.seqlen_q;
    int64_t last = d.seqlen_kv - 1;
    if (d.causal) last = std::min(last, diag);
    if (d.window_right >= 0) last = std::min(last, diag + d.window_right);
    int64_t first = 0;
    if (d.window_left >= 0) first = std::max<int64_t>(first, diag - d.window_left);
    pairs += std::max<int64_t>(0, last - first + 1);
  }
  return pairs;
}

double counted_pairs(const flash::AttentionDesc& d) {
  const double full = static_cast<double>(d.seqlen_q) * static_cast<double>(d.seqlen_kv);
  if (!d.causal && !has_window(d)) return full;
  if (d.causal && !has_window(d) && d.seqlen_q == d.seqlen_kv) return full / 2;
  return static_cast<double>(exact_visible_pairs(d));
}

double forward_flops(const flash::AttentionDesc& d) {
  const double dims = static_cast<double>(d.head_dim + value_dim(d));
  const double per_pair = kFlopsPerMultiplyAdd * dims * static_cast<double>(d.heads_q);
  if (!has_sequence_arrays(d)) return per_pair * static_cast<double>(d.batch) * counted_pairs(d);
  double pairs = 0.0;
  for (int64_t b = 0; b < d.batch; ++b) pairs += counted_pairs(dense_sequence(d, b));
  return per_pair * pairs;
}

double backward_flops(const flash::AttentionDesc& d) {
  return kBackwardWorkRatio * forward_flops(d);
}

double kv_bytes_read(const flash::AttentionDesc& d) {
  int64_t keys = 0;
  if (!has_sequence_arrays(d) && d.batch > 0)
    keys = d.batch * keys_read(d, 0);  // every sequence alike
  else
    for (int64_t b = 0; b < d.batch; ++b) keys += keys_read(d, b);
  const double row = static_cast<double>(d.heads_kv * (d.head_dim + value_dim(d)));
  return static_cast<double>(element_size(d.dtype)) * row * static_cast<double>(keys);
}

double forward_bytes(const flash::AttentionDesc& d, bool with_lse) {
  const double e = static_cast<double>(element_size(d.dtype));
  double bytes = e * static_cast<double>(q_elements(d) + o_elements(d)) + kv_bytes_read(d);
  if (with_lse) bytes += sizeof(float) * static_cast<double>(lse_elements(d));
  return bytes;
}

double backward_bytes(const flash::AttentionDesc& d) {
  const double e = static_cast<double>(element_size(d.dtype));
  const double reads = static_cast<double>(q_elements(d) + k_elements(d) + v_elements(d) +
                                           2 * o_elements(d));  // q, k, v, o, dout
  const double writes =
      static_cast<double>(q_elements(d) + k_elements(d) + v_elements(d));  // dq, dk, dv
  return e * (reads + writes) + sizeof(float) * static_cast<double>(lse_elements(d));
}

}  // namespace bench
