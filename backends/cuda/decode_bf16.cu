// Split-KV decode instantiations for bf16 (decode_mma_kernel.cuh): head dims 64/128/256 x
// query rows per block 16, and 32 at head dims 64 / 128 (17-64 rows: decode_plan.cu).
#include "decode.hpp"
#include "decode_mma_kernel.cuh"

namespace flash::cuda {

template <>
void launch_decode<Dtype::bf16>(const DecodeParams& dp, int dim, int rows, int batch,
                                cudaStream_t stream) {
  launch_decode_for<__nv_bfloat16>(dp, dim, rows, batch, stream);
}

}  // namespace flash::cuda

namespace flash::cuda {

// f16 and bf16 share the tensor-core shapes: the bf16 kernels answer for both.
int decode_max_active_clusters(int dim, int rows, int cluster) {
  const bool two = rows == kDecodeRowsTwoTiles;
  switch (dim) {
    case 64:
      return two ? decode_max_active_clusters_for<__nv_bfloat16, 64, 2>(cluster)
                 : decode_max_active_clusters_for<__nv_bfloat16, 64, 1>(cluster);
    case 128:
      return two ? decode_max_active_clusters_for<__nv_bfloat16, 128, 2>(cluster)
                 : decode_max_active_clusters_for<__nv_bfloat16, 128, 1>(cluster);
    default:
      return decode_max_active_clusters_for<__nv_bfloat16, 256, 1>(cluster);
  }
}

}  // namespace flash::cuda
