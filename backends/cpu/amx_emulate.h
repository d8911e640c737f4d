// Scalar emulation of the AMX tile instructions of amx_tile_ops.h, for the test build
// only (FLASH_AMX_EMULATE; flash_cpu_amx_emulated_test): the AMX kernels' packing,
// tile blocking and indexing then run on CPUs without AMX and are checked against the
// fp64 oracle; the real instructions are checked on a machine with AMX.
//
// tdpbf16ps follows the Intel SDM pseudo-code: for each row m of C, pair k of A and
// column n, two f32 multiply-adds in that order; bf16 denormal inputs read as 0 (DAZ),
// denormal results are flushed to 0 (FTZ), rounding to nearest even.
// Misuse aborts with a message, so a kernel bug cannot pass silently: a tile
// instruction on a thread that has not loaded a configuration (tile state is per
// thread) or has released it, a palette other than 1, a tile of 0 rows, products whose
// shapes do not match. After Configure every tile holds NaN, so a product that reads a
// tile never loaded or zeroed poisons its result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backends/cpu/amx.h"

namespace flash::cpu::amx {
namespace {

struct EmulatedTiles {
  AmxTileConfig config;
  bool configured = false;
  alignas(64) uint8_t data[AmxTiles::kNumTiles][AmxTiles::kTileRows][AmxTiles::kTileRowBytes];
};

inline EmulatedTiles& State() {
  static thread_local EmulatedTiles state;
  return state;
}

[[noreturn]] inline void Fail(const char* what, int tile) {
  std::fprintf(stderr, "AMX emulation: %s (tile %d)\n", what, tile);
  std::abort();
}

// Rows and bytes per row of a configured tile.
inline void Shape(int tile, size_t* rows, size_t* colsb) {
  const EmulatedTiles& s = State();
  if (!s.configured) Fail("tile instruction without a loaded configuration on this thread", tile);
  *rows = s.config.rows[tile];
  *colsb = s.config.colsb[tile];
  if (*rows == 0 || *colsb == 0 || *rows > AmxTiles::kTileRows ||
      *colsb > AmxTiles::kTileRowBytes || *colsb % 4 != 0)
    Fail("tile used with an invalid shape", tile);
}

inline void Configure(const AmxTileConfig& config) {
  EmulatedTiles& s = State();
  if (config.palette != 1) Fail("palette other than 1", -1);
  s.config = config;
  s.configured = true;
  std::memset(s.data, 0xff, sizeof(s.data));  // NaN in bf16 and f32 alike
}

inline void Release() { State().configured = false; }

template <int kTile>
inline void Zero() {
  size_t rows, colsb;
  Shape(kTile, &rows, &colsb);
  for (size_t r = 0; r < rows; ++r) std::memset(State().data[kTile][r], 0, colsb);
}

template <int kTile>
inline void Load(const void* base, size_t stride) {
  size_t rows, colsb;
  Shape(kTile, &rows, &colsb);
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(State().data[kTile][r], static_cast<const char*>(base) + r * stride, colsb);
}

template <int kTile>
inline void Store(void* base, size_t stride) {
  size_t rows, colsb;
  Shape(kTile, &rows, &colsb);
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(base) + r * stride, State().data[kTile][r], colsb);
}

// bf16 bits as f32, denormals as (signed) zero.
inline float Bf16Daz(uint16_t bits) {
  if ((bits & 0x7f80u) == 0) bits &= 0x8000u;
  const uint32_t u = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float Ftz(float x) {
  return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x;
}

template <int kC, int kA, int kB>
inline void DotBf16() {
  size_t c_rows, c_colsb, a_rows, a_colsb, b_rows, b_colsb;
  Shape(kC, &c_rows, &c_colsb);
  Shape(kA, &a_rows, &a_colsb);
  Shape(kB, &b_rows, &b_colsb);
  if (c_rows != a_rows) Fail("tdpbf16ps: rows of C and A differ", kC);
  if (c_colsb != b_colsb) Fail("tdpbf16ps: row bytes of C and B differ", kC);
  if (a_colsb / 4 != b_rows) Fail("tdpbf16ps: pairs of A and rows of B differ", kA);
  EmulatedTiles& s = State();
  for (size_t m = 0; m < c_rows; ++m) {
    float c[AmxTiles::kWordsPerRow];
    std::memcpy(c, s.data[kC][m], c_colsb);
    const uint16_t* a = reinterpret_cast<const uint16_t*>(s.data[kA][m]);
    for (size_t k = 0; k < a_colsb / 4; ++k) {
      const uint16_t* b = reinterpret_cast<const uint16_t*>(s.data[kB][k]);
      for (size_t n = 0; n < c_colsb / 4; ++n) {
        c[n] = Ftz(c[n] + Bf16Daz(a[2 * k]) * Bf16Daz(b[2 * n]));
        c[n] = Ftz(c[n] + Bf16Daz(a[2 * k + 1]) * Bf16Daz(b[2 * n + 1]));
      }
    }
    std::memcpy(s.data[kC][m], c, c_colsb);
  }
}

}  // namespace
}  // namespace flash::cpu::amx
