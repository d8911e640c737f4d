// Split-KV decode instantiations for f32 (decode_kernel.cuh): head dims 64/128/256 x
// query rows per block 4/16.
#include "decode.hpp"
#include "decode_kernel.cuh"

namespace flash::cuda {

template <>
void launch_decode<Dtype::f32>(const DecodeParams& dp, int dim, int rows, int batch,
                               cudaStream_t stream) {
  const bool small = rows == kDecodeRowsSmall;
  switch (dim) {
    case 64:
      return small ? launch_decode_shape<float, 64, kDecodeRowsSmall>(dp, batch, stream)
                   : launch_decode_shape<float, 64, kDecodeRowsLarge>(dp, batch, stream);
    case 128:
      return small ? launch_decode_shape<float, 128, kDecodeRowsSmall>(dp, batch, stream)
                   : launch_decode_shape<float, 128, kDecodeRowsLarge>(dp, batch, stream);
    default:
      return small ? launch_decode_shape<float, 256, kDecodeRowsSmall>(dp, batch, stream)
                   : launch_decode_shape<float, 256, kDecodeRowsLarge>(dp, batch, stream);
  }
}

}  // namespace flash::cuda

namespace flash::cuda {

// Shapes of every dtype (host-only arithmetic on the DecodeShape constants).
DecodeShapeInfo decode_shape_info(Dtype dtype, int dim, int rows) {
  auto info = [](auto shape) {
    using S = decltype(shape);
    return DecodeShapeInfo{S::kWarps, S::kSmemBytes};
  };
  auto by_dim = [&](auto t) {
    using T = decltype(t);
    const bool small = rows == kDecodeRowsSmall;
    switch (dim) {
      case 64:
        return small ? info(DecodeShape<T, 64, kDecodeRowsSmall>{})
                     : info(DecodeShape<T, 64, kDecodeRowsLarge>{});
      case 128:
        return small ? info(DecodeShape<T, 128, kDecodeRowsSmall>{})
                     : info(DecodeShape<T, 128, kDecodeRowsLarge>{});
      default:
        return small ? info(DecodeShape<T, 256, kDecodeRowsSmall>{})
                     : info(DecodeShape<T, 256, kDecodeRowsLarge>{});
    }
  };
  if (dtype == Dtype::f32) return by_dim(float{});
  return by_dim(uint16_t{});  // f16 and bf16 share sizes
}

}  // namespace flash::cuda
