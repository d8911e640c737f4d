// A user's own naive attention (f32/double, packed [batch, seq, heads, dim]), to
// check libflashattn from outside the repository with nothing but its public API.
#pragma once

#include <cmath>
#include <cstdint>
#include <flash/flash.hpp>
#include <limits>
#include <vector>

struct NaiveResult {
  std::vector<double> o, lse;
};

inline NaiveResult naive_attention(const flash::AttentionDesc& d, const std::vector<float>& q,
                                   const std::vector<float>& k, const std::vector<float>& v) {
  const int64_t dv = d.head_dim_v ? d.head_dim_v : d.head_dim;
  const double scale = d.scale ? d.scale : 1.0 / std::sqrt(double(d.head_dim));
  NaiveResult r{std::vector<double>(d.batch * d.seqlen_q * d.heads_q * dv, 0.0),
                std::vector<double>(d.batch * d.heads_q * d.seqlen_q, 0.0)};
  std::vector<double> s(d.seqlen_kv);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads_q; ++h) {
      const int64_t kh = h / (d.heads_q / d.heads_kv);
      for (int64_t i = 0; i < d.seqlen_q; ++i) {
        const int64_t diag = i + d.seqlen_kv - d.seqlen_q;
        double m = -std::numeric_limits<double>::infinity(), sum = 0;
        std::vector<char> seen(d.seqlen_kv, 0);
        for (int64_t j = 0; j < d.seqlen_kv; ++j) {
          if ((d.causal && j > diag) || (d.window_left >= 0 && j < diag - d.window_left) ||
              (d.window_right >= 0 && j > diag + d.window_right))
            continue;
          double dot = 0;
          for (int64_t e = 0; e < d.head_dim; ++e)
            dot += double(q[((b * d.seqlen_q + i) * d.heads_q + h) * d.head_dim + e]) *
                   k[((b * d.seqlen_kv + j) * d.heads_kv + kh) * d.head_dim + e];
          s[j] = dot * scale;
          if (d.softcap > 0) s[j] = d.softcap * std::tanh(s[j] / d.softcap);
          seen[j] = 1;
          m = std::max(m, s[j]);
        }
        for (int64_t j = 0; j < d.seqlen_kv; ++j)
          if (seen[j]) sum += std::exp(s[j] - m);
        const int64_t row = (b * d.heads_q + h) * d.seqlen_q + i;
        r.lse[row] = sum > 0 ? m + std::log(sum) : -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < d.seqlen_kv; ++j) {
          if (!seen[j]) continue;
          const double p = std::exp(s[j] - m) / sum;
          for (int64_t e = 0; e < dv; ++e)
            r.o[((b * d.seqlen_q + i) * d.heads_q + h) * dv + e] +=
                p * v[((b * d.seqlen_kv + j) * d.heads_kv + kh) * dv + e];
        }
      }
    }
  return r;
}
