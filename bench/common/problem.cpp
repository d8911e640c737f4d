#include "common/problem.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

namespace bench {

std::string shape_label(const flash::AttentionDesc& d) {
  std::ostringstream s;
  s << "B" << d.batch << "_Hq" << d.heads_q << "_Hkv" << d.heads_kv << "_Sq" << d.seqlen_q << "_Sk"
    << d.seqlen_kv << "_D" << d.head_dim;
  if (value_dim(d) != d.head_dim) s << "_Dv" << value_dim(d);
  return s.str();
}

std::string mask_label(const flash::AttentionDesc& d) {
  std::ostringstream s;
  const char* sep = "";
  if (d.causal) {
    s << "causal";
    sep = "+";
  }
  if (d.window_left >= 0 || d.window_right >= 0) {
    s << sep << "window(" << d.window_left << "," << d.window_right << ")";
    sep = "+";
  }
  if (d.softcap > 0.0f) s << sep << "softcap(" << d.softcap << ")";
  const std::string out = s.str();
  return out.empty() ? "none" : out;
}

flash::AttentionDesc Problem::desc() const {
  flash::AttentionDesc d = shape;
  auto data = [](const std::vector<int32_t>& a) { return a.empty() ? nullptr : a.data(); };
  d.cu_seqlens_q = data(cu_seqlens_q);
  d.cu_seqlens_kv = data(cu_seqlens_kv);
  d.seqlens_kv = data(seqlens_kv);
  d.block_table = data(block_table);
  return d;
}

std::vector<int32_t> cumulative_lengths(const std::vector<int64_t>& lengths) {
  std::vector<int32_t> cu(1, 0);
  for (int64_t n : lengths) cu.push_back(static_cast<int32_t>(cu.back() + n));
  return cu;
}

std::vector<int32_t> shuffled_pages(int64_t count, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(count));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  return ids;
}

std::string layout_label(const flash::AttentionDesc& d) {
  std::ostringstream s;
  const char* sep = "";
  if (d.block_table) {
    s << "paged " << d.page_size;
    sep = ", ";
  }
  if (d.seqlens_kv) {
    s << sep << "seqlens_kv";
    sep = ", ";
  }
  if (d.cu_seqlens_q || d.cu_seqlens_kv) s << sep << "varlen";
  return s.str();
}

}  // namespace bench
