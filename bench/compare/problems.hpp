// The problems of one flashattn-compare run, built from the command line: one per
// sweep point, with the inference arrays (cu_seqlens, cache lengths, a shuffled block
// table) that --varlen, --seqlens-kv and --paged ask for, in host memory.
#pragma once

#include <cstdint>

#include "common/problem.hpp"
#include "compare/args.hpp"

namespace compare {

// The problem at one sweep point (seqlen: the query length; with --varlen the only
// point, the longest sequence).
bench::Problem make_problem(const Options& options, int64_t seqlen);

}  // namespace compare
