// Content checks of the inference arrays (cu_seqlens_q/kv, seqlens_kv, block_table)
// and the per-sequence lengths they define. Header-only: the core runs the checks on
// host arrays before any work, and a GPU module runs the same checks on host copies of
// device arrays when FLASH_CHECK=1 (check_device_sequence_arrays); sequence_extents gives a
// GPU module the rows of packed and paged views for staging host tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dispatch/module_abi.h"
#include "flash/flash.hpp"

namespace flash::detail {

// Host copies (or the host arrays themselves) of a problem's inference arrays; null
// where the problem does not use one.
struct SequenceArrays {
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_kv = nullptr;
  const int32_t* seqlens_kv = nullptr;
  const int32_t* block_table = nullptr;
};

inline SequenceArrays arrays_of(const flash_problem& p) {
  return {p.cu_seqlens_q, p.cu_seqlens_kv, p.seqlens_kv, p.block_table};
}

[[noreturn]] inline void bad_array_entry(const char* array, int64_t index, int64_t value,
                                         const std::string& allowed) {
  throw Error("flash: " + std::string(array) + "[" + std::to_string(index) +
              "] = " + std::to_string(value) + " is invalid; " + allowed);
}

// Throws flash::Error naming the array, the index and the value: cu_seqlens start at
// 0 and never decrease, each length within the declared maximum (seqlen_q / seqlen_kv);
// seqlens_kv[b] in [0, seqlen_kv]; every page a sequence uses in [0, num_pages).
inline void check_sequence_arrays(const flash_problem& p, const SequenceArrays& a) {
  const auto check_cu = [&](const char* name, const int32_t* cu, int64_t max_len,
                            const char* max_name) {
    if (!cu) return;
    if (cu[0] != 0) bad_array_entry(name, 0, cu[0], "a packed batch starts at row 0");
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t len = int64_t{cu[b + 1]} - cu[b];
      if (len < 0)
        bad_array_entry(name, b + 1, cu[b + 1],
                        "must be >= " + std::string(name) + "[" + std::to_string(b) +
                            "] = " + std::to_string(cu[b]) + " (offsets never decrease)");
      if (len > max_len)
        bad_array_entry(name, b + 1, cu[b + 1],
                        "sequence " + std::to_string(b) + " would have " + std::to_string(len) +
                            " rows, more than " + max_name + " = " + std::to_string(max_len));
    }
  };
  check_cu("cu_seqlens_q", a.cu_seqlens_q, p.seqlen_q, "seqlen_q");
  check_cu("cu_seqlens_kv", a.cu_seqlens_kv, p.seqlen_kv, "seqlen_kv");
  if (a.seqlens_kv)
    for (int64_t b = 0; b < p.batch; ++b)
      if (a.seqlens_kv[b] < 0 || a.seqlens_kv[b] > p.seqlen_kv)
        bad_array_entry("seqlens_kv", b, a.seqlens_kv[b],
                        "must be in [0, seqlen_kv = " + std::to_string(p.seqlen_kv) + "]");
  if (a.block_table)
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t keys = a.seqlens_kv ? a.seqlens_kv[b] : p.seqlen_kv;
      const int64_t used = (keys + p.page_size - 1) / p.page_size;  // pages holding keys
      for (int64_t j = 0; j < used; ++j) {
        const int64_t page = a.block_table[b * p.pages_per_seq + j];
        if (page < 0 || page >= p.num_pages)
          bad_array_entry("block_table", b * p.pages_per_seq + j, page,
                          "page ids must be in [0, num_pages = " + std::to_string(p.num_pages) +
                              ") (sequence " + std::to_string(b) + ", page " + std::to_string(j) +
                              ")");
      }
    }
}

// Length of sequence b (host arrays): queries and visible keys.
inline int64_t seq_len_q(const flash_problem& p, const SequenceArrays& a, int64_t b) {
  return a.cu_seqlens_q ? int64_t{a.cu_seqlens_q[b + 1]} - a.cu_seqlens_q[b] : p.seqlen_q;
}
inline int64_t seq_len_kv(const flash_problem& p, const SequenceArrays& a, int64_t b) {
  if (a.cu_seqlens_kv) return int64_t{a.cu_seqlens_kv[b + 1]} - a.cu_seqlens_kv[b];
  if (a.seqlens_kv) return a.seqlens_kv[b];
  return p.seqlen_kv;
}

// True when any inference field is set (the problem is not one dense batch).
inline bool has_sequence_arrays(const flash_problem& p) {
  return p.cu_seqlens_q || p.cu_seqlens_kv || p.seqlens_kv || p.block_table;
}

// [batch, rows] extents of a GPU module's q / o and k / v views and its lse entries: packed
// rows are one [total, heads, dim] tensor (a total is known only for host arrays, the one case
// that stages tensors), a paged cache is [num_pages, page_size, heads, dim]. min_packed_rows:
// the fewest rows a packed view counts (cuda: 1, so that a tensor map always has a row).
struct SequenceExtents {
  int64_t q_batch, q_rows, kv_batch, kv_rows, lse_count;
};
inline SequenceExtents sequence_extents(const flash_problem& p, int64_t min_packed_rows) {
  SequenceExtents e{p.batch, p.seqlen_q, p.batch, p.seqlen_kv, p.batch * p.heads_q * p.seqlen_q};
  if (p.cu_seqlens_q) {
    e.q_batch = 1;
    e.q_rows = std::max<int64_t>(p.total_q, min_packed_rows);
    e.lse_count = p.heads_q * std::max<int64_t>(p.total_q, 0);
  }
  if (p.cu_seqlens_kv) {
    e.kv_batch = 1;
    e.kv_rows = std::max<int64_t>(p.total_kv, min_packed_rows);
  }
  if (p.block_table) {
    e.kv_batch = p.num_pages;
    e.kv_rows = p.page_size;
  }
  return e;
}

// FLASH_CHECK=1 (any value but empty or 0): a GPU module copies device arrays to the host
// and checks them as host arrays are checked, before any launch (this synchronises; for
// engines that build the arrays on the device). is_device(ptr) says whether ptr is device
// memory; copy_to_host(dst, src, count) copies count int32 from it.
inline bool flash_check_enabled() {
  const char* v = std::getenv("FLASH_CHECK");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}
template <class IsDevice, class CopyToHost>
void check_device_sequence_arrays(const flash_problem& p, IsDevice&& is_device,
                                  CopyToHost&& copy_to_host) {
  if (!flash_check_enabled() || !has_sequence_arrays(p)) return;
  const auto host_copy = [&](const int32_t* a, size_t count, std::vector<int32_t>& out) {
    if (a == nullptr || !is_device(a)) return a;
    out.resize(count);
    copy_to_host(out.data(), a, count);
    return static_cast<const int32_t*>(out.data());
  };
  const size_t seqs = static_cast<size_t>(p.batch);
  std::vector<int32_t> cq, ckv, lens, table;
  SequenceArrays a;
  a.cu_seqlens_q = host_copy(p.cu_seqlens_q, seqs + 1, cq);
  a.cu_seqlens_kv = host_copy(p.cu_seqlens_kv, seqs + 1, ckv);
  a.seqlens_kv = host_copy(p.seqlens_kv, seqs, lens);
  a.block_table = host_copy(p.block_table, seqs * static_cast<size_t>(p.pages_per_seq), table);
  check_sequence_arrays(p, a);
}

}  // namespace flash::detail
