// CUDA runtime status -> flash::detail::RuntimeFailure carrying the CUDA error string.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "dispatch/backend_adapter.hpp"

namespace flash::cuda {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw flash::detail::RuntimeFailure(std::string("cuda backend: ") + what +
                                        " failed: " + cudaGetErrorName(status) + " (" +
                                        cudaGetErrorString(status) + ")");
  }
}

}  // namespace flash::cuda
