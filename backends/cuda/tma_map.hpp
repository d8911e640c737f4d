// Host side of the bulk tensor copies (tma_ops.cuh): a tensor map describing one
// [batch, rows, heads, cols] tensor of 16-bit elements with the descriptor's strides,
// read in boxes of 64 columns (128 bytes, the 128-byte swizzle's span) x box_rows rows.
// The driver's cuTensorMapEncodeTiled is reached through the runtime's
// cudaGetDriverEntryPointByVersion, so the module still links only the driver.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.hpp"

namespace flash::cuda {

constexpr int kTmaBoxCols = 64;  // 128 bytes of 16-bit elements: one SW128 column atom

struct TileMapShape {
  const void* base;
  bool bf16;                                      // else f16
  int64_t cols, rows, heads, batch;               // extents (cols = the real head dim)
  int64_t row_stride, head_stride, batch_stride;  // elements
  int box_rows;
};

inline CUtensorMap make_tile_map(const TileMapShape& s) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                cudaEnableDefault, &found),
               "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw flash::detail::RuntimeFailure(
          "cuda backend: the driver has no cuTensorMapEncodeTiled (needs CUDA 12 drivers)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  // A dimension of extent 1 still needs a valid stride (a multiple of 16 bytes).
  const auto stride_bytes = [](int64_t elems, int64_t fallback) {
    const int64_t b = elems * 2;
    return static_cast<cuuint64_t>(b > 0 ? b : fallback);
  };
  const cuuint64_t row_bytes = stride_bytes(s.row_stride, 16);
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(s.cols), static_cast<cuuint64_t>(s.rows),
                              static_cast<cuuint64_t>(s.heads), static_cast<cuuint64_t>(s.batch)};
  const cuuint64_t strides[3] = {row_bytes, stride_bytes(s.head_stride, row_bytes),
                                 stride_bytes(s.batch_stride, row_bytes)};
  const cuuint32_t box[4] = {kTmaBoxCols, static_cast<cuuint32_t>(s.box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult r =
      encode(&map, s.bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
             const_cast<void*>(s.base), dims, strides, box, elem_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw flash::detail::RuntimeFailure(
        "cuda backend: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(r) +
        ") for a tensor of " + std::to_string(s.rows) + " rows x " + std::to_string(s.cols) +
        " columns, row stride " + std::to_string(s.row_stride) + " elements");
  return map;
}

}  // namespace flash::cuda
