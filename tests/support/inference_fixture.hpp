// The Inference suite's fixture and helpers (inference_test.cpp, inference_decode_test.cpp):
// flat dtype buffers, the oracle (fp64 reference and naive attention in the dtype, cached per
// problem and inputs), the run-and-compare of one descriptor on the suite's target, and the
// descriptors' packed / paged fields. The suite is instantiated once, in inference_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "reference/dtype.hpp"
#include "reference/naive.hpp"
#include "reference/sequences.hpp"
#include "support/cases.hpp"
#include "support/compare.hpp"
#include "support/oracle_cache.hpp"
#include "support/sanitized.hpp"
#include "support/targets.hpp"

namespace flash::test {

void PrintTo(const Target& target, std::ostream* os);  // cross_backend_test.cpp

// A flat buffer of one storage dtype.
struct Buffer {
  DType dtype;
  std::vector<char> bytes;
  Buffer(DType t, int64_t n)
      : dtype(t), bytes(static_cast<size_t>(n) * (t == DType::f32 ? 4 : 2)) {}
  int64_t size() const {
    return static_cast<int64_t>(bytes.size()) / (dtype == DType::f32 ? 4 : 2);
  }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  double get(int64_t i) const { return reference::load(data(), static_cast<int32_t>(dtype), i); }
  void set(int64_t i, double x) { reference::store(data(), static_cast<int32_t>(dtype), i, x); }
  void poison() {
    for (int64_t i = 0; i < size(); ++i) set(i, NAN);
  }
  void fill(std::mt19937_64& rng) {
    std::normal_distribution<double> nd;
    for (int64_t i = 0; i < size(); ++i) set(i, nd(rng));
  }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(size()));
    for (int64_t i = 0; i < size(); ++i) v[i] = get(i);
    return v;
  }
};

// The resolved problem the oracle takes, for packed layouts: q/o [rows_q, Hq, D],
// k/v [rows_kv or pages x page_size, Hkv, D] (strides packed).
inline flash_problem problem_of(const AttentionDesc& d) {
  flash_problem p = problem_fields(d);
  p.cu_seqlens_q = d.cu_seqlens_q;
  p.cu_seqlens_kv = d.cu_seqlens_kv;
  p.seqlens_kv = d.seqlens_kv;
  p.block_table = d.block_table;
  p.page_size = d.page_size;
  p.pages_per_seq = d.pages_per_seq;
  p.num_pages = d.num_pages;
  p.total_q = d.cu_seqlens_q ? d.cu_seqlens_q[d.batch] : -1;
  p.total_kv = d.cu_seqlens_kv ? d.cu_seqlens_kv[d.batch] : -1;
  const int64_t kv_rows = d.block_table ? d.page_size : d.cu_seqlens_kv ? p.total_kv : d.seqlen_kv;
  const int64_t q_rows = d.cu_seqlens_q ? p.total_q : d.seqlen_q;
  const auto packed = [](int64_t* s, int64_t rows, int64_t heads, int64_t dim) {
    s[2] = dim;
    s[1] = heads * dim;
    s[0] = rows * heads * dim;
  };
  packed(p.q_stride, q_rows, p.heads_q, p.head_dim);
  packed(p.o_stride, q_rows, p.heads_q, p.head_dim_v);
  packed(p.k_stride, kv_rows, p.heads_kv, p.head_dim);
  packed(p.v_stride, kv_rows, p.heads_kv, p.head_dim_v);
  return p;
}

// The oracle's results (fp64 reference and naive attention in the dtype) for one problem
// and its inputs, computed once and shared by every target (support/oracle_cache.hpp):
// under CI's sanitizer build computing them again cost 30-50 s per test and target.
struct ForwardOracle {
  reference::ForwardResult ref, naive;
};
struct BackwardOracle {
  reference::BackwardResult ref, naive;
};

inline std::string_view bytes_of(const Buffer& b) {
  return test::bytes_of(b.data(), b.bytes.size());
}

inline const ForwardOracle& forward_oracle(const flash_problem& p, const Buffer& q, const Buffer& k,
                                           const Buffer& v) {
  return oracle_cached<ForwardOracle>(oracle_key(p, {bytes_of(q), bytes_of(k), bytes_of(v)}), [&] {
    return ForwardOracle{
        reference::forward(p, q.data(), k.data(), v.data()),
        reference::forward_per_sequence(p, q.data(), k.data(), v.data(), reference::naive_forward)};
  });
}

inline const BackwardOracle& backward_oracle(const flash_problem& p, const Buffer& q,
                                             const Buffer& k, const Buffer& v, const Buffer& dout) {
  return oracle_cached<BackwardOracle>(
      oracle_key(p, {bytes_of(q), bytes_of(k), bytes_of(v), bytes_of(dout)}), [&] {
        return BackwardOracle{
            reference::backward(p, q.data(), k.data(), v.data(), dout.data()),
            reference::backward_per_sequence(p, q.data(), k.data(), v.data(), dout.data(),
                                             reference::naive_backward)};
      });
}

class Inference : public testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    if (!GetParam().available)
      GTEST_SKIP() << GetParam().label << " unavailable: " << GetParam().reason;
  }
  // Runs fn with the target selected; false (and a failure) when it raises: every backend
  // runs every inference feature, so a decline is a failure too.
  template <class Fn>
  bool run(AttentionDesc& d, Fn&& fn) {
    d.backend = GetParam().backend;
    ScopedEnv simd("FLASH_CPU_TARGET", GetParam().simd.empty() ? nullptr : GetParam().simd.c_str());
    try {
      fn();
    } catch (const Error& e) {
      ADD_FAILURE() << "raised: " << e.what();
      return false;
    }
    return true;
  }

  // Forward (and with `backward`, the backward) of d against the oracle.
  void check(AttentionDesc d, Buffer& q, Buffer& k, Buffer& v, bool backward,
             const std::string& what) {
    SCOPED_TRACE(what + " " + to_string(d.dtype));
    const flash_problem p = problem_of(d);
    const int64_t rows_q = reference::rows_q(p);
    Buffer o(d.dtype, rows_q * p.heads_q * p.head_dim_v);
    o.poison();
    std::vector<float> lse(static_cast<size_t>(rows_q * p.heads_q), NAN);
    d.lse = lse.data();
    if (!run(d, [&] { attention(d, q.data(), k.data(), v.data(), o.data()); })) return;
    const ForwardOracle& oracle = forward_oracle(p, q, k, v);
    const auto& ref = oracle.ref;
    const auto& naive = oracle.naive;
    const Verdict vo = compare(what + " o", o.values(), ref.o, naive.o, d.dtype);
    EXPECT_TRUE(vo.pass) << vo.detail;
    for (size_t i = 0; i < lse.size(); ++i) {
      if (std::isinf(ref.lse[i])) {
        EXPECT_EQ(lse[i], ref.lse[i]) << what << " lse[" << i << "]";
      } else {
        EXPECT_NEAR(lse[i], ref.lse[i], 1e-3 + 1e-4 * std::fabs(ref.lse[i]))
            << what << " lse[" << i << "]";
      }
    }
    if (!backward) return;
    Buffer dout(d.dtype, o.size()), dq(d.dtype, q.size()), dk(d.dtype, k.size()),
        dv(d.dtype, v.size());
    std::mt19937_64 rng(99);
    dout.fill(rng);
    dq.poison();
    dk.poison();
    dv.poison();
    // The backward's inputs: the oracle's o (in the dtype) and lse.
    Buffer o_ref(d.dtype, o.size());
    for (int64_t i = 0; i < o.size(); ++i) o_ref.set(i, ref.o[i]);
    const std::vector<float> lse_ref(ref.lse.begin(), ref.lse.end());
    d.lse = nullptr;
    if (!run(d, [&] {
          attention_backward(d, q.data(), k.data(), v.data(), o_ref.data(), dout.data(),
                             lse_ref.data(), dq.data(), dk.data(), dv.data());
        }))
      return;
    const BackwardOracle& oracle_grad = backward_oracle(p, q, k, v, dout);
    const auto& grad = oracle_grad.ref;
    const auto& ngrad = oracle_grad.naive;
    const double mag = std::max({magnitude(grad.dq), magnitude(grad.dk), magnitude(grad.dv)});
    for (auto [name, got, r, n] :
         {std::tuple{"dq", &dq, &grad.dq, &ngrad.dq}, std::tuple{"dk", &dk, &grad.dk, &ngrad.dk},
          std::tuple{"dv", &dv, &grad.dv, &ngrad.dv}}) {
      const Verdict vg = compare(what + " " + name, got->values(), *r, *n, d.dtype, mag);
      EXPECT_TRUE(vg.pass) << vg.detail;
    }
  }
};

inline AttentionDesc base(DType dtype, int64_t hq, int64_t hkv, int64_t dim) {
  AttentionDesc d;
  d.dtype = dtype;
  d.heads_q = hq;
  d.heads_kv = hkv;
  d.head_dim = dim;
  return d;
}

// The paged-cache fields of d for sequences of lens[b] keys (capacity `keys`) in pages of
// `page` rows, `spare` pages that no sequence uses coming first, and its block table: the
// used pages shuffled by rng; entries past a sequence's last page are garbage that must
// never be read (-1, or with `out_of_range` alternately -1 and ids >= num_pages).
inline std::vector<int32_t> shuffled_pages(AttentionDesc& d, const std::vector<int32_t>& lens,
                                           int64_t keys, int64_t page, int32_t spare,
                                           std::mt19937_64& rng, bool out_of_range) {
  d.page_size = page;
  d.pages_per_seq = (keys + page - 1) / page;
  d.num_pages = d.batch * d.pages_per_seq + spare;
  std::vector<int32_t> table(static_cast<size_t>(d.batch * d.pages_per_seq));
  std::iota(table.begin(), table.end(), spare);
  std::shuffle(table.begin(), table.end(), rng);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t j = (lens[b] + page - 1) / page; j < d.pages_per_seq; ++j)
      table[b * d.pages_per_seq + j] =
          out_of_range && j % 2 == 0 ? static_cast<int32_t>(d.num_pages + j) : -1;
  return table;
}

// The paged-cache fields of d (batch 1) for one sequence of `keys` keys in pages of `page`
// rows, every page in use, and its block table, shuffled by rng.
inline std::vector<int32_t> one_sequence_pages(AttentionDesc& d, int64_t keys, int64_t page,
                                               std::mt19937_64& rng) {
  return shuffled_pages(d, {static_cast<int32_t>(keys)}, keys, page, 0, rng, false);
}

inline std::vector<int32_t> offsets(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), cu.begin() + 1);
  return cu;
}

}  // namespace flash::test
