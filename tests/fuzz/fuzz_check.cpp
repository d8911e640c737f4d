// Decoding and checking of one fuzz input (see fuzz_check.hpp).
//
// Byte layout (every read past the end gives 0, so any byte string is an input):
//   0  dtype: v % 3; v >= 252 gives the raw out-of-range value 3 + (v - 252)
//   1  batch: v % 3 (0 = empty)          2  seqlen_q: v % 33      3  seqlen_kv: v % 33
//   4  heads_kv: 1 + v % 3               5  heads_q / heads_kv: 1 + v % 3
//   6  head_dim: 1 + v % 32              7  head_dim_v: 0 (= head_dim) if v < 128, else 1 + v % 32
//   8  flags: bit0 causal, bit1 backward, bits2-3 window kind, bit4 alias o onto q,
//      bit5 lse requested (forward), bit6 inject a non-finite value, bit7 heads_q % heads_kv != 0
//   9  window_left: v % 12 - 2 (-2 invalid)   10  window_right: v % 12 - 2
//  11  scale: one of kScales                  12  softcap: one of kSoftcaps
//  13  layouts of q, k, v, o: 2 bits each (packed, bhsd, padded; 3 = packed)
//  14  cpu SIMD target: index into the supported list
//  15  amplitude: one of kAmplitudes
//  16  non-finite injection: tensor (v % 3), 17 its element index (v), 18 value (NaN, +inf, -inf)
//  19+ element values, one byte each (int8 / 128 * amplitude); then a seeded generator.
#include "fuzz_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "support/cases.hpp"
#include "support/compare.hpp"
#include "support/targets.hpp"

namespace flash::fuzz {
namespace {

using test::HostTensor;
using test::Layout;

// The backward's documented non-finite semantics (tests/README.md) cover a NaN in k or v:
// backward problems get their injected value there, as a NaN. (A NaN in q reaches dK of
// keys its row does not see through dS = 0 times q; ±inf follows no documented rule.)

constexpr float kScales[] = {0.f, 0.05f, 0.3f, 1.f, 4.f, -0.5f /*invalid*/, 0.f, 0.125f};
constexpr float kSoftcaps[] = {0.f, 0.f, 0.f, 0.5f, 5.f, 30.f, -1.f /*invalid*/, 0.f};
constexpr double kAmplitudes[] = {1.0, 1.0, 4.0, 30.0};

struct Reader {
  const uint8_t* data;
  size_t size, pos = 0;
  uint8_t next() { return pos < size ? data[pos++] : 0; }
};

struct Decoded {
  AttentionDesc desc;
  bool backward = false, alias_o = false, want_lse = false;
  bool inject = false;
  int inject_tensor = 0, inject_index = 0;
  double inject_value = 0;
  Layout layout[4] = {};
  std::string simd;  // FLASH_CPU_TARGET for the cpu run
  double amplitude = 1;
  bool expect_invalid = false;  // by construction (the library decides, we cross-check)
};

const std::vector<std::string>& cpu_targets() {
  static const std::vector<std::string> targets = [] {
    std::vector<std::string> out;
    for (const test::Target& t : test::all_targets())
      if (t.backend == Backend::cpu && t.available) out.push_back(t.simd);
    return out;
  }();
  return targets;
}

Decoded decode(Reader& r) {
  Decoded x;
  AttentionDesc& d = x.desc;
  const uint8_t dt = r.next();
  d.dtype = dt >= 252 ? static_cast<DType>(3 + (dt - 252)) : static_cast<DType>(dt % 3);
  d.batch = r.next() % 3;
  d.seqlen_q = r.next() % 33;
  d.seqlen_kv = r.next() % 33;
  d.heads_kv = 1 + r.next() % 3;
  d.heads_q = d.heads_kv * (1 + r.next() % 3);
  d.head_dim = 1 + r.next() % 32;
  const uint8_t dv = r.next();
  d.head_dim_v = dv < 128 ? 0 : 1 + dv % 32;
  const uint8_t flags = r.next();
  d.causal = flags & 1;
  x.backward = flags & 2;
  const int window_kind = (flags >> 2) & 3;  // 0 none, 1 left, 2 right, 3 both
  x.alias_o = flags & 16;
  x.want_lse = flags & 32;
  x.inject = flags & 64;
  if (flags & 128) d.heads_q += 1;  // breaks heads_q % heads_kv unless heads_kv == 1
  const int64_t wl = r.next() % 12 - 2, wr = r.next() % 12 - 2;
  if (window_kind & 1) d.window_left = wl;
  if (window_kind & 2) d.window_right = wr;
  d.scale = kScales[r.next() % 8];
  d.softcap = kSoftcaps[r.next() % 8];
  const uint8_t layouts = r.next();
  for (int t = 0; t < 4; ++t) {
    const int l = (layouts >> (2 * t)) & 3;
    x.layout[t] = l == 1 ? Layout::bhsd : l == 2 ? Layout::padded : Layout::packed;
  }
  const auto& targets = cpu_targets();
  const uint8_t simd = r.next();
  if (!targets.empty()) x.simd = targets[simd % targets.size()];
  x.amplitude = kAmplitudes[r.next() % 4];
  // The backward takes o in the storage dtype: D = rowsum(dout·o) carries o's rounding
  // into every dS, times |k| or |q| -- inherent to the FlashAttention backward, absent
  // from the naive path. With inputs of 30 that exceeds the rule on f16, so the
  // backward's inputs stay within 4 (the forward gets the large logits).
  if (x.backward) x.amplitude = std::min(x.amplitude, 4.0);
  x.inject_tensor = r.next() % 3;
  x.inject_index = r.next();
  const uint8_t iv = r.next() % 3;
  x.inject_value = iv == 0   ? std::numeric_limits<double>::quiet_NaN()
                   : iv == 1 ? std::numeric_limits<double>::infinity()
                             : -std::numeric_limits<double>::infinity();
  const int dtype = static_cast<int>(d.dtype);
  // An aliased output is only an overlap when both views hold elements.
  const bool nonempty_q = d.batch > 0 && d.seqlen_q > 0;
  x.expect_invalid = dtype > 2 || d.heads_q % d.heads_kv != 0 || d.scale < 0 || d.softcap < 0 ||
                     d.window_left < -1 || d.window_right < -1 || (x.alias_o && nonempty_q);
  return x;
}

// Fills a tensor from the remaining bytes, then from a generator seeded by them.
void fill(HostTensor& t, Reader& r, std::mt19937_64& rng, double amplitude) {
  std::uniform_real_distribution<double> dist(-amplitude, amplitude);
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seq; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t e = 0; e < t.dim; ++e) {
          const double value =
              r.pos < r.size ? static_cast<int8_t>(r.next()) / 128.0 * amplitude : dist(rng);
          t.set(b, s, h, e, value);
        }
}

std::string kind_name(Error::Kind k) {
  return k == Error::Kind::invalid_argument ? "invalid_argument"
         : k == Error::Kind::unsupported    ? "unsupported"
                                            : "runtime";
}

// NaN/inf exactly where the reference has them; finite parts by the tolerance rule,
// with the naive error doubled (4x naive instead of 2x): on problems of a few dozen
// elements the naive path's max error is a noisy yardstick (one lucky rounding halves
// it), and the fuzzer hunts crashes and gross errors (a wrong mask, a wrong index),
// which are O(1).
bool matches(const std::string& what, std::vector<double> got, std::vector<double> ref,
             std::vector<double> naive, DType dtype, double magnitude, std::string& why) {
  for (size_t i = 0; i < naive.size() && i < ref.size(); ++i)
    naive[i] = ref[i] + 2 * (naive[i] - ref[i]);
  if (got.size() != ref.size()) {
    why = what + ": size differs";
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) {
      // ±inf in v times a probability that is tiny in double but underflows to 0 in
      // f32 is inf in the reference and 0·inf = NaN in a backend: both are accepted.
      const bool inf_vs_nan = std::isinf(ref[i]) && std::isnan(got[i]);
      if (!((std::isnan(ref[i]) && std::isnan(got[i])) || ref[i] == got[i] || inf_vs_nan)) {
        std::ostringstream s;
        s << what << "[" << i << "] = " << got[i] << ", reference " << ref[i];
        why = s.str();
        return false;
      }
      got[i] = ref[i] = naive[i] = 0;
    } else if (!std::isfinite(naive[i])) {
      naive[i] = ref[i];
    }
  }
  const test::Verdict v = test::compare(what, got, ref, naive, dtype, magnitude);
  if (!v.pass) why = v.detail;
  return v.pass;
}

struct Inputs {
  HostTensor q, k, v, o, dout;
  std::vector<float> lse_in;  // backward
  flash_problem problem{};
};

// Runs one backend; "" when it ran, else "error:<kind>:<message>".
std::string run(const Decoded& x, Backend backend, Inputs& in, HostTensor& o,
                std::vector<float>& lse, HostTensor& dq, HostTensor& dk, HostTensor& dv) {
  AttentionDesc d = x.desc;
  d.backend = backend;
  const bool empty_q = d.batch == 0 || d.seqlen_q == 0;
  const bool empty_kv = d.batch == 0 || d.seqlen_kv == 0;
  const void* q = empty_q ? nullptr : in.q.data();
  const void* k = empty_kv ? nullptr : in.k.data();
  const void* v = empty_kv ? nullptr : in.v.data();
  test::ScopedEnv simd("FLASH_CPU_TARGET",
                       backend == Backend::cpu && !x.simd.empty() ? x.simd.c_str() : nullptr);
  try {
    if (!x.backward) {
      d.lse = x.want_lse ? lse.data() : nullptr;
      void* out = x.alias_o ? const_cast<void*>(static_cast<const void*>(in.q.data()))
                            : (empty_q ? nullptr : o.data());
      attention(d, q, k, v, out);
    } else {
      void* out_dq = x.alias_o ? in.q.data() : (empty_q ? nullptr : dq.data());
      attention_backward(d, q, k, v, empty_q ? nullptr : in.o.data(),
                         empty_q ? nullptr : in.dout.data(), empty_q ? nullptr : in.lse_in.data(),
                         out_dq, empty_kv ? nullptr : dk.data(), empty_kv ? nullptr : dv.data());
    }
  } catch (const Error& e) {
    return "error:" + kind_name(e.kind()) + ":" + e.what();
  }
  return "";
}

}  // namespace

std::string describe(const uint8_t* data, size_t size) {
  Reader r{data, size};
  const Decoded x = decode(r);
  const AttentionDesc& d = x.desc;
  std::ostringstream s;
  s << (x.backward ? "backward" : "forward") << " dtype=" << static_cast<int>(d.dtype)
    << " B=" << d.batch << " Sq=" << d.seqlen_q << " Sk=" << d.seqlen_kv << " Hq=" << d.heads_q
    << " Hkv=" << d.heads_kv << " D=" << d.head_dim << " Dv=" << d.head_dim_v
    << " causal=" << d.causal << " window=(" << d.window_left << "," << d.window_right
    << ") scale=" << d.scale << " softcap=" << d.softcap << " layouts=" << to_string(x.layout[0])
    << "," << to_string(x.layout[1]) << "," << to_string(x.layout[2]) << ","
    << to_string(x.layout[3]) << " simd=" << x.simd << " amplitude=" << x.amplitude
    << " alias_o=" << x.alias_o << " lse=" << x.want_lse;
  if (x.inject)
    s << " inject "
      << "qkv"[x.inject_tensor] << "[" << x.inject_index << "]=" << x.inject_value;
  return s.str();
}

std::string check_one(const uint8_t* data, size_t size) {
  Reader r{data, size};
  const Decoded x = decode(r);
  const AttentionDesc& d = x.desc;
  const int dtype_code = static_cast<int>(d.dtype);
  // Tensors are built with a valid dtype even when the descriptor's is not.
  const DType tdtype = dtype_code > 2 ? DType::f32 : d.dtype;
  const int64_t dv_eff = d.head_dim_v ? d.head_dim_v : d.head_dim;
  // heads_q may be invalid (not a multiple of heads_kv): tensors still get its size.
  Inputs in;
  in.q = HostTensor(tdtype, d.batch, d.seqlen_q, d.heads_q, d.head_dim, x.layout[0]);
  in.k = HostTensor(tdtype, d.batch, d.seqlen_kv, d.heads_kv, d.head_dim, x.layout[1]);
  in.v = HostTensor(tdtype, d.batch, d.seqlen_kv, d.heads_kv, dv_eff, x.layout[2]);
  in.o = HostTensor(tdtype, d.batch, d.seqlen_q, d.heads_q, dv_eff, x.layout[3]);
  AttentionDesc desc = d;
  desc.q_stride = in.q.stride;
  desc.k_stride = in.k.stride;
  desc.v_stride = in.v.stride;
  desc.o_stride = in.o.stride;
  Decoded xs = x;
  xs.desc = desc;

  uint64_t seed = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 1099511628211ull;
  std::mt19937_64 rng(seed);
  fill(in.q, r, rng, x.amplitude);
  fill(in.k, r, rng, x.amplitude);
  fill(in.v, r, rng, 1.0);
  if (x.inject) {
    const int which = x.backward && x.inject_tensor == 0 ? 1 : x.inject_tensor;
    HostTensor& t = which == 0 ? in.q : which == 1 ? in.k : in.v;
    if (t.elements() > 0) {
      const int64_t i = x.inject_index % t.elements();
      const int64_t e = i % t.dim, h = i / t.dim % t.heads, s = i / t.dim / t.heads % t.seq,
                    b = i / t.dim / t.heads / t.seq;
      t.set(b, s, h, e, x.backward ? std::numeric_limits<double>::quiet_NaN() : x.inject_value);
    }
  }
  const bool empty = d.batch == 0 || d.seqlen_q == 0;
  const int64_t rows = d.batch * d.heads_q * d.seqlen_q;

  reference::ForwardResult ref;
  if (!x.expect_invalid && !empty) {
    in.problem = test::resolve(desc, in.q, in.k, in.v, in.o);
    ref = reference::forward(in.problem, in.q.data(), in.k.data(), in.v.data());
  }
  if (x.backward) {
    in.dout = in.o;
    fill(in.dout, r, rng, 1.0);
    in.lse_in.assign(static_cast<size_t>(std::max<int64_t>(rows, 1)), 0.f);
    if (!ref.o.empty()) {  // the forward's outputs, as a forward in this dtype returns them
      for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t s = 0; s < d.seqlen_q; ++s)
          for (int64_t h = 0; h < d.heads_q; ++h)
            for (int64_t e = 0; e < dv_eff; ++e)
              in.o.set(b, s, h, e, ref.o[((b * d.seqlen_q + s) * d.heads_q + h) * dv_eff + e]);
      in.lse_in.assign(ref.lse.begin(), ref.lse.end());
    }
  }

  std::ostringstream fail;
  const Backend backends[] = {Backend::reference, Backend::cpu};
  std::string outcome[2];
  for (int bi = 0; bi < 2; ++bi) {
    const Backend backend = backends[bi];
    HostTensor o = in.o, dq = in.q, dk = in.k, dv = in.v;
    o.poison();
    dq.poison();
    dk.poison();
    dv.poison();
    std::vector<float> lse = test::poisoned_lse(rows);
    outcome[bi] = run(xs, backend, in, o, lse, dq, dk, dv);
    const std::string name = to_string(backend);
    if (!outcome[bi].empty()) {
      if (!x.expect_invalid)
        fail << name << " raised on a valid problem: " << outcome[bi] << "\n";
      else if (outcome[bi].rfind("error:invalid_argument:", 0) != 0)
        fail << name << " raised the wrong kind: " << outcome[bi] << "\n";
      continue;
    }
    if (x.expect_invalid) {
      fail << name << " accepted an invalid problem\n";
      continue;
    }
    if (empty) continue;
    std::string why;
    // Logits are rounded to f32 in every backend (and prescaled by scale·log2(e) in the
    // fast ones): a relative error of ~2^-24·sqrt(head_dim)·|logit| in every
    // probability, unavoidably, which the naive path partly cancels. With amplitude 30
    // logits reach thousands, so the epsilon term of the bound grows with max |lse|
    // (see lse_rounding_factor in tests/reliability/numerics_test.cpp).
    // A logit is an f32 dot product, so its rounding error scales with scale·Σ|q_d·k_d|
    // (at most scale·amplitude²·head_dim), not with the logit: a logit near 0 made of
    // products near 900 (amplitude 30) is off by ~1e-3 in any f32 kernel, in a way that
    // depends on the summation order (the naive path's differs). The bound's epsilon term
    // takes the larger of the two scales, for o and for lse.
    const double eff_scale =
        d.scale > 0 ? d.scale
                    : 1 / std::sqrt(static_cast<double>(std::max<int64_t>(d.head_dim, 1)));
    const double dot_logit =
        eff_scale * x.amplitude * x.amplitude * static_cast<double>(d.head_dim);
    const double logit_scale = std::max(test::magnitude(ref.lse), dot_logit);
    const double per_logit =
        std::ldexp(1.0, -24) * (2 + 2 * std::sqrt(static_cast<double>(d.head_dim)));
    const double logit_factor = 1 + logit_scale * per_logit / test::relative_epsilon(tdtype);
    const double lse_scale =
        test::magnitude(ref.lse) + logit_scale * per_logit / test::relative_epsilon(DType::f32);
    if (!x.backward) {
      const auto naive =
          reference::naive_forward(in.problem, in.q.data(), in.k.data(), in.v.data());
      // o is a convex combination of V's rows: rounding the weights moves it by eps·|v|
      // even where the rows cancel to a small o (f32, D 1, 24 keys: an error of 2e-8 =
      // 0.17 eps·|v| on o = -0.0068 failed an eps·|o| bound; fuzz/regressions/
      // forward_f32_d1_o_cancellation_avx512bf16), so the epsilon term scales with max |v|.
      const double o_scale = std::max(test::magnitude(ref.o), test::magnitude(in.v.to_packed()));
      if (!matches(name + " o", o.to_packed(), ref.o, naive.o, tdtype, o_scale * logit_factor, why))
        fail << why << "\n";
      if (x.want_lse && !matches(name + " lse", std::vector<double>(lse.begin(), lse.end()),
                                 ref.lse, naive.lse, DType::f32, lse_scale, why))
        fail << why << "\n";
      if (!o.padding_untouched()) fail << name << " wrote outside the o view\n";
    } else {
      const auto grad =
          reference::backward(in.problem, in.q.data(), in.k.data(), in.v.data(), in.dout.data());
      const auto naive = reference::naive_backward(in.problem, in.q.data(), in.k.data(),
                                                   in.v.data(), in.dout.data());
      // The backward also reads the f32 lse: the same factor covers its rounding.
      const double mag =
          std::max({test::magnitude(grad.dq), test::magnitude(grad.dk), test::magnitude(grad.dv)}) *
          logit_factor;
      // The FlashAttention backward forms D_i = rowsum(dout_i · o_i) from o in the
      // storage dtype; o's rounding (u = half an ulp) shifts every dS_ij by P_ij·δD_i,
      // hence dq_i by up to scale·δD_i·max|k| and dk_j by up to scale·Σ_i δD_i·|q_i|.
      // The naive path uses the exact softmax Jacobian and never sees this error.
      const double u = tdtype == DType::f32 ? 0x1p-24 : tdtype == DType::f16 ? 0x1p-11 : 0x1p-8;
      const std::vector<double> o_in = in.o.to_packed(), dout_in = in.dout.to_packed();
      double max_dd = 0;
      for (size_t row = 0; row < o_in.size() / dv_eff; ++row) {
        double sum = 0;
        for (int64_t e = 0; e < dv_eff; ++e)
          sum += std::fabs(o_in[row * dv_eff + e] * dout_in[row * dv_eff + e]);
        if (std::isfinite(sum)) max_dd = std::max(max_dd, u * sum);
      }
      // dq_i = scale·Σ_j dS_ij·k_j (dk_j alike over i): where the terms cancel (a result
      // near 0 beside terms of size ~1) their rounding in the backend's summation order
      // sets the error, not the result's size: u·scale·Σ_j |dS_ij|·|k_j| <= u·scale·
      // 2·max|dP|·max|k| (Σ_j |dS_ij| <= 2·max_j |dP_ij|, |dP_ij| <= ‖dout_i‖₁·max|v|).
      double max_dout_l1 = 0;
      for (size_t row = 0; row < dout_in.size() / dv_eff; ++row) {
        double sum = 0;
        for (int64_t e = 0; e < dv_eff; ++e) sum += std::fabs(dout_in[row * dv_eff + e]);
        if (std::isfinite(sum)) max_dout_l1 = std::max(max_dout_l1, sum);
      }
      const double max_dp = max_dout_l1 * test::magnitude(in.v.to_packed());
      const double ds_error = max_dd + u * 2 * max_dp;  // per dS_ij: δD_i, then the terms
      const double scale = in.problem.scale;
      const double extra_dq = scale * ds_error * test::magnitude(in.k.to_packed());
      const double extra_dk = scale * ds_error * test::magnitude(in.q.to_packed()) *
                              static_cast<double>(d.seqlen_q * (d.heads_q / d.heads_kv));
      // dv_j = Σ_i P_ij·dout_i is a P-weighted combination of dout's rows (o's argument
      // again, but the weights of a column sum to anything up to Sq·group): rounding the
      // weights moves dv_j by eps·Σ_i P_ij·|dout_i| even where the rows cancel (f32, D 1,
      // 6 queries: dv = 0.0385 off by 8e-7 failed a bound scaled by max |grad| at 103 %;
      // fuzz/regressions/backward_f32_d1_dv_cancellation). That weighted sum is the
      // reference's dv with |dout| for dout.
      HostTensor abs_dout = in.dout;
      for (int64_t b = 0; b < abs_dout.batch; ++b)
        for (int64_t s = 0; s < abs_dout.seq; ++s)
          for (int64_t h = 0; h < abs_dout.heads; ++h)
            for (int64_t e = 0; e < abs_dout.dim; ++e)
              abs_dout.set(b, s, h, e, std::fabs(abs_dout.get(b, s, h, e)));
      const double dv_weighted = test::magnitude(
          reference::backward(in.problem, in.q.data(), in.k.data(), in.v.data(), abs_dout.data())
              .dv);
      const double dv_mag = std::max(mag, dv_weighted * logit_factor);
      const double eps = test::relative_epsilon(tdtype);
      if (!matches(name + " dq", dq.to_packed(), grad.dq, naive.dq, tdtype, mag + extra_dq / eps,
                   why))
        fail << why << "\n";
      if (d.seqlen_kv > 0) {
        if (!matches(name + " dk", dk.to_packed(), grad.dk, naive.dk, tdtype, mag + extra_dk / eps,
                     why))
          fail << why << "\n";
        if (!matches(name + " dv", dv.to_packed(), grad.dv, naive.dv, tdtype, dv_mag, why))
          fail << why << "\n";
      }
      if (!dq.padding_untouched() || !dk.padding_untouched() || !dv.padding_untouched())
        fail << name << " wrote outside a gradient view\n";
    }
  }
  if (outcome[0].empty() != outcome[1].empty())
    fail << "reference and cpu disagree on validity: '" << outcome[0] << "' vs '" << outcome[1]
         << "'\n";
  return fail.str();
}

}  // namespace flash::fuzz
