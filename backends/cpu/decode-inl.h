// CPU decode: a few query rows against a long K/V cache, at memory bandwidth
// (per-target code; the plan is decode_plan.h, threads live in cpu_backend.cpp).
//
// Algorithm (flash-decoding on CPU): an item is (sequence, kv head, key chunk) with the
// query rows of every head of the GQA group times the query tokens stacked (<= 16
// rows), so each K/V row is read from memory exactly once, in place (strided, packed
// or paged: no gather copy), and widened in registers. Vectorised along head_dim:
// per block of kBlock keys
//   S = Q·Kᵀ          dot products of 4 rows with 4 keys at a time (the keys share
//                     the Q loads), the 16 reduced together into one vector
//   softcap, mask     per row over the block (vector compare on boundary blocks)
//   online softmax    per row: running max m, sum l (log2 units), O *= α when m grows
//   O += P·V          register-blocked: kRowsPerPass rows x kDvVecs vectors of O stay
//                     in registers over the block; on boundary blocks a row skips the
//                     keys it does not see (never 0·NaN from a masked V row)
// The next blocks' K/V rows are prefetched (rows of one head are heads_kv·D apart, one
// 4 KiB page each at Hkv=8, D=128, f32, where hardware prefetchers stop).
// A split item writes its unnormalised O, m and l to the call's scratch; the combine
// (DecodeCombineImpl) merges the chunks of each (sequence, kv head) in chunk order, so
// the result is bitwise identical for any thread count. Rows that see no key get
// o = 0, lse = -inf.
// Tolerance class: f32 accumulation throughout; error comparable to a naive f32
// attention (the cross-backend suite's 2x-naive rule).
// Measured 2026-11-24, device host (Xeon, 16 cores, 16 threads), Hq=32 Hkv=8 D=128, one
// token, B=1/8, 8k/128k keys: f32 113-158 GB/s of K+V = 0.99-1.45 of a 16-thread host
// copy in the same run, bf16 68-99 GB/s = 0.90-1.74 (was 6-28 GB/s, 0.10-0.43, on the
// prefill tiles). Details and the dev machine: backends/cpu/README.md.
// Run: build/tests/cpu/flash_cpu_decode_test (vs the fp64 oracle, every SIMD target,
// bitwise equal across thread counts), build/bench/flashattn-decode-bench --backend cpu.

#if defined(FLASH_CPU_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASH_CPU_DECODE_INL_H_
#undef FLASH_CPU_DECODE_INL_H_
#else
#define FLASH_CPU_DECODE_INL_H_
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_plan.h"
#include "backends/cpu/decode_plan.h"
#include "backends/cpu/exp-inl.h"
#include "backends/cpu/load-inl.h"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct DecodeConfig {
  // Keys per block: one softmax update and one register pass of P·V per block.
  static constexpr size_t kBlock = 16;
  // Rows (and O vectors per row) whose accumulators stay in registers during P·V:
  // 4 x 4 + 4 V vectors of 32 registers on AVX-512, 4 x 2 + 2 of 16 elsewhere.
  static constexpr size_t kRowsPerPass = 4;
  static constexpr size_t kDvVecs = HWY_TARGET == HWY_AVX3 ? 4 : 2;
  // Keys per Q·K step (they share each Q vector load): kRowsPerPass x kQkKeys dot
  // products fill the lanes of one vector, reduced together (QkStepReduced): 16 on
  // AVX-512 = 16 accumulators + 8 K + 2 Q vectors of the 32 registers.
  static constexpr size_t kQkKeys = hn::MaxLanes(hn::ScalableTag<float>()) > kRowsPerPass
                                        ? hn::MaxLanes(hn::ScalableTag<float>()) / kRowsPerPass
                                        : 1;
  // Keys per P·V step: O stays in registers over this many keys of one head before the
  // next head (4, heads interleaved so V is read in address order, was 5-8% slower in
  // cache on the dev machine and no faster from memory).
  static constexpr size_t kPvKeys = 16;
  // How far ahead the K/V rows are prefetched, in blocks, per DecodePrefetch policy
  // (decode_plan.h); the hints are spread over the Q·K steps (a whole block's hints at
  // once stalled on full miss buffers: perf put 47% of the kernel's time on them).
  // Intel (16-core device host, 16 threads): into L1, one block ahead, beat no software
  // prefetch by 10-20% and hints towards L2 2 or 4 blocks ahead by 5-30% (bf16 still
  // does; f32 runs without hints there since 2026-11-24: DecodePrefetchPolicy,
  // decode_plan.h). AMD (dev
  // machine, Zen 4, one thread): towards L2, two blocks ahead, took 59-61 ns per key
  // and head (bf16) where L1 one block ahead took 85 and none 80-97; the L1 hints of a
  // block's rows, 4 KiB apart, alias into the same few L1 sets there.
  static constexpr size_t kPrefetchBlocksL1 = 1;
  static constexpr size_t kPrefetchBlocksL2 = 2;
  static constexpr size_t kLine = 64;  // bytes per prefetch hint (one cache line)
  // AMD, f32: one hint towards L2 per 4 lines (the L2 prefetchers fetch the lines
  // between). Zen 4, one thread, 128k keys, alternating: f32 70-77 ns per key and head
  // where a hint per line took 84-86 (the hints were ~19% of the in-cache time); bf16
  // took 65-67 that way and 63 with a hint per line, which 16-bit types keep.
  template <class T>
  static constexpr size_t kPrefetchStrideL2 = sizeof(T) == sizeof(float) ? 4 * kLine : kLine;
};
static_assert(DecodeConfig::kBlock % hn::MaxLanes(hn::ScalableTag<float>()) == 0,
              "the softmax runs over whole vectors of keys");
static_assert(kDecodeChunkAlign % DecodeConfig::kBlock == 0, "chunks are whole key blocks");
static_assert(DecodeConfig::kBlock % DecodeConfig::kQkKeys == 0, "Q·K steps tile a block");
static_assert(DecodeConfig::kBlock % DecodeConfig::kPvKeys == 0, "P·V steps tile a block");
static_assert(DecodeConfig::kDvVecs % 2 == 0, "V is widened 2 vectors at a time (LoadPair)");
static_assert(DecodeConfig::kRowsPerPass * (DecodeConfig::kDvVecs + 1) <=
                  (HWY_TARGET == HWY_AVX3 ? 32 : 16),
              "P·V accumulators and V vectors fit the register file");

constexpr float kDecodeLog2e = 1.4426950408889634f;
constexpr float kDecodeLn2 = 0.6931471805599453f;

// 2N elements of a K/V row (N = f32 lanes), widened to f32 in registers as two
// vectors. bf16 comes out in even/odd order (a = elements 0, 2, 4, ..., b = 1, 3, ...):
// one 32-bit load, a shift and a mask, where an in-order widening needs a lane shuffle
// per N elements (on Intel all shuffles share one port, which the horizontal sums of
// Q·K also need). Q is stored in the same order (PermuteRow) and O comes out in it,
// undone when O is written.
template <class DF, class V = hn::Vec<DF>>
HWY_INLINE void LoadPair(DF df, const float* p, V& a, V& b) {
  a = hn::LoadU(df, p);
  b = hn::LoadU(df, p + hn::Lanes(df));
}
template <class DF, class V = hn::Vec<DF>>
HWY_INLINE void LoadPair(DF df, const hwy::bfloat16_t* p, V& a, V& b) {
  const hn::RebindToUnsigned<DF> du;
  const auto raw = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p));
  a = hn::BitCast(df, hn::ShiftLeft<16>(raw));                  // little-endian: even
  b = hn::BitCast(df, hn::And(raw, hn::Set(du, 0xFFFF0000u)));  // odd
}
template <class DF, class V = hn::Vec<DF>>
HWY_INLINE void LoadPair(DF df, const hwy::float16_t* p, V& a, V& b) {
  const size_t N = hn::Lanes(df);
#if HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  // No F16C: Highway's emulated promotion loses inf/NaN; convert exactly.
  HWY_ALIGN float buf[2 * hn::MaxLanes(df)];
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(p);
  for (size_t i = 0; i < 2 * N; ++i) buf[i] = F32FromF16(bits[i]);
  a = hn::Load(df, buf);
  b = hn::Load(df, buf + N);
#else
  const hn::Rebind<hwy::float16_t, DF> dh;
  a = hn::PromoteTo(df, hn::LoadU(dh, p));
  b = hn::PromoteTo(df, hn::LoadU(dh, p + N));
#endif
}
template <class T>
constexpr bool kEvenOdd = std::is_same<T, hwy::bfloat16_t>::value;

// Reorders each block of 2N values of row[0..n) into the LoadPair order of T (in place;
// inverse = true undoes it). n is a multiple of 2N (choose() checks head dims).
template <class T>
HWY_INLINE void PermuteRow(float* row, size_t n, bool inverse) {
  if (!kEvenOdd<T>) return;
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  HWY_ALIGN float tmp[2 * hn::MaxLanes(hn::ScalableTag<float>())];
  for (size_t b = 0; b < n; b += 2 * N) {
    for (size_t i = 0; i < N; ++i) {
      if (inverse) {
        tmp[2 * i] = row[b + i];
        tmp[2 * i + 1] = row[b + N + i];
      } else {
        tmp[i] = row[b + 2 * i];
        tmp[N + i] = row[b + 2 * i + 1];
      }
    }
    std::memcpy(row + b, tmp, 2 * N * sizeof(float));
  }
}

// sc[x·kBlock + t + u] = q_x · k_(t+u) for rows x < kR of q (row stride D), keys
// t .. t+kK-1, one horizontal sum per (row, key): the tail of a block, and row groups
// whose kR·kK accumulators exceed the lanes of one vector (QkStepReduced).
template <size_t kR, size_t kK, class T>
HWY_INLINE void QkStep(const float* HWY_RESTRICT q, size_t D, const T* const* kp, size_t t,
                       float* HWY_RESTRICT sc) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  hn::Vec<decltype(df)> acc[kK][kR];
  for (size_t u = 0; u < kK; ++u)
    for (size_t x = 0; x < kR; ++x) acc[u][x] = hn::Zero(df);
  for (size_t dd = 0; dd < D; dd += 2 * N) {
    hn::Vec<decltype(df)> ka[kK], kb[kK];
    for (size_t u = 0; u < kK; ++u) LoadPair(df, kp[t + u] + dd, ka[u], kb[u]);
    for (size_t x = 0; x < kR; ++x) {
      const auto qa = hn::LoadU(df, q + x * D + dd), qb = hn::LoadU(df, q + x * D + dd + N);
      for (size_t u = 0; u < kK; ++u)
        acc[u][x] = hn::MulAdd(qb, kb[u], hn::MulAdd(qa, ka[u], acc[u][x]));
    }
  }
  for (size_t u = 0; u < kK; ++u)
    for (size_t x = 0; x < kR; ++x)
      sc[x * DecodeConfig::kBlock + t + u] = hn::GetLane(hn::SumOfLanes(df, acc[u][x]));
}

// Lane i of the result = sum of the lanes of v[i], i < kM (kM a power of two <= lanes;
// v is overwritten). Pairs of vectors are folded with ConcatEven + ConcatOdd, each level
// halving the lanes per input, so kM sums take kM - 1 folds (two permutes and an add
// each) plus one self-fold per level below the full width; one horizontal sum per
// vector took ~log2(lanes) shuffles and adds each, which made them the bulk of Q·K.
// (Compile-time recursion and full unrolling: with a loop over the halving count GCC
// kept the accumulators in memory and stored all of them on every step of Q·K.)
template <size_t kM, class DF, class V = hn::Vec<DF>>
HWY_INLINE void FoldPairs(DF df, V* v) {
#if HWY_TARGET == HWY_SCALAR
  static_assert(kM == 1, "one lane: nothing to fold");  // and no ConcatEven there
  (void)df;
  (void)v;
#else
  if constexpr (kM > 1) {
#pragma GCC unroll 16
    for (size_t i = 0; i < kM / 2; ++i)
      v[i] = hn::Add(hn::ConcatEven(df, v[2 * i + 1], v[2 * i]),
                     hn::ConcatOdd(df, v[2 * i + 1], v[2 * i]));
    FoldPairs<kM / 2>(df, v);
  }
#endif
}
template <size_t kM, class DF, class V = hn::Vec<DF>>
HWY_INLINE V SumLanesOfEach(DF df, V* v) {
  FoldPairs<kM>(df, v);
  V sum = v[0];
#if HWY_TARGET != HWY_SCALAR
  // Now kM groups of N / kM lanes, group i summing to v[i]'s total: fold each group.
  constexpr size_t kGroup = hn::MaxLanes(DF()) / kM;
#pragma GCC unroll 16
  for (size_t g = kGroup; g > 1; g /= 2)
    sum = hn::Add(hn::ConcatEven(df, sum, sum), hn::ConcatOdd(df, sum, sum));
#endif
  return sum;
}

// Smallest power of two >= n.
constexpr size_t CeilPow2(size_t n) { return n <= 1 ? 1 : 2 * CeilPow2((n + 1) / 2); }

// As QkStep, with the kR·kK dot products of the step reduced together (SumLanesOfEach):
// accumulator x·kK + u holds row x, key t + u; kR·kK <= lanes (QkFits).
template <size_t kR, size_t kK, class T>
HWY_INLINE void QkStepReduced(const float* HWY_RESTRICT q, size_t D, const T* const* kp, size_t t,
                              float* HWY_RESTRICT sc) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  constexpr size_t kM = CeilPow2(kR * kK);  // unused accumulators stay zero
  hn::Vec<decltype(df)> acc[kM];
#pragma GCC unroll 16
  for (size_t i = 0; i < kM; ++i) acc[i] = hn::Zero(df);
  for (size_t dd = 0; dd < D; dd += 2 * N) {
    hn::Vec<decltype(df)> ka[kK], kb[kK];
#pragma GCC unroll 16
    for (size_t u = 0; u < kK; ++u) LoadPair(df, kp[t + u] + dd, ka[u], kb[u]);
#pragma GCC unroll 4
    for (size_t x = 0; x < kR; ++x) {
      const auto qa = hn::LoadU(df, q + x * D + dd), qb = hn::LoadU(df, q + x * D + dd + N);
#pragma GCC unroll 16
      for (size_t u = 0; u < kK; ++u)
        acc[x * kK + u] = hn::MulAdd(qb, kb[u], hn::MulAdd(qa, ka[u], acc[x * kK + u]));
    }
  }
  HWY_ALIGN float sums[hn::MaxLanes(df)];
  hn::Store(SumLanesOfEach<kM>(df, acc), df, sums);
  for (size_t x = 0; x < kR; ++x)
    for (size_t u = 0; u < kK; ++u) sc[x * DecodeConfig::kBlock + t + u] = sums[x * kK + u];
}

// O[x] += Σ_t p[x][t] · V_t over the vectors [dv0, dv0 + kV·N) of rows x < kR, keys
// [0, kb). kFull: every row sees every key of the block; otherwise row x sees keys
// [t_lo[x], t_hi[x]] only and skips the others (a masked V row may hold NaN).
template <size_t kR, size_t kV, bool kFull, class T>
HWY_INLINE void PvPass(const float* HWY_RESTRICT sc, const T* const* vp, size_t t0, size_t t1,
                       size_t dv0, float* HWY_RESTRICT o, size_t Dv, const int64_t* t_lo,
                       const int64_t* t_hi) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  hn::Vec<decltype(df)> acc[kR][kV];
  for (size_t x = 0; x < kR; ++x)
    for (size_t w = 0; w < kV; ++w) acc[x][w] = hn::LoadU(df, o + x * Dv + dv0 + w * N);
  for (size_t t = t0; t < t1; ++t) {
    hn::Vec<decltype(df)> vv[kV];
    for (size_t w = 0; w < kV; w += 2) LoadPair(df, vp[t] + dv0 + w * N, vv[w], vv[w + 1]);
    for (size_t x = 0; x < kR; ++x) {
      if (!kFull && (static_cast<int64_t>(t) < t_lo[x] || static_cast<int64_t>(t) > t_hi[x]))
        continue;
      const auto pb = hn::Set(df, sc[x * DecodeConfig::kBlock + t]);
      for (size_t w = 0; w < kV; ++w) acc[x][w] = hn::MulAdd(pb, vv[w], acc[x][w]);
    }
  }
  for (size_t x = 0; x < kR; ++x)
    for (size_t w = 0; w < kV; ++w) hn::StoreU(acc[x][w], df, o + x * Dv + dv0 + w * N);
}

template <size_t kR, bool kFull, class T>
HWY_INLINE void PvRows(const float* sc, const T* const* vp, size_t t0, size_t t1, float* o,
                       size_t Dv, const int64_t* t_lo, const int64_t* t_hi) {
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  constexpr size_t kV = DecodeConfig::kDvVecs;
  size_t dv0 = 0;
  for (; dv0 + kV * N <= Dv; dv0 += kV * N)
    PvPass<kR, kV, kFull>(sc, vp, t0, t1, dv0, o, Dv, t_lo, t_hi);
  for (; dv0 < Dv; dv0 += 2 * N) PvPass<kR, 2, kFull>(sc, vp, t0, t1, dv0, o, Dv, t_lo, t_hi);
}

// Runs fn(std::integral_constant<size_t, rows>) for rows in 1..kRowsPerPass.
template <class Fn>
HWY_INLINE void WithRows(size_t rows, const Fn& fn) {
  static_assert(DecodeConfig::kRowsPerPass == 4, "one case per row count below");
  switch (rows) {
    case 1:
      fn(std::integral_constant<size_t, 1>());
      break;
    case 2:
      fn(std::integral_constant<size_t, 2>());
      break;
    case 3:
      fn(std::integral_constant<size_t, 3>());
      break;
    default:
      fn(std::integral_constant<size_t, 4>());
      break;
  }
}

// Softcap, mask and online-softmax update of one row's block of scores (in place:
// scores become probabilities). Returns false when the row has seen no key yet
// (m = -inf: its probabilities are all 0 and O, l stay 0).
HWY_INLINE bool SoftmaxRow(float* HWY_RESTRICT s, size_t kb, int64_t t_lo, int64_t t_hi,
                           float softcap, float* HWY_RESTRICT m, float* HWY_RESTRICT l,
                           float* HWY_RESTRICT o, size_t Dv) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  constexpr size_t K = DecodeConfig::kBlock;
  const auto neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  // Keys outside [t_lo, t_hi] (the row's mask, and the block's end) get -inf, after the
  // softcap (tanh(-inf) would bring them back as a finite value).
  const bool masked = t_lo > 0 || t_hi < static_cast<int64_t>(K) - 1;
  const auto lo = hn::Set(df, static_cast<float>(t_lo)), hi = hn::Set(df, static_cast<float>(t_hi));
  auto mx = neg_inf;
  for (size_t t = 0; t < K; t += N) {
    auto v = hn::LoadU(df, s + t);
    if (softcap > 0) {
      // cap · tanh(s / cap), then · log2(e) (cap · log2e alone overflows for huge caps).
      v = hn::Mul(
          hn::Mul(hn::Set(df, softcap), hn::Tanh(df, hn::Mul(v, hn::Set(df, 1.0f / softcap)))),
          hn::Set(df, kDecodeLog2e));
    }
    if (masked) {
      const auto j = hn::Iota(df, static_cast<float>(t));
      v = hn::IfThenElse(hn::And(hn::Ge(j, lo), hn::Le(j, hi)), v, neg_inf);
    }
    hn::StoreU(v, df, s + t);
    mx = hn::Max(mx, v);
  }
  (void)kb;
  const float m_old = *m;
  const float m_new = std::max(m_old, hn::GetLane(hn::MaxOfLanes(df, mx)));
  if (m_new == -std::numeric_limits<float>::infinity()) {
    std::memset(s, 0, K * sizeof(float));
    return false;
  }
  const auto mv = hn::Set(df, m_new);
  auto sum = hn::Zero(df);
  for (size_t t = 0; t < K; t += N) {
    const auto e = Exp2(df, hn::Sub(hn::LoadU(df, s + t), mv));
    hn::StoreU(e, df, s + t);
    sum = hn::Add(sum, e);
  }
  if (m_new != m_old) {  // rescale O and l by α = 2^(m_old - m_new) (0 on the first keys)
    const auto alpha = Exp2(df, hn::Set(df, m_old - m_new));
    for (size_t e = 0; e < Dv; e += N) hn::StoreU(hn::Mul(hn::LoadU(df, o + e), alpha), df, o + e);
    *l *= hn::GetLane(alpha);
  }
  *l += hn::GetLane(hn::SumOfLanes(df, sum));
  *m = m_new;
  return true;
}

// Prefetches k_bytes / v_bytes from the K / V row starts of keys [j, j + n).
HWY_INLINE void PrefetchLine(const char* p, bool l2) {
  // hwy::Prefetch targets L1 only; towards L2 it takes the compiler's hint (T2).
  if (l2)
    __builtin_prefetch(p, 0, 1);
  else
    hwy::Prefetch(p);
}
template <class T>
HWY_INLINE void PrefetchKeys(const KvRows& kr, const KvRows& vr, int64_t j, size_t n,
                             size_t k_bytes, size_t v_bytes, bool l2) {
  const size_t step = l2 ? DecodeConfig::kPrefetchStrideL2<T> : DecodeConfig::kLine;
  const char* rows[DecodeConfig::kBlock];
  kr.Rows(j, n, rows);
  for (size_t t = 0; t < n; ++t)
    for (size_t off = 0; off < k_bytes; off += step) PrefetchLine(rows[t] + off, l2);
  vr.Rows(j, n, rows);
  for (size_t t = 0; t < n; ++t)
    for (size_t off = 0; off < v_bytes; off += step) PrefetchLine(rows[t] + off, l2);
}

// Writes normalised rows (o / l, lse = ln2·(m + log2 l)) of one (sequence, kv head).
// o is in the LoadPair order of the dtype (restored here, in place).
HWY_INLINE void WriteRows(const DecodePlan& plan, int64_t b, int64_t h, float* o, const float* m,
                          const float* l) {
  const flash_problem& p = *plan.p;
  const DecodeSequence& s = plan.seqs[static_cast<size_t>(b)];
  const size_t Dv = static_cast<size_t>(p.head_dim_v);
  const int64_t R = s.sq * plan.group;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t hq = h * plan.group + r / s.sq, i = r % s.sq;
    const float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
    if (p.dtype == FLASH_BF16)
      PermuteRow<hwy::bfloat16_t>(o + r * static_cast<int64_t>(Dv), Dv, true);
    StoreFromF32(p.dtype, o + r * static_cast<int64_t>(Dv), Dv, inv, plan.ORow(b, i, hq));
    if (float* lse = plan.Lse(b, i, hq))
      *lse = l[r] == 0.0f ? -std::numeric_limits<float>::infinity()
                          : (m[r] + std::log2(l[r])) * kDecodeLn2;
  }
}

template <class T>
HWY_NOINLINE void DecodeItemT(const DecodePlan& plan, int64_t item) {
  const flash_problem& p = *plan.p;
  constexpr size_t K = DecodeConfig::kBlock, RP = DecodeConfig::kRowsPerPass;
  int64_t b, h0, c;
  plan.Decode(item, b, h0, c);
  const DecodeSequence& s = plan.seqs[static_cast<size_t>(b)];
  const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
  const size_t heads = static_cast<size_t>(std::min(plan.heads_per_item, p.heads_kv - h0));
  const size_t RH = static_cast<size_t>(s.sq * plan.group);  // rows per kv head
  const size_t R = heads * RH;                               // rows of the item

  Workspace& ws = Workspace::ForThisThread();
  ws.reset(Workspace::RoundUp(R * D) + Workspace::RoundUp(R * Dv) + Workspace::RoundUp(R * K) +
           2 * Workspace::RoundUp(R));
  float* q = ws.take(R * D);
  float* o = ws.take(R * Dv);
  float* sc = ws.take(R * K);
  float* m = ws.take(R);
  float* l = ws.take(R);
  int64_t* idx = ws.index(4 * RH);
  int64_t *row_lo = idx, *row_hi = idx + RH, *t_lo = idx + 2 * RH, *t_hi = idx + 3 * RH;

  // Q rows scaled by scale·log2e (scale alone with a softcap: log2e comes after tanh).
  const float q_scale = p.softcap > 0 ? p.scale : p.scale * kDecodeLog2e;
  for (size_t r = 0; r < R; ++r) {
    const int64_t hq =
        (h0 + static_cast<int64_t>(r / RH)) * plan.group + static_cast<int64_t>(r % RH) / s.sq;
    LoadRow(p.dtype, plan.QRow(b, static_cast<int64_t>(r % RH) % s.sq, hq), D, q_scale, q + r * D);
    PermuteRow<T>(q + r * D, D, false);
  }
  for (size_t r = 0; r < RH; ++r) {  // the mask depends on the token only
    row_lo[r] = s.mask.lo(static_cast<int64_t>(r) % s.sq);
    row_hi[r] = s.mask.hi(static_cast<int64_t>(r) % s.sq);
  }
  std::fill(o, o + R * Dv, 0.0f);
  std::fill(m, m + R, -std::numeric_limits<float>::infinity());
  std::fill(l, l + R, 0.0f);

  // Keys of this chunk that some row sees (row intervals grow with the token index).
  const int64_t j_begin = std::max(c * plan.chunk_keys, s.mask.lo(0));
  const int64_t j_end =
      std::min(std::min((c + 1) * plan.chunk_keys, s.sk) - 1, s.mask.hi(s.sq - 1));
  // Rows of the first kv head; head h0 + hh is hh head strides further.
  const KvRows kr = plan.Keys(plan.k, p.k_stride, b, h0), vr = plan.Keys(plan.v, p.v_stride, b, h0);
  const int64_t k_head = p.k_stride[2] * static_cast<int64_t>(sizeof(T));
  const int64_t v_head = p.v_stride[2] * static_cast<int64_t>(sizeof(T));
  // Bytes from the first head's row start to the last head's row end (one span when the
  // heads are packed, as in [.., heads, dim]).
  const size_t k_span = static_cast<size_t>(k_head) * (heads - 1) + D * sizeof(T);
  const size_t v_span = static_cast<size_t>(v_head) * (heads - 1) + Dv * sizeof(T);
  const bool l2 = plan.prefetch == DecodePrefetch::kL2Far;
  const bool prefetch = plan.prefetch != DecodePrefetch::kNone;
  const int64_t ahead = static_cast<int64_t>(
      (l2 ? DecodeConfig::kPrefetchBlocksL2 : DecodeConfig::kPrefetchBlocksL1) * K);
  for (int64_t j = j_begin; prefetch && j <= j_end && j < j_begin + ahead;
       j += static_cast<int64_t>(K))
    PrefetchKeys<T>(kr, vr, j, static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j)), k_span,
                    v_span, l2);

  // Key rows of each head of the block: kp[hh·K + t].
  constexpr size_t HI = static_cast<size_t>(kDecodeHeadsPerItem);
  const char* k0[K];
  const char* v0[K];
  const char* kp_bytes[HI * K];
  const char* vp_bytes[HI * K];
  const T* const* kp = reinterpret_cast<const T* const*>(kp_bytes);
  const T* const* vp = reinterpret_cast<const T* const*>(vp_bytes);
  constexpr size_t QK = DecodeConfig::kQkKeys, PV = DecodeConfig::kPvKeys;
  // Per group of RP rows of a head: every row sees every key of the block.
  bool full[HI * ((kDecodeMaxRows + RP - 1) / RP)];
  const size_t groups = (RH + RP - 1) / RP;
  for (int64_t j0 = j_begin; j0 <= j_end; j0 += static_cast<int64_t>(K)) {
    const size_t kb = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j0));
    const int64_t j_pf = j0 + ahead;
    kr.Rows(j0, kb, k0);
    vr.Rows(j0, kb, v0);
    for (size_t hh = 0; hh < heads; ++hh)
      for (size_t t = 0; t < kb; ++t) {
        kp_bytes[hh * K + t] = k0[t] + static_cast<int64_t>(hh) * k_head;
        vp_bytes[hh * K + t] = v0[t] + static_cast<int64_t>(hh) * v_head;
      }
    // Per row of a head: the block's keys it sees, as offsets in [0, kb).
    for (size_t r = 0; r < RH; ++r) {
      t_lo[r] = std::max<int64_t>(row_lo[r] - j0, 0);
      t_hi[r] = std::min<int64_t>(row_hi[r] - j0, static_cast<int64_t>(kb) - 1);
    }
    // S = Q·Kᵀ key-major (all heads of a key, then the next key): K is read in address
    // order when the heads are packed, a stream the hardware prefetchers follow.
    for (size_t t = 0; t < kb; t += QK) {
      if (prefetch && j_pf + static_cast<int64_t>(t) <= j_end)  // spread over the block
        PrefetchKeys<T>(
            kr, vr, j_pf + static_cast<int64_t>(t),
            static_cast<size_t>(std::min<int64_t>(QK, j_end + 1 - j_pf - static_cast<int64_t>(t))),
            k_span, v_span, l2);
      for (size_t hh = 0; hh < heads; ++hh)
        for (size_t r0 = 0; r0 < RH; r0 += RP)
          WithRows(std::min(RP, RH - r0), [&](auto rows) {
            constexpr size_t kR = decltype(rows)::value;
            const size_t r = hh * RH + r0;
            if (t + QK > kb)
              for (size_t u = t; u < kb; ++u)
                QkStep<kR, 1>(q + r * D, D, kp + hh * K, u, sc + r * K);
            else if constexpr (kR * QK <= hn::MaxLanes(hn::ScalableTag<float>()))
              QkStepReduced<kR, QK>(q + r * D, D, kp + hh * K, t, sc + r * K);
            else
              QkStep<kR, QK>(q + r * D, D, kp + hh * K, t, sc + r * K);
          });
    }
    // Softmax per row; rows of the last block (or under a mask) that see only part of
    // the block's keys take the masked P·V.
    for (size_t hh = 0; hh < heads; ++hh)
      for (size_t r0 = 0; r0 < RH; r0 += RP) {
        bool all = true;
        for (size_t x = r0; x < std::min(RH, r0 + RP); ++x) {
          const size_t r = hh * RH + x;
          if (!SoftmaxRow(sc + r * K, kb, t_lo[x], t_hi[x], p.softcap, m + r, l + r, o + r * Dv,
                          Dv))
            all = false;  // nothing seen yet: P·V skips the row (t_hi = -1 below)
          all = all && t_lo[x] == 0 && t_hi[x] == static_cast<int64_t>(kb) - 1;
        }
        full[hh * groups + r0 / RP] = all;
      }
    // O += P·V in steps of PV keys, all heads per step (V in address order).
    for (size_t t = 0; t < kb; t += PV) {
      const size_t t1 = std::min(kb, t + PV);
      for (size_t hh = 0; hh < heads; ++hh)
        for (size_t r0 = 0; r0 < RH; r0 += RP)
          WithRows(std::min(RP, RH - r0), [&](auto n) {
            constexpr size_t kR = decltype(n)::value;
            const size_t r = hh * RH + r0;
            if (full[hh * groups + r0 / RP]) {
              PvRows<kR, true>(sc + r * K, vp + hh * K, t, t1, o + r * Dv, Dv, t_lo, t_hi);
            } else {
              int64_t lo[RP], hi[RP];
              for (size_t x = 0; x < kR; ++x) {
                lo[x] = t_lo[r0 + x];
                hi[x] = m[r + x] == -std::numeric_limits<float>::infinity() ? -1 : t_hi[r0 + x];
              }
              PvRows<kR, false>(sc + r * K, vp + hh * K, t, t1, o + r * Dv, Dv, lo, hi);
            }
          });
    }
  }

  for (size_t hh = 0; hh < heads; ++hh) {
    const int64_t h = h0 + static_cast<int64_t>(hh);
    const size_t r = hh * RH;
    if (s.chunks == 1) {
      WriteRows(plan, b, h, o + r * Dv, m + r, l + r);
      continue;
    }
    float* part = plan.Partial(b, h, c);
    std::memcpy(part, o + r * Dv, RH * Dv * sizeof(float));
    std::memcpy(part + RH * Dv, m + r, RH * sizeof(float));
    std::memcpy(part + RH * Dv + RH, l + r, RH * sizeof(float));
  }
}

HWY_INLINE void DecodeItemImpl(const DecodePlan& plan, int64_t item) {
  switch (plan.p->dtype) {
    case FLASH_F32:
      return DecodeItemT<float>(plan, item);
    case FLASH_F16:
      return DecodeItemT<hwy::float16_t>(plan, item);
    default:
      return DecodeItemT<hwy::bfloat16_t>(plan, item);
  }
}

// Merges the chunks of (sequence, kv head) unit = b·heads_kv + h in chunk order:
// M = max m_c, L = Σ l_c·2^(m_c - M), O = Σ 2^(m_c - M)·O_c / L. Chunks whose rows saw
// no key (l_c = 0) are skipped.
HWY_INLINE void DecodeCombineImpl(const DecodePlan& plan, int64_t unit) {
  const flash_problem& p = *plan.p;
  const int64_t b = unit / p.heads_kv, h = unit % p.heads_kv;
  const DecodeSequence& s = plan.seqs[static_cast<size_t>(b)];
  const size_t Dv = static_cast<size_t>(p.head_dim_v);
  const size_t R = static_cast<size_t>(s.sq * plan.group);
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  Workspace& ws = Workspace::ForThisThread();
  ws.reset(Workspace::RoundUp(R * Dv) + 2 * Workspace::RoundUp(R));
  float* o = ws.take(R * Dv);
  float* m = ws.take(R);
  float* l = ws.take(R);
  std::fill(o, o + R * Dv, 0.0f);
  for (size_t r = 0; r < R; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < s.chunks; ++c) {
      const float* part = plan.Partial(b, h, c);
      if (part[R * Dv + R + r] > 0.0f) mx = std::max(mx, part[R * Dv + r]);
    }
    float sum = 0.0f;
    for (int64_t c = 0; c < s.chunks; ++c) {
      const float* part = plan.Partial(b, h, c);
      if (part[R * Dv + R + r] > 0.0f)
        sum += part[R * Dv + R + r] * std::exp2(part[R * Dv + r] - mx);
    }
    m[r] = mx;
    l[r] = sum;
    if (sum == 0.0f) continue;
    float* acc = o + r * Dv;
    for (int64_t c = 0; c < s.chunks; ++c) {
      const float* part = plan.Partial(b, h, c);
      if (!(part[R * Dv + R + r] > 0.0f)) continue;
      const auto w = hn::Set(df, std::exp2(part[R * Dv + r] - mx));
      for (size_t e = 0; e < Dv; e += N)
        hn::StoreU(hn::MulAdd(w, hn::LoadU(df, part + r * Dv + e), hn::LoadU(df, acc + e)), df,
                   acc + e);
    }
  }
  WriteRows(plan, b, h, o, m, l);
}

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASH_CPU_DECODE_INL_H_
