// flashattn-decode-bench: decode (few query tokens against a long KV cache) on the cuda
// and cpu backends, in GB/s of the K/V bytes each call reads, beside the device's own
// copy bandwidth measured in the same run (a device-to-device copy on the GPU, a copy
// over all host threads on the CPU). Contiguous and paged caches (shuffled pages).
//
//   flashattn-decode-bench [--backend cuda|cpu] [--dtype bf16|f16|f32] [--heads-q 32]
//                          [--heads-kv 8] [--head-dim 128] [--batch 1 8] [--keys 8192 ...]
//                          [--queries 1 4] [--page 0 64] [--sorted-pages] [--iters 50]
//
// GB/s counts K and V once (2 · batch · keys · heads_kv · head_dim · element size); the
// copy column is bench::copy_gbps of the same bytes (read + write of a copy of half of
// them, as a device copy's bandwidth is usually quoted), so "of copy" compares the two
// rates directly. --sorted-pages gives sequence b pages b·pps .. (b+1)·pps − 1 in order
// (the layout of a contiguous cache, split into pages): what the page lookups cost, apart
// from where the pages lie. flashattn-compare measures decode the same way, beside the reference.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/copy_ceiling.hpp"
#include "common/device.hpp"
#include "common/dtype.hpp"
#include "common/problem.hpp"
#include "common/timing.hpp"
#include "common/workload.hpp"
#include "flash/flash.hpp"

namespace {

struct Options {
  std::vector<std::string> backends = {"cuda", "cpu"};
  flash::DType dtype = flash::DType::bf16;
  int64_t heads_q = 32, heads_kv = 8, head_dim = 128;
  std::vector<int64_t> batch = {1, 8}, keys = {8192, 32768, 131072}, queries = {1, 4},
                       page = {0, 64};
  bool sorted_pages = false;
  int iters = 50;
};

std::vector<int64_t> numbers(int& i, int argc, char** argv) {
  std::vector<int64_t> out;
  while (i + 1 < argc && argv[i + 1][0] != '-') out.push_back(std::atoll(argv[++i]));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend") {
      o.backends.clear();
      while (i + 1 < argc && argv[i + 1][0] != '-') o.backends.push_back(argv[++i]);
    } else if (a == "--dtype" && i + 1 < argc) {
      const std::string t = argv[++i];
      o.dtype = t == "f32"   ? flash::DType::f32
                : t == "f16" ? flash::DType::f16
                             : flash::DType::bf16;
    } else if (a == "--heads-q") {
      o.heads_q = numbers(i, argc, argv).at(0);
    } else if (a == "--heads-kv") {
      o.heads_kv = numbers(i, argc, argv).at(0);
    } else if (a == "--head-dim") {
      o.head_dim = numbers(i, argc, argv).at(0);
    } else if (a == "--batch") {
      o.batch = numbers(i, argc, argv);
    } else if (a == "--keys") {
      o.keys = numbers(i, argc, argv);
    } else if (a == "--queries") {
      o.queries = numbers(i, argc, argv);
    } else if (a == "--page") {
      o.page = numbers(i, argc, argv);
    } else if (a == "--sorted-pages") {
      o.sorted_pages = true;
    } else if (a == "--iters") {
      o.iters = static_cast<int>(numbers(i, argc, argv).at(0));
    } else {
      std::fprintf(stderr, "unknown argument %s (see the file header for the options)\n",
                   a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// Host microseconds one call takes to queue its work (the mean over `calls` calls queued
// back to back, then one synchronisation): a decode step's CPU cost, and the time the
// GPU timing includes when it exceeds the eviction memset (FLASH_BENCH_GATE, cuda_device.cpp).
double host_us_per_call(bench::Device& dev, const std::function<void()>& fn, int calls) {
  dev.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) fn();
  const auto t1 = std::chrono::steady_clock::now();
  dev.synchronize();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / calls;
}

// Each call timed alone with the last-level cache evicted first: in serving, a layer's KV
// cache is not in L2 when its turn comes (and 8k keys of one sequence would otherwise fit
// in an H100's L2).
bench::TimingPlan timing_plan(int iters) {
  bench::TimingPlan plan;
  plan.warmup = 3;
  plan.max_runs = iters;
  plan.max_seconds = 1e9;  // always iters runs
  return plan;
}

// Random values, not a constant: with equal scores no row max ever moves after the first
// key tile, which would hide the cost of rescaling O. One block of kFillBlockElements random
// values is made per tensor (host-side generation of a whole 2 GB cache would cost more than
// the measurement) and copied over the buffer, each copy starting kFillShiftStride elements
// further into it (modulo kFillShiftElements): a split longer than a block (B 8, 128k keys:
// 64k keys a split, 16k keys a block at Hkv 8, D 128) still meets new keys, whose scores can
// move a row max as fresh random keys would.
constexpr size_t kFillBlockElements = size_t{1} << 24;
constexpr size_t kFillShiftElements = 4096, kFillShiftStride = 1031;
// Odd: copies 1 .. 63 never shift by a multiple of 64 elements, so no key row of a copy lines
// up with one of the first copy (head dims are multiples of 64 here; 64 copies are 1G elements).
static_assert(kFillShiftStride % 2 == 1 && kFillShiftElements % 64 == 0);

void fill_random(bench::Device& dev, bench::DeviceBuffer& buf, flash::DType dtype, uint64_t seed) {
  const size_t eb = bench::element_size(dtype), elements = buf.bytes() / eb;
  const size_t block = std::min(elements, kFillBlockElements);
  const std::vector<unsigned char> values =
      bench::random_tensor(block + kFillShiftElements, dtype, seed);
  size_t copy = 0;
  for (size_t at = 0; at < elements; at += block, ++copy) {
    const size_t shift = copy * kFillShiftStride % kFillShiftElements;
    dev.upload(static_cast<unsigned char*>(buf.data()) + at * eb, values.data() + shift * eb,
               std::min(block, elements - at) * eb);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const size_t eb = o.dtype == flash::DType::f32 ? 4 : 2;
  std::printf(
      "| backend | dtype | B | Sq | Hq/Hkv | keys | cache | ms | GB/s K+V | copy GB/s | of copy "
      "| host µs |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& name : o.backends) {
    const flash::Backend backend = name == "cpu" ? flash::Backend::cpu : flash::Backend::cuda;
    std::string why;
    std::unique_ptr<bench::Device> dev = bench::open_device(backend, &why);
    if (!dev) {
      std::printf("| %s | skipped: %s |\n", name.c_str(), why.c_str());
      continue;
    }
    std::map<double, double> copy_by_size;  // bytes moved -> GB/s, this device
    for (int64_t sq : o.queries)
      for (int64_t b : o.batch)
        for (int64_t keys : o.keys)
          for (int64_t page : o.page) {
            const int64_t kv_elems = b * keys * o.heads_kv * o.head_dim;
            const size_t kv_bytes = static_cast<size_t>(kv_elems) * eb;
            bench::DeviceBuffer k(*dev, kv_bytes), v(*dev, kv_bytes);
            bench::DeviceBuffer q(*dev, static_cast<size_t>(b * sq * o.heads_q * o.head_dim) * eb);
            bench::DeviceBuffer out(*dev, q.bytes());
            fill_random(*dev, k, o.dtype, 2);
            fill_random(*dev, v, o.dtype, 3);
            fill_random(*dev, q, o.dtype, 1);
            flash::AttentionDesc d;
            d.batch = b;
            d.seqlen_q = sq;
            d.seqlen_kv = keys;
            d.heads_q = o.heads_q;
            d.heads_kv = o.heads_kv;
            d.head_dim = o.head_dim;
            d.dtype = o.dtype;
            d.causal = true;  // bottom-right: every query token sees the whole cache
            d.backend = backend;
            d.stream = dev->stream();
            bench::DeviceBuffer table;
            if (page > 0) {
              const int64_t pps = (keys + page - 1) / page, pages = b * pps;
              std::vector<int32_t> ids = bench::shuffled_pages(pages, 7);
              if (o.sorted_pages) std::sort(ids.begin(), ids.end());
              table = bench::DeviceBuffer(*dev, ids.size() * sizeof(int32_t));
              dev->upload(table.data(), ids.data(), ids.size() * sizeof(int32_t));
              d.block_table = static_cast<const int32_t*>(table.data());
              d.page_size = page;
              d.pages_per_seq = pps;
              d.num_pages = pages;
            }
            double ms = 0, host_us = 0;
            const auto call = [&] {
              flash::attention(d, q.data(), k.data(), v.data(), out.data());
            };
            try {
              ms = bench::median(bench::time_calls(*dev, timing_plan(o.iters), call));
              host_us = host_us_per_call(*dev, call, 20);
            } catch (const flash::Error& e) {
              std::printf("| %s | error: %s |\n", name.c_str(), e.what());
              continue;
            }
            const double gbs = 2.0 * kv_bytes / ms / 1e6;
            // One copy measurement per size moved (all sizes below the minimum are one).
            const double moved = std::max(2.0 * kv_bytes, bench::kMinCopyBytesMoved);
            auto [ceiling, added] = copy_by_size.emplace(moved, 0.0);
            if (added) ceiling->second = bench::copy_gbps(*dev, moved, timing_plan(o.iters));
            const double copy_gbs = ceiling->second;
            std::printf(
                "| %s | %s | %lld | %lld | %lld/%lld | %lld | %s | %.4f | %.0f | %.0f | %.2f | "
                "%.1f |\n",
                name.c_str(), flash::to_string(o.dtype), (long long)b, (long long)sq,
                (long long)o.heads_q, (long long)o.heads_kv, (long long)keys,
                page > 0
                    ? ("paged " + std::to_string(page) + (o.sorted_pages ? " sorted" : "")).c_str()
                    : "contiguous",
                ms, gbs, copy_gbs, gbs / copy_gbs, host_us);
            std::fflush(stdout);
          }
  }
  return 0;
}
