#include "common/problem.hpp"

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

}  // namespace bench
