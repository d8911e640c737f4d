// Split-KV decode instantiations for f32 (decode_kernel.cuh): head dims 64/128/256 x
// query rows per block 4 or 16.
#include "decode.hpp"
#include "decode_mma_kernel.cuh"

namespace flash::cuda {

template <>
void launch_decode<Dtype::f32>(const DecodeParams& dp, int dim, int rows, int batch,
                               cudaStream_t stream) {
  launch_decode_for<float>(dp, dim, rows, batch, stream);
}

}  // namespace flash::cuda

namespace flash::cuda {

// Shapes of every dtype (host-only arithmetic on the DecodeShape constants).
DecodeShapeInfo decode_shape_info(Dtype dtype, int dim, int rows) {
  const auto info = [](auto shape) {
    using S = decltype(shape);
    return DecodeShapeInfo{S::kWarps, S::kSmemBytes, S::kKeys};
  };
  const bool small = rows == kDecodeRowsSmall;
  if (dtype == Dtype::f32) {
    switch (dim) {
      case 64:
        return small ? info(DecodeShape<float, 64, kDecodeRowsSmall>{})
                     : info(DecodeShape<float, 64, kDecodeRowsLarge>{});
      case 128:
        return small ? info(DecodeShape<float, 128, kDecodeRowsSmall>{})
                     : info(DecodeShape<float, 128, kDecodeRowsLarge>{});
      default:
        return small ? info(DecodeShape<float, 256, kDecodeRowsSmall>{})
                     : info(DecodeShape<float, 256, kDecodeRowsLarge>{});
    }
  }
  // f16 and bf16 share the tensor-core shapes.
  const bool two = rows == kDecodeRowsTwoTiles;
  switch (dim) {
    case 64:
      return two ? info(DecodeMmaShape<__half, 64, 2>{}) : info(DecodeMmaShape<__half, 64>{});
    case 128:
      return two ? info(DecodeMmaShape<__half, 128, 2>{}) : info(DecodeMmaShape<__half, 128>{});
    default:
      return info(DecodeMmaShape<__half, 256>{});
  }
}

}  // namespace flash::cuda
