#include "common/copy_ceiling.hpp"

#include <algorithm>

namespace bench {

double copy_gbps(Device& device, double bytes_moved, const TimingPlan& plan) {
  // Every copy moves at least kMinCopyBytesMoved: the device's sustained rate, not a
  // small copy's launch latency or, on a GPU, the writes that stay in L2 past the timed
  // call (up to the L2 size, uncharged after a read flush: a few % of 2 GiB).
  bytes_moved = std::max(bytes_moved, kMinCopyBytesMoved);
  // Whole 64-byte lines.
  constexpr size_t kLine = 64;
  const size_t half = static_cast<size_t>(bytes_moved / 2) / kLine * kLine;
  DeviceBuffer src(device, half), dst(device, half);
  device.fill_bytes(src.data(), 0, half);  // touched once, so the host copy does not fault
  device.fill_bytes(dst.data(), 0, half);
  const double ms =
      median(time_calls(device, plan, [&] { device.copy_bytes(dst.data(), src.data(), half); }));
  return ms > 0 ? 2.0 * static_cast<double>(half) / (ms * 1e-3) / 1e9 : 0.0;
}

}  // namespace bench
