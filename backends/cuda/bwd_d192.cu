// Backward kernels (f32, f16, bf16) for tile head dim 192.
#include "bwd_launch.cuh"

FLASH_INSTANTIATE_BACKWARD(192)
