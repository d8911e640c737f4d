// Per-sequence decomposition of inference problems (see sequences.hpp). Plain loops:
// this is the oracle's path, where clarity beats speed.
#include "reference/sequences.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "dispatch/sequence_arrays.hpp"
#include "reference/dtype.hpp"

namespace flash::reference {
namespace {

size_t elem_bytes(int32_t dtype) { return dtype == FLASH_F32 ? 4 : 2; }

int64_t at(const int64_t* stride, int64_t b, int64_t s, int64_t h) {
  return b * stride[0] + s * stride[1] + h * stride[2];
}

bool is_dense(const flash_problem& p) { return !detail::has_sequence_arrays(p); }

// Sequence b as a dense batch-1 problem. q/o rows and k/v rows point into the
// caller's tensors (strides kept); paged keys are gathered into `k_copy` / `v_copy`.
struct Sequence {
  flash_problem p;
  const char* q;
  const char* k;
  const char* v;
  const char* dout;
  int64_t q_row0, kv_row0;  // first row in the packed result layout
  std::vector<char> k_copy, v_copy;
};

Sequence sequence(const flash_problem& full, int64_t b, const void* q, const void* k, const void* v,
                  const void* dout) {
  const detail::SequenceArrays a = detail::arrays_of(full);
  const size_t eb = elem_bytes(full.dtype);
  Sequence s;
  s.p = full;
  s.p.batch = 1;
  s.p.seqlen_q = detail::seq_len_q(full, a, b);
  s.p.seqlen_kv = detail::seq_len_kv(full, a, b);
  s.p.cu_seqlens_q = s.p.cu_seqlens_kv = s.p.seqlens_kv = s.p.block_table = nullptr;
  s.p.page_size = s.p.pages_per_seq = s.p.num_pages = 0;
  s.p.total_q = s.p.total_kv = -1;
  s.p.lse = nullptr;
  const int64_t q_off =
      full.cu_seqlens_q ? full.cu_seqlens_q[b] * full.q_stride[1] : b * full.q_stride[0];
  const int64_t o_off =
      full.cu_seqlens_q ? full.cu_seqlens_q[b] * full.o_stride[1] : b * full.o_stride[0];
  s.q = static_cast<const char*>(q) + q_off * eb;
  s.dout = dout ? static_cast<const char*>(dout) + o_off * eb : nullptr;
  s.q_row0 = full.cu_seqlens_q ? full.cu_seqlens_q[b] : b * full.seqlen_q;
  s.kv_row0 = full.cu_seqlens_kv ? full.cu_seqlens_kv[b] : b * full.seqlen_kv;
  if (!full.block_table) {
    const int64_t k_off =
        full.cu_seqlens_kv ? full.cu_seqlens_kv[b] * full.k_stride[1] : b * full.k_stride[0];
    const int64_t v_off =
        full.cu_seqlens_kv ? full.cu_seqlens_kv[b] * full.v_stride[1] : b * full.v_stride[0];
    s.k = static_cast<const char*>(k) + k_off * eb;
    s.v = static_cast<const char*>(v) + v_off * eb;
    return s;
  }
  // Paged: gather key j from row j % page_size of page block_table[b, j / page_size].
  const int64_t hk = full.heads_kv, d = full.head_dim, dv = full.head_dim_v;
  const int64_t keys = s.p.seqlen_kv;
  s.k_copy.resize(static_cast<size_t>(keys * hk * d) * eb);
  s.v_copy.resize(static_cast<size_t>(keys * hk * dv) * eb);
  for (int64_t j = 0; j < keys; ++j) {
    const int64_t page = full.block_table[b * full.pages_per_seq + j / full.page_size];
    const int64_t row = j % full.page_size;
    for (int64_t h = 0; h < hk; ++h) {
      std::memcpy(&s.k_copy[static_cast<size_t>((j * hk + h) * d) * eb],
                  static_cast<const char*>(k) + at(full.k_stride, page, row, h) * eb, d * eb);
      std::memcpy(&s.v_copy[static_cast<size_t>((j * hk + h) * dv) * eb],
                  static_cast<const char*>(v) + at(full.v_stride, page, row, h) * eb, dv * eb);
    }
  }
  s.p.k_stride[0] = keys * hk * d;
  s.p.k_stride[1] = hk * d;
  s.p.k_stride[2] = d;
  s.p.v_stride[0] = keys * hk * dv;
  s.p.v_stride[1] = hk * dv;
  s.p.v_stride[2] = dv;
  s.k = s.k_copy.data();
  s.v = s.v_copy.data();
  return s;
}

// Copies rows [0, rows) of a packed [rows, heads, dim] block to row `row0` of `out`.
void place_rows(const std::vector<double>& block, int64_t rows, int64_t heads, int64_t dim,
                std::vector<double>& out, int64_t row0) {
  const size_t n = static_cast<size_t>(rows * heads * dim);
  std::copy(block.begin(), block.begin() + n, out.begin() + row0 * heads * dim);
}

}  // namespace

int64_t rows_q(const flash_problem& p) {
  return p.cu_seqlens_q ? p.cu_seqlens_q[p.batch] : p.batch * p.seqlen_q;
}

int64_t rows_kv(const flash_problem& p) {
  return p.cu_seqlens_kv ? p.cu_seqlens_kv[p.batch] : p.batch * p.seqlen_kv;
}

int64_t lse_index(const flash_problem& p, int64_t b, int64_t h, int64_t i) {
  if (p.cu_seqlens_q) return h * rows_q(p) + p.cu_seqlens_q[b] + i;
  return (b * p.heads_q + h) * p.seqlen_q + i;
}

ForwardResult forward_per_sequence(const flash_problem& p, const void* q, const void* k,
                                   const void* v, const DenseForward& dense) {
  if (is_dense(p)) return dense(p, q, k, v);
  ForwardResult r;
  r.o.assign(static_cast<size_t>(rows_q(p) * p.heads_q * p.head_dim_v), 0.0);
  r.lse.assign(static_cast<size_t>(rows_q(p) * p.heads_q), 0.0);
  for (int64_t b = 0; b < p.batch; ++b) {
    const Sequence s = sequence(p, b, q, k, v, nullptr);
    if (s.p.seqlen_q == 0) continue;
    const ForwardResult part = dense(s.p, s.q, s.k, s.v);
    place_rows(part.o, s.p.seqlen_q, p.heads_q, p.head_dim_v, r.o, s.q_row0);
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < s.p.seqlen_q; ++i)
        r.lse[lse_index(p, b, h, i)] = part.lse[h * s.p.seqlen_q + i];
  }
  return r;
}

BackwardResult backward_per_sequence(const flash_problem& p, const void* q, const void* k,
                                     const void* v, const void* dout, const DenseBackward& dense) {
  if (is_dense(p)) return dense(p, q, k, v, dout);
  BackwardResult r;
  r.dq.assign(static_cast<size_t>(rows_q(p) * p.heads_q * p.head_dim), 0.0);
  r.dk.assign(static_cast<size_t>(rows_kv(p) * p.heads_kv * p.head_dim), 0.0);
  r.dv.assign(static_cast<size_t>(rows_kv(p) * p.heads_kv * p.head_dim_v), 0.0);
  for (int64_t b = 0; b < p.batch; ++b) {
    const Sequence s = sequence(p, b, q, k, v, dout);
    if (s.p.seqlen_q == 0 && s.p.seqlen_kv == 0) continue;
    const BackwardResult part = dense(s.p, s.q, s.k, s.v, s.dout);
    place_rows(part.dq, s.p.seqlen_q, p.heads_q, p.head_dim, r.dq, s.q_row0);
    place_rows(part.dk, s.p.seqlen_kv, p.heads_kv, p.head_dim, r.dk, s.kv_row0);
    place_rows(part.dv, s.p.seqlen_kv, p.heads_kv, p.head_dim_v, r.dv, s.kv_row0);
  }
  return r;
}

ForwardResult merge(const flash_problem& p, int64_t parts, const void* o_parts,
                    const float* lse_parts) {
  const int64_t rows = rows_q(p), hq = p.heads_q, dv = p.head_dim_v;
  const int64_t part_o = rows * hq * dv, part_lse = rows * hq;
  ForwardResult r;
  r.o.assign(static_cast<size_t>(part_o), 0.0);
  r.lse.assign(static_cast<size_t>(part_lse), -std::numeric_limits<double>::infinity());
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t sq = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.seqlen_q;
    const int64_t row0 = p.cu_seqlens_q ? p.cu_seqlens_q[b] : b * p.seqlen_q;
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t li = lse_index(p, b, h, i);
        double max = -std::numeric_limits<double>::infinity();
        // A NaN part makes the row NaN (max keeps NaN, then every weight is NaN).
        for (int64_t t = 0; t < parts; ++t) {
          const double l = lse_parts[t * part_lse + li];
          max = std::isnan(max) || std::isnan(l) ? l + max : std::fmax(max, l);
        }
        if (max == -std::numeric_limits<double>::infinity()) continue;  // o = 0, lse = -inf
        double sum = 0;
        for (int64_t t = 0; t < parts; ++t) sum += std::exp(lse_parts[t * part_lse + li] - max);
        const double lse = max + std::log(sum);
        r.lse[li] = lse;
        double* o = &r.o[((row0 + i) * hq + h) * dv];
        for (int64_t t = 0; t < parts; ++t) {
          const double l = lse_parts[t * part_lse + li];
          if (l == -std::numeric_limits<double>::infinity()) continue;
          const double w = std::exp(l - lse);
          const int64_t base = t * part_o + ((row0 + i) * hq + h) * dv;
          for (int64_t e = 0; e < dv; ++e) o[e] += w * load(o_parts, p.dtype, base + e);
        }
      }
  }
  return r;
}

}  // namespace flash::reference
