// Launchers of the hip backend's kernels; hip_backend.cpp calls these after choose().
// Each returns the runtime's error code of the launch (kernels run asynchronously on
// `stream`). dtype is FLASH_F32 / FLASH_F16 / FLASH_BF16; pointers are device memory.
#pragma once

#include "dispatch/module_abi.h"
#include "kernel_problem.h"
#include "portability.h"

namespace flash::hip {

struct ForwardArgs {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // may be null
  // Split-KV (p.kv_splits > 1): the kernels write f32 partials here instead of o / lse
  // (layout: partial_o_rows / partial_lse_rows, kernel_problem.h); launch_split_merge
  // then writes o / lse.
  float* o_partial;
  float* lse_partial;
};

struct BackwardArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* dout;
  const float* lse;
  void* dq;
  void* dk;
  void* dv;
};

// Portable path (plain FMA, any wave size): every dtype, head dims up to
// kPortableMaxHeadDim (portable_tiles.h).
gpu::Error launch_portable_forward(const KernelProblem& p, int dtype, const ForwardArgs& a,
                                   gpu::Stream stream);
// Decode (portable_decode.hip): `rows` = kDecodeRowsSmall or kDecodeRowsLarge packed rows of
// one kv head per block (portable_tiles.h: decode_rows).
gpu::Error launch_portable_decode(const KernelProblem& p, int dtype, int rows, const ForwardArgs& a,
                                  gpu::Stream stream);
gpu::Error launch_portable_backward(const KernelProblem& p, int dtype, const BackwardArgs& a,
                                    gpu::Stream stream);

// merge_partials: sizes of desc, o strides, parts; cu_seqlens_q (device) may be null.
struct MergeProblem {
  int64_t batch, seqlen_q, heads_q, head_dim_v, parts;
  int64_t o_stride[3];
  const int32_t* cu_seqlens_q;
};

struct MergeArgs {
  const void* o_parts;
  const float* lse_parts;
  void* o;
  float* lse;  // may be null
};

gpu::Error launch_portable_merge(const MergeProblem& p, int dtype, const MergeArgs& a,
                                 gpu::Stream stream);

// The second launch of a split-KV forward: o / lse of every row from the p.kv_splits
// partials in a.o_partial / a.lse_partial (the same merge as merge_partials).
gpu::Error launch_split_merge(const KernelProblem& p, int dtype, const ForwardArgs& a,
                              gpu::Stream stream);

#if FLASHATTN_HIP_MFMA
// CDNA path (MFMA 32x32x8, wave64): f16 / bf16, head dims up to kMfmaMaxHeadDim
// (mfma_tiles.h). Compiled only by hipcc for gfx90a / gfx908.
gpu::Error launch_mfma_forward(const KernelProblem& p, int dtype, const ForwardArgs& a,
                               gpu::Stream stream);
gpu::Error launch_mfma_backward(const KernelProblem& p, int dtype, const BackwardArgs& a,
                                gpu::Stream stream);
#endif

}  // namespace flash::hip
