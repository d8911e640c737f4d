// GPU-only reliability tests: skipped (GTEST_SKIP naming what is missing) where the
// cuda backend is unavailable. Host pointers are used throughout: the cuda backend
// checks alignment before staging host memory, so no CUDA runtime is linked here.
//
//  CudaBadInput: a forced cuda backend and a head_dim it has no kernel for declines
//    by name (unsupported, never a fallback); pointers and strides that break its
//    16-byte vector loads are rejected by name.
//  GpuLarge: tensors of more than 2^31 elements (64-bit indexing): every output
//    element is written (o is poisoned with NaN first) and sampled rows match the
//    double reference by the suite's tolerance rule. Needs ~18 GB of device memory
//    and ~40 GB of host memory; run by the lead on the device (tests/README.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "reference/dtype.hpp"
#include "support/cases.hpp"
#include "support/compare.hpp"
#include "support/targets.hpp"

namespace flash::test {
namespace {

bool cuda_available(std::string& why) {
  for (const BackendInfo& info : backends())
    if (info.backend == Backend::cuda) {
      why = info.reason;
      return info.available;
    }
  why = "this build has no cuda backend";
  return false;
}

#define REQUIRE_CUDA()                                                             \
  do {                                                                             \
    std::string why_not;                                                           \
    if (!cuda_available(why_not)) GTEST_SKIP() << "cuda unavailable: " << why_not; \
  } while (0)

struct Small {
  AttentionDesc desc;
  HostTensor q, k, v, o;
  explicit Small(DType dtype, int64_t d = 64) {
    desc.seqlen_q = 16;
    desc.seqlen_kv = 16;
    desc.heads_q = 2;
    desc.heads_kv = 2;
    desc.head_dim = d;
    desc.dtype = dtype;
    desc.backend = Backend::cuda;
    // One batch more than the view needs, so a shifted base pointer stays inside.
    q = HostTensor(dtype, 2, 16, 2, d, Layout::packed);
    k = q;
    v = q;
    o = q;
    std::mt19937_64 rng(5);
    q.fill_random(rng, 1);
    k.fill_random(rng, 1);
    v.fill_random(rng, 1);
  }
  std::string run(const void* q_ptr) {
    try {
      attention(desc, q_ptr, k.data(), v.data(), o.data());
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  }
};

TEST(CudaBadInput, ForcedCudaWithHeadDimItCannotDoDeclinesByName) {
  REQUIRE_CUDA();
  // cuda runs every multiple of 8 from 8 to 256; these are not.
  for (const int64_t d : {1, 36, 100, 264, 512}) {
    Small s(DType::f16, d);
    try {
      attention(s.desc, s.q.data(), s.k.data(), s.v.data(), s.o.data());
      ADD_FAILURE() << "head_dim " << d << " accepted by forced cuda";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::unsupported) << e.what();
      const std::string m = e.what();
      EXPECT_NE(m.find("cuda"), std::string::npos) << m;
      EXPECT_NE(m.find("head_dim = " + std::to_string(d)), std::string::npos) << m;
      EXPECT_NE(m.find("a multiple of 8 from 8 to 256"), std::string::npos) << m;
    }
  }
  Small s(DType::bf16, 64);
  s.desc.head_dim_v = 44;
  try {
    attention(s.desc, s.q.data(), s.k.data(), s.v.data(), s.o.data());
    ADD_FAILURE() << "head_dim_v 44 accepted by forced cuda";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim_v"), std::string::npos) << e.what();
  }
}

TEST(CudaBadInput, MisalignedPointersAndStridesAreRejectedByName) {
  REQUIRE_CUDA();
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    Small s(dtype);
    const int64_t eb = dtype == DType::f32 ? 4 : 2;
    // Element-aligned but not 16-byte aligned: legal C++, but not for the kernels.
    const std::string m = s.run(static_cast<const char*>(s.q.data()) + eb);
    EXPECT_NE(m, "") << "q misaligned by one element accepted (" << to_string(dtype) << ")";
    EXPECT_NE(m.find("q"), std::string::npos) << m;
    EXPECT_NE(m.find("align"), std::string::npos) << m;
    // A head stride of head_dim + 1 elements: rows no longer start on 16 bytes.
    Small t(dtype, 32);
    t.desc.q_stride = {16 * 2 * 33, 2 * 33, 33};
    const std::string ms = t.run(t.q.data());
    EXPECT_NE(ms, "") << "odd q head stride accepted (" << to_string(dtype) << ")";
    EXPECT_NE(ms.find("stride"), std::string::npos) << ms;
  }
}

// ---- > 2^31 elements per tensor ------------------------------------------------

// Available host memory in bytes (MemAvailable), 0 if unknown.
int64_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// Fills a big 16-bit/32-bit tensor with values in [-1, 1) from a counter hash, on all
// host cores (HostTensor::fill_random is too slow for 2^31 elements).
void fill_fast(HostTensor& t, uint64_t seed) {
  const int64_t n = t.capacity();
  const int32_t code = static_cast<int32_t>(t.dtype);
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (int64_t i = n * w / workers; i < n * (w + 1) / workers; ++i) {
        uint64_t x = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 29;
        const double u = static_cast<double>(x >> 11) * 0x1.0p-53 * 2 - 1;
        reference::store(t.data(), code, i, u);
      }
    });
  for (auto& th : pool) th.join();
}

// NaN in every byte pattern of the dtype (0xFF.. is NaN for f32, f16 and bf16).
void poison_fast(HostTensor& t) {
  std::memset(t.data(), 0xFF, t.storage.size() * sizeof(uint64_t));
}

struct LargeShape {
  const char* name;
  int64_t batch, seq, heads_q, heads_kv, head_dim;
  bool causal;
};

// q and o hold B*S*H*D > 2^31 elements; long_seq also k and v. The last shape is
// small but has more batches than a grid's z dimension allows (65535): the kernels
// launch in batch chunks.
const LargeShape kLarge[] = {
    {"many_batches_gqa", 2048, 257, 32, 8, 128, false},                 // 2.16e9 elements in q, o
    {"long_seq_causal", 1, (int64_t{1} << 20) + 1, 16, 16, 128, true},  // 2.15e9 in q, k, v, o
    {"batch_above_grid_z_limit", 70001, 3, 2, 1, 64, true},             // 2.7e7 elements
};

class GpuLarge : public testing::TestWithParam<LargeShape> {};

TEST_P(GpuLarge, MoreThan2To31ElementsPerTensor) {
  REQUIRE_CUDA();
  const LargeShape& s = GetParam();
  const DType dtype = DType::bf16;
  const int64_t q_elems = s.batch * s.seq * s.heads_q * s.head_dim;
  const int64_t kv_elems = s.batch * s.seq * s.heads_kv * s.head_dim;
  const int64_t host_bytes = (2 * q_elems + 2 * kv_elems) * 2;
  if (host_memory_available() < host_bytes + (int64_t{4} << 30))
    GTEST_SKIP() << "needs " << (host_bytes >> 30) << " GiB of free host memory";

  AttentionDesc d;
  d.batch = s.batch;
  d.seqlen_q = d.seqlen_kv = s.seq;
  d.heads_q = s.heads_q;
  d.heads_kv = s.heads_kv;
  d.head_dim = s.head_dim;
  d.dtype = dtype;
  d.causal = s.causal;
  d.backend = Backend::cuda;
  HostTensor q(dtype, s.batch, s.seq, s.heads_q, s.head_dim, Layout::packed);
  HostTensor k(dtype, s.batch, s.seq, s.heads_kv, s.head_dim, Layout::packed);
  HostTensor v = k;
  HostTensor o = q;
  fill_fast(q, 1);
  fill_fast(k, 2);
  fill_fast(v, 3);
  poison_fast(o);
  std::vector<float> lse(static_cast<size_t>(s.batch * s.heads_q * s.seq),
                         std::numeric_limits<float>::quiet_NaN());
  d.lse = lse.data();
  try {
    attention(d, q.data(), k.data(), v.data(), o.data());
  } catch (const Error& e) {
    FAIL() << e.what();
  }

  // Every element written: an index that wrapped at 2^31 leaves NaN somewhere.
  const auto* bits = static_cast<const uint16_t*>(o.data());
  int64_t unwritten = 0, first = -1;
  for (int64_t i = 0; i < q_elems; ++i)
    if ((bits[i] & 0x7F80) == 0x7F80) {  // bf16 NaN/inf
      if (first < 0) first = i;
      ++unwritten;
    }
  EXPECT_EQ(unwritten, 0) << "first non-finite o element at " << first;
  int64_t bad_lse = 0;
  for (float x : lse) bad_lse += !std::isfinite(x);
  EXPECT_EQ(bad_lse, 0);

  // Sampled rows against the reference: the first, the last, and rows whose offsets
  // straddle 2^31 elements. A row (b, i, h) is checked as a 1-row problem over the
  // keys it sees (causal: keys 0..diag, with diag = i since Sq = Sk).
  const int64_t row_elems = s.heads_q * s.head_dim;  // one (b, i) position, all heads
  std::vector<int64_t> positions = {0, s.batch * s.seq - 1, (int64_t{1} << 31) / row_elems,
                                    (int64_t{1} << 31) / row_elems - 1,
                                    (int64_t{1} << 31) / row_elems + 1};
  for (int64_t x = 1; x <= 8; ++x) positions.push_back(s.batch * s.seq * x / 9);
  for (int64_t pos : positions) {
    if (pos < 0 || pos >= s.batch * s.seq) continue;  // small shapes: no row at 2^31
    const int64_t b = pos / s.seq, i = pos % s.seq;
    for (int64_t h : {int64_t{0}, s.heads_q - 1}) {
      flash_problem p{};
      p.batch = 1;
      p.seqlen_q = 1;
      p.seqlen_kv = s.causal ? i + 1 : s.seq;
      p.heads_q = 1;
      p.heads_kv = 1;
      p.head_dim = p.head_dim_v = s.head_dim;
      p.dtype = static_cast<int32_t>(dtype);
      p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
      p.window_left = p.window_right = -1;
      for (int a = 0; a < 3; ++a) {
        p.q_stride[a] = q.resolved[a];
        p.k_stride[a] = k.resolved[a];
        p.v_stride[a] = v.resolved[a];
        p.o_stride[a] = o.resolved[a];
      }
      const int64_t kvh = h / (s.heads_q / s.heads_kv);
      const auto* qp = static_cast<const uint16_t*>(q.data()) + q.offset(b, i, h);
      const auto* kp = static_cast<const uint16_t*>(k.data()) + k.offset(b, 0, kvh);
      const auto* vp = static_cast<const uint16_t*>(v.data()) + v.offset(b, 0, kvh);
      const auto ref = reference::forward(p, qp, kp, vp);
      const auto naive = reference::naive_forward(p, qp, kp, vp);
      std::vector<double> got(static_cast<size_t>(s.head_dim));
      for (int64_t e = 0; e < s.head_dim; ++e) got[e] = o.get(b, i, h, e);
      const Verdict vo = compare("o", got, ref.o, naive.o, dtype);
      EXPECT_TRUE(vo.pass) << "b=" << b << " i=" << i << " h=" << h << ": " << vo.detail;
      const double l = lse[static_cast<size_t>((b * s.heads_q + h) * s.seq + i)];
      EXPECT_NEAR(l, ref.lse[0], 1e-3 * std::max(1.0, std::fabs(ref.lse[0])))
          << "lse b=" << b << " i=" << i << " h=" << h;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuLarge, testing::ValuesIn(kLarge),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace flash::test
