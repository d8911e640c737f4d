// The bandwidth ceiling of a memory-bound call (decode): the device copying the same
// number of bytes, measured in the same run. A copy of N/2 bytes reads N/2 and writes
// N/2, so its rate in "bytes moved per second" compares directly with a kernel that
// reads N bytes (decode's K and V): "of copy" = kernel rate / copy rate.
// GPU: cudaMemcpyAsync device to device; host: memcpy over all hardware threads
// (Device::copy_bytes). Timed like the kernels: cache evicted before each call, median.
#pragma once

#include "common/device.hpp"
#include "common/timing.hpp"

namespace bench {

// GB/s (1e9 bytes per second) of moving bytes_moved bytes through a device copy.
// Allocates two buffers of bytes_moved / 2 on the device for the measurement.
double copy_gbps(Device& device, double bytes_moved, const TimingPlan& plan);

}  // namespace bench
