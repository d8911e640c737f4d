// Standalone check of libflashattn_hip.so through the module ABI (no core library):
// forward and backward of a set of odd-sized problems (GQA, Sq != Sk both ways, causal,
// sliding window, softcap, Dv != D, strided views, seqlen_kv = 0, rows that see no
// key) in f32/f16/bf16 against a double-precision reference computed here from the
// same dtype-rounded inputs. Outputs are poisoned with NaN first; the backward is run
// twice and must be bitwise identical (deterministic); strided cases run the second
// time from host memory (staged by the backend), which must not change a bit either.
// Packed batches (forward + backward), cache lengths and paged caches run as sequences of
// small dense problems, each against its own reference (run_sequence_case).
// Built with the module's own compiler (hipcc, or nvcc for hip-on-cuda) because it
// allocates device memory through backends/hip/portability.h.
// Usage: hip_selfcheck <path/to/libflashattn_hip.so>   (exit 77 = no device: skipped)
// In the CPU-emulator build (tests/hip/emulator) the module is linked in, not loaded.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dispatch/module_abi.h"
#include "portability.h"

namespace {

namespace gpu = flash::hip::gpu;

// ---- host 16-bit conversions (round to nearest even) ---------------------------
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t to_bf16(float f) {
  const uint32_t u = bits_of(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }
float from_f16(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float s = (h & 0x8000) ? -1.f : 1.f;
  if (e == 0) return s * std::ldexp(static_cast<float>(m), -24);
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * std::ldexp(static_cast<float>(m | 1024), e - 25);
}
uint16_t to_f16(float f) {  // inputs here are small and finite
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  f = std::fabs(f);
  if (f < std::ldexp(1.f, -24) / 2) return sign;
  int e;
  std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + 15;
  if (exp < 1) exp = 1;  // subnormal range: fixed quantum 2^-24
  const float quantum = std::ldexp(1.f, exp - 15 - 10);
  const float q = std::nearbyint(f / quantum);  // ties to even under the default mode
  uint32_t mant = static_cast<uint32_t>(q);
  if (mant >= 2048) mant >>= 1, ++exp;
  if (mant < 1024) return static_cast<uint16_t>(sign | mant);  // subnormal
  return static_cast<uint16_t>(sign | (exp << 10) | (mant - 1024));
}

struct Case {
  int64_t batch, sq, skv, hq, hkv, d, dv;
  int causal;
  int64_t wl, wr;
  float softcap;
  int64_t head_pad;  // extra elements between heads (strided view)
  float input_scale;
};

const Case kCases[] = {
    {1, 1, 1, 1, 1, 64, 64, 0, -1, -1, 0.f, 0, 1.f},
    {2, 17, 113, 4, 2, 64, 64, 0, -1, -1, 0.f, 0, 1.f},
    {1, 113, 17, 2, 1, 128, 128, 1, -1, -1, 0.f, 0, 1.f},
    {1, 257, 257, 2, 2, 96, 80, 1, 32, -1, 0.f, 5, 1.f},
    {1, 100, 90, 3, 1, 40, 40, 0, 7, 3, 0.f, 0, 1.f},
    {1, 40, 10, 2, 2, 32, 32, 1, -1, -1, 0.f, 0, 1.f},      // rows 0..29 see nothing
    {1, 33, 0, 2, 1, 64, 64, 0, -1, -1, 0.f, 0, 1.f},       // no keys at all
    {1, 65, 129, 2, 2, 128, 128, 0, -1, -1, 30.f, 0, 4.f},  // softcap, large logits
    {1, 31, 47, 2, 1, 256, 256, 1, -1, -1, 0.f, 3, 1.f},
    {1, 19, 23, 1, 1, 512, 512, 0, -1, -1, 0.f, 0, 1.f},
    {1, 70, 70, 2, 2, 16, 48, 0, -1, -1, 0.f, 0, 3.f},
    {2, 50, 80, 4, 1, 64, 64, 0, -1, 0, 0.f, 0, 1.f},    // window_right only (= causal)
    {1, 90, 40, 2, 2, 64, 64, 0, 5, 2, 0.f, 2, 1.f},     // Sq > Sk, two-sided window
    {1, 77, 200, 1, 1, 64, 64, 0, -1, -1, 0.f, 0, 5.f},  // large logits, no softcap
    {1, 1000, 1000, 1, 1, 64, 64, 1, -1, -1, 0.f, 0, 1.f},
    // At most 16 rows per kv head (query tokens x GQA group): the decode kernel.
    {2, 1, 300, 8, 2, 256, 256, 0, -1, -1, 0.f, 0, 1.f},
    {1, 3, 200, 3, 1, 96, 80, 1, 50, -1, 0.f, 2, 1.f},  // 9 rows, causal + window, strided
    {1, 1, 100, 2, 1, 512, 512, 0, -1, -1, 10.f, 0, 2.f},
    {3, 2, 40, 16, 2, 32, 32, 0, -1, -1, 0.f, 0, 1.f},  // 16 rows
    {1, 4, 2, 4, 4, 64, 64, 1, -1, -1, 0.f, 0, 1.f},    // rows 0, 1 see nothing
};

// Decode: a few query rows per head over many keys, a grid of 4 blocks (portable and MFMA
// tiles alike) that the emulator's 8 compute units split over the keys by themselves.
const Case kDecodeCases[] = {
    {1, 1, 3000, 4, 1, 128, 128, 0, -1, -1, 0.f, 0, 1.f},
    {1, 4, 2000, 4, 2, 64, 64, 1, -1, -1, 0.f, 1, 1.f},    // speculative rows, causal, strided
    {1, 2, 1500, 2, 2, 64, 64, 0, 700, -1, 20.f, 0, 3.f},  // window, softcap
};

struct Layout {  // [batch, seq, heads, dim] with padded heads
  int64_t s[3];
  size_t elems;
};
Layout layout(int64_t batch, int64_t seq, int64_t heads, int64_t dim, int64_t pad) {
  Layout l;
  l.s[2] = dim + pad;
  l.s[1] = heads * l.s[2];
  l.s[0] = seq * l.s[1];
  l.elems = static_cast<size_t>(batch * l.s[0]);
  return l;
}

// A tensor held as rounded floats on the host and as dtype bytes on the device.
struct Tensor {
  std::vector<float> host;
  void* dev = nullptr;
  size_t bytes = 0;
};

int g_dtype = FLASH_F32;
size_t elem_bytes() { return g_dtype == FLASH_F32 ? 4 : 2; }
float round_dtype(float f) {
  if (g_dtype == FLASH_F16) return from_f16(to_f16(f));
  if (g_dtype == FLASH_BF16) return from_bf16(to_bf16(f));
  return f;
}

bool ok(gpu::Error e, const char* what) {
  if (e == gpu::kSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, gpu::error_string(e));
  return false;
}

void upload(Tensor& t) {
  std::vector<unsigned char> raw(t.host.size() * elem_bytes());
  for (size_t i = 0; i < t.host.size(); ++i) {
    if (g_dtype == FLASH_F32) {
      std::memcpy(&raw[4 * i], &t.host[i], 4);
    } else {
      const uint16_t h = g_dtype == FLASH_F16 ? to_f16(t.host[i]) : to_bf16(t.host[i]);
      std::memcpy(&raw[2 * i], &h, 2);
    }
  }
  t.bytes = raw.size() ? raw.size() : 1;
  ok(gpu::malloc_device(&t.dev, t.bytes), "malloc");
  if (!raw.empty()) ok(gpu::copy_to_device(t.dev, raw.data(), raw.size(), nullptr), "copy");
}

std::vector<unsigned char> bytes_of(const void* dev, size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  if (bytes) ok(gpu::copy_to_host(raw.data(), dev, bytes, nullptr), "copy back");
  ok(gpu::synchronize(nullptr), "sync");
  return raw;
}

std::vector<float> decode(const std::vector<unsigned char>& raw) {
  std::vector<float> out(raw.size() / elem_bytes());
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    if (g_dtype == FLASH_F32) {
      std::memcpy(&out[i], &raw[4 * i], 4);
      continue;
    }
    std::memcpy(&h, &raw[2 * i], 2);
    out[i] = g_dtype == FLASH_F16 ? from_f16(h) : from_bf16(h);
  }
  return out;
}

std::vector<float> download(const Tensor& t, size_t n) {
  return decode(bytes_of(t.dev, n * elem_bytes()));
}

Tensor output(size_t n) {  // poisoned with NaN (all-ones bytes)
  Tensor t;
  t.host.assign(n, NAN);
  std::vector<unsigned char> raw(n * elem_bytes(), 0xff);
  t.bytes = raw.size() ? raw.size() : 1;
  ok(gpu::malloc_device(&t.dev, t.bytes), "malloc");
  if (!raw.empty()) ok(gpu::copy_to_device(t.dev, raw.data(), raw.size(), nullptr), "copy");
  return t;
}

// An f32 lse output of n values on the device, poisoned with NaN.
float* nan_lse_on_device(size_t n) {
  void* d = nullptr;
  ok(gpu::malloc_device(&d, n * 4 + 4), "malloc lse");
  std::vector<float> nan_lse(n, NAN);
  if (n) ok(gpu::copy_to_device(d, nan_lse.data(), n * 4, nullptr), "copy");
  return static_cast<float*>(d);
}

// Whether the forward must run split over the keys (split_kv.h): every problem with two or
// more keys under a forced FLASH_HIP_SPLITS, the decode cases on the emulator's 8 CUs.
bool g_expect_split = false;
// Forward only (the forced-split reruns: the backward does not split).
bool g_forward_only = false;

// The kernel choose() names for p; false (and a FAIL line) when it declines, or when a
// split-KV launch was expected and not planned.
bool chosen_kernel(const flash_backend_module* module, const flash_problem& p, const char* label,
                   std::string& kernel) {
  flash_message msg{};
  if (module->choose(&p, FLASH_FORWARD, &msg) != FLASH_OK) {
    std::printf("FAIL %s: choose declined: %s\n", label, msg.text);
    return false;
  }
  kernel = msg.text;
  if (g_expect_split && p.seqlen_kv >= 2 && kernel.find("split-kv") == std::string::npos) {
    std::printf("FAIL %s: expected a split-KV forward, choose() gave [%s]\n", label, msg.text);
    return false;
  }
  return true;
}

// ---- reference (double) and comparison -----------------------------------------
double g_budget_used = 0;  // largest error / tolerance of the current case

struct Tol {
  double fwd, bwd, lse;
};
Tol tolerance() {  // relative to the largest |reference| value of each tensor
  if (g_dtype == FLASH_F16) return {5e-3, 1.5e-2, 5e-3};
  if (g_dtype == FLASH_BF16) return {3e-2, 8e-2, 3e-2};
  return {2e-5, 2e-4, 2e-5};
}

// Max |got - ref| / max |ref| over the elements at the given offsets; NaN fails.
bool compare(const char* what, const std::vector<float>& got, const std::vector<double>& ref,
             const std::vector<size_t>& at, double tol) {
  double max_ref = 1e-30, max_err = 0;
  for (size_t idx : at) {
    if (std::isnan(got[idx])) {
      std::printf("    %s: NaN at %zu\n", what, idx);
      return false;
    }
    max_ref = std::fmax(max_ref, std::fabs(ref[idx]));
    max_err = std::fmax(max_err, std::fabs(got[idx] - ref[idx]));
  }
  const double rel = max_err / max_ref;
  const bool pass = rel <= tol;
  g_budget_used = std::fmax(g_budget_used, rel / tol);
  if (!pass)
    std::printf("    %s: error %.3g of max %.3g (relative %.3g > %.3g)\n", what, max_err, max_ref,
                rel, tol);
  return pass;
}

// lse against its reference: -inf exactly where the reference has it (rows that see no key),
// else within tol (absolute, natural-log units); NaN fails.
bool lse_matches(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  double err = 0;
  for (size_t x = 0; x < got.size(); ++x) {
    if (std::isinf(want[x]) || std::isinf(got[x])) {
      if (got[x] != want[x]) err = INFINITY;
      continue;
    }
    err = std::fmax(err, std::isnan(got[x]) ? INFINITY : std::fabs(got[x] - want[x]));
  }
  g_budget_used = std::fmax(g_budget_used, err / tol);
  if (err > tol) std::printf("    lse: max error %.3g > %.3g\n", err, tol);
  return err <= tol;
}

// Offsets of the logical elements of a [batch, seq, heads, dim] view.
std::vector<size_t> offsets(const Layout& l, int64_t b, int64_t s, int64_t h, int64_t d) {
  std::vector<size_t> out;
  for (int64_t x = 0; x < b; ++x)
    for (int64_t y = 0; y < s; ++y)
      for (int64_t z = 0; z < h; ++z)
        for (int64_t w = 0; w < d; ++w) out.push_back(x * l.s[0] + y * l.s[1] + z * l.s[2] + w);
  return out;
}

bool run_case(const flash_backend_module* module, const Case& c) {
  const char* dtype_name[] = {"f32", "f16", "bf16"};
  char label[256];
  std::snprintf(label, sizeof label,
                "%s b%lld sq%lld skv%lld h%lld/%lld d%lld/%lld causal%d win(%lld,%lld) cap%g",
                dtype_name[g_dtype], (long long)c.batch, (long long)c.sq, (long long)c.skv,
                (long long)c.hq, (long long)c.hkv, (long long)c.d, (long long)c.dv, c.causal,
                (long long)c.wl, (long long)c.wr, c.softcap);
  std::mt19937 rng(static_cast<unsigned>(c.sq * 131 + c.skv * 7 + c.d + g_dtype));
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const Layout lq = layout(c.batch, c.sq, c.hq, c.d, c.head_pad);
  const Layout lk = layout(c.batch, c.skv, c.hkv, c.d, c.head_pad);
  const Layout lv = layout(c.batch, c.skv, c.hkv, c.dv, c.head_pad);
  const Layout lo = layout(c.batch, c.sq, c.hq, c.dv, c.head_pad);
  auto random = [&](const Layout& l, float scale) {
    Tensor t;
    t.host.resize(l.elems);
    for (float& x : t.host) x = round_dtype(uni(rng) * scale);
    upload(t);
    return t;
  };
  Tensor q = random(lq, c.input_scale), k = random(lk, c.input_scale), v = random(lv, 1.f);
  Tensor dout = random(lo, 1.f);

  flash_problem p{};
  p.batch = c.batch, p.seqlen_q = c.sq, p.seqlen_kv = c.skv, p.heads_q = c.hq;
  p.heads_kv = c.hkv, p.head_dim = c.d, p.head_dim_v = c.dv, p.dtype = g_dtype;
  p.causal = c.causal, p.scale = static_cast<float>(1.0 / std::sqrt(double(c.d)));
  p.softcap = c.softcap, p.window_left = c.wl, p.window_right = c.wr;
  for (int a = 0; a < 3; ++a)
    p.q_stride[a] = lq.s[a], p.k_stride[a] = lk.s[a], p.v_stride[a] = lv.s[a],
    p.o_stride[a] = lo.s[a];
  const size_t n_lse = static_cast<size_t>(c.batch * c.hq * c.sq);
  float* const lse_dev = nan_lse_on_device(n_lse);
  p.lse = lse_dev;
  std::string kernel;
  if (!chosen_kernel(module, p, label, kernel)) return false;
  flash_message msg{};

  // Reference forward and backward in double.
  const int64_t group = c.hq / c.hkv;
  std::vector<double> o_ref(lo.elems, 0), lse_ref(n_lse, -INFINITY), dq_ref(lq.elems, 0),
      dk_ref(lk.elems, 0), dv_ref(lv.elems, 0);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t i = 0; i < c.sq; ++i) {
        const int64_t hk = h / group, diag = i + c.skv - c.sq;
        const float* qi = &q.host[b * lq.s[0] + i * lq.s[1] + h * lq.s[2]];
        std::vector<double> s(c.skv, -INFINITY), t(c.skv, 0);
        double m = -INFINITY;
        for (int64_t j = 0; j < c.skv; ++j) {
          if ((c.causal && j > diag) || (c.wl >= 0 && j < diag - c.wl) ||
              (c.wr >= 0 && j > diag + c.wr))
            continue;
          const float* kj = &k.host[b * lk.s[0] + j * lk.s[1] + hk * lk.s[2]];
          double dot = 0;
          for (int64_t d = 0; d < c.d; ++d) dot += double(qi[d]) * kj[d];
          double x = dot * p.scale;
          if (c.softcap > 0) t[j] = std::tanh(x / c.softcap), x = c.softcap * t[j];
          s[j] = x;
          m = std::fmax(m, x);
        }
        if (m == -INFINITY) continue;
        double l = 0;
        for (int64_t j = 0; j < c.skv; ++j) l += std::exp(s[j] - m);
        lse_ref[(b * c.hq + h) * c.sq + i] = m + std::log(l);
        double* oi = &o_ref[b * lo.s[0] + i * lo.s[1] + h * lo.s[2]];
        const float* doi = &dout.host[b * lo.s[0] + i * lo.s[1] + h * lo.s[2]];
        std::vector<double> pr(c.skv), dp(c.skv, 0);
        double delta = 0;
        for (int64_t j = 0; j < c.skv; ++j) {
          pr[j] = std::exp(s[j] - m) / l;
          const float* vj = &v.host[b * lv.s[0] + j * lv.s[1] + hk * lv.s[2]];
          for (int64_t d = 0; d < c.dv; ++d)
            oi[d] += pr[j] * vj[d], dp[j] += double(doi[d]) * vj[d];
          delta += pr[j] * dp[j];
        }
        for (int64_t j = 0; j < c.skv; ++j) {
          if (pr[j] == 0) continue;
          double ds = pr[j] * (dp[j] - delta) * p.scale;
          if (c.softcap > 0) ds *= 1 - t[j] * t[j];
          const float* kj = &k.host[b * lk.s[0] + j * lk.s[1] + hk * lk.s[2]];
          double* dkj = &dk_ref[b * lk.s[0] + j * lk.s[1] + hk * lk.s[2]];
          double* dvj = &dv_ref[b * lv.s[0] + j * lv.s[1] + hk * lv.s[2]];
          double* dqi = &dq_ref[b * lq.s[0] + i * lq.s[1] + h * lq.s[2]];
          for (int64_t d = 0; d < c.d; ++d) dqi[d] += ds * kj[d], dkj[d] += ds * qi[d];
          for (int64_t d = 0; d < c.dv; ++d) dvj[d] += pr[j] * doi[d];
        }
      }

  const Tol tol = tolerance();
  bool pass = true;
  g_budget_used = 0;
  // Forward.
  Tensor o = output(lo.elems);
  if (module->forward(&p, q.dev, k.dev, v.dev, o.dev, &msg) != FLASH_OK) {
    std::printf("FAIL %s: forward: %s\n", label, msg.text);
    return false;
  }
  const auto o_at = offsets(lo, c.batch, c.sq, c.hq, c.dv);
  pass &= compare("o", download(o, lo.elems), o_ref, o_at, tol.fwd);
  // Strided cases run once more from host memory (the backend stages it through device
  // memory): results must be bitwise those of the device-memory run, gaps untouched.
  const bool host_rerun = c.head_pad > 0;
  if (host_rerun) {
    const size_t eb = elem_bytes();
    auto hq = bytes_of(q.dev, lq.elems * eb), hk = bytes_of(k.dev, lk.elems * eb),
         hv = bytes_of(v.dev, lv.elems * eb);
    std::vector<unsigned char> ho(lo.elems * eb, 0xff);
    std::vector<float> hlse(n_lse, NAN);
    flash_problem ph = p;
    ph.lse = hlse.data();
    if (module->forward(&ph, hq.data(), hk.data(), hv.data(), ho.data(), &msg) != FLASH_OK) {
      std::printf("FAIL %s: forward from host memory: %s\n", label, msg.text);
      return false;
    }
    if (ho != bytes_of(o.dev, lo.elems * eb) ||
        std::memcmp(hlse.data(), bytes_of(lse_dev, n_lse * 4).data(), n_lse * 4) != 0)
      std::printf("    forward from host memory differs from device memory\n"), pass = false;
  }
  {
    std::vector<float> lse(n_lse);
    ok(gpu::copy_to_host(lse.data(), lse_dev, n_lse * 4, nullptr), "copy lse");
    ok(gpu::synchronize(nullptr), "sync");
    pass &= lse_matches(lse, lse_ref, tol.lse);
  }

  // Backward from the reference forward (o rounded to dtype), run twice.
  Tensor o_in;
  if (!g_forward_only) {
    o_in.host.resize(lo.elems);
    for (size_t x = 0; x < lo.elems; ++x) o_in.host[x] = round_dtype(float(o_ref[x]));
    upload(o_in);
    std::vector<float> lse_in(n_lse);
    for (size_t x = 0; x < n_lse; ++x) lse_in[x] = static_cast<float>(lse_ref[x]);
    ok(gpu::copy_to_device(lse_dev, lse_in.data(), n_lse * 4, nullptr), "copy lse");
    std::vector<float> first[3];
    for (int run = 0; run < 2; ++run) {
      std::vector<float> got[3];
      if (run == 1 && host_rerun) {  // second run from host memory (staged)
        const size_t eb = elem_bytes();
        auto hq = bytes_of(q.dev, lq.elems * eb), hk = bytes_of(k.dev, lk.elems * eb),
             hv = bytes_of(v.dev, lv.elems * eb), ho = bytes_of(o_in.dev, lo.elems * eb),
             hdo = bytes_of(dout.dev, lo.elems * eb);
        std::vector<unsigned char> hdq(lq.elems * eb, 0xff), hdk(lk.elems * eb, 0xff),
            hdv(lv.elems * eb, 0xff);
        if (module->backward(&p, hq.data(), hk.data(), hv.data(), ho.data(), hdo.data(),
                             lse_in.data(), hdq.data(), hdk.data(), hdv.data(), &msg) != FLASH_OK) {
          std::printf("FAIL %s: backward from host memory: %s\n", label, msg.text);
          return false;
        }
        got[0] = decode(hdq), got[1] = decode(hdk), got[2] = decode(hdv);
      } else {
        Tensor dq = output(lq.elems), dk = output(lk.elems), dv = output(lv.elems);
        if (module->backward(&p, q.dev, k.dev, v.dev, o_in.dev, dout.dev,
                             static_cast<const float*>(lse_dev), dq.dev, dk.dev, dv.dev,
                             &msg) != FLASH_OK) {
          std::printf("FAIL %s: backward: %s\n", label, msg.text);
          return false;
        }
        got[0] = download(dq, lq.elems), got[1] = download(dk, lk.elems);
        got[2] = download(dv, lv.elems);
        for (Tensor* t : {&dq, &dk, &dv}) (void)gpu::free_device(t->dev);
      }
      if (run == 0) {
        pass &= compare("dq", got[0], dq_ref, offsets(lq, c.batch, c.sq, c.hq, c.d), tol.bwd);
        pass &= compare("dk", got[1], dk_ref, offsets(lk, c.batch, c.skv, c.hkv, c.d), tol.bwd);
        pass &= compare("dv", got[2], dv_ref, offsets(lv, c.batch, c.skv, c.hkv, c.dv), tol.bwd);
        for (int x = 0; x < 3; ++x) first[x] = got[x];
      } else {
        // Bitwise equal to the first run: deterministic (and staging-transparent).
        for (int x = 0; x < 3; ++x)
          if (std::memcmp(first[x].data(), got[x].data(), got[x].size() * 4) != 0)
            std::printf("    backward run 2 differs from run 1 (%s%s)\n",
                        x == 0   ? "dq"
                        : x == 1 ? "dk"
                                 : "dv",
                        host_rerun ? ", host memory" : ""),
                pass = false;
      }
    }
  }
  for (Tensor* t : {&q, &k, &v, &dout, &o, &o_in}) (void)gpu::free_device(t->dev);
  (void)gpu::free_device(lse_dev);
  std::printf("%s %s [%s] %.0f%% of tolerance\n", pass ? "ok  " : "FAIL", label, kernel.c_str(),
              100 * g_budget_used);
  return pass;
}

// ---- packed batches, cache lengths, paged caches -------------------------------
// Each sequence is its own small dense problem; the module runs them as one call in the
// packed / cache / paged layout and every sequence must match its own double reference.
// Rows a sequence does not own (cache rows past its length, unused pages) hold NaN: a
// kernel that reads them poisons a row.
// The key layout; queries are packed (cu_seqlens_q) with packed keys or where lens_q
// differ, else dense (every sequence has seqlen_q queries, as the API defines).
enum class SeqLayout { packed, cache, paged };
struct SeqCase {
  SeqLayout layout;
  std::vector<int64_t> lens_q, lens_kv;
  int64_t hq, hkv, d, dv;
  int causal;
  int64_t wl, wr;
  float softcap;
  int64_t page_size;  // paged only
};

const SeqCase kSeqCases[] = {
    // Sq != Sk both ways, a sequence without queries, one without keys (rows see nothing).
    {SeqLayout::packed, {17, 0, 40, 1, 9}, {30, 5, 40, 0, 2}, 2, 1, 64, 64, 1, -1, -1, 0.f, 0},
    {SeqLayout::packed, {33, 70}, {70, 33}, 2, 2, 128, 128, 0, 20, 5, 30.f, 0},
    {SeqLayout::cache, {3, 3, 3}, {50, 1, 64}, 4, 2, 64, 64, 1, -1, -1, 0.f, 0},
    {SeqLayout::paged, {4, 4}, {40, 13}, 4, 1, 64, 64, 1, -1, -1, 0.f, 7},
    {SeqLayout::paged, {17, 9}, {40, 9}, 2, 1, 128, 96, 1, -1, -1, 0.f, 16},  // packed q
};

// Double reference of one sequence: q [sq][hq][d], k [skv][hkv][d], v [skv][hkv][dv],
// dout [sq][hq][dv] contiguous; o, dq, dk, dv the same shapes, lse [hq][sq].
struct SeqRef {
  std::vector<double> o, lse, dq, dk, dv;
};
SeqRef reference_sequence(const SeqCase& c, int64_t sq, int64_t skv, const float* q, const float* k,
                          const float* v, const float* dout, float scale) {
  SeqRef r;
  r.o.assign(sq * c.hq * c.dv, 0), r.lse.assign(c.hq * sq, -INFINITY);
  r.dq.assign(sq * c.hq * c.d, 0), r.dk.assign(skv * c.hkv * c.d, 0);
  r.dv.assign(skv * c.hkv * c.dv, 0);
  const int64_t group = c.hq / c.hkv;
  for (int64_t h = 0; h < c.hq; ++h)
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t hk = h / group, diag = i + skv - sq;
      const float* qi = q + (i * c.hq + h) * c.d;
      std::vector<double> s(skv, -INFINITY), t(skv, 0), pr(skv, 0), dp(skv, 0);
      double m = -INFINITY;
      for (int64_t j = 0; j < skv; ++j) {
        if ((c.causal && j > diag) || (c.wl >= 0 && j < diag - c.wl) ||
            (c.wr >= 0 && j > diag + c.wr))
          continue;
        const float* kj = k + (j * c.hkv + hk) * c.d;
        double dot = 0;
        for (int64_t d = 0; d < c.d; ++d) dot += double(qi[d]) * kj[d];
        double x = dot * scale;
        if (c.softcap > 0) t[j] = std::tanh(x / c.softcap), x = c.softcap * t[j];
        s[j] = x, m = std::fmax(m, x);
      }
      if (m == -INFINITY) continue;
      double l = 0, delta = 0;
      for (int64_t j = 0; j < skv; ++j) l += std::exp(s[j] - m);
      r.lse[h * sq + i] = m + std::log(l);
      const float* doi = dout + (i * c.hq + h) * c.dv;
      for (int64_t j = 0; j < skv; ++j) {
        pr[j] = std::exp(s[j] - m) / l;
        if (pr[j] == 0) continue;
        const float* vj = v + (j * c.hkv + hk) * c.dv;
        for (int64_t d = 0; d < c.dv; ++d)
          r.o[(i * c.hq + h) * c.dv + d] += pr[j] * vj[d], dp[j] += double(doi[d]) * vj[d];
        delta += pr[j] * dp[j];
      }
      for (int64_t j = 0; j < skv; ++j) {
        if (pr[j] == 0) continue;
        double ds = pr[j] * (dp[j] - delta) * scale;
        if (c.softcap > 0) ds *= 1 - t[j] * t[j];
        const float* kj = k + (j * c.hkv + hk) * c.d;
        for (int64_t d = 0; d < c.d; ++d)
          r.dq[(i * c.hq + h) * c.d + d] += ds * kj[d],
              r.dk[(j * c.hkv + hk) * c.d + d] += ds * qi[d];
        for (int64_t d = 0; d < c.dv; ++d) r.dv[(j * c.hkv + hk) * c.dv + d] += pr[j] * doi[d];
      }
    }
  return r;
}

int32_t* device_ints(const std::vector<int32_t>& host) {
  void* d = nullptr;
  ok(gpu::malloc_device(&d, host.size() * 4 + 4), "malloc ints");
  ok(gpu::copy_to_device(d, host.data(), host.size() * 4, nullptr), "copy ints");
  return static_cast<int32_t*>(d);
}

bool run_sequence_case(const flash_backend_module* module, const SeqCase& c) {
  const char* dtype_name[] = {"f32", "f16", "bf16"};
  const char* layout_name[] = {"packed", "cache", "paged"};
  const int64_t batch = static_cast<int64_t>(c.lens_q.size());
  const int64_t max_q = *std::max_element(c.lens_q.begin(), c.lens_q.end());
  int64_t max_kv = *std::max_element(c.lens_kv.begin(), c.lens_kv.end());
  char label[256];
  std::snprintf(label, sizeof label,
                "%s %s b%lld h%lld/%lld d%lld/%lld causal%d win(%lld,%lld) cap%g page%lld",
                dtype_name[g_dtype], layout_name[static_cast<int>(c.layout)], (long long)batch,
                (long long)c.hq, (long long)c.hkv, (long long)c.d, (long long)c.dv, c.causal,
                (long long)c.wl, (long long)c.wr, c.softcap, (long long)c.page_size);
  std::mt19937 rng(static_cast<unsigned>(batch * 977 + c.d * 13 + c.page_size + g_dtype));
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const float scale = static_cast<float>(1.0 / std::sqrt(double(c.d)));
  // Per-sequence inputs (contiguous [len][heads][dim]) and references.
  std::vector<std::vector<float>> qs(batch), ks(batch), vs(batch), dos(batch);
  std::vector<SeqRef> refs;
  auto fill = [&](std::vector<float>& x, size_t n) {
    x.resize(n);
    for (float& e : x) e = round_dtype(uni(rng));
  };
  for (int64_t b = 0; b < batch; ++b) {
    fill(qs[b], c.lens_q[b] * c.hq * c.d), fill(ks[b], c.lens_kv[b] * c.hkv * c.d);
    fill(vs[b], c.lens_kv[b] * c.hkv * c.dv), fill(dos[b], c.lens_q[b] * c.hq * c.dv);
    refs.push_back(reference_sequence(c, c.lens_q[b], c.lens_kv[b], qs[b].data(), ks[b].data(),
                                      vs[b].data(), dos[b].data(), scale));
  }
  // q / o / dout: packed rows, or [batch, max_q] rows.
  const bool packed = c.layout == SeqLayout::packed;
  const bool packed_q = packed || std::count(c.lens_q.begin(), c.lens_q.end(), max_q) != batch;
  std::vector<int32_t> cu_q(1, 0), cu_kv(1, 0);
  for (int64_t b = 0; b < batch; ++b)
    cu_q.push_back(cu_q.back() + int32_t(c.lens_q[b])),
        cu_kv.push_back(cu_kv.back() + int32_t(c.lens_kv[b]));
  const int64_t total_q = cu_q.back(), total_kv = cu_kv.back();
  const auto q_row = [&](int64_t b, int64_t i) { return packed_q ? cu_q[b] + i : b * max_q + i; };
  const int64_t q_rows = packed_q ? total_q : batch * max_q;
  // k / v rows: packed; a cache of `capacity` rows per sequence; or pages in a shuffled order.
  int64_t capacity = max_kv, pages_per_seq = 0, num_pages = 0, kv_rows = total_kv;
  std::vector<int32_t> table;
  if (c.layout == SeqLayout::paged) {
    pages_per_seq = (max_kv + c.page_size - 1) / c.page_size;
    capacity = pages_per_seq * c.page_size;
    num_pages = batch * pages_per_seq + 3;  // three pages nobody uses (NaN)
    std::vector<int32_t> ids(num_pages);
    for (int64_t x = 0; x < num_pages; ++x) ids[x] = int32_t(x);
    std::shuffle(ids.begin(), ids.end(), rng);
    table.assign(ids.begin(), ids.begin() + batch * pages_per_seq);
    kv_rows = num_pages * c.page_size;
  } else if (c.layout == SeqLayout::cache) {
    capacity = max_kv + 3;  // rows past every length (NaN)
    kv_rows = batch * capacity;
  }
  const auto kv_row = [&](int64_t b, int64_t j) -> int64_t {
    if (packed) return cu_kv[b] + j;
    if (c.layout == SeqLayout::cache) return b * capacity + j;
    return table[b * pages_per_seq + j / c.page_size] * c.page_size + j % c.page_size;
  };
  Tensor q, k, v, dout;
  q.host.assign(std::max<int64_t>(q_rows, 1) * c.hq * c.d, NAN);
  dout.host.assign(std::max<int64_t>(q_rows, 1) * c.hq * c.dv, NAN);
  k.host.assign(std::max<int64_t>(kv_rows, 1) * c.hkv * c.d, NAN);
  v.host.assign(std::max<int64_t>(kv_rows, 1) * c.hkv * c.dv, NAN);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < c.lens_q[b]; ++i) {
      std::copy_n(&qs[b][i * c.hq * c.d], c.hq * c.d, &q.host[q_row(b, i) * c.hq * c.d]);
      std::copy_n(&dos[b][i * c.hq * c.dv], c.hq * c.dv, &dout.host[q_row(b, i) * c.hq * c.dv]);
    }
    for (int64_t j = 0; j < c.lens_kv[b]; ++j) {
      std::copy_n(&ks[b][j * c.hkv * c.d], c.hkv * c.d, &k.host[kv_row(b, j) * c.hkv * c.d]);
      std::copy_n(&vs[b][j * c.hkv * c.dv], c.hkv * c.dv, &v.host[kv_row(b, j) * c.hkv * c.dv]);
    }
  }
  for (Tensor* t : {&q, &k, &v, &dout}) upload(*t);

  flash_problem p{};
  p.batch = batch, p.seqlen_q = max_q,
  p.seqlen_kv = c.layout == SeqLayout::packed ? max_kv : capacity;
  p.heads_q = c.hq, p.heads_kv = c.hkv, p.head_dim = c.d, p.head_dim_v = c.dv, p.dtype = g_dtype;
  p.causal = c.causal, p.scale = scale, p.softcap = c.softcap;
  p.window_left = c.wl, p.window_right = c.wr;
  const int64_t q_batch_stride = packed_q ? 0 : max_q * c.hq;
  p.q_stride[0] = q_batch_stride * c.d, p.q_stride[1] = c.hq * c.d, p.q_stride[2] = c.d;
  p.o_stride[0] = q_batch_stride * c.dv, p.o_stride[1] = c.hq * c.dv, p.o_stride[2] = c.dv;
  const int64_t kv_batch_rows = packed ? 0 : c.layout == SeqLayout::cache ? capacity : c.page_size;
  p.k_stride[0] = kv_batch_rows * c.hkv * c.d, p.k_stride[1] = c.hkv * c.d, p.k_stride[2] = c.d;
  p.v_stride[0] = kv_batch_rows * c.hkv * c.dv, p.v_stride[1] = c.hkv * c.dv, p.v_stride[2] = c.dv;
  std::vector<int32_t> lens(c.lens_kv.begin(), c.lens_kv.end());
  int32_t* arrays[4] = {};
  if (packed_q) p.cu_seqlens_q = arrays[0] = device_ints(cu_q);
  if (packed) {
    p.cu_seqlens_kv = arrays[1] = device_ints(cu_kv);
  } else {
    p.seqlens_kv = arrays[2] = device_ints(lens);
    if (c.layout == SeqLayout::paged) {
      p.block_table = arrays[3] = device_ints(table);
      p.page_size = c.page_size, p.pages_per_seq = pages_per_seq, p.num_pages = num_pages;
    }
  }
  p.total_q = p.total_kv = -1;  // device arrays
  // lse: [heads_q, total_q] packed, else [batch, heads_q, max_q].
  const size_t n_lse = static_cast<size_t>(packed_q ? c.hq * total_q : batch * c.hq * max_q);
  const auto lse_at = [&](int64_t b, int64_t h, int64_t i) {
    return static_cast<size_t>(packed_q ? h * total_q + cu_q[b] + i : (b * c.hq + h) * max_q + i);
  };
  float* const lse_dev = nan_lse_on_device(n_lse);
  p.lse = lse_dev;
  std::string kernel;
  if (!chosen_kernel(module, p, label, kernel)) return false;
  flash_message msg{};
  const Tol tol = tolerance();
  g_budget_used = 0;
  bool pass = true;
  // Every sequence's rows of one result against its reference (`member` of SeqRef).
  const auto check = [&](const char* what, const std::vector<float>& got, int64_t heads,
                         int64_t dim, bool keys, std::vector<double> SeqRef::*member, double t) {
    std::vector<float> flat;
    std::vector<double> want;
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<double>& r = refs[b].*member;
      const int64_t rows = keys ? c.lens_kv[b] : c.lens_q[b];
      for (int64_t x = 0; x < rows; ++x)
        for (int64_t e = 0; e < heads * dim; ++e) {
          const int64_t row = keys ? kv_row(b, x) : q_row(b, x);
          flat.push_back(got[row * heads * dim + e]);
          want.push_back(r[x * heads * dim + e]);
        }
    }
    std::vector<size_t> at(flat.size());
    for (size_t x = 0; x < at.size(); ++x) at[x] = x;
    return at.empty() || compare(what, flat, want, at, t);
  };
  Tensor o = output(std::max<int64_t>(q_rows, 1) * c.hq * c.dv);
  if (module->forward(&p, q.dev, k.dev, v.dev, o.dev, &msg) != FLASH_OK) {
    std::printf("FAIL %s: forward: %s\n", label, msg.text);
    return false;
  }
  pass &= check("o", download(o, o.host.size()), c.hq, c.dv, false, &SeqRef::o, tol.fwd);
  {
    std::vector<float> lse(n_lse);
    ok(gpu::copy_to_host(lse.data(), lse_dev, n_lse * 4, nullptr), "copy lse");
    ok(gpu::synchronize(nullptr), "sync");
    std::vector<float> got;  // every sequence's rows, in its reference's order
    std::vector<double> want;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t i = 0; i < c.lens_q[b]; ++i) {
          got.push_back(lse[lse_at(b, h, i)]);
          want.push_back(refs[b].lse[h * c.lens_q[b] + i]);
        }
    pass &= lse_matches(got, want, tol.lse);
  }
  // Backward (packed batches only: caches and paged caches are forward-only), twice.
  if (packed && !g_forward_only) {
    Tensor o_in;
    o_in.host.assign(o.host.size(), 0.f);
    std::vector<float> lse_in(n_lse, 0.f);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < c.lens_q[b]; ++i) {
        for (int64_t e = 0; e < c.hq * c.dv; ++e)
          o_in.host[q_row(b, i) * c.hq * c.dv + e] =
              round_dtype(float(refs[b].o[i * c.hq * c.dv + e]));
        for (int64_t h = 0; h < c.hq; ++h)
          lse_in[lse_at(b, h, i)] = float(refs[b].lse[h * c.lens_q[b] + i]);
      }
    upload(o_in);
    if (n_lse) ok(gpu::copy_to_device(lse_dev, lse_in.data(), n_lse * 4, nullptr), "copy lse");
    std::vector<float> first[3];
    for (int run = 0; run < 2; ++run) {
      Tensor dq = output(q.host.size()), dk = output(k.host.size()), dv = output(v.host.size());
      if (module->backward(&p, q.dev, k.dev, v.dev, o_in.dev, dout.dev,
                           static_cast<const float*>(lse_dev), dq.dev, dk.dev, dv.dev,
                           &msg) != FLASH_OK) {
        std::printf("FAIL %s: backward: %s\n", label, msg.text);
        return false;
      }
      std::vector<float> got[3] = {download(dq, dq.host.size()), download(dk, dk.host.size()),
                                   download(dv, dv.host.size())};
      for (Tensor* t : {&dq, &dk, &dv}) (void)gpu::free_device(t->dev);
      if (run == 0) {
        pass &= check("dq", got[0], c.hq, c.d, false, &SeqRef::dq, tol.bwd);
        pass &= check("dk", got[1], c.hkv, c.d, true, &SeqRef::dk, tol.bwd);
        pass &= check("dv", got[2], c.hkv, c.dv, true, &SeqRef::dv, tol.bwd);
        for (int x = 0; x < 3; ++x) first[x] = got[x];
      } else {
        for (int x = 0; x < 3; ++x)
          if (std::memcmp(first[x].data(), got[x].data(), got[x].size() * 4) != 0)
            std::printf("    backward run 2 differs from run 1\n"), pass = false;
      }
    }
    (void)gpu::free_device(o_in.dev);
  }
  for (Tensor* t : {&q, &k, &v, &dout, &o}) (void)gpu::free_device(t->dev);
  for (int32_t* a : arrays)
    if (a) (void)gpu::free_device(a);
  (void)gpu::free_device(lse_dev);
  std::printf("%s %s [%s] %.0f%% of tolerance\n", pass ? "ok  " : "FAIL", label, kernel.c_str(),
              100 * g_budget_used);
  return pass;
}

}  // namespace

#if defined(FLASH_HIP_CPU_EMULATOR)
extern "C" const flash_backend_module* flash_backend_module_v1(void);
#endif

int main(int argc, char** argv) {
#if defined(FLASH_HIP_CPU_EMULATOR)
  (void)argc, (void)argv;
  const flash_backend_module* module = flash_backend_module_v1();
#else
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s path/to/libflashattn_hip.so\n", argv[0]);
    return 2;
  }
  void* handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  auto entry =
      reinterpret_cast<flash_backend_module_entry>(dlsym(handle, FLASH_MODULE_ENTRY_SYMBOL));
  if (!entry) {
    std::fprintf(stderr, "no %s in %s\n", FLASH_MODULE_ENTRY_SYMBOL, argv[1]);
    return 1;
  }
  const flash_backend_module* module = entry();
#endif
  flash_message reason{}, detail{};
  if (!module->probe(&reason, &detail)) {
    std::printf("SKIP: hip backend unavailable: %s\n", reason.text);
    return 77;
  }
  std::printf("hip backend: %s\n", detail.text);
  int failures = 0;
  // FLASH_SELFCHECK_DTYPES=f16,bf16 limits the dtypes (shorter runs).
  const char* only = std::getenv("FLASH_SELFCHECK_DTYPES");
  const char* names[] = {"f32", "f16", "bf16"};
  for (int dtype : {FLASH_F32, FLASH_F16, FLASH_BF16}) {
    if (only && (std::string(",") + only + ",").find(std::string(",") + names[dtype] + ",") ==
                    std::string::npos)
      continue;
    g_dtype = dtype;
    for (const Case& c : kCases) failures += run_case(module, c) ? 0 : 1;
    for (const SeqCase& c : kSeqCases) failures += run_sequence_case(module, c) ? 0 : 1;
    g_expect_split = true;
    for (const Case& c : kDecodeCases) failures += run_case(module, c) ? 0 : 1;
    // Every case again with its keys cut into three ranges (windows, masks that leave a
    // range or a row without keys, packed / cached / paged sequences, NaN-poisoned rows).
    setenv("FLASH_HIP_SPLITS", "3", 1);
    g_forward_only = true;
    for (const Case& c : kCases) failures += run_case(module, c) ? 0 : 1;
    for (const SeqCase& c : kSeqCases) failures += run_sequence_case(module, c) ? 0 : 1;
    unsetenv("FLASH_HIP_SPLITS");
    g_expect_split = g_forward_only = false;
  }
  std::printf("%s: %d failing case(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
