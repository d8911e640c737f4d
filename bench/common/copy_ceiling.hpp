// The bandwidth ceiling of a memory-bound call (decode): the device copying the same
// number of bytes, at least 2 GiB (its sustained rate), measured in the same run. A
// copy of N/2 bytes reads N/2 and writes N/2, so its rate in "bytes moved per second"
// compares directly with a kernel that reads N bytes (decode's K and V): "of copy" =
// kernel rate / copy rate.
// GPU: cudaMemcpyAsync device to device; host: memcpy over all hardware threads
// (Device::copy_bytes). Timed like the kernels: cache evicted before each call, median.
#pragma once

#include "common/device.hpp"
#include "common/timing.hpp"

namespace bench {

constexpr double kMinCopyBytesMoved = 2.0 * (1 << 30);

// GB/s (1e9 bytes per second) of moving max(bytes_moved, kMinCopyBytesMoved) through a
// device copy. Allocates two buffers of half that for the measurement (callers that
// time many problems keep the result per size: every size below the minimum is one).
double copy_gbps(Device& device, double bytes_moved, const TimingPlan& plan);

}  // namespace bench
