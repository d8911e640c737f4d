// ctest cuda_mask_bounds (host only, no GPU): mask.cuh's rows_seeing_all_keys, the two row
// bounds the wgmma backward tests its mask-free tiles on (C::kMaskRowBounds), gives the answer
// of tile_fully_visible for every tile, and (small problems) exactly the rows for which
// key_visible holds for every key of the range. Masks: none, causal, windows, Sq != Sk both
// ways, unbounded sides (kUnbounded), lengths up to just under 2^30 (the host's limit).
#include <cstdint>
#include <cstdio>
#include <random>

#include "mask.cuh"

namespace {

using flash::cuda::MaskParams;

int failures = 0;

void fail(const char* what, const MaskParams& m, int r0, int r1, int k0, int k1) {
  if (++failures <= 10)
    std::printf(
        "FAIL %s: sq %d skv %d offset %d left %d right %d bounded %d rows %d..%d keys %d..%d\n",
        what, m.seqlen_q, m.seqlen_kv, m.diag_offset, m.left, m.right, m.bounded, r0, r1, k0, k1);
}

MaskParams mask_of(int sq, int skv, int left, int right, bool bounded) {
  const int unb = MaskParams::kUnbounded;
  return MaskParams{sq, skv, skv - sq, bounded ? left : unb, bounded ? right : unb, bounded};
}

// Against the tile test, for tiles anywhere in the problem (and past its ends).
void check_tiles(const MaskParams& m, std::mt19937_64& rng, int tiles) {
  std::uniform_int_distribution<int> row(0, m.seqlen_q + 200), key(0, m.seqlen_kv + 200);
  std::uniform_int_distribution<int> width(0, 130);
  for (int t = 0; t < tiles; ++t) {
    const int r0 = row(rng), k0 = key(rng);
    const int r1 = r0 + width(rng), k1 = k0 + width(rng);
    const bool want = flash::cuda::tile_fully_visible(m, r0, r1, k0, k1);
    if (flash::cuda::rows_seeing_all_keys(m, k0, k1).holds(r0, r1) != want)
      fail("differs from tile_fully_visible", m, r0, r1, k0, k1);
  }
}

// Small problems: the interval is exactly the rows that see every key of the range.
void check_rows(const MaskParams& m) {
  for (int k0 = 0; k0 < m.seqlen_kv + 3; ++k0)
    for (int k1 = k0; k1 < k0 + 18; ++k1) {
      const auto rows = flash::cuda::rows_seeing_all_keys(m, k0, k1);
      for (int r = 0; r < m.seqlen_q + 3; ++r) {
        bool all = true;
        for (int k = k0; k <= k1; ++k) all = all && flash::cuda::key_visible(m, r, k);
        if (rows.holds(r, r) != all) fail("not the rows seeing all keys", m, r, r, k0, k1);
      }
    }
}

}  // namespace

int main() {
  std::mt19937_64 rng(38);
  int masks = 0;
  for (int sq : {1, 17, 113})
    for (int skv : {1, 16, 17, 100})
      for (int left : {0, 3, 48, MaskParams::kUnbounded})
        for (int right : {0, 5, 16, MaskParams::kUnbounded})
          for (bool bounded : {false, true}) {
            check_rows(mask_of(sq, skv, left, right, bounded));
            ++masks;
          }
  const int big = (1 << 30) - 1;  // the host's bound on sequence lengths
  for (int sq : {257, 4096, big})
    for (int skv : {1, 1000, 16384, big})
      for (int left : {0, 64, 1 << 20, MaskParams::kUnbounded})
        for (int right : {0, 7, MaskParams::kUnbounded})
          for (bool bounded : {false, true}) {
            check_tiles(mask_of(sq, skv, left, right, bounded), rng, 2000);
            ++masks;
          }
  std::printf("%d masks checked, %d failures\n", masks, failures);
  return failures == 0 ? 0 : 1;
}
