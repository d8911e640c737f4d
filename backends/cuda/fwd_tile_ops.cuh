// Per-tile steps shared by the two forward tensor-core kernels (fwd_mma_kernel.cuh and
// fwd_mma_pair_kernel.cuh), on an S tile held as m16n8 mma accumulators:
// s[mt][nt][e] is row row0 + 16*mt + 8*(e >= 2), key key0 + 8*nt + (e & 1), where
// row0 / key0 already include this lane's offsets (g, 2*tig).
#pragma once

#include <cmath>

#include "kernel_params.hpp"
#include "mask.cuh"

namespace flash::cuda {

// s <- softcap * tanh(s * scale / softcap) when use_softcap (cap_in = scale / softcap),
// then -inf where the mask hides the key (only called per element on boundary tiles).
template <int MT, int NT>
__device__ __forceinline__ void softcap_and_mask(float (&s)[MT][NT][4], const FwdParams& p,
                                                 bool use_softcap, float cap_in, bool masked,
                                                 int row0, int key0) {
  if (use_softcap) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = p.softcap * tanhf(s[mt][nt][e] * cap_in);
  }
  if (!masked) return;
    // Per row, the visible keys relative to this lane's first column: then each element
    // is two compares against compile-time column offsets.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + mt * 16 + h * 8;
      const KeyRange r = visible_keys(p.mask, row, row);
      const int lo = r.begin - key0, hi = r.end - key0;  // visible: [lo, hi)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = nt * 8 + e;
          if (col < lo || col >= hi) s[mt][nt][2 * h + e] = -INFINITY;
        }
    }
}

}  // namespace flash::cuda
