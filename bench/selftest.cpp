// Self-checks of the bench's own arithmetic, run by ctest (bench_selftest): the
// FLOP count's visible-pair rule against brute force over the mask, dtype rounding,
// and the SVG writer. Prints each failure and exits 1 if any.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/dtype.hpp"
#include "common/flops.hpp"
#include "common/problem.hpp"
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

}  // namespace

int main() {
  check_visible_pairs();
  check_rounding();
  check_svg();
  std::printf("%s\n", failures ? "bench selftest FAILED" : "bench selftest passed");
  return failures ? 1 : 0;
}
