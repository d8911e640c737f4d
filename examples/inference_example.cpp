// Inference features from outside the repository, with nothing but the public API:
// packed batches (cu_seqlens), cache lengths (seqlens_kv), a paged cache (block_table),
// one-token decode and merge_partials, each checked against this program's own naive
// attention (naive_attention.hpp) on every backend that can run them (cpu, and cuda
// with host memory, which it stages). Exit status 1 on any mismatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <flash/flash.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "naive_attention.hpp"

namespace {

constexpr int64_t kHeadsQ = 4, kHeadsKv = 2, kDim = 32;
int failures = 0;

std::vector<float> random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng);
  return x;
}

// Rows [row0, row0 + rows) of a packed [total, heads, dim] tensor.
std::vector<float> rows_of(const std::vector<float>& t, int64_t row0, int64_t rows, int64_t heads) {
  return {t.begin() + row0 * heads * kDim, t.begin() + (row0 + rows) * heads * kDim};
}

void expect_close(const std::string& what, const float* got, const std::vector<double>& want) {
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i)
    err = std::max(err, std::isnan(got[i]) ? 1e9 : std::fabs(got[i] - want[i]));
  const bool ok = err < 1e-4;
  failures += !ok;
  std::printf("  %-44s max error %.2e %s\n", what.c_str(), err, ok ? "ok" : "FAIL");
}

// One dense sequence for the naive reference.
flash::AttentionDesc dense(int64_t sq, int64_t sk, bool causal) {
  flash::AttentionDesc d;
  d.seqlen_q = sq;
  d.seqlen_kv = sk;
  d.heads_q = kHeadsQ;
  d.heads_kv = kHeadsKv;
  d.head_dim = kDim;
  d.causal = causal;
  return d;
}

void packed_batch(flash::Backend backend, std::mt19937& rng) {
  const std::vector<int32_t> lq = {5, 1, 40}, lk = {7, 30, 40};
  std::vector<int32_t> cu_q(4, 0), cu_k(4, 0);
  std::partial_sum(lq.begin(), lq.end(), cu_q.begin() + 1);
  std::partial_sum(lk.begin(), lk.end(), cu_k.begin() + 1);
  const auto q = random(cu_q[3] * kHeadsQ * kDim, rng);
  const auto k = random(cu_k[3] * kHeadsKv * kDim, rng), v = random(k.size(), rng);
  std::vector<float> o(q.size(), NAN);
  flash::AttentionDesc d = dense(40, 40, true);
  d.batch = 3;
  d.cu_seqlens_q = cu_q.data();
  d.cu_seqlens_kv = cu_k.data();
  d.backend = backend;
  flash::attention(d, q.data(), k.data(), v.data(), o.data());
  for (int b = 0; b < 3; ++b) {
    const NaiveResult want =
        naive_attention(dense(lq[b], lk[b], true), rows_of(q, cu_q[b], lq[b], kHeadsQ),
                        rows_of(k, cu_k[b], lk[b], kHeadsKv), rows_of(v, cu_k[b], lk[b], kHeadsKv));
    expect_close("packed batch, sequence " + std::to_string(b), o.data() + cu_q[b] * kHeadsQ * kDim,
                 want.o);
  }
}

// Two sequences, one query token each, against a cache of 64 rows per sequence; the
// second variant holds the same keys in shuffled pages of 8 rows.
void cache_and_pages(flash::Backend backend, std::mt19937& rng) {
  const int64_t cap = 64, page = 8, pps = cap / page;
  const std::vector<int32_t> lens = {10, 64};
  const auto q = random(2 * kHeadsQ * kDim, rng);
  const auto k = random(2 * cap * kHeadsKv * kDim, rng), v = random(k.size(), rng);
  flash::AttentionDesc d = dense(1, cap, true);
  d.batch = 2;
  d.seqlens_kv = lens.data();
  d.backend = backend;
  std::vector<float> o(q.size(), NAN);
  flash::attention(d, q.data(), k.data(), v.data(), o.data());
  // Pages: page p of the pool holds rows [8p', 8p' + 8) of sequence s for shuffled p.
  std::vector<int32_t> table(2 * pps);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<float> kp(k.size()), vp(v.size());
  for (int64_t s = 0; s < 2; ++s)
    for (int64_t j = 0; j < pps; ++j) {
      const int64_t src = (s * cap + j * page) * kHeadsKv * kDim, n = page * kHeadsKv * kDim;
      std::copy_n(k.begin() + src, n, kp.begin() + table[s * pps + j] * n);
      std::copy_n(v.begin() + src, n, vp.begin() + table[s * pps + j] * n);
    }
  flash::AttentionDesc paged = d;
  paged.block_table = table.data();
  paged.page_size = page;
  paged.pages_per_seq = pps;
  paged.num_pages = 2 * pps;
  std::vector<float> op(q.size(), NAN);
  flash::attention(paged, q.data(), kp.data(), vp.data(), op.data());
  for (int b = 0; b < 2; ++b) {
    const NaiveResult want = naive_attention(dense(1, lens[b], true), rows_of(q, b, 1, kHeadsQ),
                                             rows_of(k, b * cap, lens[b], kHeadsKv),
                                             rows_of(v, b * cap, lens[b], kHeadsKv));
    expect_close("decode, cache length " + std::to_string(lens[b]), o.data() + b * kHeadsQ * kDim,
                 want.o);
    expect_close("decode, paged, length " + std::to_string(lens[b]), op.data() + b * kHeadsQ * kDim,
                 want.o);
  }
}

// Attention over keys [0, 50) and [50, 120) separately, merged, equals all 120 keys.
void merge(flash::Backend backend, std::mt19937& rng) {
  const int64_t sq = 3, sk = 120, cut = 50;
  const auto q = random(sq * kHeadsQ * kDim, rng);
  const auto k = random(sk * kHeadsKv * kDim, rng), v = random(k.size(), rng);
  std::vector<float> parts(2 * q.size()), lse(2 * kHeadsQ * sq);
  for (int t = 0; t < 2; ++t) {
    const int64_t first = t ? cut : 0, n = t ? sk - cut : cut;
    flash::AttentionDesc d = dense(sq, n, false);
    d.backend = backend;
    d.lse = lse.data() + t * kHeadsQ * sq;
    const auto kt = rows_of(k, first, n, kHeadsKv), vt = rows_of(v, first, n, kHeadsKv);
    flash::attention(d, q.data(), kt.data(), vt.data(), parts.data() + t * q.size());
  }
  flash::AttentionDesc d = dense(sq, sk, false);
  d.backend = backend;
  std::vector<float> o(q.size(), NAN);
  flash::merge_partials(d, 2, parts.data(), lse.data(), o.data(), nullptr);
  expect_close("merge_partials of two key ranges", o.data(), naive_attention(d, q, k, v).o);
}

}  // namespace

int main() {
  for (const flash::BackendInfo& b : flash::backends()) {
    if (!b.available || (b.backend != flash::Backend::cpu && b.backend != flash::Backend::cuda))
      continue;
    std::printf("%s\n", flash::to_string(b.backend));
    std::mt19937 rng(11);
    try {
      packed_batch(b.backend, rng);
      cache_and_pages(b.backend, rng);
      merge(b.backend, rng);
    } catch (const flash::Error& e) {
      std::printf("  raised: %s\n", e.what());
      ++failures;
    }
  }
  std::printf("inference_example: %d failed\n", failures);
  return failures ? 1 : 0;
}
