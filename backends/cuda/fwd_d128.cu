// Forward kernels (f32, f16, bf16) for tile head dim 128.
#include "fwd_launch.cuh"

FLASH_INSTANTIATE_FORWARD(128)
