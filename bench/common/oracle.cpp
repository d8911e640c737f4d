#include "common/oracle.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "common/dtype.hpp"
#include "common/flops.hpp"
#include "common/problem.hpp"
#include "reference/dtype.hpp"
#include "reference/naive.hpp"

namespace bench {
namespace {

// Row blocks are taken from at most the first and the last slice: the corners where
// masks and tails are most likely to go wrong.
constexpr int64_t kRowBlockSlices = 2;

int64_t group_size(const flash::AttentionDesc& d) { return d.heads_q / d.heads_kv; }

// The reference sub-problem for rows [r0, r1) and keys [0, keys) of one slice.
flash::AttentionDesc sub_problem(const flash::AttentionDesc& d, int64_t rows, int64_t keys) {
  flash::AttentionDesc s = d;
  s.batch = 1;
  s.seqlen_q = rows;
  s.seqlen_kv = keys;
  s.heads_q = group_size(d);
  s.heads_kv = 1;
  s.head_dim_v = value_dim(d);
  s.dtype = flash::DType::f32;
  s.q_stride = s.k_stride = s.v_stride = s.o_stride = flash::Strides{};
  s.lse = nullptr;
  s.backend = flash::Backend::reference;
  s.stream = nullptr;
  return s;
}

double reference_work(const flash::AttentionDesc& d, int64_t rows, int64_t keys, bool backward) {
  const flash::AttentionDesc s = sub_problem(d, rows, keys);
  return forward_flops(s) + (backward ? backward_flops(s) : 0.0);
}

// Copies rows [r0, r0 + rows) of heads [h0, h0 + heads) of batch entry b from a packed
// [B, S, H, dim] tensor in dtype into a packed f32 [rows, heads, dim] tensor.
std::vector<float> gather(const std::vector<unsigned char>& src, flash::DType dtype, int64_t S,
                          int64_t H, int64_t dim, int64_t b, int64_t r0, int64_t rows, int64_t h0,
                          int64_t heads) {
  std::vector<float> out(static_cast<size_t>(rows * heads * dim));
  size_t o = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = static_cast<size_t>(((b * S + r0 + i) * H + h0 + h) * dim);
      for (int64_t x = 0; x < dim; ++x) out[o++] = load_as_float(src.data(), base + x, dtype);
    }
  return out;
}

// Running max|out - expected| and max|expected| of one output.
struct ErrorStats {
  double max_error = 0.0, max_expected = 0.0;

  void add(float out, float expected) {
    const double diff = std::fabs(static_cast<double>(out) - expected);
    // NaN compares false: a NaN or unwritten element is an infinite error.
    max_error = diff <= max_error
                    ? max_error
                    : (std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff);
    max_expected = std::max(max_expected, std::fabs(static_cast<double>(expected)));
  }
  double relative() const { return max_expected > 0.0 ? max_error / max_expected : max_error; }
};

// Compares expected [rows, heads, dim] with rows [r0, ...) of heads [h0, ...) of
// batch entry b in the packed [B, S, H, dim] output.
void compare(const std::vector<float>& out, const std::vector<float>& expected, int64_t S,
             int64_t H, int64_t dim, int64_t b, int64_t r0, int64_t rows, int64_t h0, int64_t heads,
             ErrorStats& stats) {
  size_t e = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = static_cast<size_t>(((b * S + r0 + i) * H + h0 + h) * dim);
      for (int64_t x = 0; x < dim; ++x) stats.add(out[base + x], expected[e++]);
    }
}

// max_difference = max(max_difference, max|a - b|); NaN in a counts as infinite.
void track_max_difference(const std::vector<float>& a, const std::vector<float>& b,
                          double& max_difference) {
  ErrorStats stats;
  stats.max_error = max_difference;
  for (size_t i = 0; i < a.size(); ++i) stats.add(a[i], b[i]);
  max_difference = stats.max_error;
}

// Naive attention in the dtype under test (reference/naive.hpp, the one the tests use)
// on an f32 sub-problem: its inputs hold values of that dtype, so they are stored in it
// exactly. Results come back packed like the sub-problem's, as f32.
struct NaiveInputs {
  flash_problem p{};
  std::vector<std::vector<unsigned char>> stored;
  const void* add(const std::vector<float>& x) {
    stored.emplace_back(x.size() * (p.dtype == FLASH_F32 ? 4 : 2));
    for (size_t i = 0; i < x.size(); ++i)
      flash::reference::store(stored.back().data(), p.dtype, i, x[i]);
    return stored.back().data();
  }
};

NaiveInputs naive_inputs(const flash::AttentionDesc& sub, flash::DType dtype) {
  NaiveInputs in;
  flash_problem& p = in.p;
  p.batch = 1;
  p.seqlen_q = sub.seqlen_q;
  p.seqlen_kv = sub.seqlen_kv;
  p.heads_q = sub.heads_q;
  p.heads_kv = sub.heads_kv;
  p.head_dim = sub.head_dim;
  p.head_dim_v = sub.head_dim_v ? sub.head_dim_v : sub.head_dim;
  p.dtype = static_cast<int32_t>(dtype);
  p.causal = sub.causal;
  p.scale = sub.scale > 0 ? sub.scale : static_cast<float>(1.0 / std::sqrt(double(sub.head_dim)));
  p.softcap = sub.softcap;
  p.window_left = sub.window_left;
  p.window_right = sub.window_right;
  const auto packed = [](int64_t* st, int64_t rows, int64_t heads, int64_t dim) {
    st[2] = dim;
    st[1] = heads * dim;
    st[0] = rows * heads * dim;
  };
  packed(p.q_stride, p.seqlen_q, p.heads_q, p.head_dim);
  packed(p.o_stride, p.seqlen_q, p.heads_q, p.head_dim_v);
  packed(p.k_stride, p.seqlen_kv, p.heads_kv, p.head_dim);
  packed(p.v_stride, p.seqlen_kv, p.heads_kv, p.head_dim_v);
  p.total_q = p.total_kv = -1;
  return in;
}

std::vector<float> as_float(const std::vector<double>& x) { return {x.begin(), x.end()}; }

std::vector<float> naive_forward(const flash::AttentionDesc& sub, flash::DType dtype,
                                 const std::vector<float>& q, const std::vector<float>& k,
                                 const std::vector<float>& v) {
  NaiveInputs in = naive_inputs(sub, dtype);
  const void* qs = in.add(q);
  const void* ks = in.add(k);
  const void* vs = in.add(v);
  return as_float(flash::reference::naive_forward(in.p, qs, ks, vs).o);
}

struct NaiveGradients {
  std::vector<float> dq, dk, dv;
};

NaiveGradients naive_backward(const flash::AttentionDesc& sub, flash::DType dtype,
                              const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, const std::vector<float>& dout) {
  NaiveInputs in = naive_inputs(sub, dtype);
  const void* qs = in.add(q);
  const void* ks = in.add(k);
  const void* vs = in.add(v);
  const void* ds = in.add(dout);
  const flash::reference::BackwardResult g = flash::reference::naive_backward(in.p, qs, ks, vs, ds);
  return {as_float(g.dq), as_float(g.dk), as_float(g.dv)};
}

}  // namespace

double relative_epsilon(flash::DType dtype) {
  switch (dtype) {
    case flash::DType::f32:
      return 1e-6;
    case flash::DType::f16:
      return 1e-4;
    case flash::DType::bf16:
      return 1e-3;
  }
  return 0.0;
}

Oracle::Oracle(const flash::AttentionDesc& desc, bool backward, const HostInputs& inputs,
               double flop_budget)
    : desc_(desc), backward_(backward) {
  // Slices rest on whole GQA groups; other invalid fields are left to the library,
  // whose flash::Error the reference's first call raises.
  if (desc.heads_kv <= 0 || desc.heads_q % desc.heads_kv != 0)
    throw flash::Error("flash: heads_q = " + std::to_string(desc.heads_q) +
                       " is invalid; must be a multiple of heads_kv = " +
                       std::to_string(desc.heads_kv) + " (GQA/MQA)");
  const int64_t Sq = desc.seqlen_q, Sk = desc.seqlen_kv;
  const int64_t slices = desc.batch * desc.heads_kv;
  const double slice_work = reference_work(desc, Sq, Sk, backward);
  auto slice_block = [&](int64_t index, int64_t r0, int64_t r1, int64_t keys) {
    return Block{index / desc.heads_kv, index % desc.heads_kv, r0, r1, keys, {}, {}, {}, {}};
  };
  std::ostringstream coverage;

  if (static_cast<double>(slices) * slice_work <= flop_budget) {
    for (int64_t i = 0; i < slices; ++i) blocks_.push_back(slice_block(i, 0, Sq, Sk));
    coverage << "all rows";
  } else if (slice_work <= flop_budget) {
    // Whole slices spread evenly over (batch, kv head), first and last included.
    const int64_t n = std::max<int64_t>(
        1, std::min<int64_t>(slices, static_cast<int64_t>(flop_budget / slice_work)));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t index = n == 1 ? 0 : i * (slices - 1) / (n - 1);
      blocks_.push_back(slice_block(index, 0, Sq, Sk));
    }
    coverage << n << " of " << slices << " (batch, kv-head) slices";
  } else {
    const bool can_drop_keys = desc.causal || desc.window_right == 0;
    const int64_t blocks_per_slice = can_drop_keys ? 3 : 1;
    const int64_t sampled_slices = std::min(slices, kRowBlockSlices);
    // Upper bound on a row's work: it sees at most all Sk keys.
    const double row_work = reference_work(desc, 1, Sk, backward);
    const int64_t rows = std::clamp<int64_t>(
        static_cast<int64_t>(flop_budget / (row_work * blocks_per_slice * sampled_slices)), 1, Sq);
    for (int64_t s = 0; s < sampled_slices; ++s) {
      const int64_t index = s == 0 ? 0 : slices - 1;
      blocks_.push_back(slice_block(index, Sq - rows, Sq, Sk));  // last rows, all keys
      if (!can_drop_keys) continue;
      for (int64_t r1 : {rows, (Sq + rows) / 2}) {  // first rows, middle rows
        const int64_t keys = Sk - Sq + r1;
        if (keys >= 1 && r1 < Sq) blocks_.push_back(slice_block(index, r1 - rows, r1, keys));
      }
    }
    coverage << (backward ? "dq only, " : "") << blocks_.size() << " blocks of " << rows
             << " rows in " << sampled_slices << " of " << slices << " slices";
  }
  coverage_ = coverage.str();
  for (Block& block : blocks_) solve(block, inputs);
}

void Oracle::solve(Block& block, const HostInputs& in) {
  const flash::AttentionDesc& d = desc_;
  const int64_t g = group_size(d), Dv = value_dim(d);
  const int64_t rows = block.row_end - block.row_begin;
  const flash::AttentionDesc sub = sub_problem(d, rows, block.keys);
  const int64_t h0 = block.kv_head * g;
  const std::vector<float> q = gather(in.q, d.dtype, d.seqlen_q, d.heads_q, d.head_dim, block.b,
                                      block.row_begin, rows, h0, g);
  const std::vector<float> k = gather(in.k, d.dtype, d.seqlen_kv, d.heads_kv, d.head_dim, block.b,
                                      0, block.keys, block.kv_head, 1);
  const std::vector<float> v =
      gather(in.v, d.dtype, d.seqlen_kv, d.heads_kv, Dv, block.b, 0, block.keys, block.kv_head, 1);
  block.o.assign(static_cast<size_t>(rows * g * Dv), 0.0f);

  using Clock = std::chrono::steady_clock;
  if (!backward_) {
    const auto start = Clock::now();
    flash::attention(sub, q.data(), k.data(), v.data(), block.o.data());
    reference_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    reference_flops_ += forward_flops(sub);
    track_max_difference(naive_forward(sub, d.dtype, q, k, v), block.o, naive_error_[kO]);
    return;
  }
  std::vector<float> lse(static_cast<size_t>(g * rows));
  flash::AttentionDesc forward = sub;
  forward.lse = lse.data();
  flash::attention(forward, q.data(), k.data(), v.data(), block.o.data());
  const std::vector<float> dout =
      gather(in.dout, d.dtype, d.seqlen_q, d.heads_q, Dv, block.b, block.row_begin, rows, h0, g);
  block.dq.assign(q.size(), 0.0f);
  block.dk.assign(k.size(), 0.0f);
  block.dv.assign(v.size(), 0.0f);
  const auto start = Clock::now();
  flash::attention_backward(sub, q.data(), k.data(), v.data(), block.o.data(), dout.data(),
                            lse.data(), block.dq.data(), block.dk.data(), block.dv.data());
  reference_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  reference_flops_ += backward_flops(sub);
  const NaiveGradients naive = naive_backward(sub, d.dtype, q, k, v, dout);
  track_max_difference(naive.dq, block.dq, naive_error_[kDq]);
  if (!whole_slice(block)) return;
  track_max_difference(naive.dk, block.dk, naive_error_[kDk]);
  track_max_difference(naive.dv, block.dv, naive_error_[kDv]);
}

CheckResult Oracle::check(Workload& workload) const {
  CheckResult result;
  result.coverage = coverage_;
  if (blocks_.empty()) return result;
  const flash::AttentionDesc& d = desc_;
  const int64_t g = group_size(d), Dv = value_dim(d);
  ErrorStats stats[kOutputs];
  if (!backward_) {
    const std::vector<float> o = workload.read_as_float(Tensor::o);
    for (const Block& b : blocks_)
      compare(o, b.o, d.seqlen_q, d.heads_q, Dv, b.b, b.row_begin, b.row_end - b.row_begin,
              b.kv_head * g, g, stats[kO]);
  } else {
    const std::vector<float> dq = workload.read_as_float(Tensor::dq);
    const std::vector<float> dk = workload.read_as_float(Tensor::dk);
    const std::vector<float> dv = workload.read_as_float(Tensor::dv);
    for (const Block& b : blocks_) {
      compare(dq, b.dq, d.seqlen_q, d.heads_q, d.head_dim, b.b, b.row_begin,
              b.row_end - b.row_begin, b.kv_head * g, g, stats[kDq]);
      if (!whole_slice(b)) continue;
      compare(dk, b.dk, d.seqlen_kv, d.heads_kv, d.head_dim, b.b, 0, d.seqlen_kv, b.kv_head, 1,
              stats[kDk]);
      compare(dv, b.dv, d.seqlen_kv, d.heads_kv, Dv, b.b, 0, d.seqlen_kv, b.kv_head, 1, stats[kDv]);
    }
  }
  // One magnitude for all outputs (as the tests): a gradient can be exactly zero
  // (e.g. dk of a key no row sees) while the backend's rounding is not.
  double magnitude = 0.0;
  for (const ErrorStats& s : stats) magnitude = std::max(magnitude, s.max_expected);
  const double eps = relative_epsilon(d.dtype) * magnitude;
  const double scale = magnitude > 0.0 ? magnitude : 1.0;
  result.checked = true;
  // Report the output that uses most of its bound.
  for (int t = 0; t < kOutputs; ++t) {
    const double bound = 2.0 * naive_error_[t] + eps;
    const double error = stats[t].max_error;
    const double used = bound > 0.0 ? error / bound : (error > 0.0 ? INFINITY : 0.0);
    if (t > 0 && !(used > result.tolerance_used)) continue;
    result.tolerance_used = used;
    result.relative_error = error / scale;
    result.tolerance = bound / scale;
  }
  return result;
}

}  // namespace bench
