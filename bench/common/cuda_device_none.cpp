// Stand-in for cuda_device.cpp when the bench is built without the CUDA toolkit.
#include "common/device.hpp"

namespace bench {

std::unique_ptr<Device> open_cuda_device(std::string* why_not) {
  if (why_not) *why_not = "skipped: bench built without CUDA toolkit (no device memory or events)";
  return nullptr;
}

}  // namespace bench
