// Split-KV decode instantiations for f16 (decode_mma_kernel.cuh): head dims 64/128/256 x
// query rows per block 16, and 32 at head dims 64 / 128 (17-64 rows: decode_plan.cu).
#include "decode.hpp"
#include "decode_mma_kernel.cuh"

namespace flash::cuda {

template <>
void launch_decode<Dtype::f16>(const DecodeParams& dp, int dim, int rows, int batch,
                               cudaStream_t stream) {
  launch_decode_for<__half>(dp, dim, rows, batch, stream);
}

}  // namespace flash::cuda
