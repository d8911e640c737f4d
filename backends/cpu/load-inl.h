// Loading f32 / f16 / bf16 rows into f32 tiles (per-target code). f16 and bf16 are
// storage formats only: every element is widened once per tile and all arithmetic is
// f32. Widening is exact, so this step adds no error.

#if defined(FLASH_CPU_LOAD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASH_CPU_LOAD_INL_H_
#undef FLASH_CPU_LOAD_INL_H_
#else
#define FLASH_CPU_LOAD_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "backends/cpu/convert.h"
#include "dispatch/module_abi.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <typename T16>
HWY_INLINE void Widen16(const T16* HWY_RESTRICT src, size_t n, float scale,
                        float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<T16, decltype(df)> dh;
  const size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale);
  size_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Mul(hn::PromoteTo(df, hn::LoadU(dh, src + i)), vs), df, dst + i);
  if (i < n) {  // tail through a zero-padded lane buffer: never reads past the row
    HWY_ALIGN T16 in[hn::MaxLanes(df)];
    HWY_ALIGN float out[hn::MaxLanes(df)];
    std::memset(static_cast<void*>(in), 0, sizeof(in));
    std::memcpy(static_cast<void*>(in), src + i, (n - i) * sizeof(T16));
    hn::Store(hn::Mul(hn::PromoteTo(df, hn::Load(dh, in)), vs), df, out);
    std::memcpy(dst + i, out, (n - i) * sizeof(float));
  }
}

// dst[0..n) = scale · src[0..n) converted to f32.
HWY_INLINE void LoadRow(int32_t dtype, const void* src, size_t n, float scale, float* dst) {
  if (dtype == FLASH_F32) {
    const hn::ScalableTag<float> df;
    const size_t N = hn::Lanes(df);
    const float* s = static_cast<const float*>(src);
    const auto vs = hn::Set(df, scale);
    size_t i = 0;
    for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, s + i), vs), df, dst + i);
    for (; i < n; ++i) dst[i] = s[i] * scale;
  } else if (dtype == FLASH_F16) {
#if HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
    // No F16C here: Highway's emulated promotion loses inf/NaN; convert exactly.
    const uint16_t* h = static_cast<const uint16_t*>(src);
    for (size_t i = 0; i < n; ++i) dst[i] = F32FromF16(h[i]) * scale;
#else
    Widen16(static_cast<const hwy::float16_t*>(src), n, scale, dst);
#endif
  } else {
    Widen16(static_cast<const hwy::bfloat16_t*>(src), n, scale, dst);
  }
}

// Copies `rows` rows of `n` values (element stride `ld_src` between rows, in
// elements) into a dense f32 tile with row stride ld_dst, zero-filling columns
// [n, ld_dst) and rows [rows, padded_rows).
HWY_INLINE void LoadTile(int32_t dtype, const void* src, int64_t ld_src, size_t rows,
                         size_t padded_rows, size_t n, float scale, float* dst, size_t ld_dst) {
  const size_t esize = dtype == FLASH_F32 ? 4 : 2;
  for (size_t r = 0; r < rows; ++r) {
    float* d = dst + r * ld_dst;
    LoadRow(dtype, static_cast<const char*>(src) + static_cast<int64_t>(r) * ld_src * esize, n,
            scale, d);
    for (size_t c = n; c < ld_dst; ++c) d[c] = 0.0f;
  }
  for (size_t r = rows; r < padded_rows; ++r)
    std::memset(dst + r * ld_dst, 0, ld_dst * sizeof(float));
}

// Like LoadTile, but into the panel-major layout of BOperand (microkernel-inl.h):
// columns padded with zeros to whole vectors and cut into panels of panel_width
// columns; panel p is a dense rows x width block starting at dst + p·panel_width·rows.
HWY_INLINE void LoadPanels(int32_t dtype, const void* src, int64_t ld_src, size_t rows, size_t cols,
                           size_t panel_width, float* dst) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const size_t padded = (cols + N - 1) / N * N;
  const size_t esize = dtype == FLASH_F32 ? 4 : 2;
  for (size_t r = 0; r < rows; ++r) {
    const char* row = static_cast<const char*>(src) + static_cast<int64_t>(r) * ld_src * esize;
    for (size_t c0 = 0; c0 < padded; c0 += panel_width) {
      const size_t width = std::min(panel_width, padded - c0);
      float* out = dst + c0 * rows + r * width;
      const size_t valid = std::min(width, cols - c0);
      LoadRow(dtype, row + c0 * esize, valid, 1.0f, out);
      for (size_t c = valid; c < width; ++c) out[c] = 0.0f;
    }
  }
}

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASH_CPU_LOAD_INL_H_
