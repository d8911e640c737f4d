#include "common/timing.hpp"

#include <algorithm>

namespace bench {

std::vector<double> time_calls(Device& device, const TimingPlan& plan,
                               const std::function<void()>& fn) {
  for (int i = 0; i < plan.warmup; ++i) fn();
  device.synchronize();
  std::vector<double> times;
  double spent_ms = 0.0;
  while (static_cast<int>(times.size()) < plan.max_runs &&
         (times.empty() || spent_ms < plan.max_seconds * 1e3)) {
    device.evict_cache();
    const double ms = device.time_ms(fn);
    times.push_back(ms);
    spent_ms += ms;
  }
  return times;
}

std::vector<double> time_workload(Workload& workload, Device& device, const TimingPlan& plan) {
  workload.prepare();
  return time_calls(device, plan, [&] { workload.run(); });
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  if (values.size() % 2) return values[mid];
  const double upper = values[mid];
  return (upper +
          *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid))) /
         2;
}

}  // namespace bench
