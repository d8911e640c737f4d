// Tile shapes of the MFMA (CDNA) kernels and the function that maps a head dim onto
// them. A wave owns 32 rows (one MFMA tile); kDim is the head dim padded with zeros to a
// multiple of 32 so P·V and dK/dV produce whole 32-column accumulator blocks.
#pragma once

#include <cstdint>

namespace flash::hip {

template <int kDim_>
struct MfmaTile {
  static constexpr int kDim = kDim_;  // padded head dim (q/k and v alike)
  static constexpr int kWaves = 4;    // per block
  static constexpr int kThreads = kWaves * 64;
  static constexpr int kRowsPerWave = 32;  // one MFMA tile
  static constexpr int kRowsPerBlock = kWaves * kRowsPerWave;
  static constexpr int kFwdKeys = 64;   // forward K/V tile (two MFMA key tiles)
  static constexpr int kDqKeys = 32;    // dQ pass K/V tile
  static constexpr int kDkdvRows = 32;  // dK/dV pass Q/dO tile
  // 16-bit LDS rows are padded by 4 elements: keeps 8-byte alignment of the 4-element
  // operand reads and shifts consecutive rows across LDS banks.
  static constexpr int kPad = 4;
  static_assert(kDim % 32 == 0 && kDim <= 128, "whole accumulator blocks, <= 128 regs of O");
  static_assert(kFwdKeys % 32 == 0 && kDqKeys % 32 == 0 && kDkdvRows == 32, "MFMA tiles");
  // Forward LDS: K [kFwdKeys][kDim+pad] and V^T [kDim][kFwdKeys+pad], 16-bit.
  static constexpr int kFwdLdsBytes = 2 * (kFwdKeys * (kDim + kPad) + kDim * (kFwdKeys + kPad));
  static_assert(kFwdLdsBytes <= 64 * 1024, "fits the 64 KiB LDS of a CDNA CU");
};

constexpr int kMfmaMaxHeadDim = 128;

template <class Fn>
bool with_mfma_tile(int64_t dim, Fn&& fn) {
  if (dim <= 32) return fn(MfmaTile<32>{}), true;
  if (dim <= 64) return fn(MfmaTile<64>{}), true;
  if (dim <= 128) return fn(MfmaTile<128>{}), true;
  return false;
}

}  // namespace flash::hip
