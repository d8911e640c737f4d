// Backward kernels for tile head dim 256: f32 only (the tensor-core backward stops at
// kBwdMmaMaxDim; choose() declines f16/bf16 here).
#include "bwd_launch.cuh"

FLASH_INSTANTIATE_BACKWARD(256)
