// The case grid of the cross-backend suite, and the inputs + expectations of one
// case in one dtype (built once, cached, shared by every backend).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dispatch/module_abi.h"
#include "flash/flash.hpp"
#include "reference/naive.hpp"
#include "reference/reference.hpp"
#include "tensor.hpp"

namespace flash::test {

struct Case {
  std::string name;
  int64_t batch, seqlen_q, seqlen_kv, heads_q, heads_kv, head_dim, head_dim_v;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0;
  float scale = 0;
  Layout layout = Layout::packed;
  double amplitude = 1.0;  // inputs uniform in [-amplitude, amplitude]
};

const std::vector<Case>& forward_cases();
const std::vector<Case>& backward_cases();

// Inputs of a case and the reference / naive-in-dtype results for them.
struct Prepared {
  AttentionDesc desc;           // lse left null: the test supplies its own buffer
  flash_problem problem{};      // the same problem, resolved, for the reference
  HostTensor q, k, v, o, dout;  // o: forward output layout; in backward, o = reference o
  std::vector<float> lse;       // backward input: reference lse in f32
  reference::ForwardResult ref, naive;
  reference::BackwardResult ref_grad, naive_grad;
};

// Built on first use for (case, dtype, backward) and cached for the process.
const Prepared& prepare(const Case& c, DType dtype, bool backward);

// The descriptor's sizes, dtype, mask, scale (0: 1/sqrt(head_dim)) and softcap as a
// flash_problem; strides and the inference fields are left to the caller.
flash_problem problem_fields(const AttentionDesc& d);

// A flash_problem for the descriptor + tensors (what validation would resolve).
flash_problem resolve(const AttentionDesc& d, const HostTensor& q, const HostTensor& k,
                      const HostTensor& v, const HostTensor& o);

}  // namespace flash::test
