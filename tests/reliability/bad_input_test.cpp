// The bad-input matrix: every descriptor field and pointer with invalid values, each
// run through four entry points (C++ forward, C++ backward, C forward, C backward).
// The promise: a flash::Error of the right kind whose message names the field (and,
// where a row says so, the value); from C, the matching status code and the same
// message from flash_last_error(), never an escaping exception. The small table of
// tests/validation_test.cpp is not repeated here: this one covers what it leaves out
// (the backward and C entry points, overflow of byte counts, each tensor's strides,
// every output/input overlap, forced backends, environment variables).
//
// A second table holds inputs at the edge of what is allowed (null lse, empty
// tensors, huge windows, ...): they must run, and under ASan/UBSan touch nothing
// they should not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "flash/flash.h"
#include "support/cases.hpp"
#include "support/targets.hpp"

namespace flash::test {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// One call's arguments: valid until a row mutates them. Buffers are packed
// [B, S, H, D] f32 with B=2, Sq=4, Sk=6, Hq=4, Hkv=2, D=8.
struct Call {
  AttentionDesc desc;
  HostTensor q, k, v, o, dout, dq, dk, dv;
  std::vector<float> lse_out, lse_in;  // forward desc.lse / backward lse argument
  std::vector<float> scratch;          // room for views that overlap on purpose
  const void* pq;
  const void* pk;
  const void* pv;
  void* po;  // forward output, backward input
  const void* pdout;
  const float* plse;
  void* pdq;
  void* pdk;
  void* pdv;

  Call() {
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
    dout = q;
    dq = q;
    dk = k;
    dv = k;
    std::mt19937_64 rng(8);
    for (HostTensor* t : {&q, &k, &v, &o, &dout}) t->fill_random(rng, 1);
    lse_out.assign(2 * 4 * 4, 0.f);
    lse_in.assign(2 * 4 * 4, 1.f);
    scratch.assign(4096, 0.f);
    desc.lse = lse_out.data();
    pq = q.data();
    pk = k.data();
    pv = v.data();
    po = o.data();
    pdout = dout.data();
    plse = lse_in.data();
    pdq = dq.data();
    pdk = dk.data();
    pdv = dv.data();
  }
};

// Byte offset into a buffer (partial overlaps, misalignment).
template <class T>
T* shift(T* p, int64_t bytes) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + bytes);
}

enum Direction { kForward = 1, kBackward = 2, kBoth = 3 };

struct BadInput {
  const char* name;
  Direction directions;
  std::function<void(Call&)> mutate;
  const char* field;       // must appear in the message
  const char* value = "";  // must appear too, when not empty
  Error::Kind kind = Error::Kind::invalid_argument;
  // Environment variable set for the call (name, value), when not null.
  const char* env_name = nullptr;
  const char* env_value = nullptr;
  // Runs only when this backend is unavailable (a forced GPU backend on a host).
  bool needs_unavailable = false;
  Backend unavailable = Backend::automatic;
  // Runs only when this backend is available (its own environment variable).
  Backend requires = Backend::automatic;
};

using M = std::function<void(Call&)>;

BadInput row(const char* name, Direction dir, M mutate, const char* field, const char* value = "") {
  return BadInput{name, dir, std::move(mutate), field, value};
}

std::vector<BadInput> bad_inputs() {
  std::vector<BadInput> rows = {
      // ---- sizes -----------------------------------------------------------------
      row(
          "batch_min", kBoth, [](Call& c) { c.desc.batch = kMin; }, "batch",
          "-9223372036854775808"),
      row(
          "seqlen_q_minus1", kBoth, [](Call& c) { c.desc.seqlen_q = -1; }, "seqlen_q", "-1"),
      row(
          "seqlen_kv_min", kBoth, [](Call& c) { c.desc.seqlen_kv = kMin; }, "seqlen_kv"),
      row(
          "heads_q_negative", kBoth, [](Call& c) { c.desc.heads_q = -4; }, "heads_q", "-4"),
      row(
          "heads_kv_negative", kBoth, [](Call& c) { c.desc.heads_kv = -2; }, "heads_kv", "-2"),
      row(
          "head_dim_negative", kBoth, [](Call& c) { c.desc.head_dim = -8; }, "head_dim", "-8"),
      row(
          "head_dim_v_min", kBoth, [](Call& c) { c.desc.head_dim_v = kMin; }, "head_dim_v"),
      row(
          "heads_kv_above_heads_q", kBoth, [](Call& c) { c.desc.heads_kv = 8; }, "heads_q", "4"),
      row(
          "heads_q_not_multiple", kBoth,
          [](Call& c) {
            c.desc.heads_q = 5;
            c.desc.heads_kv = 2;
          },
          "heads_q", "5"),
      // ---- element and byte counts that overflow int64 ----------------------------
      row(
          "q_elements_overflow", kBoth, [](Call& c) { c.desc.batch = int64_t{1} << 62; },
          "overflows"),
      row(
          "k_elements_overflow", kBoth, [](Call& c) { c.desc.seqlen_kv = kMax; }, "overflows"),
      row(
          "head_dim_overflow", kBoth, [](Call& c) { c.desc.head_dim = kMax / 2; }, "overflows"),
      row(
          "head_dim_v_overflow", kBoth, [](Call& c) { c.desc.head_dim_v = int64_t{1} << 61; },
          "overflows"),
      row(
          "heads_overflow", kBoth,
          [](Call& c) {
            c.desc.heads_q = int64_t{1} << 60;
            c.desc.heads_kv = 1;
          },
          "overflows"),
      // 2^61 elements fit in int64, their 2^63 bytes (f32) do not.
      row(
          "q_bytes_overflow_f32", kBoth,
          [](Call& c) {
            c.desc.seqlen_q = int64_t{1} << 56;
            c.desc.heads_q = 4;
          },
          "overflows"),
      // f16, head_dim 1: q's 2^61 elements x 2 bytes fit; lse's 2^61 floats x 4 bytes
      // do not. Tensors that large cannot exist, so the pointers are addresses that are
      // never dereferenced, spaced so that no two views overlap.
      row(
          "lse_bytes_overflow_f16", kForward,
          [](Call& c) {
            c.desc.dtype = DType::f16;
            c.desc.head_dim = 1;
            c.desc.seqlen_q = int64_t{1} << 58;
            auto at = [](uint64_t address) { return reinterpret_cast<float*>(address); };
            c.pq = at(uint64_t{1} << 4);
            c.po = at((uint64_t{1} << 62) + 64);
            c.pk = at((uint64_t{1} << 63) + (uint64_t{1} << 20));
            c.pv = at((uint64_t{1} << 63) + (uint64_t{1} << 21));
            c.desc.lse = at((uint64_t{1} << 63) + (uint64_t{1} << 22));
          },
          "lse", "overflows"),
      // ---- strides: negative, smaller than the extent they skip, overflowing --------
      row(
          "q_stride_batch_negative", kBoth,
          [](Call& c) {
            c.desc.q_stride = {-128, 32, 8};
          },
          "q_stride.batch", "-128"),
      row(
          "k_stride_head_negative", kBoth,
          [](Call& c) {
            c.desc.k_stride = {96, 16, -8};
          },
          "k_stride.head", "-8"),
      row(
          "v_stride_seq_negative", kBoth,
          [](Call& c) {
            c.desc.v_stride = {96, -16, 8};
          },
          "v_stride.seq"),
      row(
          "o_stride_head_below_head_dim", kBoth,
          [](Call& c) {
            c.desc.o_stride = {128, 32, 7};
          },
          "o_stride.head", "7"),
      // seq and head strides both 8: whichever comes second overlaps the first.
      row(
          "k_stride_seq_equals_head", kBoth,
          [](Call& c) {
            c.desc.k_stride = {96, 8, 8};
          },
          "k_stride."),
      row(
          "v_stride_batch_overlaps_seq", kBoth,
          [](Call& c) {
            c.desc.v_stride = {80, 16, 8};
          },
          "v_stride.batch", "80"),
      // A zero batch stride would broadcast one batch to both: not allowed for any tensor.
      row(
          "q_stride_batch_zero_broadcast", kBoth,
          [](Call& c) {
            c.desc.q_stride = {0, 32, 8};
          },
          "q_stride.batch", "0"),
      row(
          "o_stride_all_heads_aliased", kBoth,
          [](Call& c) {
            c.desc.o_stride = {128, 32, 0};
          },
          "o_stride.head"),
      // head_dim_v = 16 makes v rows 16 wide: a head stride of 8 (right for k) overlaps.
      row(
          "v_stride_head_below_head_dim_v", kBoth,
          [](Call& c) {
            c.desc.head_dim_v = 16;
            c.desc.v_stride = {96, 16, 8};
          },
          "v_stride.head"),
      row(
          "q_stride_overflow", kBoth,
          [](Call& c) {
            c.desc.q_stride = {int64_t{1} << 62, 32, 8};
          },
          "q_stride"),
      row(
          "k_stride_span_overflow", kBoth,
          [](Call& c) {
            c.desc.k_stride = {kMax / 2, 16, 8};
          },
          "overflows"),
      // ---- mask, scale, softcap --------------------------------------------------
      row(
          "window_left_minus2", kBoth, [](Call& c) { c.desc.window_left = -2; }, "window_left",
          "-2"),
      row(
          "window_left_min", kBoth, [](Call& c) { c.desc.window_left = kMin; }, "window_left"),
      row(
          "window_right_min", kBoth, [](Call& c) { c.desc.window_right = kMin; }, "window_right"),
      row(
          "scale_nan", kBoth, [](Call& c) { c.desc.scale = kNaN; }, "scale", "nan"),
      row(
          "scale_plus_inf", kBoth, [](Call& c) { c.desc.scale = kInf; }, "scale", "inf"),
      row(
          "scale_minus_inf", kBoth, [](Call& c) { c.desc.scale = -kInf; }, "scale", "-inf"),
      row(
          "scale_negative_tiny", kBoth, [](Call& c) { c.desc.scale = -1e-30f; }, "scale"),
      row(
          "softcap_plus_inf", kBoth, [](Call& c) { c.desc.softcap = kInf; }, "softcap", "inf"),
      row(
          "softcap_minus_inf", kBoth, [](Call& c) { c.desc.softcap = -kInf; }, "softcap"),
      row(
          "softcap_negative", kBoth, [](Call& c) { c.desc.softcap = -0.5f; }, "softcap", "-0.5"),
      // ---- enums cast from out-of-range integers ----------------------------------
      row(
          "dtype_3", kBoth, [](Call& c) { c.desc.dtype = static_cast<DType>(3); }, "dtype", "3"),
      row(
          "dtype_minus1", kBoth, [](Call& c) { c.desc.dtype = static_cast<DType>(-1); }, "dtype",
          "-1"),
      row(
          "dtype_int_max", kBoth,
          [](Call& c) { c.desc.dtype = static_cast<DType>(std::numeric_limits<int>::max()); },
          "dtype", "2147483647"),
      row(
          "backend_5", kBoth, [](Call& c) { c.desc.backend = static_cast<Backend>(5); }, "backend",
          "5"),
      row(
          "backend_minus1", kBoth, [](Call& c) { c.desc.backend = static_cast<Backend>(-1); },
          "backend", "-1"),
      // ---- null pointers ---------------------------------------------------------
      row(
          "null_k", kBoth, [](Call& c) { c.pk = nullptr; }, "k = nullptr"),
      row(
          "null_v", kBoth, [](Call& c) { c.pv = nullptr; }, "v = nullptr"),
      row(
          "null_o", kBackward, [](Call& c) { c.po = nullptr; }, "o = nullptr"),
      row(
          "null_dout", kBackward, [](Call& c) { c.pdout = nullptr; }, "dout = nullptr"),
      row(
          "null_lse_argument", kBackward, [](Call& c) { c.plse = nullptr; }, "lse"),
      row(
          "null_dq", kBackward, [](Call& c) { c.pdq = nullptr; }, "dq = nullptr"),
      row(
          "null_dk", kBackward, [](Call& c) { c.pdk = nullptr; }, "dk = nullptr"),
      row(
          "null_dv", kBackward, [](Call& c) { c.pdv = nullptr; }, "dv = nullptr"),
      // ---- outputs overlapping inputs or each other -------------------------------
      row(
          "o_overlaps_k_partially", kForward,
          [](Call& c) {  // k and o inside one scratch buffer, o 64 floats after k
            c.pk = c.scratch.data();
            c.po = c.scratch.data() + 64;
          },
          "o", "overlapping k"),
      row(
          "o_overlaps_v", kForward, [](Call& c) { c.po = const_cast<void*>(c.pv); }, "o",
          "overlapping v"),
      row(
          "lse_overlaps_q", kForward, [](Call& c) { c.desc.lse = static_cast<float*>(c.q.data()); },
          "lse", "overlapping q"),
      row(
          "lse_overlaps_o_tail", kForward,
          [](Call& c) {  // lse starts inside the last row of o
            c.desc.lse = shift(static_cast<float*>(c.o.data()), 4 * (c.o.elements() - 4));
          },
          "overlapping"),
      row(
          "dq_overlaps_q", kBackward, [](Call& c) { c.pdq = c.q.data(); }, "dq", "overlapping q"),
      row(
          "dk_overlaps_v", kBackward, [](Call& c) { c.pdk = c.v.data(); }, "dk", "overlapping v"),
      row(
          "dv_overlaps_dout", kBackward, [](Call& c) { c.pdv = shift(c.dout.data(), 4); }, "dv",
          "overlapping dout"),
      row(
          "dv_overlaps_o", kBackward, [](Call& c) { c.pdv = c.o.data(); }, "dv", "overlapping o"),
      row(
          "dq_overlaps_dk", kBackward, [](Call& c) { c.pdq = shift(c.dk.data(), 8); }, "dq",
          "overlapping dk"),
      row(
          "dk_is_dv", kBackward, [](Call& c) { c.pdk = c.dv.data(); }, "dk", "overlapping dv"),
      // The backward's lse argument is an input: a gradient written over it would be
      // read back as statistics.
      row(
          "dq_overlaps_lse_argument", kBackward,
          [](Call& c) {
            c.plse = static_cast<const float*>(static_cast<const void*>(c.dq.data()));
          },
          "overlapping lse"),
  };

  // ---- environment variables ---------------------------------------------------
  BadInput env_backend = row(
      "FLASH_BACKEND_unknown", kBoth, [](Call& c) { c.desc.backend = Backend::automatic; },
      "FLASH_BACKEND", "tpu");
  env_backend.env_name = "FLASH_BACKEND";
  env_backend.env_value = "tpu";
  rows.push_back(env_backend);
  BadInput env_target = row(
      "FLASH_CPU_TARGET_unknown", kBoth, [](Call& c) { c.desc.backend = Backend::cpu; },
      "FLASH_CPU_TARGET", "avx9000");
  env_target.env_name = "FLASH_CPU_TARGET";
  env_target.env_value = "avx9000";
  env_target.requires = Backend::cpu;
  rows.push_back(env_target);

  // ---- a forced backend that cannot run: unavailable here, never a fallback ----------
  for (Backend gpu : {Backend::cuda, Backend::hip}) {
    const bool is_cuda = gpu == Backend::cuda;
    BadInput forced = row(
        is_cuda ? "forced_cuda_unavailable" : "forced_hip_unavailable", kBoth,
        [gpu](Call& c) { c.desc.backend = gpu; }, to_string(gpu), "unavailable");
    forced.kind = Error::Kind::unsupported;
    forced.needs_unavailable = true;
    forced.unavailable = gpu;
    rows.push_back(forced);
    BadInput by_env = row(
        is_cuda ? "FLASH_BACKEND_cuda_unavailable" : "FLASH_BACKEND_hip_unavailable", kBoth,
        [](Call& c) { c.desc.backend = Backend::automatic; },
        is_cuda ? "FLASH_BACKEND=cuda" : "FLASH_BACKEND=hip", "unavailable");
    by_env.kind = Error::Kind::unsupported;
    by_env.env_name = "FLASH_BACKEND";
    by_env.env_value = to_string(gpu);
    by_env.needs_unavailable = true;
    by_env.unavailable = gpu;
    rows.push_back(by_env);
  }
  return rows;
}

const std::vector<BadInput>& kRows() {
  static const std::vector<BadInput> rows = bad_inputs();
  return rows;
}

bool available(Backend b) {
  for (const BackendInfo& info : backends())
    if (info.backend == b) return info.available;
  return false;
}

// ---- the four entry points ------------------------------------------------------

enum class Entry { cpp_forward, cpp_backward, c_forward, c_backward };

const char* entry_name(Entry e) {
  switch (e) {
    case Entry::cpp_forward:
      return "cpp_forward";
    case Entry::cpp_backward:
      return "cpp_backward";
    case Entry::c_forward:
      return "c_forward";
    case Entry::c_backward:
      return "c_backward";
  }
  return "?";
}

flash_attention_desc to_c(const AttentionDesc& d) {
  flash_attention_desc c;
  flash_desc_init(&c);
  c.batch = d.batch;
  c.seqlen_q = d.seqlen_q;
  c.seqlen_kv = d.seqlen_kv;
  c.heads_q = d.heads_q;
  c.heads_kv = d.heads_kv;
  c.head_dim = d.head_dim;
  c.head_dim_v = d.head_dim_v;
  c.dtype = static_cast<int32_t>(d.dtype);
  c.scale = d.scale;
  c.causal = d.causal ? 1 : 0;
  c.window_left = d.window_left;
  c.window_right = d.window_right;
  c.softcap = d.softcap;
  c.q_stride = {d.q_stride.batch, d.q_stride.seq, d.q_stride.head};
  c.k_stride = {d.k_stride.batch, d.k_stride.seq, d.k_stride.head};
  c.v_stride = {d.v_stride.batch, d.v_stride.seq, d.v_stride.head};
  c.o_stride = {d.o_stride.batch, d.o_stride.seq, d.o_stride.head};
  c.lse = d.lse;
  c.backend = static_cast<int32_t>(d.backend);
  c.stream = d.stream;
  return c;
}

// What one call did: ok, or the error kind + message.
struct Outcome {
  bool ok = false;
  Error::Kind kind = Error::Kind::runtime;
  std::string message;
};

Error::Kind kind_of(flash_status s) {
  switch (s) {
    case FLASH_STATUS_INVALID_ARGUMENT:
      return Error::Kind::invalid_argument;
    case FLASH_STATUS_UNSUPPORTED:
      return Error::Kind::unsupported;
    default:
      return Error::Kind::runtime;
  }
}

Outcome call(Entry entry, Call& c) {
  Outcome out;
  if (entry == Entry::c_forward || entry == Entry::c_backward) {
    const flash_attention_desc d = to_c(c.desc);
    // Any exception crossing the C API fails the test through gtest's handler.
    const flash_status s = entry == Entry::c_forward
                               ? flash_attention(&d, c.pq, c.pk, c.pv, c.po)
                               : flash_attention_backward(&d, c.pq, c.pk, c.pv, c.po, c.pdout,
                                                          c.plse, c.pdq, c.pdk, c.pdv);
    out.ok = s == FLASH_STATUS_OK;
    out.message = flash_last_error();
    if (!out.ok) {
      out.kind = kind_of(s);
      EXPECT_NE(s, FLASH_STATUS_INTERNAL_ERROR) << out.message;
    }
    return out;
  }
  try {
    if (entry == Entry::cpp_forward)
      attention(c.desc, c.pq, c.pk, c.pv, c.po);
    else
      attention_backward(c.desc, c.pq, c.pk, c.pv, c.po, c.pdout, c.plse, c.pdq, c.pdk, c.pdv);
    out.ok = true;
  } catch (const Error& e) {
    out.kind = e.kind();
    out.message = e.what();
  }
  return out;
}

std::string kind_name(Error::Kind k) {
  switch (k) {
    case Error::Kind::invalid_argument:
      return "invalid_argument";
    case Error::Kind::unsupported:
      return "unsupported";
    case Error::Kind::runtime:
      return "runtime";
  }
  return "?";
}

using Param = std::tuple<size_t, Entry>;

class BadInputMatrix : public testing::TestWithParam<Param> {};

TEST_P(BadInputMatrix, RaisesErrorNamingTheField) {
  const auto& [index, entry] = GetParam();
  const BadInput& r = kRows()[index];
  const bool backward = entry == Entry::cpp_backward || entry == Entry::c_backward;
  if (r.requires != Backend::automatic && !available(r.requires))
    GTEST_SKIP() << to_string(r.requires) << " is unavailable in this build";
  if (r.needs_unavailable && available(r.unavailable))
    GTEST_SKIP() << to_string(r.unavailable) << " is available here: the row tests its absence";
  Call c;
  r.mutate(c);
  ScopedEnv env(r.env_name ? r.env_name : "FLASH_RELIABILITY_UNUSED", r.env_value);
  const Outcome out = call(entry, c);
  ASSERT_FALSE(out.ok) << r.name << " (" << entry_name(entry) << "): accepted";
  EXPECT_EQ(kind_name(out.kind), kind_name(r.kind)) << out.message;
  EXPECT_NE(out.message.find(r.field), std::string::npos)
      << "message does not name '" << r.field << "': " << out.message;
  EXPECT_NE(out.message.find(r.value), std::string::npos)
      << "message does not give the value '" << r.value << "': " << out.message;
  // The outputs of a rejected call stay as they were (nothing ran).
  if (!backward) {
    for (float x : c.lse_out) ASSERT_EQ(x, 0.f) << "lse written by a rejected call";
  }
}

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (size_t i = 0; i < kRows().size(); ++i)
    for (Entry e : {Entry::cpp_forward, Entry::cpp_backward, Entry::c_forward, Entry::c_backward}) {
      const bool backward = e == Entry::cpp_backward || e == Entry::c_backward;
      if (kRows()[i].directions & (backward ? kBackward : kForward)) out.emplace_back(i, e);
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Rows, BadInputMatrix, testing::ValuesIn(all_params()),
                         [](const testing::TestParamInfo<Param>& info) {
                           return std::string(kRows()[std::get<0>(info.param)].name) + "_" +
                                  entry_name(std::get<1>(info.param));
                         });

// The C API: a null descriptor and a rejected call after a good one.
TEST(BadInputCApi, NullDescriptorAndMessageLifetime) {
  Call c;
  EXPECT_EQ(flash_attention_backward(nullptr, c.pq, c.pk, c.pv, c.po, c.pdout, c.plse, c.pdq, c.pdk,
                                     c.pdv),
            FLASH_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flash_last_error()).find("desc"), std::string::npos);
  flash_attention_desc d = to_c(c.desc);
  EXPECT_EQ(flash_attention(&d, c.pq, c.pk, c.pv, c.po), FLASH_STATUS_OK) << flash_last_error();
  EXPECT_STREQ(flash_last_error(), "");
  d.head_dim = -1;
  EXPECT_EQ(flash_attention(&d, c.pq, c.pk, c.pv, c.po), FLASH_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flash_last_error()).find("head_dim"), std::string::npos);
  flash_desc_init(nullptr);  // documented as a no-op
}

// ---- inputs at the edge of what is allowed: they run -----------------------------

struct EdgeInput {
  const char* name;
  Direction directions;
  std::function<void(Call&)> mutate;
};

// Empty tensors may be null; lse (forward) is optional; windows may be as large as
// int64 allows (the mask arithmetic must not overflow); causal may be any nonzero int
// in C.
const EdgeInput kEdges[] = {
    {"forward_without_lse", kForward, [](Call& c) { c.desc.lse = nullptr; }},
    {"empty_batch_null_pointers", kBoth,
     [](Call& c) {
       c.desc.batch = 0;
       c.pq = c.pk = c.pv = c.pdout = nullptr;
       c.po = c.pdq = c.pdk = c.pdv = nullptr;
       c.plse = nullptr;
       c.desc.lse = nullptr;
     }},
    {"empty_query_null_q_o_lse", kBoth,
     [](Call& c) {
       c.desc.seqlen_q = 0;
       c.pq = c.pdout = nullptr;
       c.po = c.pdq = nullptr;
       c.plse = nullptr;
     }},
    {"empty_keys_null_k_v", kBoth,
     [](Call& c) {
       c.desc.seqlen_kv = 0;
       c.pk = c.pv = nullptr;
       c.pdk = c.pdv = nullptr;
     }},
    // Strides of an empty tensor can make no two elements share an address: a
    // [B, H, 0, D] tensor's bhsd strides are {0, D, 0} (torch gives the same).
    {"empty_query_bhsd_strides", kBoth,
     [](Call& c) {
       c.desc.seqlen_q = 0;
       c.desc.q_stride = c.desc.o_stride = {0, 8, 0};
     }},
    {"window_left_int64_max", kBoth, [](Call& c) { c.desc.window_left = kMax; }},
    {"window_right_int64_max", kBoth, [](Call& c) { c.desc.window_right = kMax; }},
    {"both_windows_int64_max_causal", kBoth,
     [](Call& c) {
       c.desc.window_left = kMax;
       c.desc.window_right = kMax;
       c.desc.causal = true;
     }},
    {"windows_zero", kBoth,
     [](Call& c) {
       c.desc.window_left = 0;
       c.desc.window_right = 0;
     }},
    {"scale_tiny", kBoth, [](Call& c) { c.desc.scale = 1e-38f; }},
    {"scale_negative_zero_is_default", kBoth, [](Call& c) { c.desc.scale = -0.0f; }},
    {"softcap_tiny", kBoth, [](Call& c) { c.desc.softcap = 1e-30f; }},
    {"softcap_huge", kBoth, [](Call& c) { c.desc.softcap = 3e38f; }},
    {"mqa_heads_kv_1", kBoth,
     [](Call& c) {
       c.desc.heads_kv = 1;
       c.desc.k_stride = c.desc.v_stride = {96, 16, 8};  // k/v buffers keep their layout
     }},
    {"zero_strides_on_extent_1_dims", kBoth,
     [](Call& c) {  // q with one batch: its batch stride is never applied
       c.desc.batch = 1;
       c.desc.q_stride = {0, 32, 8};
     }},
};

using EdgeParam = std::tuple<size_t, Entry, Backend>;

std::vector<EdgeParam> edge_params() {
  std::vector<EdgeParam> out;
  for (size_t i = 0; i < std::size(kEdges); ++i)
    for (Entry e : {Entry::cpp_forward, Entry::cpp_backward, Entry::c_forward, Entry::c_backward})
      for (Backend b : {Backend::reference, Backend::cpu}) {
        const bool backward = e == Entry::cpp_backward || e == Entry::c_backward;
        if (kEdges[i].directions & (backward ? kBackward : kForward)) out.emplace_back(i, e, b);
      }
  return out;
}

class EdgeInputs : public testing::TestWithParam<EdgeParam> {};

TEST_P(EdgeInputs, RunWithoutError) {
  const auto& [index, entry, backend] = GetParam();
  const EdgeInput& e = kEdges[index];
  const bool backward = entry == Entry::cpp_backward || entry == Entry::c_backward;
  if (!available(backend)) GTEST_SKIP() << to_string(backend) << " unavailable";
  Call c;
  c.desc.backend = backend;
  e.mutate(c);
  const Outcome out = call(entry, c);
  EXPECT_TRUE(out.ok) << e.name << ": " << out.message;
  if (out.ok && !backward && c.desc.batch > 0 && c.desc.seqlen_q > 0 && c.desc.seqlen_kv > 0) {
    // A row that sees at least one key is finite (these inputs are finite, in [-1, 1]).
    for (int64_t i = 0; i < c.o.elements(); ++i)
      ASSERT_TRUE(std::isfinite(static_cast<const float*>(c.o.data())[i]))
          << e.name << " o[" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Edges, EdgeInputs, testing::ValuesIn(edge_params()), [](const auto& info) {
  return std::string(kEdges[std::get<0>(info.param)].name) + "_" +
         entry_name(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param));
});

// Misaligned host pointers: the host backends read float/uint16 elements, which C++
// requires to be aligned to their size. A pointer that is not must be rejected by
// name (not read as a misaligned float: undefined behaviour, caught by UBSan).
class Misaligned : public testing::TestWithParam<std::tuple<Entry, Backend>> {};

TEST_P(Misaligned, HostPointerNotAlignedToItsElementIsRejected) {
  const auto& [entry, backend] = GetParam();
  if (!available(backend)) GTEST_SKIP() << to_string(backend) << " unavailable";
  const bool backward = entry == Entry::cpp_backward || entry == Entry::c_backward;
  // One spare element of room in each buffer so the shifted view stays inside it.
  Call c;
  c.desc.backend = backend;
  c.desc.batch = 1;  // buffers hold 2 batches: +2 bytes stays in bounds
  HostTensor big_q(DType::f32, 2, 4, 4, 8, Layout::packed);
  std::mt19937_64 rng(3);
  big_q.fill_random(rng, 1);
  c.pq = shift(big_q.data(), 2);
  const Outcome out = call(entry, c);
  ASSERT_FALSE(out.ok) << "q misaligned by 2 bytes (f32) accepted by " << to_string(backend)
                       << (backward ? " backward" : " forward");
  EXPECT_NE(out.message.find("q"), std::string::npos) << out.message;
  EXPECT_NE(out.message.find("align"), std::string::npos) << out.message;
}

INSTANTIATE_TEST_SUITE_P(HostBackends, Misaligned,
                         testing::Combine(testing::Values(Entry::cpp_forward, Entry::cpp_backward,
                                                          Entry::c_forward, Entry::c_backward),
                                          testing::Values(Backend::reference, Backend::cpu)),
                         [](const auto& info) {
                           return std::string(entry_name(std::get<0>(info.param))) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace flash::test
