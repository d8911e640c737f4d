// Self-checks of the bench's own arithmetic, run by ctest (bench_selftest): the
// FLOP count's visible-pair rule against brute force over the mask, dtype rounding,
// the SVG writer, flashattn-compare's inference flags (parsing, bad values, the problems
// they build) and the oracle on packed, cached and paged problems (a backend agreeing
// with it, a wrong page table caught by it). Prints each failure and exits 1 if any.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/device.hpp"
#include "common/dtype.hpp"
#include "common/flops.hpp"
#include "common/oracle.hpp"
#include "common/problem.hpp"
#include "common/workload.hpp"
#include "compare/args.hpp"
#include "compare/problems.hpp"
#include "compare/svg.hpp"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::printf("FAIL: %s\n", what.c_str());
  ++failures;
}

int64_t brute_force_pairs(const flash::AttentionDesc& d) {
  int64_t pairs = 0;
  for (int64_t i = 0; i < d.seqlen_q; ++i)
    for (int64_t j = 0; j < d.seqlen_kv; ++j) pairs += bench::visible(d, i, j) ? 1 : 0;
  return pairs;
}

void check_visible_pairs() {
  const int64_t lengths[] = {1, 17, 113};
  const int64_t windows[][2] = {{-1, -1}, {0, 0}, {5, -1}, {-1, 3}, {7, 2}, {200, 200}};
  for (int64_t sq : lengths)
    for (int64_t sk : lengths)
      for (bool causal : {false, true})
        for (const auto& w : windows) {
          flash::AttentionDesc d;
          d.seqlen_q = sq;
          d.seqlen_kv = sk;
          d.causal = causal;
          d.window_left = w[0];
          d.window_right = w[1];
          expect(bench::exact_visible_pairs(d) == brute_force_pairs(d),
                 "visible pairs " + bench::shape_label(d) + " " + bench::mask_label(d));
        }
  flash::AttentionDesc square;
  square.seqlen_q = square.seqlen_kv = 1024;
  square.head_dim = 64;
  square.heads_q = square.heads_kv = 8;
  expect(bench::forward_flops(square) == 4.0 * 8 * 1024 * 1024 * 64, "forward FLOPs, no mask");
  square.causal = true;
  expect(bench::forward_flops(square) == 2.0 * 8 * 1024 * 1024 * 64, "causal is half");
  expect(bench::backward_flops(square) == 2.5 * bench::forward_flops(square), "backward 2.5x");
  flash::AttentionDesc decode = square;
  decode.seqlen_q = 1;
  decode.seqlen_kv = 4096;
  expect(bench::counted_pairs(decode) == 4096, "causal decode step sees every key");
}

void check_rounding() {
  expect(bench::bf16_to_float(bench::float_to_bf16(1.0f)) == 1.0f, "bf16 1.0");
  // 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even (1).
  expect(bench::bf16_to_float(bench::float_to_bf16(1.0f + 0x1p-8f)) == 1.0f, "bf16 tie");
  expect(bench::bf16_to_float(bench::float_to_bf16(1.0f + 0x1p-8f + 0x1p-16f)) == 1.0f + 0x1p-7f,
         "bf16 above tie");
  expect(std::isnan(bench::bf16_to_float(bench::float_to_bf16(NAN))), "bf16 NaN");
  expect(bench::f16_to_float(bench::float_to_f16(65504.0f)) == 65504.0f, "f16 max");
  expect(bench::f16_to_float(bench::float_to_f16(1.0f + 0x1p-11f)) == 1.0f, "f16 tie");
  float nan_f32;
  const unsigned poison = 0xffffffffu;  // what Device::fill_bytes(0xff) writes
  static_assert(sizeof(nan_f32) == sizeof(poison));
  std::memcpy(&nan_f32, &poison, sizeof(poison));
  expect(std::isnan(nan_f32) && std::isnan(bench::f16_to_float(0xffff)) &&
             std::isnan(bench::bf16_to_float(0xffff)),
         "0xff bytes are NaN in every dtype");
}

void check_svg() {
  compare::LinePlot plot;
  plot.title = "a <title> & more";
  plot.log2_x = true;
  plot.series = {{"cpu", {{512, 1.0}, {1024, 2.0}}}, {"cuda", {{512, 100.0}}}};
  const std::string svg = compare::render_svg(plot);
  expect(svg.rfind("<svg ", 0) == 0 && svg.find("</svg>") != std::string::npos, "svg document");
  expect(svg.find("&lt;title&gt; &amp; more") != std::string::npos, "svg escapes text");
  expect(svg.find("nan") == std::string::npos && svg.find("inf") == std::string::npos,
         "svg coordinates are finite");
  bool threw = false;
  try {
    compare::render_svg(compare::LinePlot{});
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  expect(threw, "empty plot is an error");
}

compare::Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "flashattn-compare");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return compare::parse_args(static_cast<int>(argv.size()), argv.data());
}

// The message parse_args throws for args, or "" when it accepts them.
std::string parse_error(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void check_inference_flags() {
  const compare::Options decode = parse({"--seqlen-q", "1", "--seqlen-kv", "8192", "--heads-q",
                                         "32", "--heads-kv", "8", "--paged", "64"});
  expect(decode.seqlens == std::vector<int64_t>{1} && decode.seqlen_kv == 8192 &&
             decode.base.heads_q == 32 && decode.base.heads_kv == 8 && decode.page_size == 64,
         "decode flags parsed");
  expect(decode.copy_ceiling, "decode rows measure the copy ceiling");
  expect(!parse({"--seqlen", "1024"}).copy_ceiling, "prefill rows do not");
  expect(!parse({"--seqlen", "4", "--backward"}).copy_ceiling, "backward rows do not");
  const compare::Options lists = parse({"--varlen", "0,17,113", "--seqlens-kv", "5,0,1000"});
  expect(lists.varlen == std::vector<int64_t>{0, 17, 113} &&
             lists.seqlens_kv == std::vector<int64_t>{5, 0, 1000} &&
             lists.seqlens == std::vector<int64_t>{113},
         "--varlen / --seqlens-kv parsed, one point at the longest sequence");

  // Bad values: rejected with the option and the value named.
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--paged", "0"}, "--paged: 0 is not a page size"},
      {{"--paged", "-3"}, "--paged: -3"},
      {{"--paged", "16k"}, "--paged: '16k' is not an integer"},
      {{"--seqlens-kv", "4,-1"}, "--seqlens-kv: length -1 is out of range"},
      {{"--seqlens-kv", ","}, "--seqlens-kv: ',' has no lengths"},
      {{"--varlen", "3,x"}, "--varlen: 'x' is not an integer"},
      {{"--varlen", "3000000000"}, "--varlen: length 3000000000 is out of range"},
      {{"--varlen", "2000000000,2000000000"}, "overflow the int32 cu_seqlens"},
      {{"--seqlens-kv", "10,9000", "--seqlen-kv", "8192"}, "exceeds --seqlen-kv 8192"},
      {{"--varlen", "3,4", "--seqlen", "5"}, "--varlen gives the query lengths"},
      {{"--varlen", "3,4", "--batch", "3"}, "--varlen: 2 lengths but --batch 3"},
      {{"--varlen", "3,4", "--seqlens-kv", "1,2,3"}, "--seqlens-kv: 3 lengths but --varlen has 2"},
      {{"--seqlens-kv", "3,4", "--tokens", "100"}, "--tokens cannot size the batch"},
      {{"--paged", "16", "--backward"}, "--paged is forward-only"},
      {{"--seqlens-kv", "16", "--backward"}, "--seqlens-kv is forward-only"},
      {{"--pages", "random", "--paged", "16"}, "--pages: 'random' is not shuffled or in-order"},
      {{"--pages", "in-order"}, "--pages in-order needs --paged"},
  };
  for (const auto& [args, message] : bad) {
    const std::string got = parse_error(args);
    expect(
        got.find(message) != std::string::npos,
        "'" + args[0] + " " + args[1] + "' rejected with \"" + message + "\", got \"" + got + "\"");
  }
  expect(parse_error({"--varlen", "17,113", "--backward"}).empty(), "varlen backward accepted");
}

void check_problems() {
  // Decode against a paged cache: whole capacity in pages, each page id used once.
  const bench::Problem paged = compare::make_problem(
      parse({"--seqlen-q", "1", "--seqlen-kv", "1000", "--batch", "3", "--paged", "64"}), 1);
  const flash::AttentionDesc d = paged.desc();
  expect(d.batch == 3 && d.seqlen_q == 1 && d.seqlen_kv == 1000 && d.page_size == 64 &&
             d.pages_per_seq == 16 && d.num_pages == 48,
         "paged problem sizes");
  std::vector<int32_t> ids = paged.block_table;
  std::sort(ids.begin(), ids.end());
  bool permutation = ids.size() == 48;
  for (size_t i = 0; permutation && i < ids.size(); ++i) permutation = ids[i] == int32_t(i);
  expect(permutation && paged.block_table != ids, "block table: shuffled page ids, each once");
  expect(bench::key_row(d, 1, 70) == paged.block_table[16 + 1] * 64 + 6, "key row via its page");
  const bench::Problem in_order =
      compare::make_problem(parse({"--seqlen-q", "1", "--seqlen-kv", "1000", "--batch", "3",
                                   "--paged", "64", "--pages", "in-order"}),
                            1);
  expect(in_order.block_table == ids, "--pages in-order: page j of sequence b is b * 16 + j");
  expect(bench::kv_rows(d) == 48 * 64, "k/v rows = the page pool");
  // Bytes read: the 1000 keys of each sequence, not the 1024 rows of its pages.
  expect(bench::kv_bytes_read(d) == 3.0 * 1000 * 8 * (64 + 64) * 4, "K+V bytes of a decode");

  // A packed batch: cu_seqlens of both, FLOPs per sequence with its own (causal) mask.
  const bench::Problem packed =
      compare::make_problem(parse({"--varlen", "0,17,113", "--causal", "--heads", "2"}), 113);
  const flash::AttentionDesc v = packed.desc();
  expect(packed.cu_seqlens_q == std::vector<int32_t>{0, 0, 17, 130} &&
             packed.cu_seqlens_kv == packed.cu_seqlens_q && v.seqlen_q == 113 &&
             v.seqlen_kv == 113 && v.batch == 3 && bench::q_rows(v) == 130,
         "varlen problem");
  // Square causal sequences count half their pairs (the FLOP rule), the empty one none.
  expect(bench::forward_flops(v) == 4.0 * 2 * 64 * (17 * 17 / 2.0 + 113 * 113 / 2.0),
         "varlen FLOPs sum the sequences");
  // Cache lengths beside packed queries: each sequence sees its own keys.
  const bench::Problem cached = compare::make_problem(
      parse({"--varlen", "1,4", "--seqlens-kv", "300,7", "--seqlen-kv", "512"}), 4);
  const flash::AttentionDesc c = cached.desc();
  expect(c.cu_seqlens_kv == nullptr && c.seqlens_kv && c.seqlen_kv == 512 &&
             bench::sequence_rows(c, 1).kv_len == 7 && bench::key_row(c, 1, 3) == 512 + 3,
         "cache rows of a sequence");
  flash::AttentionDesc window = c;
  window.causal = true;
  window.window_left = 10;
  expect(bench::keys_read(window, 0) == 11 && bench::keys_read(window, 1) == 7,
         "keys read under a sliding window");
}

// Runs desc on the cpu backend (reference when the cpu module is absent) with the
// same inputs the oracle saw; returns the share of the tolerance used.
double tolerance_used(const flash::AttentionDesc& desc, const flash::AttentionDesc& oracle_desc,
                      bool backward) {
  bool cpu = false;
  for (const flash::BackendInfo& info : flash::backends())
    cpu = cpu || (info.backend == flash::Backend::cpu && info.available);
  flash::AttentionDesc run = desc;
  run.backend = cpu ? flash::Backend::cpu : flash::Backend::reference;
  std::string why;
  const std::unique_ptr<bench::Device> device = bench::open_device(run.backend, &why);
  const bench::HostInputs inputs = bench::make_host_inputs(oracle_desc, backward, 7);
  const bench::Oracle oracle(oracle_desc, backward, inputs, 1e8);
  bench::Workload workload(run, backward, *device, inputs);
  workload.prepare();
  workload.run();
  const bench::CheckResult r = oracle.check(workload);
  return r.checked ? r.tolerance_used : -1.0;
}

void check_runs_against_reference() {
  const std::vector<std::vector<std::string>> problems = {
      {"--seqlen-q", "1", "--seqlen-kv", "777", "--heads", "8", "--kv-heads", "2", "--paged", "64"},
      {"--seqlen-q", "4", "--seqlens-kv", "0,1,100,500", "--seqlen-kv", "512", "--heads", "4",
       "--kv-heads", "1", "--causal", "--paged", "7", "--dtype", "bf16"},
      {"--seqlen-q", "16", "--seqlens-kv", "16,300", "--heads", "4", "--kv-heads", "4", "--causal",
       "--window", "40,0", "--softcap", "15", "--dtype", "f16"},
      {"--varlen", "0,1,17,113", "--heads", "4", "--kv-heads", "2", "--causal"},
      {"--varlen", "5,100", "--paged", "16", "--heads", "2", "--kv-heads", "1"},
  };
  for (const std::vector<std::string>& args : problems) {
    const compare::Options o = parse(args);
    const bench::Problem p = compare::make_problem(o, o.seqlens.front());
    const double used = tolerance_used(p.desc(), p.desc(), false);
    std::string line;
    for (const std::string& a : args) line += " " + a;
    expect(used >= 0.0 && used <= 1.0,
           "agrees with the reference:" + line + " (tol used " + std::to_string(used) + ")");
  }
  const compare::Options o =
      parse({"--varlen", "17,113,40", "--heads", "4", "--kv-heads", "2", "--causal", "--backward"});
  const bench::Problem p = compare::make_problem(o, o.seqlens.front());
  const double used = tolerance_used(p.desc(), p.desc(), true);
  expect(used >= 0.0 && used <= 1.0, "varlen backward agrees with the reference");

  // The check can fail: the same pages in another order give another cache.
  const bench::Problem right = compare::make_problem(
      parse({"--seqlen-q", "2", "--seqlen-kv", "300", "--batch", "2", "--paged", "16"}), 2);
  bench::Problem wrong = right;
  wrong.block_table = bench::shuffled_pages(right.shape.num_pages, 12345);
  expect(tolerance_used(wrong.desc(), right.desc(), false) > 1.0,
         "a wrong block table fails the check");
}

}  // namespace

int main() {
  check_visible_pairs();
  check_rounding();
  check_svg();
  check_inference_flags();
  check_problems();
  check_runs_against_reference();
  std::printf("%s\n", failures ? "bench selftest FAILED" : "bench selftest passed");
  return failures ? 1 : 0;
}
