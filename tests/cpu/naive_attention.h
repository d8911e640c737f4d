// A deliberately simple attention in double, for checking the CPU kernels while they
// are developed (the project-wide reference lives in reference/; this one keeps the
// CPU tests self-contained). Inputs are already-widened f32 values in the problem's
// strided layout; outputs are packed [b, s, h, d].
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "dispatch/module_abi.h"

namespace flash::cpu::test {

inline bool Sees(const flash_problem& p, int64_t i, int64_t j) {
  const int64_t diag = i + p.seqlen_kv - p.seqlen_q;
  return (!p.causal || j <= diag) && (p.window_left < 0 || j >= diag - p.window_left) &&
         (p.window_right < 0 || j <= diag + p.window_right);
}

inline size_t Off(const int64_t* st, int64_t b, int64_t s, int64_t h) {
  return static_cast<size_t>(b * st[0] + s * st[1] + h * st[2]);
}

struct NaiveResult {
  std::vector<double> o, lse, dq, dk, dv;  // packed [b, s, h, d]; lse [b, h, s]
};

// Forward (and backward when dout is non-empty; dout packed like o).
inline NaiveResult NaiveAttention(const flash_problem& p, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v,
                                  const std::vector<float>& dout) {
  const int64_t B = p.batch, Sq = p.seqlen_q, Sk = p.seqlen_kv, Hq = p.heads_q, Hk = p.heads_kv;
  const int64_t D = p.head_dim, Dv = p.head_dim_v, G = Hq / Hk;
  NaiveResult r;
  r.o.assign(B * Sq * Hq * Dv, 0.0);
  r.lse.assign(B * Hq * Sq, 0.0);
  const bool bwd = !dout.empty();
  if (bwd) {
    r.dq.assign(B * Sq * Hq * D, 0.0);
    r.dk.assign(B * Sk * Hk * D, 0.0);
    r.dv.assign(B * Sk * Hk * Dv, 0.0);
  }
  std::vector<double> s(Sk), pr(Sk), t(Sk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / G;
      for (int64_t i = 0; i < Sq; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Sk; ++j) {
          if (!Sees(p, i, j)) {
            s[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(q[Off(p.q_stride, b, i, h) + d]) * k[Off(p.k_stride, b, j, hk) + d];
          dot *= p.scale;
          if (p.softcap > 0) {
            t[j] = std::tanh(dot / p.softcap);
            dot = p.softcap * t[j];
          }
          s[j] = dot;
          mx = std::max(mx, dot);
        }
        const size_t orow = ((b * Sq + i) * Hq + h) * Dv;
        if (mx == -std::numeric_limits<double>::infinity()) {
          r.lse[(b * Hq + h) * Sq + i] = -std::numeric_limits<double>::infinity();
          continue;  // o = 0, dq = 0
        }
        double sum = 0;
        for (int64_t j = 0; j < Sk; ++j) sum += (pr[j] = std::exp(s[j] - mx));
        for (int64_t j = 0; j < Sk; ++j) pr[j] /= sum;
        r.lse[(b * Hq + h) * Sq + i] = mx + std::log(sum);
        for (int64_t j = 0; j < Sk; ++j)
          if (pr[j] != 0)
            for (int64_t d = 0; d < Dv; ++d)
              r.o[orow + d] += pr[j] * v[Off(p.v_stride, b, j, hk) + d];
        if (!bwd) continue;
        double di = 0;
        for (int64_t d = 0; d < Dv; ++d) di += double(dout[orow + d]) * r.o[orow + d];
        for (int64_t j = 0; j < Sk; ++j) {
          if (pr[j] == 0) continue;
          double dp = 0;
          for (int64_t d = 0; d < Dv; ++d) {
            dp += double(dout[orow + d]) * v[Off(p.v_stride, b, j, hk) + d];
            r.dv[((b * Sk + j) * Hk + hk) * Dv + d] += pr[j] * dout[orow + d];
          }
          double ds = pr[j] * (dp - di);
          if (p.softcap > 0) ds *= 1 - t[j] * t[j];
          for (int64_t d = 0; d < D; ++d) {
            r.dq[((b * Sq + i) * Hq + h) * D + d] +=
                p.scale * ds * k[Off(p.k_stride, b, j, hk) + d];
            r.dk[((b * Sk + j) * Hk + hk) * D + d] +=
                p.scale * ds * q[Off(p.q_stride, b, i, h) + d];
          }
        }
      }
    }
  return r;
}

}  // namespace flash::cpu::test
