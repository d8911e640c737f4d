// Tile shapes of each SIMD target (per-target code). One named config per register
// file size; everything derived from it is computed here, once, and checked.

#if defined(FLASH_CPU_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASH_CPU_TILES_INL_H_
#undef FLASH_CPU_TILES_INL_H_
#else
#define FLASH_CPU_TILES_INL_H_
#endif

#include <cstddef>

#include "backends/cpu/cpu_plan.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t Gcd(size_t a, size_t b) { return b == 0 ? a : Gcd(b, a % b); }
constexpr size_t Lcm(size_t a, size_t b) { return a / Gcd(a, b) * b; }

// kRows: query rows per work item (columns of Sᵀ, rows of O); kKeys: keys per K/V
// tile. Sᵀ = K·Qᵀ runs as kQkMR keys x kQkNR vectors of query rows; O += P·V (and
// the backward's dV, dK, dQ products) as kPvMR rows x kPvNR vectors of head_dim.
template <size_t kRegisters>
struct TileConfig;

// AVX-512: 32 vector registers, FMA takes a broadcast memory operand. 8x3 and 6x4
// keep 24 accumulators + 3-4 B vectors live. 96 rows x 96 keys: Qᵀ, Sᵀ, O and the
// K/V tiles (D = 128) total ~230 KiB, inside a 1-2 MiB L2.
template <>
struct TileConfig<32> {
  static constexpr size_t kRows = 96, kKeys = 96;
  static constexpr size_t kQkMR = 8, kQkNR = 3;
  static constexpr size_t kPvMR = 6, kPvNR = 4;
};

// 16 vector registers (AVX2, SSE4, emulated): 6x2 keeps 12 accumulators + 2 B
// vectors + 1 broadcast live. 96 rows per item halve the K/V traffic per FLOP against
// 48 (K/V copies fell from ~33% to ~11% of forward time on the dev machine); 96 x 96
// tiles are ~230 KiB at D = 128, inside L2.
template <>
struct TileConfig<16> {
  static constexpr size_t kRows = 96, kKeys = 96;
  static constexpr size_t kQkMR = 6, kQkNR = 2;
  static constexpr size_t kPvMR = 6, kPvNR = 2;
};

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr size_t kVectorRegisters = 32;
#else
constexpr size_t kVectorRegisters = 16;
#endif

struct Tiles : TileConfig<kVectorRegisters> {
  static constexpr size_t kLanes = hn::MaxLanes(hn::ScalableTag<float>());
  // Item rows are Sᵀ columns (whole vectors) and O rows (whole kPvMR blocks).
  static constexpr size_t kRowAlign = Lcm(kLanes, kPvMR);
  // Tile keys are Sᵀ rows (kQkMR blocks) and dK/dV rows (kPvMR blocks).
  static constexpr size_t kKeyAlign = Lcm(kQkMR, kPvMR);
  static_assert(kRows % kRowAlign == 0, "rows per item must fill whole vectors and row blocks");
  static_assert(kKeys % kKeyAlign == 0, "keys per tile must fill whole row blocks");
  static_assert(kQkMR * kQkNR + kQkNR + 1 <= kVectorRegisters, "QK micro-tile spills");
  static_assert(kPvMR * kPvNR + kPvNR + 1 <= kVectorRegisters, "PV micro-tile spills");
};

inline TargetTiles MakeTargetTiles() {
  return {hn::Lanes(hn::ScalableTag<float>()), Tiles::kRows, Tiles::kKeys, Tiles::kRowAlign,
          Tiles::kKeyAlign};
}

inline size_t RoundUpTo(size_t n, size_t m) { return (n + m - 1) / m * m; }

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASH_CPU_TILES_INL_H_
