#include "compare/problems.hpp"

#include <algorithm>
#include <vector>

namespace compare {
namespace {

int64_t longest(const std::vector<int64_t>& lengths) {
  return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
}

std::vector<int32_t> as_int32(const std::vector<int64_t>& lengths) {
  return {lengths.begin(), lengths.end()};  // parse_args keeps each within int32
}

}  // namespace

bench::Problem make_problem(const Options& o, int64_t seqlen) {
  bench::Problem p;
  flash::AttentionDesc& d = p.shape;
  d = o.base;
  // Keys in a cache (rows of capacity seqlen_kv per sequence, or pages) rather than
  // packed or dense beside the queries.
  const bool cache = o.page_size > 0 || !o.seqlens_kv.empty();
  // Cache lengths: as given; with --varlen and a paged cache but no --seqlen-kv, each
  // sequence's keys are as long as its queries (a prefill written into pages).
  std::vector<int64_t> kv_lengths = o.seqlens_kv;
  if (kv_lengths.empty() && !o.varlen.empty() && o.page_size > 0 && o.seqlen_kv == 0)
    kv_lengths = o.varlen;

  if (!o.varlen.empty()) {
    d.batch = static_cast<int64_t>(o.varlen.size());
    d.seqlen_q = longest(o.varlen);
    p.cu_seqlens_q = bench::cumulative_lengths(o.varlen);
    if (!cache && o.seqlen_kv == 0) {  // keys packed like the queries
      p.cu_seqlens_kv = p.cu_seqlens_q;
      d.seqlen_kv = d.seqlen_q;
    }
  } else {
    d.seqlen_q = seqlen;
    d.batch = !kv_lengths.empty() ? static_cast<int64_t>(kv_lengths.size())
              : o.tokens > 0      ? std::max<int64_t>(1, o.tokens / seqlen)
              : o.batch > 0       ? o.batch
                                  : 1;
  }
  if (p.cu_seqlens_kv.empty())
    d.seqlen_kv = o.seqlen_kv > 0       ? o.seqlen_kv
                  : !kv_lengths.empty() ? longest(kv_lengths)
                  : !o.varlen.empty()   ? d.seqlen_q
                                        : seqlen;
  if (!kv_lengths.empty()) p.seqlens_kv = as_int32(kv_lengths);
  if (o.page_size > 0) {
    // Every sequence owns the pages of its whole capacity; a cache's last page is
    // partly filled when its length is not a multiple of the page size.
    d.page_size = o.page_size;
    d.pages_per_seq = std::max<int64_t>(1, (d.seqlen_kv + o.page_size - 1) / o.page_size);
    d.num_pages = d.batch * d.pages_per_seq;
    p.block_table = bench::shuffled_pages(d.num_pages, o.seed);
    if (o.pages_in_order)
      for (size_t i = 0; i < p.block_table.size(); ++i) p.block_table[i] = static_cast<int32_t>(i);
  }
  return p;
}

}  // namespace compare
