#include "compare/runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/copy_ceiling.hpp"
#include "common/flops.hpp"
#include "common/oracle.hpp"
#include "common/timing.hpp"
#include "common/workload.hpp"

namespace compare {
namespace {

constexpr double kGiga = 1e9, kTera = 1e12;
constexpr double kSecondsPerMs = 1e-3;

bool stderr_is_terminal() {
  static const bool tty = isatty(fileno(stderr)) != 0;
  return tty;
}

std::vector<flash::Backend> requested(const Options& o,
                                      const std::vector<flash::BackendInfo>& known) {
  if (!o.backends.empty()) return o.backends;
  std::vector<flash::Backend> all;
  for (const flash::BackendInfo& info : known) all.push_back(info.backend);
  return all;
}

Row blank_row(const flash::AttentionDesc& desc, flash::Backend backend, bool backward) {
  Row row;
  row.desc = desc;
  row.desc.backend = backend;
  row.backward = backward;
  row.backend = flash::to_string(backend);
  return row;
}

void fill_rates(Row& row, double median_ms) {
  const flash::AttentionDesc& d = row.desc;
  const double flops = row.backward ? bench::backward_flops(d) : bench::forward_flops(d);
  const double bytes = row.backward ? bench::backward_bytes(d) : bench::forward_bytes(d, false);
  row.median_ms = median_ms;
  if (median_ms <= 0) return;
  const double seconds = median_ms * kSecondsPerMs;
  row.tflops = flops / seconds / kTera;
  row.gbps = bytes / seconds / kGiga;
  row.kv_gbps = bench::kv_bytes_read(d) / seconds / kGiga;
}

std::string failure_status(const std::exception& e) {
  if (const auto* error = dynamic_cast<const flash::Error*>(&e))
    return (error->kind() == flash::Error::Kind::unsupported ? "skipped: " : "error: ") +
           std::string(e.what());
  return std::string("error: ") + e.what();
}

}  // namespace

void show_progress(const std::string& text) {
  if (stderr_is_terminal())
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
  else
    std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

void clear_progress() {
  if (stderr_is_terminal()) std::fprintf(stderr, "\r\033[K");
}

bench::Device* Runner::device(flash::Backend backend, std::string* why_not) {
  if (auto it = devices_.find(backend); it != devices_.end()) return it->second.get();
  if (auto it = device_failures_.find(backend); it != device_failures_.end()) {
    *why_not = it->second;
    return nullptr;
  }
  std::unique_ptr<bench::Device> opened = bench::open_device(backend, why_not);
  if (!opened) {
    device_failures_[backend] = *why_not;
    return nullptr;
  }
  return (devices_[backend] = std::move(opened)).get();
}

std::vector<Row> Runner::run(const flash::AttentionDesc& desc, const std::string& prefix) {
  const bool backward = options_.backward;
  const std::vector<flash::BackendInfo> known = flash::backends();
  std::vector<Row> rows;
  std::map<bench::Device*, double> copy_rates;  // GB/s of each device's copy

  show_progress(prefix + ": inputs and reference");
  const bench::HostInputs inputs = bench::make_host_inputs(desc, backward, options_.seed);
  std::unique_ptr<bench::Oracle> oracle;
  std::string oracle_failure;
  if (options_.check_budget_gflop > 0) {
    try {
      oracle = std::make_unique<bench::Oracle>(desc, backward, inputs,
                                               options_.check_budget_gflop * kGiga);
    } catch (const std::exception& e) {
      oracle_failure = failure_status(e);
    }
  } else {
    oracle_failure = "skipped: --check-budget 0 (no reference run)";
  }

  for (flash::Backend backend : requested(options_, known)) {
    Row row = blank_row(desc, backend, backward);
    const auto info = std::find_if(known.begin(), known.end(), [&](const flash::BackendInfo& i) {
      return i.backend == backend;
    });
    if (info == known.end()) {
      row.status = "skipped: not known to this build of libflashattn";
    } else if (!info->available) {
      row.status = "skipped: " + info->reason;
    } else if (backend == flash::Backend::reference) {
      // The reference's row is the oracle itself, timed on the sample it solved.
      row.is_oracle = true;
      if (!oracle) {
        row.status = oracle_failure;
      } else if (!oracle->checked()) {
        row.status = "skipped: reference too slow for this size (" + oracle->coverage() + ")";
      } else {
        row.status = "ok";
        row.kernel = info->detail + " [" + oracle->coverage() + "]";
        row.runs = 1;
        row.median_ms = row.min_ms = oracle->reference_ms();
        row.tflops = oracle->reference_flops() / (row.median_ms * kSecondsPerMs) / kTera;
        row.check.coverage = oracle->coverage();
      }
    } else {
      show_progress(prefix + ": " + row.backend);
      std::string why_not;
      bench::Device* dev = device(backend, &why_not);
      if (!dev) {
        row.status = "skipped: " + why_not;
      } else {
        try {
          bench::Workload workload(row.desc, backward, *dev, inputs);
          bench::TimingPlan plan;
          plan.max_runs = options_.iters;
          plan.max_seconds = options_.max_seconds;
          const std::vector<double> times = bench::time_workload(workload, *dev, plan);
          row.status = "ok";
          // The kernel/config the backend's choose() picked for exactly this problem.
          row.kernel = flash::explain(row.desc, backward).kernel;
          row.runs = static_cast<int>(times.size());
          row.min_ms = *std::min_element(times.begin(), times.end());
          fill_rates(row, bench::median(times));
          if (oracle) row.check = oracle->check(workload);
          if (options_.copy_ceiling) {
            // Once per device and problem, with the bytes this problem reads.
            auto [it, added] = copy_rates.emplace(dev, 0.0);
            if (added) it->second = bench::copy_gbps(*dev, bench::kv_bytes_read(desc), plan);
            row.copy_gbps = it->second;
          }
        } catch (const std::exception& e) {
          row.status = failure_status(e);
        }
      }
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace compare
