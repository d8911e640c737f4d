// Descriptor validation and resolution: the only place that decides whether a
// call's arguments are acceptable. Every backend receives the resolved problem.
#pragma once

#include "dispatch/module_abi.h"
#include "flash/flash.hpp"

namespace flash::detail {

struct ForwardArgs {
  const void* q;
  const void* k;
  const void* v;
  void* o;
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

struct MergeArgs {
  const void* o_parts;
  const float* lse_parts;
  void* o;
  float* lse;
};

// Throws flash::Error naming the field, the value and what is allowed. Returns the
// problem with head_dim_v, scale and every stride filled in.
flash_problem validate_forward(const AttentionDesc& desc, const ForwardArgs& args);
flash_problem validate_backward(const AttentionDesc& desc, const BackwardArgs& args);
flash_problem validate_merge(const AttentionDesc& desc, int64_t parts, const MergeArgs& args);

// The descriptor alone (no pointers): what explain() needs.
flash_problem validate_descriptor(const AttentionDesc& desc);

// True when the call has no work (seqlen_q == 0 or batch == 0).
bool is_empty(const flash_problem& p);

}  // namespace flash::detail
