// flashattn-read-ceiling: what a bare streaming read of N bytes reaches on this GPU when
// timed as flashattn-compare times a decode call (a read flush of L2 before each call,
// CUDA events around the call alone), beside the copy ceiling that the decode rows'
// "of copy" column divides by (a >= 2 GiB device copy, read + write bytes / time).
// Issue 14's decode bar (>= 0.9 of copy at >= 32k keys) reads B = 1, 32k keys (128 MiB of
// K+V) against this: a kernel that only streams those bytes, with no split merge, sets
// the most any decode can reach there (bench/RESULTS.md, session 23).
//   flashattn-read-ceiling [MiB ...]   (default 32 64 128 256 512 1024 2048)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/l2_flush.hpp"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kFlushBytes = 256 * kMiB;  // > 5x the L2 of an H100 / H200
constexpr size_t kCopyBytes = 2048 * kMiB;  // read + write, as bench/common/copy_ceiling.cpp
constexpr int kCalls = 21;                  // timed calls per point (median)

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "flashattn-read-ceiling: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {32, 64, 128, 256, 512, 1024, 2048};
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
    std::fprintf(stderr, "flashattn-read-ceiling: no CUDA device\n");
    return 77;
  }
  const size_t largest =
      std::max(kCopyBytes / 2, *std::max_element(sizes.begin(), sizes.end()) * kMiB);
  char *data = nullptr, *flush = nullptr, *dst = nullptr;
  unsigned* sink = nullptr;
  check(cudaMalloc(&data, largest), "cudaMalloc");
  check(cudaMalloc(&flush, kFlushBytes), "cudaMalloc");
  check(cudaMalloc(&dst, kCopyBytes / 2), "cudaMalloc");
  check(cudaMalloc(&sink, sizeof(unsigned)), "cudaMalloc");
  check(cudaMemset(data, 1, largest), "cudaMemset");
  check(cudaMemset(flush, 2, kFlushBytes), "cudaMemset");
  check(cudaMemset(dst, 0, kCopyBytes / 2), "cudaMemset");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  // Milliseconds of `call` between two events, after a read flush when `flushed`.
  const auto time = [&](auto call, bool flushed) {
    std::vector<float> ms(kCalls);
    for (float& m : ms) {
      if (flushed) check(bench::read_flush(flush, kFlushBytes, sms, sink, nullptr), "flush");
      check(cudaEventRecord(start), "cudaEventRecord");
      call();
      check(cudaEventRecord(stop), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      check(cudaEventElapsedTime(&m, start, stop), "cudaEventElapsedTime");
    }
    return median(ms);
  };
  const float copy_ms = time(
      [&] { check(cudaMemcpyAsync(dst, data, kCopyBytes / 2, cudaMemcpyDeviceToDevice), "copy"); },
      false);
  const double copy = kCopyBytes / (copy_ms * 1e-3) / 1e9;
  std::printf("copy ceiling (2 GiB moved, read + write): %.0f GB/s\n", copy);
  std::printf("| MiB read | us | GB/s | of copy |\n|---|---|---|---|\n");
  for (size_t mib : sizes) {
    const size_t bytes = mib * kMiB;
    const float ms =
        time([&] { check(bench::read_flush(data, bytes, sms, sink, nullptr), "read"); }, true);
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    std::printf("| %zu | %.1f | %.0f | %.2f |\n", mib, ms * 1e3, gbps, gbps / copy);
  }
  return 0;
}
