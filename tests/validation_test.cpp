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
