// Split-KV decode instantiations for f16 (decode_mma_kernel.cuh): head dims 64/128/256 x
// query rows per block 16 (32 at head dims 64 / 128 with FLASH_CUDA_DECODE_ROWS=32).
#include "decode.hpp"
#include "decode_mma_kernel.cuh"

namespace flash::cuda {

template <>
void launch_decode<Dtype::f16>(const DecodeParams& dp, int dim, int rows, int batch,
                               cudaStream_t stream) {
  launch_decode_for<__half>(dp, dim, rows, batch, stream);
}

}  // namespace flash::cuda
