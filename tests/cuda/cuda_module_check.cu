// Standalone correctness check of the cuda module against a double-precision CPU
// reference, through the module ABI (no core library). Covers every dtype and head
// dim, causal / windows / softcap / GQA, Sq != Skv both ways, strided layouts,
// host pointers (staging) and device pointers. Outputs are poisoned with NaN first.
// Then host threads running forwards at once on cudaStreamPerThread must each get the
// single-threaded result bitwise (the module's per-stream scratch is per thread there).
// Exit 0 = pass, 1 = fail, 77 = skipped (no CUDA device).
//   cuda_module_check <path to libflashattn_cuda.so> [--quick]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_inputs.cuh"
#include "module_loader.hpp"

namespace {

struct Case {
  int b, sq, skv, hq, hkv, d, dv, dtype;
  bool causal;
  int wl, wr;
  float softcap;
  bool heads_major;  // [B,H,S,D] strides instead of packed [B,S,H,D]
  bool device_ptrs;
  float q_amp = 1.f;  // large logits when > 1
};

float round_to(int dtype, float x) {
  if (dtype == FLASH_F16) return __half2float(__float2half(x));
  if (dtype == FLASH_BF16) return __bfloat162float(__float2bfloat16(x));
  return x;
}

void store(int dtype, void* base, size_t i, float x) {
  if (dtype == FLASH_F32)
    static_cast<float*>(base)[i] = x;
  else if (dtype == FLASH_F16)
    static_cast<__half*>(base)[i] = __float2half(x);
  else
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(x);
}
float load(int dtype, const void* base, size_t i) {
  if (dtype == FLASH_F32) return static_cast<const float*>(base)[i];
  if (dtype == FLASH_F16) return __half2float(static_cast<const __half*>(base)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
}

struct Tensor {
  int64_t stride[3];
  size_t elems;
  std::vector<float> vals;  // logical [b][s][h][d], rounded to dtype
  std::vector<unsigned char> bytes;
};

Tensor make(int b, int s, int h, int d, bool heads_major, int dtype, std::mt19937& rng, float amp,
            bool random) {
  Tensor t;
  if (heads_major) {
    t.stride[0] = (int64_t)h * s * d;
    t.stride[2] = (int64_t)s * d;
    t.stride[1] = d;
  } else {
    t.stride[0] = (int64_t)s * h * d;
    t.stride[1] = (int64_t)h * d;
    t.stride[2] = d;
  }
  t.elems = (size_t)b * s * h * d;
  const size_t eb = dtype == FLASH_F32 ? 4 : 2;
  t.bytes.assign(t.elems * eb, 0);
  t.vals.assign(t.elems, 0.f);
  std::uniform_real_distribution<float> u(-amp, amp);
  for (int ib = 0; ib < b; ++ib)
    for (int is = 0; is < s; ++is)
      for (int ih = 0; ih < h; ++ih)
        for (int id = 0; id < d; ++id) {
          const size_t li = (((size_t)ib * s + is) * h + ih) * d + id;
          const size_t pi = ib * t.stride[0] + is * t.stride[1] + ih * t.stride[2] + id;
          const float x = random ? round_to(dtype, u(rng)) : NAN;
          t.vals[li] = x;
          store(dtype, t.bytes.data(), pi, x);
        }
  return t;
}

bool visible(const Case& c, int i, int j) {
  const long diag = (long)i + c.skv - c.sq;
  if (c.causal && j > diag) return false;
  if (c.wl >= 0 && j < diag - c.wl) return false;
  if (c.wr >= 0 && j > diag + c.wr) return false;
  return true;
}

bool run_case(const flash_backend_module* m, const Case& c, std::mt19937& rng) {
  Tensor q = make(c.b, c.sq, c.hq, c.d, c.heads_major, c.dtype, rng, c.q_amp, true);
  Tensor k = make(c.b, c.skv, c.hkv, c.d, c.heads_major, c.dtype, rng, 1.f, true);
  Tensor v = make(c.b, c.skv, c.hkv, c.dv, c.heads_major, c.dtype, rng, 1.f, true);
  Tensor o = make(c.b, c.sq, c.hq, c.dv, c.heads_major, c.dtype, rng, 1.f, false);  // NaN
  std::vector<float> lse((size_t)c.b * c.hq * c.sq, NAN);

  flash_problem p{};
  p.batch = c.b;
  p.seqlen_q = c.sq;
  p.seqlen_kv = c.skv;
  p.heads_q = c.hq;
  p.heads_kv = c.hkv;
  p.head_dim = c.d;
  p.head_dim_v = c.dv;
  p.dtype = c.dtype;
  p.causal = c.causal;
  p.scale = 1.f / std::sqrt((float)c.d);
  p.softcap = c.softcap;
  p.window_left = c.wl;
  p.window_right = c.wr;
  std::memcpy(p.q_stride, q.stride, sizeof q.stride);
  std::memcpy(p.k_stride, k.stride, sizeof k.stride);
  std::memcpy(p.v_stride, v.stride, sizeof v.stride);
  std::memcpy(p.o_stride, o.stride, sizeof o.stride);

  flash_message msg{};
  int status;
  if (c.device_ptrs) {
    void *dq, *dk, *dv, *dout;
    float* dlse;
    cudaMalloc(&dq, q.bytes.size());
    cudaMalloc(&dk, k.bytes.size());
    cudaMalloc(&dv, v.bytes.size());
    cudaMalloc(&dout, o.bytes.size());
    cudaMalloc(&dlse, lse.size() * 4);
    cudaMemcpy(dq, q.bytes.data(), q.bytes.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dk, k.bytes.data(), k.bytes.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dv, v.bytes.data(), v.bytes.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dout, o.bytes.data(), o.bytes.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dlse, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice);
    p.lse = dlse;
    status = m->forward(&p, dq, dk, dv, dout, &msg);
    cudaMemcpy(o.bytes.data(), dout, o.bytes.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(lse.data(), dlse, lse.size() * 4, cudaMemcpyDeviceToHost);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dlse);
  } else {
    p.lse = lse.data();
    status = m->forward(&p, q.bytes.data(), k.bytes.data(), v.bytes.data(), o.bytes.data(), &msg);
  }
  char name[256];
  std::snprintf(name, sizeof name,
                "%s b%d sq%d skv%d hq%d hkv%d d%d dv%d causal%d wl%d wr%d cap%g %s %s amp%g",
                c.dtype == 0   ? "f32"
                : c.dtype == 1 ? "f16"
                               : "bf16",
                c.b, c.sq, c.skv, c.hq, c.hkv, c.d, c.dv, c.causal, c.wl, c.wr, c.softcap,
                c.heads_major ? "BHSD" : "BSHD", c.device_ptrs ? "dev" : "host", c.q_amp);
  if (status != FLASH_OK) {
    std::printf("FAIL %s: status %d: %s\n", name, status, msg.text);
    return false;
  }
  const int group = c.hq / c.hkv;
  double max_err = 0, max_ref = 0, max_lse_err = 0;
  bool nan = false;
  std::vector<double> s(c.skv);
  for (int b = 0; b < c.b; ++b)
    for (int h = 0; h < c.hq; ++h)
      for (int i = 0; i < c.sq; ++i) {
        const int hk = h / group;
        double mx = -INFINITY;
        for (int j = 0; j < c.skv; ++j) {
          if (!visible(c, i, j)) {
            s[j] = -INFINITY;
            continue;
          }
          double acc = 0;
          for (int d = 0; d < c.d; ++d)
            acc += (double)q.vals[(((size_t)b * c.sq + i) * c.hq + h) * c.d + d] *
                   k.vals[(((size_t)b * c.skv + j) * c.hkv + hk) * c.d + d];
          acc *= p.scale;
          if (c.softcap > 0) acc = c.softcap * std::tanh(acc / c.softcap);
          s[j] = acc;
          mx = std::max(mx, acc);
        }
        double l = 0;
        for (int j = 0; j < c.skv; ++j) l += s[j] == -INFINITY ? 0 : std::exp(s[j] - mx);
        const double ref_lse = l > 0 ? mx + std::log(l) : -INFINITY;
        const float got_lse = lse[((size_t)b * c.hq + h) * c.sq + i];
        if (std::isnan(got_lse))
          nan = true;
        else if (!(std::isinf(ref_lse) && std::isinf(got_lse) && got_lse < 0))
          max_lse_err = std::max(max_lse_err, std::fabs(got_lse - ref_lse));
        for (int d = 0; d < c.dv; ++d) {
          double ref = 0;
          if (l > 0)
            for (int j = 0; j < c.skv; ++j)
              if (s[j] != -INFINITY)
                ref += std::exp(s[j] - mx) / l *
                       v.vals[(((size_t)b * c.skv + j) * c.hkv + hk) * c.dv + d];
          const float got = load(c.dtype, o.bytes.data(),
                                 b * o.stride[0] + i * o.stride[1] + h * o.stride[2] + d);
          if (std::isnan(got)) nan = true;
          max_err = std::max(max_err, std::fabs(got - ref));
          max_ref = std::max(max_ref, std::fabs(ref));
        }
      }
  const double tol = c.dtype == FLASH_F32 ? 2e-5 : c.dtype == FLASH_F16 ? 4e-3 : 2.5e-2;
  const bool ok = !nan && max_err <= tol * std::max(1.0, max_ref) && max_lse_err <= tol * 4;
  std::printf("%s %s: max|err| %.3g (tol %.3g, max|ref| %.3g) lse err %.3g%s\n",
              ok ? "ok  " : "FAIL", name, max_err, tol, max_ref, max_lse_err, nan ? " NaN!" : "");
  return ok;
}

// kThreads host threads, each running kRepeats forwards on cudaStreamPerThread (a different
// stream in each thread, so their kernels overlap) into its own NaN-poisoned output: every
// result must equal the single-threaded one bitwise. The persistent Hopper forward takes
// its work tiles from a per-stream counter; one counter shared by all threads' streams let
// overlapping grids take each other's tiles (unwritten outputs).
bool per_thread_streams(const flash_backend_module* m) {
  constexpr int kThreads = 4, kRepeats = 20, B = 2, S = 1024, H = 8, D = 128;
  flash_problem p = packed_problem(B, S, H, D, FLASH_BF16, false, nullptr);
  p.stream = cudaStreamPerThread;
  const size_t elems = (size_t)B * S * H * D, bytes = elems * 2;
  void* in = nullptr;  // q, k, v
  cudaMalloc(&in, 3 * bytes);
  fill_random<<<1024, 256>>>(in, 3 * elems, 7, FLASH_BF16, InputDist::kUniform);
  cudaDeviceSynchronize();
  const char* q = static_cast<const char*>(in);
  const auto forward = [&](void* out, std::vector<unsigned char>& result) {
    cudaMemsetAsync(out, 0xFF, bytes, cudaStreamPerThread);  // NaN in bf16
    flash_problem mine = p;
    flash_message msg{};
    if (m->forward(&mine, q, q + bytes, q + 2 * bytes, out, &msg) != FLASH_OK) {
      std::printf("FAIL per-thread streams: %s\n", msg.text);
      return false;
    }
    result.resize(bytes);
    cudaMemcpyAsync(result.data(), out, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread);
    return cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess;
  };
  std::vector<unsigned char> expected;
  void* out0 = nullptr;
  cudaMalloc(&out0, bytes);
  bool ok = forward(out0, expected);
  cudaFree(out0);
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads && ok; ++t)
    threads.emplace_back([&] {
      void* out = nullptr;
      cudaMalloc(&out, bytes);
      std::vector<unsigned char> got;
      for (int r = 0; r < kRepeats; ++r) {
        if (!forward(out, got))
          ++failures;
        else if (std::memcmp(got.data(), expected.data(), bytes) != 0)
          ++mismatches;
      }
      cudaFree(out);
    });
  for (auto& th : threads) th.join();
  cudaFree(in);
  ok = ok && failures == 0 && mismatches == 0;
  std::printf(
      "%s per-thread streams: %d threads x %d bf16 forwards (B %d, S %d, H %d, D %d) on "
      "cudaStreamPerThread: %d differ from the single-threaded result, %d failed\n",
      ok ? "ok  " : "FAIL", kThreads, kRepeats, B, S, H, D, mismatches.load(), failures.load());
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s libflashattn_cuda.so [--quick]\n", argv[0]);
    return 2;
  }
  const bool quick = argc > 2 && std::strcmp(argv[2], "--quick") == 0;
  const flash_backend_module* m = load_cuda_module(argv[1]);
  if (m == nullptr) return 1;
  flash_message reason{}, detail{};
  if (!m->probe(&reason, &detail)) {
    std::printf("SKIP: %s\n", reason.text);
    return 77;
  }
  std::printf("cuda module: %s\n", detail.text);
  std::mt19937 rng(1234);
  int fails = 0, total = 0;
  auto run = [&](Case c) {
    ++total;
    if (!run_case(m, c, rng)) ++fails;
  };
  const int dims[] = {32, 64, 96, 128, 160, 192, 256};
  for (int dtype : {FLASH_F32, FLASH_F16, FLASH_BF16}) {
    for (int d : dims) {
      run({2, 113, 257, 4, 2, d, d, dtype, false, -1, -1, 0.f, false, true});
      run({1, 257, 113, 2, 1, d, d, dtype, true, -1, -1, 0.f, true, false});
      if (quick) continue;
      run({1, 300, 300, 2, 2, d, d, dtype, true, 40, -1, 0.f, false, true});
      run({1, 17, 1000, 3, 1, d, d, dtype, false, 100, 50, 30.f, true, true});
    }
    run({1, 1, 1, 1, 1, 64, 64, dtype, false, -1, -1, 0.f, false, true});
    run({2, 37, 0, 2, 1, 64, 64, dtype, false, -1, -1, 0.f, false, true});      // no keys: o = 0
    run({2, 37, 0, 2, 1, 64, 64, dtype, false, -1, -1, 0.f, false, false});     // same, host
    run({1, 1, 1000, 8, 1, 128, 128, dtype, false, -1, -1, 0.f, false, true});  // decode-like
    run({2, 200, 300, 4, 4, 128, 64, dtype, true, -1, -1, 0.f, false, true});
    run({2, 200, 300, 4, 2, 64, 256, dtype, false, -1, 20, 0.f, true, false});
    run({1, 500, 200, 2, 1, 96, 32, dtype, true, -1, -1, 0.f, false, true});  // rows with no key
    run({1, 300, 300, 2, 1, 64, 64, dtype, false, 0, 0, 0.f, false, true});   // diagonal only
    if (quick) continue;  // --quick (also the compute-sanitizer grid) stops here
    run({1, 300, 700, 2, 1, 128, 128, dtype, false, -1, -1, 0.f, false, true,
         8.f});  // large logits
    run({1, 1024, 1024, 2, 2, 128, 128, dtype, true, -1, -1, 0.f, false, true});
  }
  ++total;
  if (!per_thread_streams(m)) ++fails;
  std::printf("%d/%d cases passed\n", total - fails, total);
  return fails == 0 ? 0 : 1;
}
