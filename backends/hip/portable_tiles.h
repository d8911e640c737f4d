// Tile shapes of the portable (plain FMA) path, shared by its forward and backward
// kernels, and the one function that maps a head dim onto them.
//
// A row (a query row in forward/dQ, a key row in dK/dV) is owned by kGroup
// consecutive lanes; lane t holds head-dim elements t, t + kGroup, ... (kPerLane of
// them), so a dot product is kPerLane FMAs plus a log2(kGroup)-step shuffle sum.
// kGroup <= 16 divides both wave64 and warp32: no wave size is assumed anywhere.
#pragma once

namespace flash::hip {

template <int kGroup_, int kPerLane_, int kTileRows_>
struct PortableTile {
  static constexpr int kGroup = kGroup_;
  static constexpr int kPerLane = kPerLane_;
  static constexpr int kDim = kGroup * kPerLane;  // padded head dim (q/k and v alike)
  static constexpr int kThreads = 256;
  static constexpr int kRowsPerBlock = kThreads / kGroup;
  // Rows of the streamed operand (K/V in forward and dQ, Q/dO in dK/dV) per smem tile.
  static constexpr int kTileRows = kTileRows_;
  // Two f32 tiles [kTileRows][kDim] (K and V, or Q and dO).
  static constexpr int kSmemBytes = 2 * kTileRows * kDim * 4;
  static_assert(kGroup >= 1 && kGroup <= 16 && (kGroup & (kGroup - 1)) == 0,
                "a row's lanes must fit in any wave (32 or 64)");
  static_assert(kThreads % kGroup == 0, "whole rows per block");
  static_assert(kSmemBytes <= 32768, "static shared memory stays well under 48 KiB");
};

using PortableD32 = PortableTile<8, 4, 64>;
using PortableD64 = PortableTile<8, 8, 64>;
using PortableD128 = PortableTile<8, 16, 32>;
using PortableD256 = PortableTile<8, 32, 16>;
using PortableD512 = PortableTile<16, 32, 8>;

constexpr int kPortableMaxHeadDim = PortableD512::kDim;

// The decode kernel (portable_decode.hip) on these tiles: a block holds kDecodeRowsSmall or
// kDecodeRowsLarge packed query rows of one kv head (its GQA group's heads times the query
// tokens); problems with more rows per kv head run on the forward kernels.
constexpr int kDecodeRowsSmall = 4;
constexpr int kDecodeRowsLarge = 16;
// Rows per decode block for `rows` packed rows per kv head, or 0: not a decode.
inline int decode_rows(int64_t rows) {
  return rows <= kDecodeRowsSmall   ? kDecodeRowsSmall
         : rows <= kDecodeRowsLarge ? kDecodeRowsLarge
                                    : 0;
}

// Calls fn(Tile{}) with the smallest tile whose kDim covers max(head_dim, head_dim_v);
// returns false when the dim exceeds kPortableMaxHeadDim.
template <class Fn>
bool with_portable_tile(int64_t dim, Fn&& fn) {
  if (dim <= PortableD32::kDim) return fn(PortableD32{}), true;
  if (dim <= PortableD64::kDim) return fn(PortableD64{}), true;
  if (dim <= PortableD128::kDim) return fn(PortableD128{}), true;
  if (dim <= PortableD256::kDim) return fn(PortableD256{}), true;
  if (dim <= PortableD512::kDim) return fn(PortableD512{}), true;
  return false;
}

}  // namespace flash::hip
