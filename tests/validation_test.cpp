// Descriptor validation: each bad field raises flash::Error whose message names the
// field and the value. Table-driven.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "support/cases.hpp"

namespace flash::test {
namespace {

struct Buffers {
  AttentionDesc desc;
  HostTensor q, k, v, o;
  Buffers() {
    desc.batch = 2;
    desc.seqlen_q = 4;
    desc.seqlen_kv = 6;
    desc.heads_q = 4;
    desc.heads_kv = 2;
    desc.head_dim = 8;
    desc.backend = Backend::reference;
    q = HostTensor(DType::f32, 2, 4, 4, 8, Layout::packed);
    k = HostTensor(DType::f32, 2, 6, 2, 8, Layout::packed);
    v = k;
    o = q;
    std::mt19937_64 rng(9);
    q.fill_random(rng, 1);
    k.fill_random(rng, 1);
    v.fill_random(rng, 1);
  }
};

struct BadInput {
  const char* name;
  std::function<void(Buffers&, const void*& q, void*& o)> mutate;
  const char* must_mention;  // field name in the message
};

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

const BadInput kBadInputs[] = {
    {"negative batch", [](Buffers& b, auto&, auto&) { b.desc.batch = -1; }, "batch"},
    {"negative seqlen_q", [](Buffers& b, auto&, auto&) { b.desc.seqlen_q = -3; }, "seqlen_q"},
    {"negative seqlen_kv", [](Buffers& b, auto&, auto&) { b.desc.seqlen_kv = -3; }, "seqlen_kv"},
    {"zero heads_q", [](Buffers& b, auto&, auto&) { b.desc.heads_q = 0; }, "heads_q"},
    {"zero heads_kv", [](Buffers& b, auto&, auto&) { b.desc.heads_kv = 0; }, "heads_kv"},
    {"heads not divisible", [](Buffers& b, auto&, auto&) { b.desc.heads_kv = 3; }, "heads_q"},
    {"zero head_dim", [](Buffers& b, auto&, auto&) { b.desc.head_dim = 0; }, "head_dim"},
    {"negative head_dim_v", [](Buffers& b, auto&, auto&) { b.desc.head_dim_v = -2; }, "head_dim_v"},
    {"element count overflow",
     [](Buffers& b, auto&, auto&) {
       b.desc.seqlen_q = int64_t{1} << 40;
       b.desc.head_dim = int64_t{1} << 30;
     },
     "overflows"},
    {"bad dtype", [](Buffers& b, auto&, auto&) { b.desc.dtype = static_cast<DType>(7); }, "dtype"},
    {"bad backend", [](Buffers& b, auto&, auto&) { b.desc.backend = static_cast<Backend>(42); },
     "backend"},
    {"NaN scale", [](Buffers& b, auto&, auto&) { b.desc.scale = kNaN; }, "scale"},
    {"infinite scale", [](Buffers& b, auto&, auto&) { b.desc.scale = kInf; }, "scale"},
    {"negative scale", [](Buffers& b, auto&, auto&) { b.desc.scale = -1; }, "scale"},
    {"NaN softcap", [](Buffers& b, auto&, auto&) { b.desc.softcap = kNaN; }, "softcap"},
    {"negative softcap", [](Buffers& b, auto&, auto&) { b.desc.softcap = -5; }, "softcap"},
    {"window_left < -1", [](Buffers& b, auto&, auto&) { b.desc.window_left = -2; }, "window_left"},
    {"window_right < -1", [](Buffers& b, auto&, auto&) { b.desc.window_right = -7; },
     "window_right"},
    {"null q", [](Buffers&, const void*& q, auto&) { q = nullptr; }, "q = nullptr"},
    {"null o", [](Buffers&, auto&, void*& o) { o = nullptr; }, "o = nullptr"},
    {"negative stride",
     [](Buffers& b, auto&, auto&) {
       b.desc.k_stride = {96, -16, 8};
     },
     "k_stride"},
    {"head stride smaller than head_dim",
     [](Buffers& b, auto&, auto&) {
       b.desc.q_stride = {128, 32, 4};
     },
     "q_stride.head"},
    {"seq stride overlapping heads",
     [](Buffers& b, auto&, auto&) {
       b.desc.o_stride = {128, 16, 8};
     },
     "o_stride.seq"},
    {"o overlaps q", [](Buffers& b, auto&, void*& o) { o = b.q.data(); }, "overlapping q"},
};

class Validation : public testing::TestWithParam<BadInput> {};

// Inference fields (AttentionDesc: packed batches, cache lengths, paged caches). The
// arrays are static so a case's descriptor can point at them. Paged cases use k/v as
// [num_pages 4, page_size 3, heads_kv 2, dim 8] (the same 192 floats).
void paged(Buffers& b, const int32_t* table) {
  b.desc.block_table = table;
  b.desc.page_size = 3;
  b.desc.pages_per_seq = 2;
  b.desc.num_pages = 4;
}
const int32_t kTable[] = {0, 1, 2, 3}, kTableBadPage[] = {0, 9, 2, 3};
const int32_t kCuQ[] = {0, 4, 6}, kCuQStart1[] = {1, 4, 6}, kCuQDecreasing[] = {0, 4, 3},
              kCuQTooLong[] = {0, 5, 6}, kCuKv[] = {0, 6, 12};
const int32_t kLensNegative[] = {6, -1}, kLensTooLong[] = {7, 2};
alignas(8) const int32_t kAligned[4] = {0, 0, 4, 6};

const BadInput kBadInferenceInputs[] = {
    {"page_size 0 with block_table",
     [](Buffers& b, auto&, auto&) {
       paged(b, kTable);
       b.desc.page_size = 0;
     },
     "page_size = 0"},
    {"pages_per_seq 0",
     [](Buffers& b, auto&, auto&) {
       paged(b, kTable);
       b.desc.pages_per_seq = 0;
     },
     "pages_per_seq = 0"},
    {"num_pages 0",
     [](Buffers& b, auto&, auto&) {
       paged(b, kTable);
       b.desc.num_pages = 0;
     },
     "num_pages = 0"},
    {"page fields without block_table", [](Buffers& b, auto&, auto&) { b.desc.page_size = 16; },
     "page_size = 16"},
    {"seqlen_kv above the pages' capacity",
     [](Buffers& b, auto&, auto&) {
       paged(b, kTable);
       b.desc.pages_per_seq = 1;
     },
     "seqlen_kv = 6"},
    {"block_table with cu_seqlens_kv",
     [](Buffers& b, auto&, auto&) {
       paged(b, kTable);
       b.desc.cu_seqlens_kv = kCuKv;
     },
     "cu_seqlens_kv"},
    {"seqlens_kv with cu_seqlens_kv",
     [](Buffers& b, auto&, auto&) {
       b.desc.cu_seqlens_kv = kCuKv;
       b.desc.seqlens_kv = kLensTooLong;
     },
     "seqlens_kv"},
    {"cu_seqlens_q not starting at 0",
     [](Buffers& b, auto&, auto&) { b.desc.cu_seqlens_q = kCuQStart1; }, "cu_seqlens_q[0] = 1"},
    {"decreasing cu_seqlens_q",
     [](Buffers& b, auto&, auto&) { b.desc.cu_seqlens_q = kCuQDecreasing; }, "cu_seqlens_q[2] = 3"},
    {"packed length above seqlen_q",
     [](Buffers& b, auto&, auto&) { b.desc.cu_seqlens_q = kCuQTooLong; }, "cu_seqlens_q[1] = 5"},
    {"negative cache length", [](Buffers& b, auto&, auto&) { b.desc.seqlens_kv = kLensNegative; },
     "seqlens_kv[1] = -1"},
    {"cache length above seqlen_kv",
     [](Buffers& b, auto&, auto&) { b.desc.seqlens_kv = kLensTooLong; }, "seqlens_kv[0] = 7"},
    {"used page id out of range", [](Buffers& b, auto&, auto&) { paged(b, kTableBadPage); },
     "block_table[1] = 9"},
    {"misaligned cu_seqlens_q",
     [](Buffers& b, auto&, auto&) {
       b.desc.cu_seqlens_q =
           reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(kAligned) + 2);
     },
     "cu_seqlens_q"},
};

INSTANTIATE_TEST_SUITE_P(BadInferenceInputs, Validation, testing::ValuesIn(kBadInferenceInputs),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// Garbage past a sequence's used pages is never read, so it is accepted; a packed batch
// and a cache within their bounds run.
TEST(Validation, InferenceFieldsWithinBoundsAreAccepted) {
  static const int32_t table[] = {0, -7, 2, 3};  // sequence 0 uses one page (3 keys)
  static const int32_t lens[] = {3, 6};
  Buffers b;
  paged(b, table);
  b.desc.seqlens_kv = lens;
  EXPECT_NO_THROW(attention(b.desc, b.q.data(), b.k.data(), b.v.data(), b.o.data()));
  Buffers c;
  c.desc.cu_seqlens_q = kCuQ;  // q/o rows: 6 of the 32 allocated
  EXPECT_NO_THROW(attention(c.desc, c.q.data(), c.k.data(), c.v.data(), c.o.data()));
}

TEST(Validation, BackwardRefusesCacheFieldsByName) {
  static const int32_t lens[] = {3, 6};
  for (int which = 0; which < 2; ++which) {
    Buffers b;
    if (which == 0) {
      b.desc.seqlens_kv = lens;
    } else {
      paged(b, kTable);
    }
    HostTensor dq = b.q, dk = b.k, dv = b.v, dout = b.o;
    std::vector<float> lse(2 * 4 * 4, 0.f);
    try {
      attention_backward(b.desc, b.q.data(), b.k.data(), b.v.data(), b.o.data(), dout.data(),
                         lse.data(), dq.data(), dk.data(), dv.data());
      FAIL() << "backward accepted " << (which ? "block_table" : "seqlens_kv");
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(which ? "block_table" : "seqlens_kv"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("forward-only"), std::string::npos) << e.what();
    }
  }
}

TEST(Validation, MergeNamesItsArguments) {
  Buffers b;
  std::vector<float> parts(2 * 2 * 4 * 4 * 8, 0.f), lse_parts(2 * 2 * 4 * 4, 0.f), lse(2 * 4 * 4);
  const auto message = [&](int64_t n, const void* op, const float* lp, void* o, float* l) {
    try {
      merge_partials(b.desc, n, op, lp, o, l);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(-1, parts.data(), lse_parts.data(), b.o.data(), lse.data()).find("parts = -1"),
            std::string::npos);
  EXPECT_NE(message(2, nullptr, lse_parts.data(), b.o.data(), lse.data()).find("o_parts"),
            std::string::npos);
  EXPECT_NE(message(2, parts.data(), nullptr, b.o.data(), lse.data()).find("lse_parts"),
            std::string::npos);
  EXPECT_NE(
      message(2, parts.data(), lse_parts.data(), parts.data(), lse.data()).find("overlapping"),
      std::string::npos);
  EXPECT_EQ(message(2, parts.data(), lse_parts.data(), b.o.data(), lse.data()), "no error");
}

TEST_P(Validation, RaisesErrorNamingTheField) {
  Buffers b;
  const void* q = b.q.data();
  void* o = b.o.data();
  GetParam().mutate(b, q, o);
  try {
    attention(b.desc, q, b.k.data(), b.v.data(), o);
    FAIL() << GetParam().name << ": no flash::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().must_mention), std::string::npos)
        << GetParam().name << ": " << e.what();
    EXPECT_EQ(e.kind(), Error::Kind::invalid_argument) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(BadInputs, Validation, testing::ValuesIn(kBadInputs),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(Validation, BackwardNeedsLseAndGradientPointers) {
  Buffers b;
  HostTensor dq = b.q, dk = b.k, dv = b.v, dout = b.o;
  std::vector<float> lse(2 * 4 * 4, 0.f);
  auto run = [&](const float* l, void* dqp) {
    attention_backward(b.desc, b.q.data(), b.k.data(), b.v.data(), b.o.data(), dout.data(), l, dqp,
                       dk.data(), dv.data());
  };
  EXPECT_THROW(run(nullptr, dq.data()), Error);
  EXPECT_THROW(run(lse.data(), nullptr), Error);
  try {
    run(lse.data(), const_cast<void*>(b.k.data()));
    FAIL() << "dq overlapping k accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dq"), std::string::npos) << e.what();
  }
}

TEST(Validation, ValidStridedInputsAreAccepted) {
  Buffers b;
  HostTensor q(DType::f32, 2, 4, 4, 8, Layout::bhsd);
  std::mt19937_64 rng(1);
  q.fill_random(rng, 1);
  b.desc.q_stride = q.stride;
  EXPECT_NO_THROW(attention(b.desc, q.data(), b.k.data(), b.v.data(), b.o.data()));
}

}  // namespace
}  // namespace flash::test
