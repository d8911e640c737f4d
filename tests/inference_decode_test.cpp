// Decode shapes of the Inference suite (its fixture: support/inference_fixture.hpp; it is
// instantiated in inference_test.cpp): long caches and their key splits, the cluster merge,
// 17-64 packed rows per kv head (cuda's 16- and 32-row chunks and the plan's choice between
// them), and non-finite values in keys that only some rows of a chunk see.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "support/inference_fixture.hpp"

namespace flash::test {
namespace {

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

}  // namespace
}  // namespace flash::test
