// Read flush of the GPU's L2 (l2_flush.cu): reads `bytes` of `buffer` (never written by
// the bench, so the lines it leaves in L2 are clean) on `stream`, over a grid sized for
// `sms` multiprocessors (queried once by the caller, not per flush).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace bench {

cudaError_t read_flush(const void* buffer, size_t bytes, int sms, unsigned* sink,
                       cudaStream_t stream);

}  // namespace bench
