// Inference features on every backend: packed batches (cu_seqlens_q/kv, forward and
// backward), cache lengths (seqlens_kv), paged caches (block_table), decode shapes and
// merge_partials. Each result is compared with the fp64 oracle (reference/sequences.hpp)
// under the tolerance rule, the naive-in-dtype error taken per sequence the same way.
// Outputs are poisoned with NaN first, so an unwritten element fails. A backend may
// decline a feature only as its README documents (hip: packed batches, cache lengths,
// paged caches); any other decline fails.
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
#include "support/compare.hpp"
#include "support/oracle_cache.hpp"
#include "support/sanitized.hpp"
#include "support/targets.hpp"

namespace flash::test {

void PrintTo(const Target& target, std::ostream* os);  // cross_backend_test.cpp

namespace {

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
flash_problem problem_of(const AttentionDesc& d) {
  flash_problem p{};
  p.batch = d.batch;
  p.seqlen_q = d.seqlen_q;
  p.seqlen_kv = d.seqlen_kv;
  p.heads_q = d.heads_q;
  p.heads_kv = d.heads_kv;
  p.head_dim = d.head_dim;
  p.head_dim_v = d.head_dim_v ? d.head_dim_v : d.head_dim;
  p.dtype = static_cast<int32_t>(d.dtype);
  p.causal = d.causal;
  p.scale = d.scale > 0 ? d.scale : static_cast<float>(1.0 / std::sqrt(double(d.head_dim)));
  p.softcap = d.softcap;
  p.window_left = d.window_left;
  p.window_right = d.window_right;
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

std::string_view bytes_of(const Buffer& b) { return test::bytes_of(b.data(), b.bytes.size()); }

const ForwardOracle& forward_oracle(const flash_problem& p, const Buffer& q, const Buffer& k,
                                    const Buffer& v) {
  return oracle_cached<ForwardOracle>(oracle_key(p, {bytes_of(q), bytes_of(k), bytes_of(v)}), [&] {
    return ForwardOracle{
        reference::forward(p, q.data(), k.data(), v.data()),
        reference::forward_per_sequence(p, q.data(), k.data(), v.data(), reference::naive_forward)};
  });
}

const BackwardOracle& backward_oracle(const flash_problem& p, const Buffer& q, const Buffer& k,
                                      const Buffer& v, const Buffer& dout) {
  return oracle_cached<BackwardOracle>(
      oracle_key(p, {bytes_of(q), bytes_of(k), bytes_of(v), bytes_of(dout)}), [&] {
        return BackwardOracle{
            reference::backward(p, q.data(), k.data(), v.data(), dout.data()),
            reference::backward_per_sequence(p, q.data(), k.data(), v.data(), dout.data(),
                                             reference::naive_backward)};
      });
}

// The documented declines of inference features (backends/hip/README.md).
bool documented_decline(Backend backend, const std::string& message) {
  return backend == Backend::hip && message.find("not supported on hip") != std::string::npos;
}

class Inference : public testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    if (!GetParam().available)
      GTEST_SKIP() << GetParam().label << " unavailable: " << GetParam().reason;
  }
  // Runs fn with the target selected; false (and a passing test) on a documented decline.
  template <class Fn>
  bool run(AttentionDesc& d, Fn&& fn) {
    d.backend = GetParam().backend;
    ScopedEnv simd("FLASH_CPU_TARGET", GetParam().simd.empty() ? nullptr : GetParam().simd.c_str());
    try {
      fn();
    } catch (const Error& e) {
      if (documented_decline(GetParam().backend, e.what())) return false;
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

AttentionDesc base(DType dtype, int64_t hq, int64_t hkv, int64_t dim) {
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
std::vector<int32_t> shuffled_pages(AttentionDesc& d, const std::vector<int32_t>& lens,
                                    int64_t keys, int64_t page, int32_t spare, std::mt19937_64& rng,
                                    bool out_of_range) {
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
std::vector<int32_t> one_sequence_pages(AttentionDesc& d, int64_t keys, int64_t page,
                                        std::mt19937_64& rng) {
  return shuffled_pages(d, {static_cast<int32_t>(keys)}, keys, page, 0, rng, false);
}

std::vector<int32_t> offsets(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), cu.begin() + 1);
  return cu;
}

TEST_P(Inference, PackedBatches) {
  // The long sequence: 250 under sanitizers (support/sanitized.hpp), still several tiles
  // with a tail on every backend.
  const int32_t n = kSanitized ? 250 : 1000;
  const std::vector<int32_t> lq = {0, 1, 17, 113, n}, lk = {5, 1, n, 113, 17};
  const auto cu_q = offsets(lq), cu_k = offsets(lk);
  struct Variant {
    const char* name;
    bool causal;
    int64_t left, right;
    float softcap;
  };
  // Head dims of every tile width of the Hopper forward (64, 128, 256) and both 16-bit
  // dtypes: packed prefill runs on it there. The wider ones run on the GPU targets only:
  // the cpu backend runs each packed sequence as a dense problem (cpu_sequences.h), whose
  // widths the cross-backend suite covers, and the oracle at D 128 / 256 added ~2 minutes
  // per cpu target to CI's sanitizer build. D 256 backward: the Hopper backward's shared-key
  // tiles (bwd_wgmma_kernel.cuh, kSplitD) on packed sequences.
  struct Shape {
    DType dtype;
    int64_t dim;
    bool backward;
  };
  for (const Variant x :
       {Variant{"plain", false, -1, -1, 0.f}, Variant{"causal", true, -1, -1, 0.f},
        Variant{"window", false, 40, 7, 0.f}, Variant{"softcap", true, -1, -1, 20.f}})
    for (const Shape shape : {Shape{DType::bf16, 64, true}, Shape{DType::f32, 64, true},
                              Shape{DType::f16, 128, true}, Shape{DType::bf16, 256, true}}) {
      const Backend backend = GetParam().backend;
      if (shape.dim != 64 && backend != Backend::cuda && backend != Backend::hip) continue;
      const DType dtype = shape.dtype;
      const int64_t dim = shape.dim;
      AttentionDesc d = base(dtype, 4, 2, dim);
      d.batch = 5;
      d.seqlen_q = n;
      d.seqlen_kv = n;
      d.cu_seqlens_q = cu_q.data();
      d.cu_seqlens_kv = cu_k.data();
      d.causal = x.causal;
      d.window_left = x.left;
      d.window_right = x.right;
      d.softcap = x.softcap;
      std::mt19937_64 rng(1);
      Buffer q(dtype, cu_q.back() * 4 * dim), k(dtype, cu_k.back() * 2 * dim), v = k;
      q.fill(rng);
      k.fill(rng);
      v.fill(rng);
      check(d, q, k, v, shape.backward,
            std::string("packed ") + x.name + " D " + std::to_string(dim));
    }
}

// NaN in the values of a packed neighbour that no row sees (sequence 1: keys, no queries):
// a tensor-core forward's last key tile of sequence 0 runs past that sequence's end into
// them, as hidden keys, and 0·NaN = NaN; they must reach no row (fwd_wgmma_kernel.cuh's
// exact path).
TEST_P(Inference, PackedNeighbourWithNanValues) {
  // The last sequence: 150 under sanitizers (support/sanitized.hpp), still two tiles.
  const int32_t n = kSanitized ? 150 : 300;
  const std::vector<int32_t> lq = {40, 0, n}, lk = {30, 50, n};
  const auto cu_q = offsets(lq), cu_k = offsets(lk);
  for (const bool causal : {false, true})
    for (const int64_t dim : {64, 128}) {
      const Backend backend = GetParam().backend;
      if (dim != 64 && backend != Backend::cuda && backend != Backend::hip) continue;
      AttentionDesc d = base(DType::bf16, 4, 2, dim);
      d.batch = 3;
      d.seqlen_q = n;
      d.seqlen_kv = n;
      d.cu_seqlens_q = cu_q.data();
      d.cu_seqlens_kv = cu_k.data();
      d.causal = causal;
      std::mt19937_64 rng(4);
      Buffer q(d.dtype, cu_q.back() * 4 * dim), k(d.dtype, cu_k.back() * 2 * dim), v = k;
      q.fill(rng);
      k.fill(rng);
      v.fill(rng);
      for (int64_t i = cu_k[1] * 2 * dim; i < cu_k[2] * 2 * dim; ++i) v.set(i, NAN);
      check(d, q, k, v, false,
            std::string("packed neighbour NaN ") + (causal ? "causal" : "plain") + " D " +
                std::to_string(dim));
    }
}

// A packed batch without keys (cu_seqlens_kv all 0, total 0): k and v may be null (an
// empty tensor needs no pointer) and every row gets o = 0, lse = -inf. (The Hopper
// forward's tensor maps still need an address: fwd_wgmma_kernel.cuh's launcher.)
TEST_P(Inference, PackedBatchWithoutKeys) {
  const std::vector<int32_t> cu_q = {0, 3, 20}, cu_k = {0, 0, 0};
  for (DType dtype : {DType::bf16, DType::f32}) {
    AttentionDesc d = base(dtype, 4, 2, 128);
    d.batch = 2;
    d.seqlen_q = 17;
    d.seqlen_kv = 64;
    d.cu_seqlens_q = cu_q.data();
    d.cu_seqlens_kv = cu_k.data();
    std::mt19937_64 rng(5);
    Buffer q(dtype, 20 * 4 * 128), o(dtype, 20 * 4 * 128);
    q.fill(rng);
    o.poison();
    std::vector<float> lse(4 * 20, NAN);
    d.lse = lse.data();
    if (!run(d, [&] { attention(d, q.data(), nullptr, nullptr, o.data()); })) continue;
    const std::vector<double> got = o.values();
    EXPECT_EQ(std::count(got.begin(), got.end(), 0.0), o.size()) << to_string(dtype);
    for (float l : lse) EXPECT_TRUE(std::isinf(l) && l < 0) << l << " " << to_string(dtype);
  }
}

TEST_P(Inference, CacheLengths) {
  // The cache: 300 keys under sanitizers (support/sanitized.hpp), still split into
  // several key chunks for decode and several tiles for the sq = 16 prefill.
  const int32_t sk = kSanitized ? 300 : 1000;
  const std::vector<int32_t> lens = {0, 5, sk * 7 / 10, sk};
  for (int64_t sq : {1, 3, 16})
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      AttentionDesc d = base(dtype, 8, 2, 128);
      d.batch = 4;
      d.seqlen_q = sq;
      d.seqlen_kv = sk;
      d.seqlens_kv = lens.data();
      d.causal = sq > 1;
      std::mt19937_64 rng(2);
      Buffer q(dtype, 4 * sq * 8 * 128), k(dtype, 4 * sk * 2 * 128), v = k;
      q.fill(rng);
      k.fill(rng);
      v.fill(rng);
      check(d, q, k, v, false, "cache sq=" + std::to_string(sq));
    }
}

TEST_P(Inference, PagedCaches) {
  const std::vector<int32_t> lens = {1, 300, 77, 513};  // last pages partly filled
  for (int64_t page : {1, 7, 16, 64, 256})
    for (int64_t sq : {1, 4}) {
      const DType dtype = page == 64 ? DType::f32 : DType::bf16;
      AttentionDesc d = base(dtype, 8, 2, 64);
      d.batch = 4;
      d.seqlen_q = sq;
      d.seqlen_kv = 513;
      d.seqlens_kv = lens.data();
      d.causal = true;
      std::mt19937_64 rng(3);
      const std::vector<int32_t> table = shuffled_pages(d, lens, 513, page, 5, rng, false);
      d.block_table = table.data();
      Buffer q(dtype, d.batch * sq * 8 * 64), k(dtype, d.num_pages * page * 2 * 64), v = k;
      q.fill(rng);
      k.fill(rng);
      v.fill(rng);
      check(d, q, k, v, false, "paged page=" + std::to_string(page) + " sq=" + std::to_string(sq));
    }
}

// Paged caches under prefill-sized queries (chunked prefill: seqlen_q x group above the
// decode kernel's 64 rows): cuda's Hopper forward takes pages of whole 8-row boxes (its
// choose() is asserted to name it), the decode kernel the rest (page 7). Dense and packed
// queries, cache lengths with partly filled last pages, a sequence of one key (causal
// rows that see none) or full caches, GQA 4, every tile width of the Hopper forward.
// Every K / V row no sequence uses (spare pages, rows past a length) holds NaN, and table
// entries past a sequence's last page are garbage (-1, out of range): a read of any of
// them reaches o.
// cuda runs each problem twice more on a grid of two blocks (a block then crosses work
// tiles and sequences with its paged producer), the second time with the band tile off
// (at D 128 the 176-key tile, whose boxes are at most 16 rows, instead of the 128-key one).
TEST_P(Inference, PagedPrefill) {
  const int32_t n = kSanitized ? 200 : 520;  // the longest cache
  const std::vector<int32_t> lens = {n, 77, 1, n * 7 / 10 + 3};
  const std::vector<int32_t> lq = {n / 2, 77, 70, 0};  // packed queries
  const auto cu_q = offsets(lq);
  struct Case {
    DType dtype;
    int64_t dim, page;
    const char* variant;  // plain, causal, window, softcap
    bool packed_q;
    bool lengths = true;  // seqlens_kv; without it every sequence has all n keys
  };
  const std::vector<int32_t> all_keys(lens.size(), n);
  const Backend backend = GetParam().backend;
  const bool gpu = backend == Backend::cuda || backend == Backend::hip;
  bool sm90a = false;
  for (const BackendInfo& b : backends())
    sm90a |= backend == Backend::cuda && b.backend == Backend::cuda &&
             b.detail.find("sm_90a kernels") != std::string::npos;
  const char* forced = std::getenv("FLASH_CUDA_FWD");
  sm90a &= !(forced && std::string(forced) == "mma");
  for (const Case c :
       {Case{DType::bf16, 64, 8, "causal", false}, Case{DType::bf16, 64, 16, "causal", true},
        Case{DType::f16, 64, 64, "window", true}, Case{DType::bf16, 64, 256, "softcap", false},
        Case{DType::bf16, 64, 7, "causal", true}, Case{DType::f32, 64, 16, "causal", false},
        Case{DType::bf16, 64, 16, "plain", true, false}, Case{DType::bf16, 128, 16, "plain", true},
        Case{DType::f16, 128, 64, "causal", false},
        Case{DType::f16, 128, 64, "causal", false, false},
        Case{DType::bf16, 256, 64, "causal", true}}) {
    if (c.dim != 64 && !gpu) continue;  // as PackedBatches: the oracle's cost on cpu targets
    AttentionDesc d = base(c.dtype, 8, 2, c.dim);
    d.batch = 4;
    d.seqlen_q = c.packed_q ? n / 2 : 96;
    if (c.packed_q) d.cu_seqlens_q = cu_q.data();
    d.seqlen_kv = n;
    const std::vector<int32_t>& keys = c.lengths ? lens : all_keys;
    if (c.lengths) d.seqlens_kv = lens.data();
    const std::string variant = c.variant;
    d.causal = variant == "causal" || variant == "softcap";
    if (variant == "window") d.window_left = 40, d.window_right = 7;
    if (variant == "softcap") d.softcap = 20.f;
    std::mt19937_64 rng(7);
    const std::vector<int32_t> table = shuffled_pages(d, keys, n, c.page, 3, rng, true);
    d.block_table = table.data();
    const std::string what = std::string("paged prefill ") + c.variant +
                             (c.packed_q ? " packed q" : "") + (c.lengths ? "" : " full") + " D " +
                             std::to_string(c.dim) + " page " + std::to_string(c.page);
    if (sm90a && c.dtype != DType::f32) {
      d.backend = Backend::cuda;
      const std::string kernel = explain(d).kernel;
      const bool boxes = c.page % 8 == 0;
      EXPECT_NE(kernel.find(boxes ? "wgmma_fwd" : "decode_mma"), std::string::npos)
          << what << ": " << kernel;
      EXPECT_NE(kernel.find("paged(page " + std::to_string(c.page) + ")"), std::string::npos)
          << what << ": " << kernel;
    }
    const int64_t rows_q = c.packed_q ? cu_q.back() : d.batch * d.seqlen_q;
    Buffer q(c.dtype, rows_q * 8 * c.dim), k(c.dtype, d.num_pages * c.page * 2 * c.dim), v = k;
    q.fill(rng);
    k.fill(rng);
    v.fill(rng);
    std::vector<bool> used(static_cast<size_t>(d.num_pages * c.page), false);
    for (int64_t b = 0; b < d.batch; ++b)
      for (int64_t j = 0; j < keys[b]; ++j)
        used[table[b * d.pages_per_seq + j / c.page] * c.page + j % c.page] = true;
    for (int64_t row = 0; row < d.num_pages * c.page; ++row)
      if (!used[row])
        for (int64_t i = row * 2 * c.dim; i < (row + 1) * 2 * c.dim; ++i) {
          k.set(i, NAN);
          v.set(i, NAN);
        }
    check(d, q, k, v, false, what);
    if (backend == Backend::cuda) {
      ScopedEnv two_blocks("FLASH_CUDA_FWD_BLOCKS", "2");
      check(d, q, k, v, false, what + " (2 blocks)");
      ScopedEnv wide_tile("FLASH_CUDA_FWD_BAND_TILE", "0");  // D 128: 176-key tiles, 16-row boxes
      check(d, q, k, v, false, what + " (2 blocks, band tile off)");
    }
  }
}

// One query token against a long cache (GQA 4:1), contiguous and paged (shuffled pages);
// the paged problem runs twice on the same stream, so scratch counters a call leaves
// dirty (the cuda decode's split counts) would fail the second. Under sanitizers
// (support/sanitized.hpp) the long caches are 4x shorter: the cpu decode still splits
// each into 128 chunks (of 256 keys; of two 64-key pages).
TEST_P(Inference, DecodeLongCache) {
  if (GetParam().backend == Backend::reference) GTEST_SKIP() << "the oracle itself";
  struct Case {
    int64_t keys, page, runs;
  };
  const int64_t shorter = kSanitized ? 4 : 1;
  for (const Case c :
       {Case{4096, 0, 1}, Case{131072 / shorter, 0, 1}, Case{65536 / shorter, 64, 2}}) {
    AttentionDesc d = base(DType::bf16, 8, 2, 64);
    d.batch = 1;
    d.seqlen_q = 1;
    d.seqlen_kv = c.keys;
    d.causal = true;
    std::mt19937_64 rng(4);
    std::vector<int32_t> table;
    if (c.page > 0) {
      table = one_sequence_pages(d, c.keys, c.page, rng);
      d.block_table = table.data();
    }
    Buffer q(DType::bf16, 8 * 64), k(DType::bf16, c.keys * 2 * 64), v = k;
    q.fill(rng);
    k.fill(rng);
    v.fill(rng);
    for (int64_t run = 0; run < c.runs; ++run)
      check(d, q, k, v, false,
            "decode keys=" + std::to_string(c.keys) + " page=" + std::to_string(c.page) + " run " +
                std::to_string(run));
  }
}

// Decode splits that the cuda backend merges inside one thread block cluster
// (decode_cluster_merge, sm_90a): one (sequence, kv head) with 1k / 3k / 8k keys (2k at
// head dim 256) splits into 2 / 6 / 8 / 16 blocks, one cluster of each size (6: column
// slices of 21 and 22). Where the backend runs sm_90a kernels (its detail says so) explain()
// must name the cluster merge for the clusters of up to 8 blocks, which fit in a GPC of any
// such GPU, unless FLASH_CUDA_DECODE_CLUSTER=0 turns it off; 16 blocks may not fit
// (cudaOccupancyMaxActiveClusters decides). Every other backend and device runs the same
// problems its own way. Rows 4 and 12 of the kernel's 16-row tile, head dims 64, 96
// (columns past head_dim_v in the padded tile) and 256, lse, cache lengths below the
// capacity (at 2100 of 8192 keys the last split sees none), paged caches, and eight kv heads
// (on an H100 14 splits as eight clusters, cuda_backend.cu's decode_plan).
TEST_P(Inference, DecodeSplitsInOneCluster) {
  if (GetParam().backend == Backend::reference) GTEST_SKIP() << "the oracle itself";
  const char* cluster_switch = std::getenv("FLASH_CUDA_DECODE_CLUSTER");
  bool sm90a = false;
  for (const BackendInfo& b : backends())
    sm90a |= b.backend == Backend::cuda && GetParam().backend == Backend::cuda &&
             b.detail.find("sm_90a kernels") != std::string::npos &&
             !(cluster_switch && std::string(cluster_switch) == "0");
  struct Case {
    int64_t keys, hkv, sq, dim;
    DType dtype;
    int32_t len;  // cache length of the one sequence (0: all keys)
    int64_t page;
    bool must_cluster;  // a single (sequence, kv head), <= 8 splits: the cluster merge on sm_90a
  };
  for (const Case c :
       {Case{1024, 1, 1, 64, DType::bf16, 0, 0, true}, Case{3072, 1, 3, 96, DType::f16, 0, 0, true},
        Case{2048, 1, 1, 256, DType::bf16, 700, 0, true},
        Case{8192, 1, 1, 128, DType::bf16, 0, 64, false},
        Case{8192, 1, 3, 128, DType::f16, 2100, 16, false},
        Case{8192, 8, 1, 128, DType::bf16, 0, 0, false}}) {
    const int64_t hq = 4 * c.hkv;
    AttentionDesc d = base(c.dtype, hq, c.hkv, c.dim);
    d.batch = 1;
    d.seqlen_q = c.sq;
    d.seqlen_kv = c.keys;
    d.causal = true;
    const std::vector<int32_t> lens = {c.len};
    if (c.len > 0) d.seqlens_kv = lens.data();
    std::mt19937_64 rng(5);
    std::vector<int32_t> table;
    if (c.page > 0) {
      table = one_sequence_pages(d, c.keys, c.page, rng);
      d.block_table = table.data();
    }
    const std::string what = "keys=" + std::to_string(c.keys) + " hkv=" + std::to_string(c.hkv) +
                             " sq=" + std::to_string(c.sq) + " dim=" + std::to_string(c.dim) +
                             " page=" + std::to_string(c.page);
    if (sm90a && c.must_cluster) {
      d.backend = Backend::cuda;
      const std::string kernel = explain(d).kernel;
      EXPECT_NE(kernel.find("cluster-merge"), std::string::npos) << what << ": " << kernel;
    }
    Buffer q(c.dtype, c.sq * hq * c.dim), k(c.dtype, c.keys * c.hkv * c.dim), v = k;
    q.fill(rng);
    k.fill(rng);
    v.fill(rng);
    check(d, q, k, v, false, "decode cluster " + what);
  }
}

// Decode problems of 17-64 packed rows per kv head (GQA group x query tokens, as
// speculative decoding with Hq 64 sends): cuda's tensor-core decode takes them in chunks of
// 32, two m16 tiles sharing each K/V tile, at padded head dims <= 128 (24 rows: the second
// tile half padding; 48: two chunks, the second partly filled; 64: two full ones), or in
// chunks of 16 (its plan picks one by the keys per split, DecodeRowChunkChoice pins that; at
// these cache lengths it would pick 16). cuda runs every case forced to 16 rows and to 32
// (FLASH_CUDA_DECODE_ROWS), and with 32 once more with FLASH_CUDA_DECODE_CLUSTER=0 (the
// splits merge through global memory, decode_merge_if_last, instead of a cluster); explain()
// must name the chunk. Other backends run each case once. Causal rows
// of different tokens in one chunk see different keys (per-row masks inside a tile), with
// cache lengths, windows, softcap, paged caches (page 7, 16), head dim 96 (columns past
// head_dim_v in the padded tile), lse.
TEST_P(Inference, DecodeRowChunks) {
  if (GetParam().backend == Backend::reference) GTEST_SKIP() << "the oracle itself";
  const int32_t sk = kSanitized ? 700 : 2000;
  struct Case {
    DType dtype;
    int64_t dim, hq, sq, page;
    const char* variant;  // causal, window, softcap
    bool lengths;
    bool two_tiles;  // cuda's chunk is 32 rows with FLASH_CUDA_DECODE_ROWS=32
  };
  struct Setting {
    const char* rows;     // FLASH_CUDA_DECODE_ROWS (null: unset, off cuda)
    const char* cluster;  // FLASH_CUDA_DECODE_CLUSTER
  };
  const bool cuda = GetParam().backend == Backend::cuda;
  const std::vector<Setting> settings =
      cuda ? std::vector<Setting>{{"16", nullptr}, {"32", nullptr}, {"32", "0"}}
           : std::vector<Setting>{{nullptr, nullptr}};
  for (const Setting setting : settings) {
    const char* rows_switch = setting.rows;
    ScopedEnv rows_env("FLASH_CUDA_DECODE_ROWS", rows_switch);
    ScopedEnv cluster_env("FLASH_CUDA_DECODE_CLUSTER", setting.cluster);
    for (const Case c : {Case{DType::bf16, 128, 16, 3, 0, "causal", true, true},
                         Case{DType::f16, 64, 16, 4, 16, "causal", false, true},
                         Case{DType::bf16, 96, 8, 5, 0, "window", true, true},
                         Case{DType::bf16, 128, 16, 6, 0, "softcap", false, true},
                         Case{DType::bf16, 64, 32, 2, 7, "causal", true, true},
                         Case{DType::f16, 128, 32, 4, 0, "causal", true, true},
                         Case{DType::bf16, 256, 16, 3, 0, "causal", true, false},
                         Case{DType::f32, 128, 16, 3, 0, "causal", true, false}}) {
      AttentionDesc d = base(c.dtype, c.hq, 2, c.dim);
      d.batch = 2;
      d.seqlen_q = c.sq;
      d.seqlen_kv = sk;
      const std::string variant = c.variant;
      d.causal = variant != "window";
      if (variant == "window") d.window_left = sk / 3, d.window_right = 0;
      if (variant == "softcap") d.softcap = 20.f;
      const std::vector<int32_t> lens = {sk, sk * 3 / 4 + 1};
      if (c.lengths) d.seqlens_kv = lens.data();
      std::mt19937_64 rng(6);
      std::vector<int32_t> table;
      if (c.page > 0) {
        table = shuffled_pages(d, c.lengths ? lens : std::vector<int32_t>{sk, sk}, sk, c.page, 2,
                               rng, false);
        d.block_table = table.data();
      }
      const bool forced_two = rows_switch != nullptr && std::string(rows_switch) == "32";
      const int chunk = forced_two && c.two_tiles ? 32 : 16;
      const std::string what =
          std::string("decode rows ") + std::to_string(c.hq / 2 * c.sq) + " D " +
          std::to_string(c.dim) + " " + c.variant +
          (c.page ? " page " + std::to_string(c.page) : "") +
          (rows_switch ? std::string(" (FLASH_CUDA_DECODE_ROWS=") + rows_switch + ")" : "") +
          (setting.cluster ? " (FLASH_CUDA_DECODE_CLUSTER=0)" : "");
      if (cuda) {
        d.backend = Backend::cuda;
        const std::string kernel = explain(d).kernel;
        if (rows_switch != nullptr && kernel.find("decode_") != std::string::npos)
          EXPECT_NE(kernel.find("_m" + std::to_string(chunk) + "_"), std::string::npos)
              << what << ": " << kernel;
      }
      const int64_t kv_rows = c.page ? d.num_pages * c.page : d.batch * sk;
      Buffer q(c.dtype, d.batch * c.sq * c.hq * c.dim), k(c.dtype, kv_rows * 2 * c.dim), v = k;
      q.fill(rng);
      k.fill(rng);
      v.fill(rng);
      check(d, q, k, v, false, what);
    }
  }
}

// cuda's plan for 32 packed rows per kv head (Hq 64 / Hkv 8 x 4 tokens, bf16, D 128): two m16
// tiles per chunk where each warp streams enough key tiles per split (B 8, 32k keys: 128
// tiles), 16-row chunks where two tiles would leave each warp 4 (B 1, 8k keys: measured 31 %
// slower, decode.hpp's kDecodeTwoTileMinTilesPerWarp), and at head dim 256 (no two-tile
// kernel). Asks explain() only: nothing is allocated. (B 1 8k keeps 16 rows on any GPU of
// 40 SMs or more: fewer would give the two-tile plan few enough splits.)
TEST_P(Inference, DecodeRowChunkChoice) {
  if (GetParam().backend != Backend::cuda) GTEST_SKIP() << "cuda's decode plan";
  ScopedEnv rows_env("FLASH_CUDA_DECODE_ROWS", nullptr);  // the plan's own choice
  struct Case {
    int64_t batch, keys, dim;
    int chunk;
  };
  for (const Case c : {Case{8, 32768, 128, 32}, Case{1, 8192, 128, 16}, Case{8, 32768, 256, 16}}) {
    AttentionDesc d = base(DType::bf16, 64, 8, c.dim);
    d.batch = c.batch;
    d.seqlen_q = 4;
    d.seqlen_kv = c.keys;
    d.causal = true;
    d.backend = Backend::cuda;
    const std::string kernel = explain(d).kernel;
    // A GPU whose shared memory does not hold the decode ring (sm_8x: 99-163 KB) runs
    // contiguous caches on the prefill kernels (backends/cuda/README.md).
    if (kernel.find("decode_") == std::string::npos)
      GTEST_SKIP() << "no decode kernel on this GPU (shared memory): " << kernel;
    EXPECT_NE(kernel.find("_m" + std::to_string(c.chunk) + "_"), std::string::npos)
        << "B " << c.batch << " keys " << c.keys << " D " << c.dim << ": " << kernel;
  }
}

// NaN and inf in the values of the last two keys of a causal decode step of 4 tokens x
// group 8 (32 rows per kv head; on cuda under the plan's choice, which is two 16-row chunks
// at this cache length, forced to 16 and forced to one 32-row chunk at head dims 64 / 128,
// FLASH_CUDA_DECODE_ROWS=32, whose exact P·V path is the two-tile one): only the tokens that see a
// key may turn non-finite, in its column only. Tensor cores multiply a hidden key's p = 0 by its v
// row (0·NaN = NaN): the decode's exact P·V must keep the other rows of the chunk finite.
TEST_P(Inference, DecodeNonFiniteValueReachesOnlyTheRowsThatSeeIt) {
  if (GetParam().backend == Backend::reference) GTEST_SKIP() << "the oracle itself";
  const int64_t sq = 4, hq = 16, hkv = 2, sk = 1000;
  const bool cuda = GetParam().backend == Backend::cuda;
  for (const char* rows_switch : {static_cast<const char*>(nullptr), "16", "32"}) {
    if (rows_switch != nullptr && !cuda) continue;
    ScopedEnv rows_env("FLASH_CUDA_DECODE_ROWS", rows_switch);
    for (DType dtype : {DType::bf16, DType::f16})
      for (int64_t dim : {64, 128, 256}) {
        SCOPED_TRACE(std::string(to_string(dtype)) + " D " + std::to_string(dim) +
                     (rows_switch ? std::string(" FLASH_CUDA_DECODE_ROWS=") + rows_switch : ""));
        AttentionDesc d = base(dtype, hq, hkv, dim);
        d.batch = 1;
        d.seqlen_q = sq;
        d.seqlen_kv = sk;
        d.causal = true;
        std::mt19937_64 rng(8);
        Buffer q(dtype, sq * hq * dim), k(dtype, sk * hkv * dim), v = k, o(dtype, sq * hq * dim);
        q.fill(rng);
        k.fill(rng);
        v.fill(rng);
        // Key sk - 1 (seen by token sq - 1 only): NaN in column 3 of kv head 1; key sk - 2
        // (tokens sq - 2 and sq - 1): inf in column 5 of kv head 0.
        struct Poison {
          int64_t key, head, col;
          double value;
        };
        const Poison poisons[] = {{sk - 1, 1, 3, double(NAN)}, {sk - 2, 0, 5, double(INFINITY)}};
        for (const Poison& x : poisons) v.set((x.key * hkv + x.head) * dim + x.col, x.value);
        o.poison();
        if (!run(d, [&] { attention(d, q.data(), k.data(), v.data(), o.data()); })) continue;
        int wrong = 0;
        for (int64_t i = 0; i < sq; ++i)
          for (int64_t h = 0; h < hq; ++h)
            for (int64_t dd = 0; dd < dim; ++dd) {
              bool non_finite = false;  // some key this row sees holds a non-finite value here
              for (const Poison& x : poisons)
                non_finite |= h / (hq / hkv) == x.head && dd == x.col && x.key <= i + sk - sq;
              const double got = o.get((i * hq + h) * dim + dd);
              if (std::isfinite(got) == non_finite && wrong++ < 5)
                ADD_FAILURE() << "token " << i << " head " << h << " column " << dd << ": " << got;
            }
      }
  }
}

// merge_partials of attention over disjoint key ranges equals attention over all keys,
// including an empty part (lse = -inf).
TEST_P(Inference, MergeOfKeySplitsEqualsUnsplit) {
  for (DType dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(to_string(dtype));
    const int64_t B = 2, sq = 3, hq = 4, hkv = 2, dim = 64, keys = 600;
    const std::vector<int64_t> cuts = {0, 250, 250, 600};  // parts: 250 keys, none, 350
    const int64_t parts = static_cast<int64_t>(cuts.size()) - 1;
    std::mt19937_64 rng(5);
    Buffer q(dtype, B * sq * hq * dim), k(dtype, B * keys * hkv * dim), v = k;
    q.fill(rng);
    k.fill(rng);
    v.fill(rng);
    const int64_t o_elems = B * sq * hq * dim, lse_elems = B * hq * sq;
    Buffer o_parts(dtype, parts * o_elems);
    std::vector<float> lse_parts(static_cast<size_t>(parts * lse_elems));
    const size_t eb = dtype == DType::f32 ? 4 : 2;
    bool ran = true;
    for (int64_t t = 0; t < parts && ran; ++t) {
      AttentionDesc d = base(dtype, hq, hkv, dim);
      d.batch = B;
      d.seqlen_q = sq;
      d.seqlen_kv = cuts[t + 1] - cuts[t];
      d.k_stride = {keys * hkv * dim, hkv * dim, dim};  // a window of the full cache
      d.v_stride = d.k_stride;
      d.lse = lse_parts.data() + t * lse_elems;
      const char* kp = static_cast<const char*>(k.data()) + cuts[t] * hkv * dim * eb;
      const char* vp = static_cast<const char*>(v.data()) + cuts[t] * hkv * dim * eb;
      char* op = static_cast<char*>(o_parts.data()) + t * o_elems * eb;
      ran = run(d, [&] { attention(d, q.data(), kp, vp, op); });
    }
    if (!ran) return;
    AttentionDesc full = base(dtype, hq, hkv, dim);
    full.batch = B;
    full.seqlen_q = sq;
    full.seqlen_kv = keys;
    Buffer o(dtype, o_elems);
    o.poison();
    std::vector<float> lse(static_cast<size_t>(lse_elems), NAN);
    if (!run(full, [&] {
          merge_partials(full, parts, o_parts.data(), lse_parts.data(), o.data(), lse.data());
        }))
      return;
    const flash_problem p = problem_of(full);
    const auto ref = reference::forward(p, q.data(), k.data(), v.data());
    const auto naive =
        reference::forward_per_sequence(p, q.data(), k.data(), v.data(), reference::naive_forward);
    // Two roundings of o (each part's, then the merge's) against naive's one: the rule
    // with the bound doubled.
    Verdict vo = compare("merged o", o.values(), ref.o, naive.o, dtype);
    EXPECT_TRUE(vo.error <= 2 * vo.bound) << vo.detail;
    for (int64_t i = 0; i < lse_elems; ++i)
      EXPECT_NEAR(lse[i], ref.lse[i], 1e-3 + 1e-4 * std::fabs(ref.lse[i])) << "lse " << i;
    // Every part empty: o = 0, lse = -inf.
    std::fill(lse_parts.begin(), lse_parts.end(), -INFINITY);
    o.poison();
    run(full, [&] {
      merge_partials(full, parts, o_parts.data(), lse_parts.data(), o.data(), lse.data());
    });
    for (int64_t i = 0; i < o_elems; ++i) ASSERT_EQ(o.get(i), 0.0) << "o " << i;
    for (int64_t i = 0; i < lse_elems; ++i) ASSERT_EQ(lse[i], -INFINITY) << "lse " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Inference, Inference, testing::ValuesIn(all_targets()),
                         [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace flash::test
