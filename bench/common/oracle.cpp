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
#include "common/sequences.hpp"
#include "reference/dtype.hpp"
#include "reference/naive.hpp"

namespace bench {
namespace {

// Row blocks are taken from at most the first and the last slice: the corners where
// masks and tails are most likely to go wrong.
constexpr int64_t kRowBlockSlices = 2;

int64_t group_size(const flash::AttentionDesc& d) { return d.heads_q / d.heads_kv; }

// The reference sub-problem for rows [r0, r1) and keys [0, keys) of one slice: dense,
// whatever layout the sequence has in the problem's tensors (gathered into it).
flash::AttentionDesc sub_problem(const flash::AttentionDesc& d, int64_t rows, int64_t keys) {
  flash::AttentionDesc s = d;
  s.cu_seqlens_q = s.cu_seqlens_kv = s.seqlens_kv = s.block_table = nullptr;
  s.page_size = s.pages_per_seq = s.num_pages = 0;
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

// Rows of the q/o (or dq) buffers that hold rows [r0, r0 + count) of sequence b.
std::vector<int64_t> query_rows(const flash::AttentionDesc& d, int64_t b, int64_t r0,
                                int64_t count) {
  std::vector<int64_t> rows(static_cast<size_t>(count));
  const int64_t begin = sequence_rows(d, b).q_begin + r0;
  for (int64_t i = 0; i < count; ++i) rows[static_cast<size_t>(i)] = begin + i;
  return rows;
}

// Rows of the k/v (or dk/dv) buffers that hold keys [0, count) of sequence b.
std::vector<int64_t> key_rows(const flash::AttentionDesc& d, int64_t b, int64_t count) {
  std::vector<int64_t> rows(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) rows[static_cast<size_t>(j)] = key_row(d, b, j);
  return rows;
}

// Copies the given rows, heads [h0, h0 + heads), of a packed [rows, H, dim] tensor in
// dtype into a packed f32 [rows.size(), heads, dim] tensor.
std::vector<float> gather(const std::vector<unsigned char>& src, flash::DType dtype, int64_t H,
                          int64_t dim, const std::vector<int64_t>& rows, int64_t h0,
                          int64_t heads) {
  std::vector<float> out(rows.size() * static_cast<size_t>(heads * dim));
  size_t o = 0;
  for (int64_t row : rows)
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = static_cast<size_t>((row * H + h0 + h) * dim);
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

// Compares expected [rows.size(), heads, dim] with the given rows, heads [h0, ...), of
// the packed [rows, H, dim] output.
void compare(const std::vector<float>& out, const std::vector<float>& expected, int64_t H,
             int64_t dim, const std::vector<int64_t>& rows, int64_t h0, int64_t heads,
             ErrorStats& stats) {
  size_t e = 0;
  for (int64_t row : rows)
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = static_cast<size_t>((row * H + h0 + h) * dim);
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
  // The reference's own checks first (sizes, GQA, inference fields and the host arrays'
  // contents, forward-only fields in a backward): the samples below rest on them.
  flash::AttentionDesc as_reference = desc;
  as_reference.backend = flash::Backend::reference;
  as_reference.stream = nullptr;
  as_reference.lse = nullptr;
  flash::explain(as_reference, backward);

  const int64_t slices = desc.batch * desc.heads_kv;
  auto slice_block = [&](int64_t index, int64_t r0, int64_t r1, int64_t keys) {
    return Block{index / desc.heads_kv, index % desc.heads_kv, r0, r1, keys, {}, {}, {}, {}};
  };
  auto sequence_of = [&](int64_t index) { return sequence_rows(desc, index / desc.heads_kv); };
  auto slice_work = [&](int64_t index) {
    const SequenceRows s = sequence_of(index);
    return reference_work(desc, s.q_len, s.kv_len, backward);
  };
  // Slices of sequences with no query rows have nothing to check.
  std::vector<int64_t> candidates;
  double total_work = 0.0, max_work = 0.0;
  for (int64_t i = 0; i < slices; ++i) {
    if (sequence_of(i).q_len == 0) continue;
    candidates.push_back(i);
    total_work += slice_work(i);
    max_work = std::max(max_work, slice_work(i));
  }
  const int64_t n_candidates = static_cast<int64_t>(candidates.size());
  std::ostringstream coverage;

  if (total_work <= flop_budget) {
    for (int64_t i : candidates) {
      const SequenceRows s = sequence_of(i);
      blocks_.push_back(slice_block(i, 0, s.q_len, s.kv_len));
    }
    coverage << "all rows";
  } else if (max_work <= flop_budget) {
    // Whole slices spread evenly over (batch, kv head), first and last included.
    const int64_t n = std::max<int64_t>(
        1, std::min<int64_t>(n_candidates, static_cast<int64_t>(flop_budget / max_work)));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t index = candidates[n == 1 ? 0 : i * (n_candidates - 1) / (n - 1)];
      const SequenceRows s = sequence_of(index);
      blocks_.push_back(slice_block(index, 0, s.q_len, s.kv_len));
    }
    coverage << n << " of " << slices << " (batch, kv-head) slices";
  } else {
    const bool can_drop_keys = desc.causal || desc.window_right == 0;
    const int64_t blocks_per_slice = can_drop_keys ? 3 : 1;
    const int64_t sampled_slices = std::min(n_candidates, kRowBlockSlices);
    int64_t rows_per_block = 0;
    for (int64_t k = 0; k < sampled_slices; ++k) {
      const int64_t index = k == 0 ? candidates.front() : candidates.back();
      const SequenceRows s = sequence_of(index);
      const int64_t Sq = s.q_len, Sk = s.kv_len;
      // Upper bound on a row's work: it sees at most all Sk keys.
      const double row_work = reference_work(desc, 1, Sk, backward);
      const int64_t rows = std::clamp<int64_t>(
          static_cast<int64_t>(flop_budget / (row_work * blocks_per_slice * sampled_slices)), 1,
          Sq);
      rows_per_block = std::max(rows_per_block, rows);
      blocks_.push_back(slice_block(index, Sq - rows, Sq, Sk));  // last rows, all keys
      if (!can_drop_keys) continue;
      for (int64_t r1 : {rows, (Sq + rows) / 2}) {  // first rows, middle rows
        const int64_t keys = Sk - Sq + r1;
        if (keys >= 1 && r1 < Sq) blocks_.push_back(slice_block(index, r1 - rows, r1, keys));
      }
    }
    coverage << (backward ? "dq only, " : "") << blocks_.size() << " blocks of " << rows_per_block
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
  const std::vector<int64_t> q_at = query_rows(d, block.b, block.row_begin, rows);
  const std::vector<int64_t> kv_at = key_rows(d, block.b, block.keys);
  const std::vector<float> q = gather(in.q, d.dtype, d.heads_q, d.head_dim, q_at, h0, g);
  const std::vector<float> k =
      gather(in.k, d.dtype, d.heads_kv, d.head_dim, kv_at, block.kv_head, 1);
  const std::vector<float> v = gather(in.v, d.dtype, d.heads_kv, Dv, kv_at, block.kv_head, 1);
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
  const std::vector<float> dout = gather(in.dout, d.dtype, d.heads_q, Dv, q_at, h0, g);
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

bool Oracle::whole_slice(const Block& b) const {
  const SequenceRows s = sequence_rows(desc_, b.b);
  return b.row_begin == 0 && b.row_end == s.q_len && b.keys == s.kv_len;
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
      compare(o, b.o, d.heads_q, Dv, query_rows(d, b.b, b.row_begin, b.row_end - b.row_begin),
              b.kv_head * g, g, stats[kO]);
  } else {
    const std::vector<float> dq = workload.read_as_float(Tensor::dq);
    const std::vector<float> dk = workload.read_as_float(Tensor::dk);
    const std::vector<float> dv = workload.read_as_float(Tensor::dv);
    for (const Block& b : blocks_) {
      compare(dq, b.dq, d.heads_q, d.head_dim,
              query_rows(d, b.b, b.row_begin, b.row_end - b.row_begin), b.kv_head * g, g,
              stats[kDq]);
      if (!whole_slice(b)) continue;
      const std::vector<int64_t> kv_at = key_rows(d, b.b, b.keys);
      compare(dk, b.dk, d.heads_kv, d.head_dim, kv_at, b.kv_head, 1, stats[kDk]);
      compare(dv, b.dv, d.heads_kv, Dv, kv_at, b.kv_head, 1, stats[kDv]);
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
