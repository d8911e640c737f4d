// Reference attention. Tolerance class: exact up to double rounding (~1e-15
// relative); speed is irrelevant (scalar loops). See reference.hpp.
#include "reference/reference.hpp"

#include <cmath>
#include <limits>

#include "reference/dtype.hpp"
#include "reference/sequences.hpp"

namespace flash::reference {
namespace {

int64_t at(const int64_t* stride, int64_t b, int64_t s, int64_t h) {
  return b * stride[0] + s * stride[1] + h * stride[2];
}

// Scores of one query row against every key, after scale and softcap; the row's
// softmax statistics. Masked keys are flagged invisible.
struct Row {
  std::vector<double> score;   // s_j (only meaningful where seen[j])
  std::vector<double> tanh_u;  // tanh(u_j / softcap), for the softcap derivative
  std::vector<char> seen;
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0;  // sum_j exp(s_j - max)
  bool has_nan = false;

  // A row with no visible key, or whose visible scores are all -inf (and none NaN),
  // attends to nothing: o = 0, lse = -inf, no gradient. This is what a tiled kernel
  // computes and what FlashAttention defines.
  bool empty() const { return max == -std::numeric_limits<double>::infinity() && !has_nan; }
  double lse() const {
    return empty() ? -std::numeric_limits<double>::infinity() : max + std::log(sum);
  }
  double prob(int64_t j) const { return seen[j] && !empty() ? std::exp(score[j] - lse()) : 0.0; }
};

Row score_row(const flash_problem& p, const void* q, const void* k, int64_t b, int64_t h,
              int64_t i) {
  const int64_t kv_head = h / (p.heads_q / p.heads_kv);
  Row row;
  row.score.assign(p.seqlen_kv, 0.0);
  row.tanh_u.assign(p.seqlen_kv, 0.0);
  row.seen.assign(p.seqlen_kv, 0);
  const int64_t qi = at(p.q_stride, b, i, h);
  for (int64_t j = 0; j < p.seqlen_kv; ++j) {
    if (!visible(p, i, j)) continue;
    const int64_t kj = at(p.k_stride, b, j, kv_head);
    double dot = 0;
    for (int64_t d = 0; d < p.head_dim; ++d)
      dot += load(q, p.dtype, qi + d) * load(k, p.dtype, kj + d);
    double s = dot * static_cast<double>(p.scale);
    if (p.softcap > 0) {
      row.tanh_u[j] = std::tanh(s / p.softcap);
      s = p.softcap * row.tanh_u[j];
    }
    row.score[j] = s;
    row.seen[j] = 1;
    row.has_nan |= std::isnan(s);
    if (s > row.max) row.max = s;  // NaN scores never become the max; they poison sum
  }
  for (int64_t j = 0; j < p.seqlen_kv; ++j)
    if (row.seen[j]) row.sum += std::exp(row.score[j] - row.max);
  return row;
}

}  // namespace

bool visible(const flash_problem& p, int64_t i, int64_t j) {
  // Distances, not diag -/+ window: windows may be as large as INT64_MAX, and
  // |diag - j| <= seqlen_q + seqlen_kv cannot overflow.
  const int64_t diag = i + p.seqlen_kv - p.seqlen_q;
  if (p.causal && j > diag) return false;
  if (p.window_left >= 0 && diag - j > p.window_left) return false;
  if (p.window_right >= 0 && j - diag > p.window_right) return false;
  return true;
}

namespace {

ForwardResult forward_dense(const flash_problem& p, const void* q, const void* k, const void* v) {
  ForwardResult r;
  const int64_t dv = p.head_dim_v;
  r.o.assign(static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q * dv), 0.0);
  r.lse.assign(static_cast<size_t>(p.batch * p.heads_q * p.seqlen_q), 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t kv_head = h / (p.heads_q / p.heads_kv);
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const Row row = score_row(p, q, k, b, h, i);
        r.lse[(b * p.heads_q + h) * p.seqlen_q + i] = row.lse();
        double* o = &r.o[((b * p.seqlen_q + i) * p.heads_q + h) * dv];
        for (int64_t j = 0; j < p.seqlen_kv; ++j) {
          if (!row.seen[j]) continue;
          const double prob = row.prob(j);
          const int64_t vj = at(p.v_stride, b, j, kv_head);
          for (int64_t d = 0; d < dv; ++d) o[d] += prob * load(v, p.dtype, vj + d);
        }
      }
    }
  return r;
}

BackwardResult backward_dense(const flash_problem& p, const void* q, const void* k, const void* v,
                              const void* dout) {
  BackwardResult r;
  const int64_t d_qk = p.head_dim, d_v = p.head_dim_v;
  r.dq.assign(static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q * d_qk), 0.0);
  r.dk.assign(static_cast<size_t>(p.batch * p.seqlen_kv * p.heads_kv * d_qk), 0.0);
  r.dv.assign(static_cast<size_t>(p.batch * p.seqlen_kv * p.heads_kv * d_v), 0.0);
  std::vector<double> dprob(static_cast<size_t>(p.seqlen_kv));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t kv_head = h / (p.heads_q / p.heads_kv);
      for (int64_t i = 0; i < p.seqlen_q; ++i) {
        const Row row = score_row(p, q, k, b, h, i);
        const int64_t qi = at(p.q_stride, b, i, h);
        const int64_t doi = at(p.o_stride, b, i, h);
        // dP_ij = dO_i . V_j ;  delta_i = sum_j P_ij dP_ij (= rowsum(dO * O)).
        double delta = 0;
        for (int64_t j = 0; j < p.seqlen_kv; ++j) {
          if (!row.seen[j]) continue;
          const int64_t vj = at(p.v_stride, b, j, kv_head);
          double dot = 0;
          for (int64_t d = 0; d < d_v; ++d)
            dot += load(dout, p.dtype, doi + d) * load(v, p.dtype, vj + d);
          dprob[j] = dot;
          delta += row.prob(j) * dot;
        }
        double* dq = &r.dq[((b * p.seqlen_q + i) * p.heads_q + h) * d_qk];
        for (int64_t j = 0; j < p.seqlen_kv; ++j) {
          if (!row.seen[j]) continue;
          const double prob = row.prob(j);
          // dS = P (dP - delta); through softcap: ds/du = 1 - tanh^2(u / softcap).
          double dscore = prob * (dprob[j] - delta);
          if (p.softcap > 0) dscore *= 1.0 - row.tanh_u[j] * row.tanh_u[j];
          const double dlogit = dscore * static_cast<double>(p.scale);
          const int64_t kj = at(p.k_stride, b, j, kv_head);
          const int64_t vj_packed = (b * p.seqlen_kv + j) * p.heads_kv + kv_head;
          double* dk = &r.dk[vj_packed * d_qk];
          double* dv = &r.dv[vj_packed * d_v];
          for (int64_t d = 0; d < d_qk; ++d) {
            dq[d] += dlogit * load(k, p.dtype, kj + d);
            dk[d] += dlogit * load(q, p.dtype, qi + d);
          }
          for (int64_t d = 0; d < d_v; ++d) dv[d] += prob * load(dout, p.dtype, doi + d);
        }
      }
    }
  return r;
}

}  // namespace

ForwardResult forward(const flash_problem& p, const void* q, const void* k, const void* v) {
  return forward_per_sequence(p, q, k, v, forward_dense);
}

BackwardResult backward(const flash_problem& p, const void* q, const void* k, const void* v,
                        const void* dout) {
  return backward_per_sequence(p, q, k, v, dout, backward_dense);
}

}  // namespace flash::reference
