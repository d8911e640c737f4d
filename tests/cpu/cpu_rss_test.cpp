// Memory: a forward with B=1, H=1, Sq=Sk=65536, D=64, f32 must peak below
// 2 x (inputs + outputs) + 64 MiB resident (a 65536² score matrix alone would be
// 16 GiB). Own executable, so ru_maxrss is this problem's peak and nothing else's.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "dispatch/module_abi.h"

extern "C" const flash_backend_module* flash_cpu_module(void);

namespace {

double PeakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // Linux: KiB
}

TEST(CpuMemory, Forward64kPeakRss) {
  const int64_t S = 65536, D = 64;
  const size_t n = static_cast<size_t>(S * D);
  std::vector<float> q(n), k(n), v(n), o(n, std::nanf("")), lse(S, std::nanf(""));
  uint32_t state = 12345;  // cheap LCG: values in [-1, 1)
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) {
      state = state * 1664525u + 1013904223u;
      x = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
    }
  const double io_mib = (4.0 * n + S) * sizeof(float) / (1024.0 * 1024.0);
  const double before = PeakRssMiB();

  flash_problem p{};
  p.batch = 1;
  p.seqlen_q = p.seqlen_kv = S;
  p.heads_q = p.heads_kv = 1;
  p.head_dim = p.head_dim_v = D;
  p.dtype = FLASH_F32;
  p.scale = 1.0f / 8.0f;
  p.window_left = p.window_right = -1;
  for (int64_t* st : {p.q_stride, p.k_stride, p.v_stride, p.o_stride}) {
    st[0] = S * D;
    st[1] = D;
    st[2] = D;
  }
  p.lse = lse.data();
  flash_message err{};
  ASSERT_EQ(flash_cpu_module()->forward(&p, q.data(), k.data(), v.data(), o.data(), &err), FLASH_OK)
      << err.text;
  const double peak = PeakRssMiB();
  std::printf("inputs+outputs %.1f MiB, peak RSS %.1f MiB (%.1f before the call), limit %.1f MiB\n",
              io_mib, peak, before, 2 * io_mib + 64);
  EXPECT_LT(peak, 2 * io_mib + 64);

  // The result is real: two rows against a direct double-precision evaluation.
  for (int64_t i : {int64_t{0}, S - 1}) {
    std::vector<double> s(S);
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < S; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += double(q[i * D + d]) * k[j * D + d];
      s[j] = dot * p.scale;
      mx = std::max(mx, s[j]);
    }
    for (int64_t j = 0; j < S; ++j) sum += (s[j] = std::exp(s[j] - mx));
    for (int64_t d = 0; d < D; d += 7) {
      double ref = 0;
      for (int64_t j = 0; j < S; ++j) ref += s[j] * v[j * D + d];
      EXPECT_NEAR(o[i * D + d], ref / sum, 1e-5) << "row " << i << " d " << d;
    }
    EXPECT_NEAR(lse[i], mx + std::log(sum), 1e-4);
  }
}

}  // namespace
