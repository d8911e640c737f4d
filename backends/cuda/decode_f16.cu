// Split-KV decode instantiations for f16 (decode_kernel.cuh): head dims 64/128/256 x
// query rows per block 4/16.
#include "decode.hpp"
#include "decode_kernel.cuh"

namespace flash::cuda {

template <>
void launch_decode<Dtype::f16>(const DecodeParams& dp, int dim, int rows, int batch,
                               cudaStream_t stream) {
  const bool small = rows == kDecodeRowsSmall;
  switch (dim) {
    case 64:
      return small ? launch_decode_shape<__half, 64, kDecodeRowsSmall>(dp, batch, stream)
                   : launch_decode_shape<__half, 64, kDecodeRowsLarge>(dp, batch, stream);
    case 128:
      return small ? launch_decode_shape<__half, 128, kDecodeRowsSmall>(dp, batch, stream)
                   : launch_decode_shape<__half, 128, kDecodeRowsLarge>(dp, batch, stream);
    default:
      return small ? launch_decode_shape<__half, 256, kDecodeRowsSmall>(dp, batch, stream)
                   : launch_decode_shape<__half, 256, kDecodeRowsLarge>(dp, batch, stream);
  }
}

}  // namespace flash::cuda
