// Helpers of the CPU backend tests: typed strided tensors, problem construction,
// calls through the module ABI (the same path the core uses), and error measures.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/convert.h"
#include "dispatch/module_abi.h"

extern "C" const flash_backend_module* flash_cpu_module(void);

namespace flash::cpu::test {

inline float Widen(int32_t dtype, const void* base, size_t i) {
  if (dtype == FLASH_F32) return static_cast<const float*>(base)[i];
  const uint16_t bits = static_cast<const uint16_t*>(base)[i];
  if (dtype == FLASH_BF16) {
    const uint32_t u = uint32_t{bits} << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int exp = (bits >> 10) & 0x1f, man = bits & 0x3ff;
  const float sign = (bits & 0x8000) ? -1.0f : 1.0f;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), -24);
  if (exp == 31) return man ? std::nanf("") : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(man + 1024), exp - 25);
}

// A tensor stored in `dtype` at arbitrary strides (element units).
struct Tensor {
  int32_t dtype = FLASH_F32;
  std::vector<uint8_t> bytes;
  size_t elems = 0;
  void Resize(int32_t dt, size_t n) {
    dtype = dt;
    elems = n;
    bytes.assign(n * (dt == FLASH_F32 ? 4 : 2), 0);
  }
  void* data() { return bytes.data(); }
  float Get(size_t i) const { return Widen(dtype, bytes.data(), i); }
  void Set(size_t i, float f) {
    if (dtype == FLASH_F32) {
      reinterpret_cast<float*>(bytes.data())[i] = f;
    } else {
      reinterpret_cast<uint16_t*>(bytes.data())[i] =
          dtype == FLASH_F16 ? F16FromF32(f) : Bf16FromF32(f);
    }
  }
  void Poison() {  // all-ones bits: NaN in every dtype
    std::memset(bytes.data(), 0xff, bytes.size());
  }
};

struct Case {
  int64_t batch = 1, sq = 17, sk = 17, hq = 1, hk = 1, d = 16, dv = 0;
  int32_t dtype = FLASH_F32;
  bool causal = false;
  int64_t wl = -1, wr = -1;
  float softcap = 0.0f;
  int layout = 0;  // 0 packed [b,s,h,d]; 1 [b,h,s,d]; 2 packed with padded rows
  std::string Name() const {
    return "B" + std::to_string(batch) + "_Sq" + std::to_string(sq) + "_Sk" + std::to_string(sk) +
           "_H" + std::to_string(hq) + "x" + std::to_string(hk) + "_D" + std::to_string(d) + "v" +
           std::to_string(dv ? dv : d) + "_t" + std::to_string(dtype) + (causal ? "_causal" : "") +
           "_w" + std::to_string(wl) + "," + std::to_string(wr) + "_cap" +
           std::to_string(static_cast<int>(softcap)) + "_L" + std::to_string(layout);
  }
};

// Strides of a [batch, seq, heads, dim] tensor in the case's layout; returns the
// element count to allocate.
inline size_t LayoutStrides(int layout, int64_t B, int64_t S, int64_t H, int64_t D, int64_t* st) {
  if (layout == 1) {  // [b, h, s, d]
    st[2] = S * D;
    st[1] = D;
    st[0] = H * S * D;
  } else {
    const int64_t row = D + (layout == 2 ? 3 : 0);  // padded rows: odd extra elements
    st[2] = row;
    st[1] = H * row;
    st[0] = S * H * row + (layout == 2 ? 5 : 0);
  }
  return static_cast<size_t>(std::max<int64_t>(1, B * st[0] + 8));
}

struct Problem {
  flash_problem p{};
  Tensor q, k, v, o, dout, dq, dk, dv;
  std::vector<float> lse;
  std::vector<float> qf, kf, vf, doutf;  // widened inputs, same strides (doutf packed)

  explicit Problem(const Case& c, uint32_t seed = 1) {
    p.batch = c.batch;
    p.seqlen_q = c.sq;
    p.seqlen_kv = c.sk;
    p.heads_q = c.hq;
    p.heads_kv = c.hk;
    p.head_dim = c.d;
    p.head_dim_v = c.dv ? c.dv : c.d;
    p.dtype = c.dtype;
    p.causal = c.causal;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    p.softcap = c.softcap;
    p.window_left = c.wl;
    p.window_right = c.wr;
    const size_t nq = LayoutStrides(c.layout, c.batch, c.sq, c.hq, c.d, p.q_stride);
    const size_t nk = LayoutStrides(c.layout, c.batch, c.sk, c.hk, c.d, p.k_stride);
    const size_t nv = LayoutStrides(c.layout, c.batch, c.sk, c.hk, p.head_dim_v, p.v_stride);
    const size_t no = LayoutStrides(c.layout, c.batch, c.sq, c.hq, p.head_dim_v, p.o_stride);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    auto fill = [&](Tensor& t, std::vector<float>& f, size_t n, float amp) {
      t.Resize(c.dtype, n);
      f.resize(n);
      for (size_t i = 0; i < n; ++i) {
        t.Set(i, amp * uni(rng));
        f[i] = t.Get(i);
      }
    };
    fill(q, qf, nq, 2.0f);  // logits of a few units: a peaked but not one-hot softmax
    fill(k, kf, nk, 2.0f);
    fill(v, vf, nv, 1.0f);
    o.Resize(c.dtype, no);
    o.Poison();
    std::vector<float> dtmp;
    fill(dout, dtmp, no, 1.0f);
    doutf.assign(c.batch * c.sq * c.hq * p.head_dim_v, 0.0f);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t s = 0; s < c.sq; ++s)
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t d = 0; d < p.head_dim_v; ++d)
            doutf[((b * c.sq + s) * c.hq + h) * p.head_dim_v + d] =
                dout.Get(b * p.o_stride[0] + s * p.o_stride[1] + h * p.o_stride[2] + d);
    dq.Resize(c.dtype, nq);
    dk.Resize(c.dtype, nk);
    dv.Resize(c.dtype, nv);
    dq.Poison();
    dk.Poison();
    dv.Poison();
    lse.assign(c.batch * c.hq * c.sq, std::nanf(""));
    p.lse = lse.data();
  }

  int Forward(std::string* error = nullptr) {
    flash_message msg{};
    const int s = flash_cpu_module()->forward(&p, q.data(), k.data(), v.data(), o.data(), &msg);
    if (error) *error = msg.text;
    return s;
  }
  int Backward(std::string* error = nullptr) {
    flash_message msg{};
    const int s =
        flash_cpu_module()->backward(&p, q.data(), k.data(), v.data(), o.data(), dout.data(),
                                     lse.data(), dq.data(), dk.data(), dv.data(), &msg);
    if (error) *error = msg.text;
    return s;
  }
  // Element (b, s, h, d) of t with strides st, widened.
  static float At(const Tensor& t, const int64_t* st, int64_t b, int64_t s, int64_t h, int64_t d) {
    return t.Get(static_cast<size_t>(b * st[0] + s * st[1] + h * st[2] + d));
  }
};

// Targets to test: every entry of probe()'s "supported=" list.
inline std::vector<std::string> SupportedTargetNames() {
  unsetenv("FLASH_CPU_TARGET");
  flash_message reason{}, detail{};
  flash_cpu_module()->probe(&reason, &detail);
  const std::string d = detail.text;
  const size_t at = d.find("supported=");
  std::vector<std::string> names;
  if (at == std::string::npos) return names;
  std::string list = d.substr(at + 10, d.find(';', at) - at - 10);
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = list.find(',', pos);
    names.push_back(list.substr(pos, comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return names;
}

// probe()'s "unsupported=" entries as (target, "needs <feature>"): entries are
// "<target> (needs <feature>)", separated by ", " outside parentheses (a feature may
// hold commas and parentheses of its own).
inline std::vector<std::pair<std::string, std::string>> UnsupportedTargets() {
  unsetenv("FLASH_CPU_TARGET");
  flash_message reason{}, detail{};
  flash_cpu_module()->probe(&reason, &detail);
  const std::string d = detail.text;
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = d.find("unsupported=");
  if (at == std::string::npos) return out;
  at += 12;
  while (at < d.size() && d[at] != ';') {
    const size_t space = d.find(' ', at);
    if (space == std::string::npos) break;
    size_t end = space;
    for (int depth = 0; end < d.size(); ++end) {
      depth += d[end] == '(' ? 1 : d[end] == ')' ? -1 : 0;
      if (depth == 0 && (d[end] == ',' || d[end] == ';')) break;
    }
    std::string needs = d.substr(space + 1, end - space - 1);  // "(needs ...)"
    if (needs.size() >= 2 && needs.front() == '(' && needs.back() == ')')
      needs = needs.substr(1, needs.size() - 2);
    out.emplace_back(d.substr(at, space - at), needs);
    at = end;
    while (at < d.size() && (d[at] == ',' || d[at] == ' ')) ++at;
  }
  return out;
}

// "" when SIMD target `name` runs here, else what it needs (probe()'s entry) or a note
// that probe() does not report it.
inline std::string MissingTarget(const std::string& name) {
  for (const std::string& n : SupportedTargetNames())
    if (n == name) return "";
  for (const auto& [target, needs] : UnsupportedTargets())
    if (target == name) return needs;
  return name + " is neither supported nor reported unsupported by probe()";
}

}  // namespace flash::cpu::test
