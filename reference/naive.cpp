#include "reference/naive.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/dtype.hpp"

namespace flash::reference {
namespace {

int64_t at(const int64_t* stride, int64_t b, int64_t s, int64_t h) {
  return b * stride[0] + s * stride[1] + h * stride[2];
}

struct NaiveRow {
  std::vector<float> prob;  // rounded to dtype; 0 where masked
  std::vector<float> tanh_u;
  float lse = -std::numeric_limits<float>::infinity();
};

NaiveRow naive_row(const flash_problem& p, const void* q, const void* k, int64_t b, int64_t h,
                   int64_t i) {
  const int64_t kvh = h / (p.heads_q / p.heads_kv);
  NaiveRow row;
  row.prob.assign(p.seqlen_kv, 0.f);
  row.tanh_u.assign(p.seqlen_kv, 0.f);
  std::vector<float> score(p.seqlen_kv, 0.f);
  std::vector<char> seen(p.seqlen_kv, 0);
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < p.seqlen_kv; ++j) {
    if (!reference::visible(p, i, j)) continue;
    float dot = 0;
    for (int64_t d = 0; d < p.head_dim; ++d)
      dot += static_cast<float>(reference::load(q, p.dtype, at(p.q_stride, b, i, h) + d)) *
             static_cast<float>(reference::load(k, p.dtype, at(p.k_stride, b, j, kvh) + d));
    float s = static_cast<float>(reference::round_to(p.dtype, dot * p.scale));
    if (p.softcap > 0) {
      row.tanh_u[j] = std::tanh(s / p.softcap);
      s = static_cast<float>(reference::round_to(p.dtype, p.softcap * row.tanh_u[j]));
    }
    score[j] = s;
    seen[j] = 1;
    if (s > max) max = s;
  }
  float sum = 0;
  for (int64_t j = 0; j < p.seqlen_kv; ++j)
    if (seen[j]) sum += std::exp(score[j] - max);
  // No visible key, or all visible scores -inf (none NaN): the row attends to nothing.
  bool has_nan = false;
  for (int64_t j = 0; j < p.seqlen_kv; ++j) has_nan |= seen[j] && std::isnan(score[j]);
  if (max == -std::numeric_limits<float>::infinity() && !has_nan) return row;
  row.lse = max + std::log(sum);
  for (int64_t j = 0; j < p.seqlen_kv; ++j)
    if (seen[j])
      row.prob[j] =
          static_cast<float>(reference::round_to(p.dtype, std::exp(score[j] - max) / sum));
  return row;
}

}  // namespace

ForwardResult naive_forward(const flash_problem& p, const void* q, const void* k, const void* v) {
  reference::ForwardResult r;
  const int64_t dv = p.head_dim_v;
  r.o.assign(static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q * dv), 0.0);
  r.lse.assign(static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q), 0.0);
  std::vector<float> acc(dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t kvh = h / (p.heads_q / p.heads_kv);
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const NaiveRow row = naive_row(p, q, k, b, h, i);
        r.lse[(b * p.heads_q + h) * p.seqlen_q + i] = row.lse;
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t j = 0; j < p.seqlen_kv; ++j) {
          if (row.prob[j] == 0.f) continue;
          for (int64_t d = 0; d < dv; ++d)
            acc[d] += row.prob[j] * static_cast<float>(
                                        reference::load(v, p.dtype, at(p.v_stride, b, j, kvh) + d));
        }
        for (int64_t d = 0; d < dv; ++d)
          r.o[((b * p.seqlen_q + i) * p.heads_q + h) * dv + d] =
              reference::round_to(p.dtype, acc[d]);
      }
    }
  return r;
}

BackwardResult naive_backward(const flash_problem& p, const void* q, const void* k, const void* v,
                              const void* dout) {
  reference::BackwardResult r;
  const int64_t dqk = p.head_dim, dv = p.head_dim_v;
  std::vector<float> dq_acc(static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q * dqk), 0.f);
  std::vector<float> dk_acc(static_cast<size_t>(p.batch * p.seqlen_kv * p.heads_kv * dqk), 0.f);
  std::vector<float> dv_acc(static_cast<size_t>(p.batch * p.seqlen_kv * p.heads_kv * dv), 0.f);
  std::vector<float> dprob(p.seqlen_kv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t kvh = h / (p.heads_q / p.heads_kv);
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const NaiveRow row = naive_row(p, q, k, b, h, i);
        const int64_t doi = at(p.o_stride, b, i, h), qi = at(p.q_stride, b, i, h);
        float delta = 0;
        for (int64_t j = 0; j < p.seqlen_kv; ++j) {
          if (row.prob[j] == 0.f) continue;
          float dot = 0;
          for (int64_t d = 0; d < dv; ++d)
            dot += static_cast<float>(reference::load(dout, p.dtype, doi + d)) *
                   static_cast<float>(reference::load(v, p.dtype, at(p.v_stride, b, j, kvh) + d));
          dprob[j] = static_cast<float>(reference::round_to(p.dtype, dot));
          delta += row.prob[j] * dprob[j];
        }
        for (int64_t j = 0; j < p.seqlen_kv; ++j) {
          if (row.prob[j] == 0.f) continue;
          float ds = row.prob[j] * (dprob[j] - delta);
          if (p.softcap > 0) ds *= 1.f - row.tanh_u[j] * row.tanh_u[j];
          ds = static_cast<float>(reference::round_to(p.dtype, ds)) * p.scale;
          const int64_t kj = at(p.k_stride, b, j, kvh);
          const int64_t packed_kv = (b * p.seqlen_kv + j) * p.heads_kv + kvh;
          float* dq = &dq_acc[((b * p.seqlen_q + i) * p.heads_q + h) * dqk];
          for (int64_t d = 0; d < dqk; ++d) {
            dq[d] += ds * static_cast<float>(reference::load(k, p.dtype, kj + d));
            dk_acc[packed_kv * dqk + d] +=
                ds * static_cast<float>(reference::load(q, p.dtype, qi + d));
          }
          for (int64_t d = 0; d < dv; ++d)
            dv_acc[packed_kv * dv + d] +=
                row.prob[j] * static_cast<float>(reference::load(dout, p.dtype, doi + d));
        }
      }
    }
  auto rounded = [&](const std::vector<float>& acc) {
    std::vector<double> out(acc.size());
    for (size_t i = 0; i < acc.size(); ++i) out[i] = reference::round_to(p.dtype, acc[i]);
    return out;
  };
  r.dq = rounded(dq_acc);
  r.dk = rounded(dk_acc);
  r.dv = rounded(dv_acc);
  return r;
}

}  // namespace flash::reference
