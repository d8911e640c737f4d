// The amx target of the CPU backend: a bf16 forward and backward whose products run on
// AMX tiles (tdpbf16ps; forward_amx.cpp, backward_amx.cpp), beside the Highway targets.
// Plain C++: this header is read by code that runs on any x86-64 CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/cpu/avx512bf16.h"

namespace flash::cpu {

// The tile shapes of the AMX kernels. Every tile is configured once to the largest
// shape (16 rows of 64 bytes) and operands are zero-padded to whole tiles, so one
// ldtilecfg per work item serves every product.
struct AmxTiles {
  static constexpr size_t kTileRows = 16;                    // rows of a tile (max 16)
  static constexpr size_t kTileRowBytes = 64;                // bytes of a tile row (max 64)
  static constexpr size_t kWordsPerRow = kTileRowBytes / 4;  // f32 of C / bf16 pairs of A, B
  static constexpr size_t kNumTiles = 8;                     // tmm0..tmm7
  // C = A·B with A = kTileRows x kWordsPerRow bf16 pairs, B = kWordsPerRow pairs x
  // kWordsPerRow columns: one tdpbf16ps is 16 x 16 x 32 multiply-adds.
  static constexpr size_t kPairsPerStep = kWordsPerRow;
  // Register blocking: kBlockM x kBlockN C tiles, kBlockM A tiles, kBlockN B tiles,
  // so each loaded A and B tile feeds 2 products.
  static constexpr size_t kBlockM = 2, kBlockN = 2;
  static constexpr int kFirstA = kBlockM * kBlockN;  // tile index of A(0); C(m, n) = m·kBlockN + n
  static constexpr int kFirstB = kFirstA + kBlockM;  // tile index of B(0)
  static_assert(kBlockM * kBlockN + kBlockM + kBlockN <= kNumTiles,
                "tile blocking needs > 8 tiles");
  // B tiles hold kPairsPerStep rows, so the pairs of one step must fit a tile's rows.
  static_assert(kPairsPerStep <= kTileRows, "B tile of one step has more than 16 rows");
};

// ldtilecfg's 64-byte operand (palette 1).
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile i
  uint8_t rows[16] = {};    // rows of tile i
};
static_assert(sizeof(AmxTileConfig) == 64, "ldtilecfg reads 64 bytes");

// Every tile at its largest shape (see AmxTiles).
constexpr AmxTileConfig AmxFullTiles() {
  AmxTileConfig c;
  for (size_t t = 0; t < AmxTiles::kNumTiles; ++t) {
    c.colsb[t] = AmxTiles::kTileRowBytes;
    c.rows[t] = AmxTiles::kTileRows;
  }
  return c;
}

// "" when this CPU and OS run the AMX kernel, else what is missing (named as
// /proc/cpuinfo and CPUID name it). The first call asks Linux for permission to use
// tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)), once per process.
// In the test build with emulated tiles (FLASH_AMX_EMULATE) it needs AVX512-BF16 only.
std::string AmxMissing();

// The AMX forward work item (same Plan and tiles as the avx512 Highway target), or
// nullptr when this build compiled no AVX-512 code. It takes the problems
// Avx512Bf16Declines() accepts.
ForwardItemFn AmxForwardItem();

// The AMX backward's dK/dV and dQ work items (backward_amx.cpp; the delta pass stays on
// the avx512 kernels), or nullptr without AVX-512 code; same problems as the forward.
ItemFn AmxBackwardKvItem();
ItemFn AmxBackwardQItem();

}  // namespace flash::cpu
