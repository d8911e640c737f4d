#include "compare/args.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

namespace compare {
namespace {

// Default problem: finishes in a few seconds on a 2-core machine with every backend,
// the reference (≈0.5 GFLOP/s) included, and is large enough to reach the tiled
// kernels' steady state.
constexpr int64_t kDefaultSeqlen = 1024;
constexpr int64_t kDefaultHeads = 8;
constexpr int64_t kDefaultHeadDim = 64;

const char* const kUsage =
    R"(flashattn-compare: run one attention problem (or a sweep over seqlen) on
every backend and print time, TFLOP/s and the error against the reference.

usage: flashattn-compare [options]

problem (defaults: B=1 H=8 S=1024 D=64 f32 forward, no mask):
  --dtype f32|f16|bf16        storage type
  --batch N                   batch size
  --tokens N                  batch = max(1, N / seqlen) per sweep point
                              (FlashAttention's benchmark uses 16384)
  --heads N                   query heads
  --kv-heads N                key/value heads (GQA/MQA; divides --heads)
  --seqlen N[,N...]           query length; a list runs a sweep
  --seqlen-kv N               key length (default: equal to each seqlen); with
                              --paged / --seqlens-kv the cache's capacity
  --head-dim N                head dim of q and k
  --head-dim-v N              head dim of v and o (default: --head-dim)
  --causal                    causal mask, bottom-right aligned
  --window L,R                sliding window (-1 = unbounded side)
  --softcap X                 logit soft-capping (0 = off)
  --scale X                   softmax scale (default 1/sqrt(head-dim))
  --backward                  time the backward (dq, dk, dv) instead

inference (packed batches, KV caches, decode):
  --seqlen-q N[,N...]         the same as --seqlen; decode: 1 to 16 query tokens
  --heads-q N, --heads-kv N   the same as --heads, --kv-heads
  --paged PAGE                K/V in a paged cache of PAGE keys a page: k/v are
                              [num_pages, PAGE, Hkv, D], pages_per_seq =
                              ceil(seqlen-kv / PAGE), the pages shuffled
  --pages shuffled|in-order   the block table's page order (default shuffled: a
                              pool's pages in no order; in-order: sequence b's page
                              j is page b * pages_per_seq + j, a contiguous cache's
                              layout, to tell the page lookups' cost from memory
                              locality)
  --seqlens-kv L1,L2,...      cache lengths, one per sequence (batch = their count):
                              sequence b sees the first Lb of its --seqlen-kv rows
                              (default --seqlen-kv: the longest Lb)
  --varlen L1,L2,...          a packed batch (cu_seqlens_q) of sequences of these
                              lengths, replacing --seqlen; the keys are packed alike
                              (cu_seqlens_kv) unless --seqlen-kv, --seqlens-kv or
                              --paged put them in a cache (of the same lengths
                              unless --seqlens-kv says otherwise)
  The arrays are built in host memory and copied where q lives. --paged and
  --seqlens-kv are forward-only. Forward problems with one of these flags, or at
  most 16 query rows, add K+V GB/s (the K and V rows each sequence sees, read
  once), copy GB/s (a device copy of as many bytes in the same run: cudaMemcpy on
  a GPU, memcpy over all threads on the host) and "of copy" (their ratio).

run:
  --backends a,b,...          reference,cpu,cuda,hip (default: all; unavailable
                              ones are listed with the reason)
  --iters N                   timed runs per backend, median reported (default 10)
  --max-seconds S             stop timing a backend after S seconds (default 2),
                              at least one run
  --check-budget GFLOP        reference work per problem for the error column
                              (default 0.5, a few seconds; larger shapes are
                              sampled; 0 = no check)
  --seed N                    input seed
  --json FILE                 write all rows as JSON
  --plot FILE.svg             write TFLOP/s against seqlen, one line per backend
  --help                      this text

Environment: FLASH_LOG=1 prints the library's kernel choices to stderr;
OMP_NUM_THREADS sets the cpu backend's threads.
)";

int64_t parse_int(const std::string& option, const std::string& value) {
  try {
    size_t used = 0;
    const long long n = std::stoll(value, &used);
    if (used == value.size()) return n;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(option + ": '" + value + "' is not an integer");
}

double parse_double(const std::string& option, const std::string& value) {
  try {
    size_t used = 0;
    const double x = std::stod(value, &used);
    if (used == value.size()) return x;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(option + ": '" + value + "' is not a number");
}

std::vector<std::string> split(const std::string& value, char sep) {
  std::vector<std::string> parts;
  std::stringstream s(value);
  for (std::string part; std::getline(s, part, sep);)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

// A comma-separated list of lengths (int32 array entries): non-empty, each >= 0.
std::vector<int64_t> parse_lengths(const std::string& option, const std::string& value) {
  std::vector<int64_t> lengths;
  for (const std::string& part : split(value, ',')) {
    const int64_t n = parse_int(option, part);
    if (n < 0 || n > std::numeric_limits<int32_t>::max())
      throw std::invalid_argument(option + ": length " + part +
                                  " is out of range (0 .. 2147483647)");
    lengths.push_back(n);
  }
  if (lengths.empty())
    throw std::invalid_argument(option + ": '" + value + "' has no lengths (e.g. 17,113,1000)");
  return lengths;
}

// Cross-checks the inference flags; the library validates everything else.
void check_inference_flags(const Options& o, bool seqlen_given) {
  const bool lists = !o.varlen.empty() || !o.seqlens_kv.empty();
  if (!o.varlen.empty() && seqlen_given)
    throw std::invalid_argument("--varlen gives the query lengths; drop --seqlen / --seqlen-q");
  if (lists && o.tokens > 0)
    throw std::invalid_argument(
        "--tokens cannot size the batch of --varlen / --seqlens-kv (batch = their count)");
  for (const auto* list : {&o.varlen, &o.seqlens_kv}) {
    if (list->empty() || o.batch == 0 || static_cast<int64_t>(list->size()) == o.batch) continue;
    throw std::invalid_argument(std::string(list == &o.varlen ? "--varlen" : "--seqlens-kv") +
                                ": " + std::to_string(list->size()) + " lengths but --batch " +
                                std::to_string(o.batch) + " (batch = the number of lengths)");
  }
  if (!o.varlen.empty() && !o.seqlens_kv.empty() && o.varlen.size() != o.seqlens_kv.size())
    throw std::invalid_argument("--seqlens-kv: " + std::to_string(o.seqlens_kv.size()) +
                                " lengths but --varlen has " + std::to_string(o.varlen.size()) +
                                " sequences");
  int64_t total = 0;
  for (int64_t n : o.varlen) total += n;
  if (total > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("--varlen: " + std::to_string(total) +
                                " rows in all overflow the int32 cu_seqlens");
  if (o.seqlen_kv > 0)
    for (int64_t n : o.seqlens_kv)
      if (n > o.seqlen_kv)
        throw std::invalid_argument("--seqlens-kv: length " + std::to_string(n) +
                                    " exceeds --seqlen-kv " + std::to_string(o.seqlen_kv) +
                                    " (the cache's capacity)");
  if (o.pages_in_order && o.page_size == 0)
    throw std::invalid_argument("--pages in-order needs --paged (a block table to order)");
  if (o.backward && (o.page_size > 0 || !o.seqlens_kv.empty()))
    throw std::invalid_argument(
        std::string(o.page_size > 0 ? "--paged" : "--seqlens-kv") +
        " is forward-only: the library's backward takes packed batches (--varlen) but not "
        "caches");
}

flash::DType parse_dtype(const std::string& value) {
  for (flash::DType t : {flash::DType::f32, flash::DType::f16, flash::DType::bf16})
    if (value == flash::to_string(t)) return t;
  throw std::invalid_argument("--dtype: '" + value + "' is not one of f32, f16, bf16");
}

flash::Backend parse_backend(const std::string& value) {
  for (flash::Backend b :
       {flash::Backend::reference, flash::Backend::cpu, flash::Backend::cuda, flash::Backend::hip})
    if (value == flash::to_string(b)) return b;
  throw std::invalid_argument("--backends: '" + value +
                              "' is not one of reference, cpu, cuda, hip");
}

}  // namespace

Options parse_args(int argc, char** argv) {
  Options o;
  o.base.heads_q = kDefaultHeads;
  o.base.heads_kv = 0;  // resolved below: equal to heads
  o.base.head_dim = kDefaultHeadDim;
  o.seqlens = {kDefaultSeqlen};

  using Handler = std::function<void(const std::string&)>;
  bool seqlen_given = false;
  auto parse_seqlens = [&](const std::string& option) -> Handler {
    return [&, option](const std::string& v) {
      o.seqlens.clear();
      for (const std::string& s : split(v, ',')) o.seqlens.push_back(parse_int(option, s));
      if (o.seqlens.empty()) throw std::invalid_argument(option + ": empty list");
      seqlen_given = true;
    };
  };
  const std::map<std::string, Handler> with_value = {
      {"--dtype", [&](const std::string& v) { o.base.dtype = parse_dtype(v); }},
      {"--batch", [&](const std::string& v) { o.batch = parse_int("--batch", v); }},
      {"--tokens", [&](const std::string& v) { o.tokens = parse_int("--tokens", v); }},
      {"--heads", [&](const std::string& v) { o.base.heads_q = parse_int("--heads", v); }},
      {"--kv-heads", [&](const std::string& v) { o.base.heads_kv = parse_int("--kv-heads", v); }},
      {"--heads-q", [&](const std::string& v) { o.base.heads_q = parse_int("--heads-q", v); }},
      {"--heads-kv", [&](const std::string& v) { o.base.heads_kv = parse_int("--heads-kv", v); }},
      {"--seqlen", parse_seqlens("--seqlen")},
      {"--seqlen-q", parse_seqlens("--seqlen-q")},
      {"--paged",
       [&](const std::string& v) {
         o.page_size = parse_int("--paged", v);
         if (o.page_size < 1)
           throw std::invalid_argument("--paged: " + v +
                                       " is not a page size (keys a page holds, at least 1)");
       }},
      {"--pages",
       [&](const std::string& v) {
         if (v != "shuffled" && v != "in-order")
           throw std::invalid_argument("--pages: '" + v + "' is not shuffled or in-order");
         o.pages_in_order = v == "in-order";
       }},
      {"--seqlens-kv",
       [&](const std::string& v) { o.seqlens_kv = parse_lengths("--seqlens-kv", v); }},
      {"--varlen", [&](const std::string& v) { o.varlen = parse_lengths("--varlen", v); }},
      {"--seqlen-kv", [&](const std::string& v) { o.seqlen_kv = parse_int("--seqlen-kv", v); }},
      {"--head-dim", [&](const std::string& v) { o.base.head_dim = parse_int("--head-dim", v); }},
      {"--head-dim-v",
       [&](const std::string& v) { o.base.head_dim_v = parse_int("--head-dim-v", v); }},
      {"--window",
       [&](const std::string& v) {
         const std::vector<std::string> lr = split(v, ',');
         if (lr.size() != 2)
           throw std::invalid_argument("--window: '" + v + "' is not L,R (e.g. 256,0)");
         o.base.window_left = parse_int("--window", lr[0]);
         o.base.window_right = parse_int("--window", lr[1]);
       }},
      {"--softcap",
       [&](const std::string& v) {
         o.base.softcap = static_cast<float>(parse_double("--softcap", v));
       }},
      {"--scale",
       [&](const std::string& v) {
         o.base.scale = static_cast<float>(parse_double("--scale", v));
       }},
      {"--backends",
       [&](const std::string& v) {
         for (const std::string& b : split(v, ',')) o.backends.push_back(parse_backend(b));
       }},
      {"--iters",
       [&](const std::string& v) { o.iters = static_cast<int>(parse_int("--iters", v)); }},
      {"--max-seconds",
       [&](const std::string& v) { o.max_seconds = parse_double("--max-seconds", v); }},
      {"--check-budget",
       [&](const std::string& v) { o.check_budget_gflop = parse_double("--check-budget", v); }},
      {"--seed",
       [&](const std::string& v) { o.seed = static_cast<uint64_t>(parse_int("--seed", v)); }},
      {"--json", [&](const std::string& v) { o.json_path = v; }},
      {"--plot", [&](const std::string& v) { o.plot_path = v; }},
  };

  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);  // --option=value
      arg = arg.substr(0, eq);
      has_value = true;
    }
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg == "--causal") {
      o.base.causal = true;
    } else if (arg == "--backward") {
      o.backward = true;
    } else if (auto it = with_value.find(arg); it != with_value.end()) {
      if (!has_value) {
        if (i + 1 >= argc) throw std::invalid_argument(arg + ": needs a value");
        value = argv[++i];
      }
      it->second(value);
    } else {
      throw std::invalid_argument("unknown option '" + arg + "' (see --help)");
    }
  }
  if (o.base.heads_kv == 0) o.base.heads_kv = o.base.heads_q;
  if (o.iters < 1) throw std::invalid_argument("--iters: must be at least 1");
  check_inference_flags(o, seqlen_given);
  if (!o.varlen.empty()) o.seqlens = {*std::max_element(o.varlen.begin(), o.varlen.end())};
  const bool inference = o.page_size > 0 || !o.seqlens_kv.empty() || !o.varlen.empty();
  const bool few_rows = *std::max_element(o.seqlens.begin(), o.seqlens.end()) <= kDecodeRows;
  o.copy_ceiling = !o.backward && (inference || few_rows);
  // Everything else (sizes, GQA divisibility, window, softcap) is validated by the
  // library, whose flash::Error names the field.
  return o;
}

}  // namespace compare
