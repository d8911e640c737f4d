// Per-tile steps shared by the two forward tensor-core kernels (fwd_mma_kernel.cuh and
// fwd_mma_pair_kernel.cuh), on an S tile held as m16n8 mma accumulators:
// s[mt][nt][e] is row row0 + 16*mt + 8*(e >= 2), key key0 + 8*nt + (e & 1), where
// row0 / key0 already include this lane's offsets (g, 2*tig).
#pragma once

#include <cmath>

#include "device_ops.cuh"
#include "kernel_params.hpp"
#include "mask.cuh"

namespace flash::cuda {

// s <- softcap * tanh(s * scale / softcap) when use_softcap (cap_in = scale / softcap),
// then -inf where the mask hides the key (only called per element on boundary tiles).
template <int MT, int NT>
__device__ __forceinline__ void softcap_and_mask(float (&s)[MT][NT][4], float softcap,
                                                 const MaskParams& mask, bool use_softcap,
                                                 float cap_in, bool masked, int row0, int key0) {
  if (use_softcap) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = softcap * tanhf(s[mt][nt][e] * cap_in);
  }
  if (!masked) return;
    // Per row, the visible keys relative to this lane's first column: then each element
    // is two compares against compile-time column offsets.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + mt * 16 + h * 8;
      const KeyRange r = visible_keys(mask, row, row);
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

// The largest of this lane's 2·NT scores of row half h (s[nt][2h], s[nt][2h + 1]) as a tree
// of fmaxf, depth log2(2·NT). The loop `mx = fmaxf(mx, ...)` compiles to a chain of 2·NT
// dependent FMNMX (ptxas does not reassociate fmaxf): 14 % of the D = 128 wgmma forward's
// samples (ncu); the tree measured +1-4 % at D = 64 and within the spread at D = 128 / 256,
// where the other warpgroup's products hid most of the chain (bench/RESULTS.md, session 18).
// fmaxf ignores NaN, so the tree returns what the chain did (the max of the non-NaN scores).
template <int NT>
__device__ __forceinline__ float row_half_max(const float (&s)[NT][4], int h) {
  float m[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) m[nt] = fmaxf(s[nt][2 * h], s[nt][2 * h + 1]);
#pragma unroll
  for (int stride = 1; stride < NT; stride *= 2)
#pragma unroll
    for (int nt = 0; nt + stride < NT; nt += 2 * stride) m[nt] = fmaxf(m[nt], m[nt + stride]);
  return m[0];
}

// One step of a row's online softmax on raw scores (before the mult = scale·log2(e)
// factor, or the capped score under softcap). Every p of the row is
// exp2((score − max)·mult): the difference is exact where it matters (Sterbenz: scores
// within a factor 2 of the max), so the row's largest score gives p = 1 exactly and every
// exponent keeps f32's relative precision however large the logits. The one-FFMA form
// exp2(score·mult − max·mult) subtracts a rounded max·mult: at logits of 1e4 that is
// ~5e-4 in every exponent, p_max = 1 ± 3e-4, which the f16/bf16 rounding of P before
// P·V then turns into an output error of up to one ulp (3x the tolerance rule in
// Numerics.LogitsUpTo1e4AfterScalingForward). Cost: one FADD more per score.
// tile_max: the row's largest score in this tile (−inf if it sees none). Out: the max to
// subtract (0 while the row has seen no key, so exp2 gives 0, never NaN) and alpha,
// the factor for the row's running sum and O (0 at its first visible tile).
__device__ __forceinline__ void online_softmax_max(float& row_max, float tile_max, float mult,
                                                   float& max_used, float& alpha) {
  const float mx = fmaxf(row_max, tile_max);
  max_used = mx == -INFINITY ? 0.f : mx;
  alpha = fast_exp2((row_max - max_used) * mult);
  row_max = mx;
}

// p = exp2((score − max)·mult); −inf scores give 0.
__device__ __forceinline__ float softmax_p(float score, float max_used, float mult) {
  return fast_exp2((score - max_used) * mult);
}

// O *= alpha for an m16n8 accumulator tile (e 0-1: row g, factor alpha[mt][0]; e 2-3: row
// g + 8, alpha[mt][1]). kLazy: skipped when no row max of the warp moved (every alpha is 1
// exactly, as after the first tiles a new maximum is rare); the vote costs more than the
// multiplies it saves where O is narrow (each caller's measurement says where).
template <bool kLazy, int MT, int OT>
__device__ __forceinline__ void rescale_o(float (&acc)[MT][OT][4], const float (&alpha)[MT][2]) {
  bool moved = false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) moved |= alpha[mt][0] != 1.f || alpha[mt][1] != 1.f;
  if (kLazy && !__any_sync(0xffffffffu, moved)) return;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < OT; ++nt) {
      acc[mt][nt][0] *= alpha[mt][0];
      acc[mt][nt][1] *= alpha[mt][0];
      acc[mt][nt][2] *= alpha[mt][1];
      acc[mt][nt][3] *= alpha[mt][1];
    }
}

// The row's lse (natural log) from its max and sum; rows that saw no key: −inf. A NaN
// sum (a NaN or inf − inf in the row) stays NaN, as in the reference.
__device__ __forceinline__ float row_lse(float row_max, float row_sum, float mult) {
  return row_sum == 0.f ? -INFINITY : fmaf(row_max, mult, log2f(row_sum)) * kLn2;
}

// Non-finite values in V and the mask. P·V on tensor cores multiplies the masked keys'
// p = 0 by their v rows, and 0·NaN = NaN: a NaN or inf in v of a key that a row does not
// see would reach that row. So a tile that straddles the mask is checked once its V has
// landed (each thread reads the 16-byte chunks it copied), and a block where any V value
// is NaN/inf takes pv_visible_keys_only for that tile instead of the mma loop. Real data
// never takes it; the check costs a few instructions per chunk on boundary tiles only.
template <int kRows, int kChunks, int kThreads, class T>
__device__ __forceinline__ bool own_chunks_nonfinite(uint32_t smem_base) {
  bool bad = false;
#pragma unroll
  for (int it = 0; it < kRows * kChunks / kThreads; ++it) {  // load_tile_async's mapping
    const int idx = it * kThreads + threadIdx.x;
    bad |= has_nonfinite<T>(lds128(tile_addr<kChunks>(smem_base, idx / kChunks, idx % kChunks)));
  }
  return bad;
}

// O += P·V for one warp's rows over the keys each row sees, with scalar FMAs (the exact
// path above). P arrives in the mma A-fragment layout: frag(mt, kk, reg, lane) returns
// register `reg` of k-step kk of m-tile mt as held by `lane` (the quad of the row holds
// its 16 keys: reg 0/1 = keys 2·tig..+1 of rows g / g+8, reg 2/3 = the same 8 keys on).
// acc[mt][nt] covers the value columns of chunk nt (8 columns each); the P columns are
// keys 16·kk.. of the V tile, whose 16-byte chunk nt of key row j is at v_addr(j, nt)
// (shared memory; any tile layout); key0 is the global index of its key 0.
// row0: global row of this lane's (mt = 0, g) row.
template <class T, int MT, int KSTEPS, int OT, class Frag, class VAddr>
__device__ __forceinline__ void pv_visible_keys_only(float (&acc)[MT][OT][4], const Frag& frag,
                                                     const VAddr& v_addr, const MaskParams& m,
                                                     int row0, int key0) {
  const int lane = threadIdx.x % 32, tig = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    int lo[2], hi[2];  // visible keys of rows g and g + 8, relative to key0
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + mt * 16 + h * 8;
      const KeyRange r = visible_keys(m, row, row);
      lo[h] = r.begin - key0;
      hi[h] = r.end - key0;
    }
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
      for (int upper = 0; upper < 2; ++upper)
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int src = (lane & ~3) | t;
          const float2 p_rows[2] = {unpack2<T>(frag(mt, kk, 2 * upper, src)),
                                    unpack2<T>(frag(mt, kk, 2 * upper + 1, src))};
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            const int key = kk * 16 + upper * 8 + t * 2 + b;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if (key < lo[h] || key >= hi[h]) continue;
              const float pv = b == 0 ? p_rows[h].x : p_rows[h].y;
#pragma unroll
              for (int nt = 0; nt < OT; ++nt) {
                const float2 v = unpack2<T>(lds32(v_addr(key, nt) + tig * 4));
                acc[mt][nt][2 * h] = fmaf(pv, v.x, acc[mt][nt][2 * h]);
                acc[mt][nt][2 * h + 1] = fmaf(pv, v.y, acc[mt][nt][2 * h + 1]);
              }
            }
          }
        }
  }
}

// ---- the Hopper forward's staged O (fwd_wgmma_kernel.cuh) ---------------------------------
// An O atom: 64 rows x 64 columns of 16-bit elements (128-byte rows) in the loads' 128-byte
// swizzle. Warp `warp` of a consumer writes its 16 rows of atoms [a0, a1) from `packed`
// (n8 block nt, row half h: the accumulator layout, pairs converted) with stmatrix, atom a
// at sO + (a - a0) * kOAtomBytes. Lanes 8m.. address matrix m = (n8 block 2j + m / 2, row
// half m % 2) of pair j.
constexpr int kOAtomBytes = 64 * 128;
template <int kOT>
__device__ __forceinline__ void stage_o_atoms(uint32_t sO, const uint32_t (&packed)[kOT][2], int a0,
                                              int a1, int warp, int lane) {
  const int row = warp * 16 + lane % 8 + 8 * ((lane / 8) % 2), chunk = lane / 16;
#pragma unroll
  for (int a = a0; a < a1; ++a)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int nt = a * 8 + 2 * j;
      if (nt >= kOT) break;  // columns past the used ones (never stored: the O map ends there)
      stmatrix_x4(sO + (a - a0) * kOAtomBytes + row * 128 + (((2 * j + chunk) ^ (row % 8)) * 16),
                  packed[nt][0], packed[nt][1], packed[nt + 1][0], packed[nt + 1][1]);
    }
}
// Copies staged atoms [a0, a1) (at most kPassAtoms) to o (row stride in elements) in 16-byte
// chunks: thread ct of the consumer's 128 stores chunks ct, ct + 128, .. (8 a row: a warp
// writes four rows of 128 bytes), rows [0, rows) and columns [0, cols) only (cols a
// multiple of 8: a chunk is all in or all out).
template <int kPassAtoms, class T>
__device__ __forceinline__ void copy_o_atoms(T* o, int64_t row_stride, uint32_t sO, int a0, int a1,
                                             int rows, int cols, int ct) {
#pragma unroll
  for (int q = ct; q < kPassAtoms * 64 * 8; q += 128) {
    const int a = a0 + q / (64 * 8), r = q % (64 * 8) / 8, ch = q % 8;
    if (a < a1 && r < rows && a * 64 + ch * 8 < cols)
      *reinterpret_cast<uint4*>(o + r * row_stride + a * 64 + ch * 8) =
          lds128(sO + (a - a0) * kOAtomBytes + r * 128 + ((ch ^ (r % 8)) * 16));
  }
}

// O straight from the registers (the Hopper forward's tiles without staging): this thread's
// rows row0 and row0 + 8 below `rows`, columns 8nt + 2tig and + 1 (o_pair(nt, h): the two
// values of row half h packed), o at column 2tig of row 0. When head_dim_v fills the tile (the
// usual case) the columns need no test: the stores take immediate offsets from one row address
// (a test per store, with the row address rebuilt for each, made this epilogue ~5 % of a
// causal 4k forward's samples, ncu).
template <int kOT, class T, class Pair>
__device__ __forceinline__ void store_o_rows(T* o, int64_t row_stride, int row0, int rows,
                                             int head_dim_v, int tig, const Pair& o_pair) {
  const bool full_width = head_dim_v == kOT * 8;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row >= rows) continue;
    T* orow = o + static_cast<int64_t>(row) * row_stride;
    if (full_width) {
#pragma unroll
      for (int nt = 0; nt < kOT; ++nt) *reinterpret_cast<uint32_t*>(orow + nt * 8) = o_pair(nt, h);
    } else {
#pragma unroll
      for (int nt = 0; nt < kOT; ++nt)  // head_dim_v is a multiple of 8: col + 1 fits too
        if (nt * 8 + tig * 2 < head_dim_v)
          *reinterpret_cast<uint32_t*>(orow + nt * 8) = o_pair(nt, h);
    }
  }
}

}  // namespace flash::cuda
