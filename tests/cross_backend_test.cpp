// The cross-backend suite: every backend (and the cpu backend on every SIMD target
// it reports) against the double reference, forward and backward, every dtype, the
// case grid of support/cases.cpp. Outputs are poisoned with NaN first; padding
// outside strided views must stay untouched. A backend may decline only what it
// documents (documented_decline below; README "Backends × features"): such a case
// passes once the message names the field, any other decline fails. Unavailable
// backends are skips naming what is missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <tuple>
#include <vector>

#include "support/cases.hpp"
#include "support/compare.hpp"
#include "support/targets.hpp"

namespace flash::test {
namespace {

using Param = std::tuple<Target, size_t, DType>;

}  // namespace

// Readable parameter names in gtest output (instead of a byte dump).
void PrintTo(const Target& target, std::ostream* os) { *os << target.label; }

namespace {

std::string param_name(const testing::TestParamInfo<Param>& info, const std::vector<Case>& cases) {
  const auto& [target, index, dtype] = info.param;
  std::string name = target.label + "_" + cases[index].name + "_" + to_string(dtype);
  for (char& ch : name)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

// Runs fn with the target forced. Returns "" when it ran; otherwise the reason it
// did not: a declined problem (unsupported-kind flash::Error, to skip) or a failure.
template <class Fn>
std::string run_on(const Target& target, Fn&& fn) {
  ScopedEnv simd("FLASH_CPU_TARGET", target.simd.empty() ? nullptr : target.simd.c_str());
  try {
    fn();
    return "";
  } catch (const Error& e) {
    if (e.kind() != Error::Kind::unsupported) ADD_FAILURE() << "flash::Error: " << e.what();
    return e.what();
  }
}

// What a backend documents it declines for this problem: the field and its value, both
// of which its message must name ("" = it must run the problem).
std::string documented_decline(Backend backend, const flash_problem& p) {
  const auto cuda_dim = [](int64_t d) { return d >= 8 && d <= 256 && d % 8 == 0; };
  if (backend == Backend::cuda) {
    if (!cuda_dim(p.head_dim)) return "head_dim = " + std::to_string(p.head_dim);
    if (!cuda_dim(p.head_dim_v)) return "head_dim_v = " + std::to_string(p.head_dim_v);
  }
  if (backend == Backend::hip && std::max(p.head_dim, p.head_dim_v) > 512)
    return "head_dim " + std::to_string(p.head_dim);
  return "";
}

// Runs body on the target; returns from the test when the backend (rightly) declined.
#define RUN_OR_DECLINE(target, problem, body)                                              \
  do {                                                                                     \
    const std::string why_not = run_on(target, [&] { body; });                             \
    const std::string field = documented_decline(target.backend, problem);                 \
    if (!field.empty()) {                                                                  \
      EXPECT_NE(why_not.find(field), std::string::npos)                                    \
          << "expected a decline naming " << field                                         \
          << ", got: " << (why_not.empty() ? "it ran" : why_not);                          \
      return;                                                                              \
    }                                                                                      \
    ASSERT_TRUE(why_not.empty()) << "declined a problem it documents to run: " << why_not; \
  } while (0)

class Forward : public testing::TestWithParam<Param> {};
class Backward : public testing::TestWithParam<Param> {};

TEST_P(Forward, MatchesReference) {
  const auto& [target, index, dtype] = GetParam();
  if (!target.available) GTEST_SKIP() << target.label << " unavailable: " << target.reason;
  const Prepared& in = prepare(forward_cases()[index], dtype, false);
  // cuda runs each case three times: on its default grid, and on a persistent grid of three
  // or two blocks, where every block runs many work tiles (on one block per SM these small
  // problems give a block one tile: the Hopper forward's hand-over from one tile to the
  // next, the Q reload and the K/V ring continuing across tiles, would go untested), once
  // with the banded-mask tile off and once forced on (FLASH_CUDA_FWD_BAND_TILE), so that
  // every case at D 128, masked or not, crosses tile boundaries on both Hopper tiles. The
  // first of the two also splits the tail wherever it can (FLASH_CUDA_FWD_TAIL=force: an
  // unmasked case whose work tiles leave one or two over three blocks cuts them into three
  // key ranges, two tiles' ranges crossing from one tile into the next, each tile merged
  // by its segment that ends last). Other backends ignore the variables.
  struct Run {
    const char *blocks, *band_tile, *tail;
  };
  const std::vector<Run> runs =
      target.backend == Backend::cuda
          ? std::vector<Run>{{nullptr, nullptr, nullptr}, {"3", "0", "force"}, {"2", "1", nullptr}}
          : std::vector<Run>{{nullptr, nullptr, nullptr}};
  for (const Run& run : runs) {
    SCOPED_TRACE(run.blocks ? std::string("FLASH_CUDA_FWD_BLOCKS=") + run.blocks +
                                  " FLASH_CUDA_FWD_BAND_TILE=" + run.band_tile +
                                  " FLASH_CUDA_FWD_TAIL=" + (run.tail ? run.tail : "1")
                            : std::string("default grid"));
    ScopedEnv grid("FLASH_CUDA_FWD_BLOCKS", run.blocks);
    ScopedEnv band_tile("FLASH_CUDA_FWD_BAND_TILE", run.band_tile);
    ScopedEnv tail("FLASH_CUDA_FWD_TAIL", run.tail);
    HostTensor o = in.o;  // a fresh output buffer with the case's layout
    o.poison();
    std::vector<float> lse =
        poisoned_lse(in.problem.batch * in.problem.heads_q * in.problem.seqlen_q);
    AttentionDesc desc = in.desc;
    desc.backend = target.backend;
    desc.lse = lse.data();
    RUN_OR_DECLINE(target, in.problem,
                   attention(desc, in.q.data(), in.k.data(), in.v.data(), o.data()));

    const Verdict vo = compare("o", o.to_packed(), in.ref.o, in.naive.o, dtype);
    EXPECT_TRUE(vo.pass) << vo.detail;
    const std::vector<double> got_lse(lse.begin(), lse.end());
    const Verdict vl = compare("lse", got_lse, in.ref.lse, in.naive.lse, DType::f32);
    EXPECT_TRUE(vl.pass) << vl.detail;
    EXPECT_TRUE(o.padding_untouched()) << "the backend wrote outside the o view";
    if (run.blocks == nullptr) RecordProperty("share_of_tolerance_o", std::to_string(vo.share()));
  }
}

TEST_P(Backward, MatchesReference) {
  const auto& [target, index, dtype] = GetParam();
  if (!target.available) GTEST_SKIP() << target.label << " unavailable: " << target.reason;
  const Prepared& in = prepare(backward_cases()[index], dtype, true);
  // cuda runs each case three times: with its default key-block dispatch order (the suite's
  // problems are small enough for one group a head, each head's key blocks first one
  // first), with FLASH_CUDA_BWD_HEAVY_FIRST=0 (last one first) and with
  // FLASH_CUDA_BWD_DQ_GROUP=2 (groups of two key blocks, heads interleaved per group, as a
  // head of more than sms / 2 key blocks runs): under a mask band the ordered dQ adds meet
  // blocks dispatched in each order. Other backends ignore the variables.
  struct Order {
    const char *heavy_first, *group;
  };
  const std::vector<Order> orders =
      target.backend == Backend::cuda
          ? std::vector<Order>{{nullptr, nullptr}, {"0", nullptr}, {nullptr, "2"}}
          : std::vector<Order>{{nullptr, nullptr}};
  for (const Order& order : orders) {
    SCOPED_TRACE(order.heavy_first ? "FLASH_CUDA_BWD_HEAVY_FIRST=0"
                 : order.group     ? "FLASH_CUDA_BWD_DQ_GROUP=2"
                                   : "default dispatch order");
    ScopedEnv heavy_first("FLASH_CUDA_BWD_HEAVY_FIRST", order.heavy_first);
    ScopedEnv group("FLASH_CUDA_BWD_DQ_GROUP", order.group);
    HostTensor dq = in.q, dk = in.k, dv = in.v;
    dq.poison();
    dk.poison();
    dv.poison();
    AttentionDesc desc = in.desc;
    desc.backend = target.backend;
    RUN_OR_DECLINE(
        target, in.problem,
        attention_backward(desc, in.q.data(), in.k.data(), in.v.data(), in.o.data(), in.dout.data(),
                           in.lse.data(), dq.data(), dk.data(), dv.data()));
    const double scale =
        std::max({magnitude(in.ref_grad.dq), magnitude(in.ref_grad.dk), magnitude(in.ref_grad.dv)});
    const Verdict vq =
        compare("dq", dq.to_packed(), in.ref_grad.dq, in.naive_grad.dq, dtype, scale);
    const Verdict vk =
        compare("dk", dk.to_packed(), in.ref_grad.dk, in.naive_grad.dk, dtype, scale);
    const Verdict vv =
        compare("dv", dv.to_packed(), in.ref_grad.dv, in.naive_grad.dv, dtype, scale);
    EXPECT_TRUE(vq.pass) << vq.detail;
    EXPECT_TRUE(vk.pass) << vk.detail;
    EXPECT_TRUE(vv.pass) << vv.detail;
    EXPECT_TRUE(dq.padding_untouched() && dk.padding_untouched() && dv.padding_untouched())
        << "the backend wrote outside a gradient view";
  }
}

std::vector<size_t> indices(size_t n) {
  std::vector<size_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = i;
  return out;
}

const auto kDtypes = testing::Values(DType::f32, DType::f16, DType::bf16);

INSTANTIATE_TEST_SUITE_P(All, Forward,
                         testing::Combine(testing::ValuesIn(all_targets()),
                                          testing::ValuesIn(indices(forward_cases().size())),
                                          kDtypes),
                         [](const auto& info) { return param_name(info, forward_cases()); });

INSTANTIATE_TEST_SUITE_P(All, Backward,
                         testing::Combine(testing::ValuesIn(all_targets()),
                                          testing::ValuesIn(indices(backward_cases().size())),
                                          kDtypes),
                         [](const auto& info) { return param_name(info, backward_cases()); });

// The comparator itself must be able to fail: a perturbed output is rejected.
TEST(Tolerance, RejectsAPerturbedOutput) {
  const Prepared& in = prepare(forward_cases()[1], DType::bf16, false);
  std::vector<double> perturbed = in.ref.o;
  perturbed[perturbed.size() / 2] +=
      4 * compare("o", in.naive.o, in.ref.o, in.naive.o, DType::bf16).bound;
  EXPECT_FALSE(compare("o", perturbed, in.ref.o, in.naive.o, DType::bf16).pass);
  std::vector<double> with_nan = in.ref.o;
  with_nan[0] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(compare("o", with_nan, in.ref.o, in.naive.o, DType::bf16).pass);
  EXPECT_TRUE(compare("o", in.ref.o, in.ref.o, in.naive.o, DType::bf16).pass);
}

}  // namespace
}  // namespace flash::test
