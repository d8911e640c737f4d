// Acceptance check of the installed package, from outside the repository: only
// <flash/flash.hpp> and the names it documents. Results must match our own naive
// attention (f32 within 2e-5, bf16 within 3e-2, lse too) for causal, GQA/MQA,
// Sq != Sk both ways (rows with no visible key: o = 0, lse = -inf), sliding windows
// and softcap; and the promised errors must be flash::Error. Prints
// "N passed, M failed" and exits non-zero on any failure.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <flash/flash.hpp>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "naive_attention.hpp"

namespace {

int passed = 0, failed = 0;

void expect(bool ok, const std::string& what) {
  (ok ? passed : failed)++;
  if (!ok) std::printf("FAILED: %s\n", what.c_str());
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Shape {
  const char* name;
  int64_t sq, sk, hq, hkv;
  bool causal;
  int64_t wl, wr;
  float softcap;
};

void check_results(flash::Backend backend, flash::DType dtype, const Shape& s) {
  flash::AttentionDesc d;
  d.batch = 2;
  d.seqlen_q = s.sq;
  d.seqlen_kv = s.sk;
  d.heads_q = s.hq;
  d.heads_kv = s.hkv;
  d.head_dim = 64;
  d.causal = s.causal;
  d.window_left = s.wl;
  d.window_right = s.wr;
  d.softcap = s.softcap;
  d.dtype = dtype;
  d.backend = backend;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const bool bf16 = dtype == flash::DType::bf16;
  // Inputs rounded to the dtype first, so the naive attention sees the same values.
  auto random = [&](int64_t n) {
    std::vector<float> x(n);
    for (float& e : x) e = bf16 ? from_bf16(to_bf16(2 * uniform(rng))) : 2 * uniform(rng);
    return x;
  };
  const auto q = random(d.batch * s.sq * s.hq * 64), k = random(d.batch * s.sk * s.hkv * 64),
             v = random(d.batch * s.sk * s.hkv * 64);
  std::vector<float> lse(d.batch * s.hq * s.sq, NAN), o(q.size(), NAN);
  d.lse = lse.data();
  if (bf16) {
    auto pack = [](const std::vector<float>& x) {
      std::vector<uint16_t> y(x.size());
      for (size_t i = 0; i < x.size(); ++i) y[i] = to_bf16(x[i]);
      return y;
    };
    const auto qb = pack(q), kb = pack(k), vb = pack(v);
    std::vector<uint16_t> ob(o.size(), 0x7FC0);
    flash::attention(d, qb.data(), kb.data(), vb.data(), ob.data());
    for (size_t i = 0; i < o.size(); ++i) o[i] = from_bf16(ob[i]);
  } else {
    flash::attention(d, q.data(), k.data(), v.data(), o.data());
  }
  const NaiveResult want = naive_attention(d, q, k, v);
  const double tol = bf16 ? 3e-2 : 2e-5;
  double err = 0, lse_err = 0;
  bool finite_mismatch = false;
  for (size_t i = 0; i < o.size(); ++i) {
    const double e = std::fabs(o[i] - want.o[i]);
    if (!(e <= err)) err = std::isnan(e) ? INFINITY : e;
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(want.lse[i])) {
      finite_mismatch |= !(std::isinf(lse[i]) && lse[i] < 0);
      continue;
    }
    lse_err = std::max(lse_err, std::fabs(lse[i] - want.lse[i]));
    if (std::isnan(lse[i])) finite_mismatch = true;
  }
  char what[256];
  std::snprintf(what, sizeof what, "%s %s %s: max |o error| %.3g, max |lse error| %.3g (tol %.0e)",
                flash::to_string(backend), flash::to_string(dtype), s.name, err, lse_err, tol);
  expect(err <= tol && lse_err <= tol && !finite_mismatch, what);
  if (err <= tol && lse_err <= tol && !finite_mismatch) std::printf("ok: %s\n", what);
}

void expect_error(const std::string& what, const std::function<void()>& fn,
                  const char* must_mention = nullptr) {
  try {
    fn();
    expect(false, what + ": no flash::Error");
  } catch (const flash::Error& e) {
    std::string message = e.what();
    bool ok = true;
    if (must_mention) {
      std::string lower = message;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      ok = lower.find(must_mention) != std::string::npos;
    }
    expect(ok, what + ": " + message);
    if (ok) std::printf("ok: %s -> flash::Error: %s\n", what.c_str(), message.c_str());
  }
}

}  // namespace

int main() {
  const Shape shapes[] = {
      {"causal GQA Sq<Sk", 33, 97, 4, 2, true, -1, -1, 0},
      {"causal MQA Sq>Sk (empty rows)", 97, 33, 4, 1, true, -1, -1, 0},
      {"sliding window", 80, 80, 2, 2, false, 16, 4, 0},
      {"causal sliding window", 80, 120, 2, 1, true, 24, -1, 0},
      {"softcap", 64, 64, 2, 2, false, -1, -1, 5.f},
  };
  for (const flash::BackendInfo& info : flash::backends()) {
    if (!info.available || info.backend == flash::Backend::cuda ||
        info.backend == flash::Backend::hip)
      continue;  // host memory here; GPU backends are checked on GPU machines
    for (flash::DType dtype : {flash::DType::f32, flash::DType::bf16})
      for (const Shape& s : shapes) check_results(info.backend, dtype, s);
  }

  flash::AttentionDesc d;
  d.seqlen_q = 4;
  d.seqlen_kv = 4;
  d.head_dim = 8;
  std::vector<float> buf(32, 0.5f), out(32);
  auto run = [&](flash::AttentionDesc desc) {
    flash::attention(desc, buf.data(), buf.data(), buf.data(), out.data());
  };
  bool cuda_available = false;
  for (const auto& info : flash::backends())
    cuda_available |= info.backend == flash::Backend::cuda && info.available;
  if (!cuda_available) {
    setenv("FLASH_BACKEND", "cuda", 1);
    expect_error(
        "FLASH_BACKEND=cuda without a GPU", [&] { run(d); }, "cuda");
  }
  setenv("FLASH_BACKEND", "bogus", 1);
  expect_error(
      "FLASH_BACKEND=bogus", [&] { run(d); }, "bogus");
  unsetenv("FLASH_BACKEND");
  flash::AttentionDesc bad = d;
  bad.heads_q = 3;
  bad.heads_kv = 2;
  expect_error(
      "heads_q % heads_kv != 0", [&] { run(bad); }, "heads_q");
  bad = d;
  bad.head_dim = 0;
  expect_error(
      "head_dim 0", [&] { run(bad); }, "head_dim");
  bad = d;
  bad.seqlen_q = -1;
  expect_error(
      "negative seqlen", [&] { run(bad); }, "seqlen_q");
  expect_error(
      "null pointer", [&] { flash::attention(d, nullptr, buf.data(), buf.data(), out.data()); },
      "q");

  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
