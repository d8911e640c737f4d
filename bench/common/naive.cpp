#include "common/naive.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/dtype.hpp"
#include "common/problem.hpp"

namespace bench {
namespace {

float round_to(flash::DType dtype, float x) {
  switch (dtype) {
    case flash::DType::f32:
      return x;
    case flash::DType::f16:
      return f16_to_float(float_to_f16(x));
    case flash::DType::bf16:
      return bf16_to_float(float_to_bf16(x));
  }
  return x;
}

float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t x = 0; x < n; ++x) sum += a[x] * b[x];
  return sum;
}

float resolved_scale(const flash::AttentionDesc& d) {
  return d.scale > 0.0f ? d.scale : 1.0f / std::sqrt(static_cast<float>(d.head_dim));
}

// One row of one head: the visible keys, their capped scores' tanh (for the softcap
// gradient) and the probabilities, each rounded as a framework would store them.
struct RowProbabilities {
  std::vector<int64_t> keys;
  std::vector<float> tanh_of_score;  // softcap only
  std::vector<float> p;
};

RowProbabilities row_probabilities(const flash::AttentionDesc& d, flash::DType dtype,
                                   const float* q_row, const std::vector<float>& k, int64_t i) {
  RowProbabilities row;
  const float scale = resolved_scale(d);
  std::vector<float> s;
  for (int64_t j = 0; j < d.seqlen_kv; ++j) {
    if (!visible(d, i, j)) continue;
    float score =
        round_to(dtype, round_to(dtype, dot(q_row, &k[j * d.head_dim], d.head_dim)) * scale);
    if (d.softcap > 0.0f) {
      const float t = std::tanh(score / d.softcap);
      row.tanh_of_score.push_back(t);
      score = round_to(dtype, d.softcap * t);
    }
    row.keys.push_back(j);
    s.push_back(score);
  }
  if (s.empty()) return row;
  const float max_score = *std::max_element(s.begin(), s.end());
  float sum = 0.0f;
  for (float& x : s) sum += (x = std::exp(x - max_score));
  for (float x : s) row.p.push_back(round_to(dtype, x / sum));
  return row;
}

}  // namespace

std::vector<float> naive_forward(const flash::AttentionDesc& d, flash::DType dtype,
                                 const std::vector<float>& q, const std::vector<float>& k,
                                 const std::vector<float>& v) {
  const int64_t H = d.heads_q, D = d.head_dim, Dv = value_dim(d);
  std::vector<float> o(static_cast<size_t>(d.seqlen_q * H * Dv), 0.0f);
  std::vector<float> acc(static_cast<size_t>(Dv));
  for (int64_t i = 0; i < d.seqlen_q; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const RowProbabilities row = row_probabilities(d, dtype, &q[(i * H + h) * D], k, i);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (size_t n = 0; n < row.keys.size(); ++n)
        for (int64_t x = 0; x < Dv; ++x) acc[x] += row.p[n] * v[row.keys[n] * Dv + x];
      for (int64_t x = 0; x < Dv; ++x) o[(i * H + h) * Dv + x] = round_to(dtype, acc[x]);
    }
  return o;
}

NaiveGradients naive_backward(const flash::AttentionDesc& d, flash::DType dtype,
                              const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, const std::vector<float>& dout) {
  const int64_t H = d.heads_q, D = d.head_dim, Dv = value_dim(d);
  const float scale = resolved_scale(d);
  // Accumulated in f32 over rows and heads, rounded once at the end like one GEMM.
  NaiveGradients g{std::vector<float>(q.size(), 0.0f), std::vector<float>(k.size(), 0.0f),
                   std::vector<float>(v.size(), 0.0f)};
  for (int64_t i = 0; i < d.seqlen_q; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const float* q_row = &q[(i * H + h) * D];
      const float* do_row = &dout[(i * H + h) * Dv];
      const RowProbabilities row = row_probabilities(d, dtype, q_row, k, i);
      const size_t n_keys = row.keys.size();
      std::vector<float> dp(n_keys);
      float p_dot_dp = 0.0f;
      for (size_t n = 0; n < n_keys; ++n) {
        dp[n] = round_to(dtype, dot(do_row, &v[row.keys[n] * Dv], Dv));
        p_dot_dp += row.p[n] * dp[n];
      }
      for (size_t n = 0; n < n_keys; ++n) {
        const int64_t j = row.keys[n];
        for (int64_t x = 0; x < Dv; ++x) g.dv[j * Dv + x] += row.p[n] * do_row[x];
        float ds = round_to(dtype, row.p[n] * (dp[n] - p_dot_dp));
        if (d.softcap > 0.0f) {  // d(cap·tanh(s/cap))/ds = 1 - tanh²
          const float t = row.tanh_of_score[n];
          ds = round_to(dtype, ds * (1.0f - t * t));
        }
        ds = round_to(dtype, ds * scale);
        for (int64_t x = 0; x < D; ++x) {
          g.dq[(i * H + h) * D + x] += ds * k[j * D + x];
          g.dk[j * D + x] += ds * q_row[x];
        }
      }
    }
  for (std::vector<float>* t : {&g.dq, &g.dk, &g.dv})
    for (float& x : *t) x = round_to(dtype, x);
  return g;
}

}  // namespace bench
