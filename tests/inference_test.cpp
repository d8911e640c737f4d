// Inference features on every backend: packed batches (cu_seqlens_q/kv, forward and
// backward), cache lengths (seqlens_kv), paged caches (block_table), merge_partials, and
// decode shapes (inference_decode_test.cpp; the fixture: support/inference_fixture.hpp). Each
// result is compared with the fp64 oracle (reference/sequences.hpp) under the tolerance rule, the
// naive-in-dtype error taken per sequence the same way. Outputs are poisoned with NaN first, so an
// unwritten element fails. Every backend runs every feature: a decline fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/inference_fixture.hpp"

namespace flash::test {
namespace {

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
  // tiles (bwd_wgmma_kernel.cuh, kSplitD) on packed sequences. D 96: the 96-column configs
  // of both Hopper kernels, the forward's with the band tile off (these lengths would take it).
  struct Shape {
    DType dtype;
    int64_t dim;
    bool backward;
  };
  for (const Variant x :
       {Variant{"plain", false, -1, -1, 0.f}, Variant{"causal", true, -1, -1, 0.f},
        Variant{"window", false, 40, 7, 0.f}, Variant{"softcap", true, -1, -1, 20.f}})
    for (const Shape shape :
         {Shape{DType::bf16, 64, true}, Shape{DType::f32, 64, true}, Shape{DType::f16, 128, true},
          Shape{DType::bf16, 256, true}, Shape{DType::bf16, 96, true}}) {
      const Backend backend = GetParam().backend;
      if (shape.dim != 64 && backend != Backend::cuda && backend != Backend::hip) continue;
      ScopedEnv band_tile("FLASH_CUDA_FWD_BAND_TILE", shape.dim == 96 ? "0" : nullptr);
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
// (at D 128 the 192-key tile, whose boxes are at most 64 rows, instead of the 128-key one).
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
      ScopedEnv wide_tile("FLASH_CUDA_FWD_BAND_TILE", "0");  // D 128: 192-key tiles
      check(d, q, k, v, false, what + " (2 blocks, band tile off)");
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
