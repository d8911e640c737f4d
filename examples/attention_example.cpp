// libflashattn example: one problem (B=2, Sq=77, Sk=129, Hq=4, Hkv=2, D=64, causal,
// f32) on every available backend; prints backend, time and max error against a
// naive attention written here. Build against the installed package (see
// CMakeLists.txt); run ./attention_example.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <flash/flash.hpp>
#include <random>
#include <vector>

#include "naive_attention.hpp"

int main() {
  flash::AttentionDesc desc;
  desc.batch = 2;
  desc.seqlen_q = 77;
  desc.seqlen_kv = 129;
  desc.heads_q = 4;
  desc.heads_kv = 2;
  desc.head_dim = 64;
  desc.causal = true;
  desc.dtype = flash::DType::f32;

  std::mt19937 rng(2024);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  auto random = [&](size_t n) {
    std::vector<float> x(n);
    for (float& e : x) e = uniform(rng);
    return x;
  };
  const auto q = random(desc.batch * desc.seqlen_q * desc.heads_q * desc.head_dim);
  const auto k = random(desc.batch * desc.seqlen_kv * desc.heads_kv * desc.head_dim);
  const auto v = random(desc.batch * desc.seqlen_kv * desc.heads_kv * desc.head_dim);
  const NaiveResult expected = naive_attention(desc, q, k, v);

  std::printf("libflashattn %s: B=2 Sq=77 Sk=129 Hq=4 Hkv=2 D=64 causal f32\n", flash::version());
  std::printf("%-10s %-10s %12s %14s  %s\n", "backend", "status", "time (ms)", "max error",
              "detail");
  for (const flash::BackendInfo& info : flash::backends()) {
    if (!info.available) {
      std::printf("%-10s %-10s %12s %14s  %s\n", flash::to_string(info.backend), "unavailable", "-",
                  "-", info.reason.c_str());
      continue;
    }
    desc.backend = info.backend;
    std::vector<float> o(q.size(), NAN);
    try {
      flash::attention(desc, q.data(), k.data(), v.data(), o.data());  // warm-up
      const auto start = std::chrono::steady_clock::now();
      flash::attention(desc, q.data(), k.data(), v.data(), o.data());
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      double error = 0;
      for (size_t i = 0; i < o.size(); ++i)
        error = std::max(error, std::fabs(o[i] - expected.o[i]));
      std::printf("%-10s %-10s %12.3f %14.3g  %s\n", flash::to_string(info.backend), "ok", ms,
                  error, info.detail.c_str());
    } catch (const flash::Error& e) {
      std::printf("%-10s %-10s %12s %14s  %s\n", flash::to_string(info.backend), "error", "-", "-",
                  e.what());
    }
  }
  return 0;
}
