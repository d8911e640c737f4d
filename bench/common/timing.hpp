// Repeated timing of a workload: warm-up, then N timed calls, each after the device's
// cache was evicted, so no call finds the previous call's inputs in L2.
#pragma once

#include <functional>
#include <vector>

#include "common/device.hpp"
#include "common/workload.hpp"

namespace bench {

struct TimingPlan {
  int warmup = 1;            // untimed calls first: module load, allocation, clocks
  int max_runs = 10;         // timed calls at most
  double max_seconds = 2.0;  // stop earlier once this much was spent (at least 1 run)
};

// Milliseconds of each timed call of fn (work it queues on device.stream()), in call
// order, after plan.warmup untimed calls.
std::vector<double> time_calls(Device& device, const TimingPlan& plan,
                               const std::function<void()>& fn);

// time_calls of workload.run(), after workload.prepare().
std::vector<double> time_workload(Workload& workload, Device& device, const TimingPlan& plan);

double median(std::vector<double> values);

}  // namespace bench
