// flashattn-compare: one attention problem, or a sweep over seqlen, on every
// backend: time (median of N), TFLOP/s, GB/s, and the error against the reference
// with the share of the tolerance it uses. --help lists the options.
//
//   flashattn-compare                                  # B=1 H=8 S=1024 D=64 f32
//   flashattn-compare --dtype bf16 --seqlen 512,1024,2048,4096 --causal --plot s.svg
//   flashattn-compare --backward --kv-heads 2 --json out.json
//   flashattn-compare --seqlen-q 1 --seqlen-kv 8192 --heads-q 32 --heads-kv 8 --paged 64
//                                                      # decode against a paged cache
//
// Exit status: 0 when every backend that ran is within tolerance, 1 when one is not
// or a backend failed with an error (skips do not count), 2 for a bad command line.
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "common/flops.hpp"
#include "common/oracle.hpp"
#include "common/problem.hpp"
#include "compare/args.hpp"
#include "compare/json.hpp"
#include "compare/problems.hpp"
#include "compare/runner.hpp"
#include "compare/svg.hpp"
#include "compare/table.hpp"

namespace {

constexpr int kExitFailure = 1;  // a backend outside tolerance, or an error
constexpr int kExitBadArguments = 2;

std::string describe(const compare::Options& o, const bench::Problem& first) {
  const flash::AttentionDesc& d = o.base;
  std::string text = std::string(o.backward ? "backward" : "forward") + " " +
                     flash::to_string(d.dtype) + "  H=" + std::to_string(d.heads_q) +
                     " Hkv=" + std::to_string(d.heads_kv) + " D=" + std::to_string(d.head_dim);
  if (bench::value_dim(d) != d.head_dim) text += " Dv=" + std::to_string(bench::value_dim(d));
  text += "  mask: " + bench::mask_label(d);
  const std::string layout = bench::layout_label(first.desc());
  if (!layout.empty()) text += "  " + layout;
  return text;
}

compare::LinePlot make_plot(const compare::Options& o, const bench::Problem& first,
                            const std::vector<compare::Row>& rows) {
  compare::LinePlot plot;
  plot.title = "libflashattn " + std::string(flash::version()) + ": " + describe(o, first);
  plot.x_label = "seqlen (query)";
  plot.y_label = o.backward ? "backward TFLOP/s" : "forward TFLOP/s";
  plot.log2_x = true;
  std::map<std::string, size_t> index;
  for (const compare::Row& r : rows) {
    if (!r.ok()) continue;
    // The reference is timed on the sample it checked, not on the whole problem.
    const std::string name = r.is_oracle ? r.backend + " (on checked sample)" : r.backend;
    auto [it, added] = index.emplace(name, plot.series.size());
    if (added) plot.series.push_back({name, {}});
    plot.series[it->second].points.emplace_back(static_cast<double>(r.desc.seqlen_q), r.tflops);
  }
  return plot;
}

}  // namespace

int main(int argc, char** argv) {
  compare::Options options;
  try {
    options = compare::parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashattn-compare: %s\n", e.what());
    return kExitBadArguments;
  }

  // Every point's problem, kept to the end: rows point at their inference arrays.
  std::vector<bench::Problem> problems;
  for (int64_t seqlen : options.seqlens) problems.push_back(compare::make_problem(options, seqlen));

  std::printf("libflashattn %s  |  %s\n", flash::version(),
              describe(options, problems.front()).c_str());
  for (const flash::BackendInfo& info : flash::backends())
    std::printf("  %-9s %s\n", flash::to_string(info.backend),
                info.available ? info.detail.c_str() : ("unavailable: " + info.reason).c_str());
  std::printf("\n");

  compare::Runner runner(options);
  std::vector<compare::Row> rows;
  std::vector<std::string> coverage_notes;
  const size_t points = problems.size();
  for (size_t i = 0; i < points; ++i) {
    const flash::AttentionDesc desc = problems[i].desc();
    const std::string prefix = "[" + std::to_string(i + 1) + "/" + std::to_string(points) +
                               "] B=" + std::to_string(desc.batch) +
                               " Sq=" + std::to_string(desc.seqlen_q) +
                               " Sk=" + std::to_string(desc.seqlen_kv);
    std::vector<compare::Row> point_rows = runner.run(desc, prefix);
    for (const compare::Row& r : point_rows)
      if (!r.check.coverage.empty()) {
        coverage_notes.push_back("Sq=" + std::to_string(desc.seqlen_q) + ": " + r.check.coverage);
        break;
      }
    rows.insert(rows.end(), point_rows.begin(), point_rows.end());
  }
  compare::clear_progress();

  compare::print_table(stdout, rows);
  std::printf(
      "\nTFLOP/s: FlashAttention's count (4*B*H*Sq*Sk*D forward, half for square causal, "
      "backward 2.5x).\n"
      "max rel err: max|out - reference| / max|reference| over the checked rows (worst of "
      "o, or of dq, dk, dv).\n"
      "tol used: error / (2 x error of naive attention in %s + %.0e x max|reference|), "
      "the tests' rule.\n",
      flash::to_string(options.base.dtype), bench::relative_epsilon(options.base.dtype));
  if (options.copy_ceiling)
    std::printf(
        "K+V GB/s: K and V rows each sequence sees, read once, over the kv heads (a cache's "
        "unused rows and other pages not counted).\n"
        "copy GB/s: the same device copying as many bytes (read + write), measured in this "
        "run; of copy = K+V GB/s / copy GB/s.\n");
  for (const std::string& note : coverage_notes) std::printf("checked: %s\n", note.c_str());

  int status = 0;
  for (const compare::Row& r : rows) {
    if (r.ok() && r.check.checked && !(r.check.tolerance_used <= 1.0)) {
      std::fprintf(stderr, "flashattn-compare: %s exceeds its tolerance at Sq=%lld\n",
                   r.backend.c_str(), static_cast<long long>(r.desc.seqlen_q));
      status = kExitFailure;
    }
    if (r.status.rfind("error:", 0) == 0) status = kExitFailure;  // skips are not failures
  }
  try {
    if (!options.json_path.empty()) {
      compare::write_json(options.json_path, rows);
      std::printf("wrote %s\n", options.json_path.c_str());
    }
    if (!options.plot_path.empty()) {
      compare::write_svg(options.plot_path, make_plot(options, problems.front(), rows));
      std::printf("wrote %s\n", options.plot_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashattn-compare: %s\n", e.what());
    return kExitBadArguments;
  }
  return status;
}
