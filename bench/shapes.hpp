// The problem shapes flashattn_bench registers, grouped by where they are meant to run.
#pragma once

#include <cstdint>
#include <vector>

namespace bench {

struct Shape {
  int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_kv, head_dim;
};

// Tiny: every backend including the scalar reference; the CI filter picks it.
inline std::vector<Shape> ci_shapes() { return {{1, 2, 2, 128, 128, 64}}; }

// Host backends (cpu): sizes a 2-16 core machine finishes in milliseconds to seconds.
inline std::vector<Shape> host_shapes() {
  return {
      {1, 8, 8, 1024, 1024, 64},    // flashattn-compare's default problem
      {1, 8, 8, 2048, 2048, 128},   // ggml's CPU flash attention figure in ANCHORS.md
      {1, 16, 16, 4096, 4096, 64},  // torch CPU SDPA anchor, D=64 N=4k
      {1, 8, 2, 1024, 1024, 128},   // GQA 4:1
      {1, 8, 8, 256, 1024, 64},     // Sq < Sk (chunked prefill)
      {1, 32, 8, 1, 4096, 128},     // decode step, GQA: bandwidth bound, read GB/s
  };
}

// GPU backends: FlashAttention's benchmark (batch·seqlen = 16384 tokens,
// heads·head_dim = 2048) plus decode, as in ANCHORS.md.
inline std::vector<Shape> gpu_shapes() {
  constexpr int64_t kTokens = 16384, kModelWidth = 2048;
  std::vector<Shape> shapes;
  for (int64_t d : {64, 128, 256})
    for (int64_t s : {1024, 4096, 16384})
      shapes.push_back({kTokens / s, kModelWidth / d, kModelWidth / d, s, s, d});
  for (int64_t s : {4096, 32768, 131072}) shapes.push_back({8, 32, 8, 1, s, 128});
  shapes.push_back({2, 32, 8, 4096, 4096, 128});  // GQA 4:1 prefill
  return shapes;
}

}  // namespace bench
