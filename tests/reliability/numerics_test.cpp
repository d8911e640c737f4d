// Numerical edge cases, pinned on every backend (and the cpu backend on every SIMD
// target): huge logits (±1e4 after scaling), all-equal scores, rows that see exactly
// one key, -inf / NaN / +inf inputs (propagation as documented in tests/README.md),
// very long rows (seqlen_kv = 2^20, seqlen_q = 1), and extreme but valid descriptor
// values (int64-max windows, tiny scale / softcap). Each case is compared with the
// double reference by the suite's tolerance rule (support/compare.hpp); non-finite
// outputs must sit exactly where the reference has them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "support/cases.hpp"
#include "support/compare.hpp"
#include "support/oracle_cache.hpp"
#include "support/targets.hpp"

namespace flash::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

// A FlashAttention backward recomputes each probability as exp(s - lse) from an f32
// logit s (a head_dim-term dot product) and the forward's f32 lse. Both carry
// rounding relative to the logits' size (about 2^-24 |lse| for lse, and up to
// sqrt(head_dim) times that for s), which becomes a relative error of every
// probability -- unavoidable with f32 statistics, and absent from the naive path,
// which never leaves a consistent (s, max) pair. With logits of 1e4 that is ~1e-3
// relative, far above f32's epsilon, so the epsilon term of the bound is widened by
// this factor (1 for logits of order 1).
double lse_rounding_factor(const std::vector<double>& lse, DType dtype, int64_t head_dim) {
  const double per_logit =
      std::ldexp(1.0, -24) * (2 + 2 * std::sqrt(static_cast<double>(head_dim)));
  return 1 + magnitude(lse) * per_logit / relative_epsilon(dtype);
}

// One problem with packed host tensors, its reference and naive-in-dtype results.
struct Problem {
  AttentionDesc desc;
  HostTensor q, k, v, o, dout;

  Problem(DType dtype, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, uint64_t seed) {
    desc.seqlen_q = sq;
    desc.seqlen_kv = sk;
    desc.heads_q = hq;
    desc.heads_kv = hkv;
    desc.head_dim = d;
    desc.dtype = dtype;
    q = HostTensor(dtype, 1, sq, hq, d, Layout::packed);
    k = HostTensor(dtype, 1, sk, hkv, d, Layout::packed);
    v = HostTensor(dtype, 1, sk, hkv, d, Layout::packed);
    o = HostTensor(dtype, 1, sq, hq, d, Layout::packed);
    dout = o;
    std::mt19937_64 rng(seed);
    q.fill_random(rng, 1);
    k.fill_random(rng, 1);
    v.fill_random(rng, 1);
    dout.fill_random(rng, 1);
  }
  flash_problem resolved() const { return resolve(desc, q, k, v, o); }
};

// The oracle's results for a problem and its inputs, computed once and shared by every
// target (support/oracle_cache.hpp): the 2^20-key problems' oracle alone took a minute
// per target under CI's sanitizer build.
std::string_view bytes_of(const HostTensor& t) {
  return test::bytes_of(t.data(), t.storage.size() * sizeof t.storage[0]);
}
const reference::ForwardResult& reference_forward(const flash_problem& fp, const Problem& p) {
  return oracle_cached<reference::ForwardResult>(
      oracle_key(fp, {bytes_of(p.q), bytes_of(p.k), bytes_of(p.v)}),
      [&] { return reference::forward(fp, p.q.data(), p.k.data(), p.v.data()); });
}
struct NaiveForward {
  reference::ForwardResult result;
};
const reference::ForwardResult& naive_forward(const flash_problem& fp, const Problem& p) {
  return oracle_cached<NaiveForward>(oracle_key(fp, {bytes_of(p.q), bytes_of(p.k), bytes_of(p.v)}),
                                     [&] {
                                       return NaiveForward{reference::naive_forward(
                                           fp, p.q.data(), p.k.data(), p.v.data())};
                                     })
      .result;
}
struct BackwardOracle {
  reference::BackwardResult ref, naive;
};
const BackwardOracle& backward_oracle(const flash_problem& fp, const Problem& p) {
  return oracle_cached<BackwardOracle>(
      oracle_key(fp, {bytes_of(p.q), bytes_of(p.k), bytes_of(p.v), bytes_of(p.dout)}), [&] {
        return BackwardOracle{
            reference::backward(fp, p.q.data(), p.k.data(), p.v.data(), p.dout.data()),
            reference::naive_backward(fp, p.q.data(), p.k.data(), p.v.data(), p.dout.data())};
      });
}

// NaN and infinities must match the reference element by element; finite elements
// then go through the tolerance rule (with non-finite positions set to 0 on all sides).
::testing::AssertionResult matches(const std::string& what, std::vector<double> got,
                                   std::vector<double> ref, std::vector<double> naive, DType dtype,
                                   double magnitude = -1) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << what << ": size differs";
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ref_finite = std::isfinite(ref[i]);
    if (!ref_finite || !std::isfinite(got[i])) {
      const bool same = (std::isnan(ref[i]) && std::isnan(got[i])) || ref[i] == got[i];
      if (!same)
        return ::testing::AssertionFailure()
               << what << "[" << i << "] = " << got[i] << ", reference " << ref[i];
      got[i] = ref[i] = naive[i] = 0;
    } else if (!std::isfinite(naive[i])) {
      naive[i] = ref[i];  // the naive path overflowed where the reference did not
    }
  }
  const Verdict v = compare(what, got, ref, naive, dtype, magnitude);
  if (!v.pass) return ::testing::AssertionFailure() << v.detail;
  return ::testing::AssertionSuccess() << v.detail;
}

}  // namespace

// Readable parameter names in gtest output (instead of a byte dump).
void PrintTo(const Target& target, std::ostream* os) { *os << target.label; }

namespace {

class Numerics : public testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    if (!GetParam().available) GTEST_SKIP() << GetParam().label << ": " << GetParam().reason;
  }

  // Runs the forward on this target; returns false when it raised. Every head dim used
  // here (8 to 64, multiples of 8) runs on every backend, so a decline is a failure.
  bool forward(Problem& p, std::vector<float>& lse) {
    AttentionDesc d = p.desc;
    d.backend = GetParam().backend;
    lse = poisoned_lse(d.batch * d.heads_q * d.seqlen_q);
    d.lse = lse.data();
    p.o.poison();
    ScopedEnv simd("FLASH_CPU_TARGET", GetParam().simd.empty() ? nullptr : GetParam().simd.c_str());
    try {
      attention(d, p.q.data(), p.k.data(), p.v.data(), p.o.data());
    } catch (const Error& e) {
      ADD_FAILURE() << "raised: " << e.what();
      return false;
    }
    return true;
  }

  // Returns false when the forward raised (already a failure).
  bool check_forward(Problem& p, const char* what) {
    std::vector<float> lse;
    if (!forward(p, lse)) return false;
    const flash_problem fp = p.resolved();
    const auto& ref = reference_forward(fp, p);
    const auto& naive = naive_forward(fp, p);
    EXPECT_TRUE(matches(std::string(what) + " o", p.o.to_packed(), ref.o, naive.o, p.desc.dtype));
    EXPECT_TRUE(matches(std::string(what) + " lse", std::vector<double>(lse.begin(), lse.end()),
                        ref.lse, naive.lse, DType::f32));
    return true;
  }

  void check_backward(Problem& p, const char* what) {
    const flash_problem fp = p.resolved();
    const auto& ref = reference_forward(fp, p);
    // The backward's inputs: the reference o (in the dtype) and lse (in f32).
    HostTensor o = p.o;
    const int64_t dv = fp.head_dim_v;
    for (int64_t s = 0; s < fp.seqlen_q; ++s)
      for (int64_t h = 0; h < fp.heads_q; ++h)
        for (int64_t e = 0; e < dv; ++e) o.set(0, s, h, e, ref.o[(s * fp.heads_q + h) * dv + e]);
    const std::vector<float> lse(ref.lse.begin(), ref.lse.end());
    HostTensor dq = p.q, dk = p.k, dv_t = p.v;
    dq.poison();
    dk.poison();
    dv_t.poison();
    AttentionDesc d = p.desc;
    d.backend = GetParam().backend;
    ScopedEnv simd("FLASH_CPU_TARGET", GetParam().simd.empty() ? nullptr : GetParam().simd.c_str());
    try {
      attention_backward(d, p.q.data(), p.k.data(), p.v.data(), o.data(), p.dout.data(), lse.data(),
                         dq.data(), dk.data(), dv_t.data());
    } catch (const Error& e) {
      FAIL() << "raised: " << e.what();
    }
    const BackwardOracle& oracle = backward_oracle(fp, p);
    const auto& grad = oracle.ref;
    const auto& naive = oracle.naive;
    const double mag = std::max({magnitude(grad.dq), magnitude(grad.dk), magnitude(grad.dv)}) *
                       lse_rounding_factor(ref.lse, d.dtype, d.head_dim);
    EXPECT_TRUE(
        matches(std::string(what) + " dq", dq.to_packed(), grad.dq, naive.dq, d.dtype, mag));
    EXPECT_TRUE(
        matches(std::string(what) + " dk", dk.to_packed(), grad.dk, naive.dk, d.dtype, mag));
    EXPECT_TRUE(
        matches(std::string(what) + " dv", dv_t.to_packed(), grad.dv, naive.dv, d.dtype, mag));
  }
};

// Largest |q·k| over all (query, key) pairs of head pairs that meet (GQA included).
double max_abs_dot(const Problem& p) {
  const auto& d = p.desc;
  double worst = 0;
  for (int64_t h = 0; h < d.heads_q; ++h)
    for (int64_t i = 0; i < d.seqlen_q; ++i)
      for (int64_t j = 0; j < d.seqlen_kv; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < d.head_dim; ++e)
          dot += p.q.get(0, i, h, e) * p.k.get(0, j, h / (d.heads_q / d.heads_kv), e);
        worst = std::max(worst, std::fabs(dot));
      }
  return worst;
}

// Logits reach ±1e4 after scaling: the online softmax must subtract the running max
// before exponentiating (exp(1e4) overflows every float type), and rescale correctly
// when a later tile raises the max by thousands.
TEST_P(Numerics, LogitsUpTo1e4AfterScalingForward) {
  for (DType dtype : kDTypes)
    for (const bool causal : {false, true}) {
      Problem p(dtype, 67, 150, 2, 1, 64, 11);
      p.desc.causal = causal;
      p.desc.scale = static_cast<float>(1e4 / max_abs_dot(p));
      SCOPED_TRACE(std::string(to_string(dtype)) + (causal ? " causal" : ""));
      check_forward(p, "logits1e4");
    }
}

TEST_P(Numerics, LogitsUpTo1e4AfterScalingBackward) {
  for (DType dtype : kDTypes) {
    Problem p(dtype, 33, 70, 2, 2, 32, 12);
    p.desc.scale = static_cast<float>(1e4 / max_abs_dot(p));
    SCOPED_TRACE(to_string(dtype));
    check_backward(p, "logits1e4");
  }
}

// Every score of a row equal (all keys identical): uniform weights, o = mean of v.
TEST_P(Numerics, AllEqualScores) {
  for (DType dtype : kDTypes) {
    Problem p(dtype, 19, 300, 2, 2, 64, 13);
    for (int64_t j = 1; j < 300; ++j)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t e = 0; e < 64; ++e) p.k.set(0, j, h, e, p.k.get(0, 0, h, e));
    SCOPED_TRACE(to_string(dtype));
    check_forward(p, "equal_scores");
    check_backward(p, "equal_scores");
  }
}

// Rows that see exactly one key: window (0, 0) shows row i only key i (Sq = Sk), and
// with causal Sq = Sk row 0 sees key 0 alone. The output is that key's v row.
TEST_P(Numerics, RowsWithOneVisibleKey) {
  for (DType dtype : kDTypes) {
    Problem p(dtype, 40, 40, 2, 1, 64, 14);
    p.desc.window_left = 0;
    p.desc.window_right = 0;
    SCOPED_TRACE(to_string(dtype));
    if (!check_forward(p, "window00")) return;
    // o == v exactly up to one rounding of p = 1: a tight check on top of the rule.
    for (int64_t i = 0; i < 40; ++i)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t e = 0; e < 64; ++e)
          ASSERT_NEAR(p.o.get(0, i, h, e), p.v.get(0, i, 0, e),
                      1e-6 + 4e-3 * std::fabs(p.v.get(0, i, 0, e)))
              << "row " << i << " head " << h;
    check_backward(p, "window00");
    Problem c(dtype, 25, 25, 1, 1, 32, 15);
    c.desc.causal = true;
    check_forward(c, "causal_row0");
  }
}

// Non-finite inputs (see tests/README.md, "Non-finite inputs"): NaN/inf reach exactly
// the outputs the reference gives them, and no other.
struct Poison {
  const char* name;
  char tensor;  // 'q', 'k' or 'v'
  int64_t row, dim;
  double value;
};

const Poison kPoisons[] = {
    {"nan_in_q", 'q', 3, 5, kNaN},  // query row 3 of head 0
    {"nan_in_k", 'k', 6, 1, kNaN},  // key 6 (both query heads share the kv head)
    {"nan_in_v", 'v', 2, 7, kNaN},  // value 2, column 7
    {"minus_inf_in_q", 'q', 4, 0, -kInf}, {"minus_inf_in_k", 'k', 5, 3, -kInf},
    {"plus_inf_in_k", 'k', 1, 2, kInf},   {"minus_inf_in_v", 'v', 3, 4, -kInf},
    {"plus_inf_in_v", 'v', 0, 0, kInf},
};

TEST_P(Numerics, NonFiniteInputsPropagateLikeTheReference) {
  for (DType dtype : kDTypes)
    for (const Poison& poison : kPoisons)
      for (const bool causal : {false, true}) {
        Problem p(dtype, 9, 9, 2, 1, 16, 16);
        p.desc.causal = causal;
        HostTensor& t = poison.tensor == 'q' ? p.q : poison.tensor == 'k' ? p.k : p.v;
        t.set(0, poison.row, 0, poison.dim, poison.value);
        SCOPED_TRACE(std::string(poison.name) + " " + to_string(dtype) + (causal ? " causal" : ""));
        check_forward(p, poison.name);
      }
}

// The backward with NaN in a key or value row that only some rows see (causal): the
// gradients of the rows that do not see it must stay finite, as in the reference. Head
// dims 16 (mma.sync on the GPU) and 64 / 128 / 256 (the Hopper backward's tiles: its
// non-finite-key quarantine, bwd_ops.cuh, and at 256 the shared-key tiles).
TEST_P(Numerics, NanInKeyOrValueBackward) {
  for (DType dtype : {DType::f32, DType::bf16})
    for (const int64_t dim : {16, 64, 128, 256})
      for (const char tensor : {'k', 'v'}) {
        Problem p(dtype, 12, 9, 2, 1, dim, 21);  // Sq > Sk: rows 0-2 see no key at all
        p.desc.causal = true;
        (tensor == 'k' ? p.k : p.v).set(0, 6, 0, 3, kNaN);  // key 6: rows 9-11 see it
        SCOPED_TRACE(std::string("NaN in ") + tensor + " " + to_string(dtype) + " D " +
                     std::to_string(dim));
        check_backward(p, tensor == 'k' ? "nan_in_k" : "nan_in_v");
      }
}

// A score of -inf for every key a row sees (q·k = -inf): documented as the reference
// computes it (see tests/README.md); every backend must agree.
TEST_P(Numerics, RowWhoseScoresAreAllMinusInfinity) {
  for (DType dtype : kDTypes) {
    Problem p(dtype, 4, 6, 1, 1, 8, 17);
    // k's dim 0 positive everywhere, q[2][0] = -inf: row 2 scores -inf for every key.
    for (int64_t j = 0; j < 6; ++j) p.k.set(0, j, 0, 0, 0.5 + 0.1 * j);
    p.q.set(0, 2, 0, 0, -kInf);
    SCOPED_TRACE(to_string(dtype));
    check_forward(p, "all_minus_inf");
  }
}

// Very long rows: seqlen_kv = 2^20 keys, one query. f32 accumulation over a million
// terms must stay within the rule (2x naive f32 error + eps). On the cpu backend only
// its default SIMD target runs these (the other targets share the code path; under
// ASan each target costs a minute).
class MillionKeys : public Numerics {
 protected:
  void SetUp() override {
    Numerics::SetUp();
    if (IsSkipped()) return;
    const Target& t = GetParam();
    if (!t.simd.empty()) {
      for (const Target& other : all_targets())
        if (other.backend == Backend::cpu) {
          if (other.simd != t.simd)
            GTEST_SKIP() << "runs on the default cpu target " << other.label;
          break;
        }
    }
  }
  // Fills k and v (2^20 rows) straight into f32 storage: HostTensor::fill_random
  // would dominate the test's time.
  static void fast_fill(HostTensor& t, uint64_t seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    float* x = static_cast<float*>(t.data());
    for (int64_t i = 0; i < t.capacity(); ++i) x[i] = dist(rng);
  }
};

constexpr int64_t kMillion = int64_t{1} << 20;

TEST_P(MillionKeys, Forward) {
  Problem p(DType::f32, 1, 1, 1, 1, 16, 18);
  p.desc.seqlen_kv = kMillion;
  p.k = HostTensor(DType::f32, 1, kMillion, 1, 16, Layout::packed);
  p.v = p.k;
  fast_fill(p.k, 1);
  fast_fill(p.v, 2);
  check_forward(p, "sk_1M");
}

TEST_P(MillionKeys, Backward) {
  Problem p(DType::f32, 1, 1, 1, 1, 16, 19);
  p.desc.seqlen_kv = kMillion;
  p.k = HostTensor(DType::f32, 1, kMillion, 1, 16, Layout::packed);
  p.v = p.k;
  fast_fill(p.k, 3);
  fast_fill(p.v, 4);
  check_backward(p, "sk_1M");
}

// Extreme but valid descriptors: int64-max windows behave as unbounded (the mask
// arithmetic diag ± window must not overflow), with Sq > Sk and Sq < Sk; a scale or
// softcap at the bottom of the float range gives uniform weights.
TEST_P(Numerics, ExtremeValidDescriptorValues) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  struct Variant {
    const char* name;
    int64_t sq, sk, left, right;
    bool causal;
    float scale, softcap;
  };
  const Variant variants[] = {
      {"windows_max_sq_gt_sk", 12, 5, kMax, kMax, false, 0, 0},
      {"windows_max_sq_lt_sk", 5, 12, kMax, kMax, false, 0, 0},
      {"window_left_max_causal", 12, 5, kMax, -1, true, 0, 0},
      {"window_right_max_only", 7, 7, -1, kMax, false, 0, 0},
      {"window_left_huge_sq_gt_sk", 12, 5, int64_t{1} << 62, 0, false, 0, 0},
      {"scale_1e-38", 9, 14, -1, -1, false, 1e-38f, 0},
      {"softcap_1e-30", 9, 14, -1, -1, false, 0, 1e-30f},
      {"softcap_3e38", 9, 14, -1, -1, false, 0, 3e38f},
  };
  for (const Variant& x : variants)
    for (DType dtype : {DType::f32, DType::bf16}) {
      Problem p(dtype, x.sq, x.sk, 2, 2, 32, 20);
      p.desc.window_left = x.left;
      p.desc.window_right = x.right;
      p.desc.causal = x.causal;
      p.desc.scale = x.scale;
      p.desc.softcap = x.softcap;
      SCOPED_TRACE(std::string(x.name) + " " + to_string(dtype));
      check_forward(p, x.name);
      check_backward(p, x.name);
    }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, Numerics, testing::ValuesIn(all_targets()),
                         [](const auto& info) { return info.param.label; });
INSTANTIATE_TEST_SUITE_P(AllTargets, MillionKeys, testing::ValuesIn(all_targets()),
                         [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace flash::test
