// Checks of the cuda module's backward through the module ABI (no core library):
//  1. determinism: the default backward gives bitwise-identical dq/dk/dv on two runs
//     (device pointers, outputs poisoned with NaN bytes before each run), every dtype,
//     GQA + causal + windows + softcap, and every output element is written (no NaN);
//     also with many (batch, head) pairs, where each block walks several key blocks;
//  2. the atomic mode (nondeterministic = 1) agrees with the default (dq within a few
//     ulps: the same partial sums in another order; dk, dv bitwise);
//  3. f32 gradients against central finite differences of L = sum(dO * O), computed
//     with the module's own f32 forward, on small shapes with every mask feature.
// The cross-backend suite (tests/cross_backend_test.cpp) compares against the double
// reference; this file covers what it cannot (run-to-run identity, an independent
// derivative check). Exit 0 = pass, 1 = fail, 77 = skipped (no CUDA device).
//   cuda_backward_check <path to libflashattn_cuda.so> [--quick]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "module_loader.hpp"

namespace {

struct Shape {
  int b, sq, skv, hq, hkv, d, dv;
  bool causal;
  int wl, wr;
  float softcap;
};

size_t esize(int dtype) { return dtype == FLASH_F32 ? 4 : 2; }

void store(int dtype, std::vector<unsigned char>& bytes, size_t i, float x) {
  if (dtype == FLASH_F32)
    reinterpret_cast<float*>(bytes.data())[i] = x;
  else if (dtype == FLASH_F16)
    reinterpret_cast<__half*>(bytes.data())[i] = __float2half(x);
  else
    reinterpret_cast<__nv_bfloat16*>(bytes.data())[i] = __float2bfloat16(x);
}

// Packed [b, s, h, d] tensors; device copies.
struct Problem {
  flash_problem p{};
  size_t n_q, n_k, n_v, n_o, n_lse;
  void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float* lse;
};

bool ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::printf("FAIL %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

void* upload(const std::vector<unsigned char>& host) {
  void* d = nullptr;
  cudaMalloc(&d, host.size());
  cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice);
  return d;
}

std::vector<unsigned char> random_bytes(int dtype, size_t n, std::mt19937& rng, float amp) {
  std::vector<unsigned char> b(n * esize(dtype));
  std::uniform_real_distribution<float> u(-amp, amp);
  for (size_t i = 0; i < n; ++i) store(dtype, b, i, u(rng));
  return b;
}

Problem make_problem(const Shape& s, int dtype, std::mt19937& rng) {
  Problem r;
  flash_problem& p = r.p;
  p.batch = s.b;
  p.seqlen_q = s.sq;
  p.seqlen_kv = s.skv;
  p.heads_q = s.hq;
  p.heads_kv = s.hkv;
  p.head_dim = s.d;
  p.head_dim_v = s.dv;
  p.dtype = dtype;
  p.causal = s.causal;
  p.scale = 1.f / std::sqrt(float(s.d));
  p.softcap = s.softcap;
  p.window_left = s.wl;
  p.window_right = s.wr;
  auto strides = [](int64_t* st, int64_t seq, int64_t h, int64_t d) {
    st[0] = seq * h * d;
    st[1] = h * d;
    st[2] = d;
  };
  strides(p.q_stride, s.sq, s.hq, s.d);
  strides(p.k_stride, s.skv, s.hkv, s.d);
  strides(p.v_stride, s.skv, s.hkv, s.dv);
  strides(p.o_stride, s.sq, s.hq, s.dv);
  r.n_q = (size_t)s.b * s.sq * s.hq * s.d;
  r.n_k = (size_t)s.b * s.skv * s.hkv * s.d;
  r.n_v = (size_t)s.b * s.skv * s.hkv * s.dv;
  r.n_o = (size_t)s.b * s.sq * s.hq * s.dv;
  r.n_lse = (size_t)s.b * s.hq * s.sq;
  r.q = upload(random_bytes(dtype, r.n_q, rng, 1.5f));
  r.k = upload(random_bytes(dtype, r.n_k, rng, 1.5f));
  r.v = upload(random_bytes(dtype, r.n_v, rng, 1.f));
  r.dout = upload(random_bytes(dtype, r.n_o, rng, 1.f));
  const size_t e = esize(dtype);
  cudaMalloc(&r.o, r.n_o * e);
  cudaMalloc(&r.dq, r.n_q * e);
  cudaMalloc(&r.dk, r.n_k * e);
  cudaMalloc(&r.dv, r.n_v * e);
  cudaMalloc(&r.lse, r.n_lse * 4);
  p.lse = r.lse;
  return r;
}

void free_problem(Problem& r) {
  for (void* ptr : {r.q, r.k, r.v, r.o, r.dout, r.dq, r.dk, r.dv, (void*)r.lse}) cudaFree(ptr);
}

bool forward(const flash_backend_module* m, Problem& r) {
  flash_message msg{};
  if (m->forward(&r.p, r.q, r.k, r.v, r.o, &msg) != FLASH_OK) {
    std::printf("FAIL forward: %s\n", msg.text);
    return false;
  }
  return ok(cudaDeviceSynchronize(), "forward");
}

// Runs the backward with poisoned outputs; returns dq | dk | dv bytes (empty on error).
std::vector<unsigned char> backward(const flash_backend_module* m, Problem& r) {
  const size_t e = esize(r.p.dtype);
  cudaMemset(r.dq, 0xff, r.n_q * e);  // 0xffff.. is NaN in every dtype
  cudaMemset(r.dk, 0xff, r.n_k * e);
  cudaMemset(r.dv, 0xff, r.n_v * e);
  flash_message msg{};
  if (m->backward(&r.p, r.q, r.k, r.v, r.o, r.dout, r.lse, r.dq, r.dk, r.dv, &msg) != FLASH_OK) {
    std::printf("FAIL backward: %s\n", msg.text);
    return {};
  }
  if (!ok(cudaDeviceSynchronize(), "backward")) return {};
  std::vector<unsigned char> out((r.n_q + r.n_k + r.n_v) * e);
  cudaMemcpy(out.data(), r.dq, r.n_q * e, cudaMemcpyDeviceToHost);
  cudaMemcpy(out.data() + r.n_q * e, r.dk, r.n_k * e, cudaMemcpyDeviceToHost);
  cudaMemcpy(out.data() + (r.n_q + r.n_k) * e, r.dv, r.n_v * e, cudaMemcpyDeviceToHost);
  return out;
}

bool any_nan(const std::vector<unsigned char>& b, int dtype) {
  const size_t n = b.size() / esize(dtype);
  for (size_t i = 0; i < n; ++i) {
    float x;
    if (dtype == FLASH_F32)
      x = reinterpret_cast<const float*>(b.data())[i];
    else if (dtype == FLASH_F16)
      x = __half2float(reinterpret_cast<const __half*>(b.data())[i]);
    else
      x = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(b.data())[i]);
    if (std::isnan(x)) return true;
  }
  return false;
}

bool check_determinism(const flash_backend_module* m, const Shape& s, int dtype,
                       std::mt19937& rng) {
  Problem r = make_problem(s, dtype, rng);
  bool pass = forward(m, r);
  std::vector<unsigned char> a, b;
  if (pass) a = backward(m, r);
  if (pass) b = backward(m, r);
  pass = pass && !a.empty() && a == b && !any_nan(a, dtype);
  std::printf(
      "%s determinism dtype=%d b%d sq%d skv%d hq%d hkv%d d%d dv%d causal%d w(%d,%d) cap%g\n",
      pass ? "ok  " : "FAIL", dtype, s.b, s.sq, s.skv, s.hq, s.hkv, s.d, s.dv, s.causal, s.wl, s.wr,
      s.softcap);
  free_problem(r);
  return pass;
}

float to_float(const std::vector<unsigned char>& b, int dtype, size_t i) {
  if (dtype == FLASH_F32) return reinterpret_cast<const float*>(b.data())[i];
  if (dtype == FLASH_F16) return __half2float(reinterpret_cast<const __half*>(b.data())[i]);
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(b.data())[i]);
}

// nondeterministic = 1 (unordered atomic dQ) against the default: the same sums in
// another order, so dq within a few output-dtype ulps, dk and dv identical.
bool check_atomic_mode(const flash_backend_module* m, const Shape& s, int dtype,
                       std::mt19937& rng) {
  Problem r = make_problem(s, dtype, rng);
  bool pass = forward(m, r);
  std::vector<unsigned char> a, b;
  if (pass) a = backward(m, r);
  r.p.nondeterministic = 1;
  if (pass) b = backward(m, r);
  pass = pass && !a.empty() && a.size() == b.size() && !any_nan(b, dtype);
  const size_t e = esize(dtype), n = a.size() / e;
  double max_abs = 0, worst = 0;
  for (size_t i = 0; pass && i < r.n_q; ++i)
    max_abs = std::max(max_abs, (double)std::fabs(to_float(a, dtype, i)));
  const double ulp = dtype == FLASH_BF16 ? 1.0 / 128 : dtype == FLASH_F16 ? 1.0 / 1024 : 1e-6;
  for (size_t i = 0; pass && i < n; ++i) {
    const double x = to_float(a, dtype, i), y = to_float(b, dtype, i);
    // dq: 4 ulps of the value plus 1e-3 ulps of the largest |dq| (cancellation);
    // dk, dv: bitwise (each is summed in registers by one block either way).
    const double tol = i < r.n_q ? 4 * ulp * std::fabs(x) + 1e-3 * ulp * max_abs : 0.0;
    const double err = std::fabs(x - y);
    if (err > tol) {
      if (worst == 0)
        std::printf("  %s[%zu]: deterministic %.6g, atomic %.6g\n", i < r.n_q ? "dq" : "dk/dv",
                    i < r.n_q ? i : i - r.n_q, x, y);
      worst = std::max(worst, err);
      pass = false;
    }
  }
  std::printf("%s atomic mode dtype=%d b%d sq%d skv%d hq%d hkv%d d%d causal%d\n",
              pass ? "ok  " : "FAIL", dtype, s.b, s.sq, s.skv, s.hq, s.hkv, s.d, s.causal);
  free_problem(r);
  return pass;
}

// L = sum(dO * O) in double from the module's f32 forward.
double loss(const flash_backend_module* m, Problem& r, const std::vector<float>& dout) {
  if (!forward(m, r)) return NAN;
  std::vector<float> o(r.n_o);
  cudaMemcpy(o.data(), r.o, r.n_o * 4, cudaMemcpyDeviceToHost);
  double l = 0;
  for (size_t i = 0; i < r.n_o; ++i) l += (double)o[i] * dout[i];
  return l;
}

bool check_finite_differences(const flash_backend_module* m, const Shape& s, std::mt19937& rng) {
  Problem r = make_problem(s, FLASH_F32, rng);
  std::vector<float> dout(r.n_o);
  cudaMemcpy(dout.data(), r.dout, r.n_o * 4, cudaMemcpyDeviceToHost);
  bool pass = forward(m, r);
  std::vector<unsigned char> grads = pass ? backward(m, r) : std::vector<unsigned char>{};
  pass = pass && !grads.empty();
  const float* g = reinterpret_cast<const float*>(grads.data());
  double worst = 0;  // largest |fd - analytic| / (abs_tol + rel_tol * |analytic|)
  struct Tensor {
    void* dev;
    size_t n;
    size_t grad_off;
  } tensors[3] = {{r.q, r.n_q, 0}, {r.k, r.n_k, r.n_q}, {r.v, r.n_v, r.n_q + r.n_k}};
  const float h = 1e-2f;
  for (int t = 0; pass && t < 3; ++t) {
    std::uniform_int_distribution<size_t> pick(0, tensors[t].n - 1);
    for (int sample = 0; sample < 12; ++sample) {
      const size_t i = pick(rng);
      float* x = static_cast<float*>(tensors[t].dev) + i;
      float x0;
      cudaMemcpy(&x0, x, 4, cudaMemcpyDeviceToHost);
      const float xp = x0 + h, xm = x0 - h;
      cudaMemcpy(x, &xp, 4, cudaMemcpyHostToDevice);
      const double lp = loss(m, r, dout);
      cudaMemcpy(x, &xm, 4, cudaMemcpyHostToDevice);
      const double lm = loss(m, r, dout);
      cudaMemcpy(x, &x0, 4, cudaMemcpyHostToDevice);
      const double fd = (lp - lm) / ((double)xp - (double)xm);
      const double an = g[tensors[t].grad_off + i];
      const double ratio = std::fabs(fd - an) / (2e-3 + 2e-2 * std::fabs(an));
      worst = std::max(worst, ratio);
      if (!(ratio <= 1.0)) {
        std::printf("  d%c[%zu]: finite difference %.6g, backward %.6g\n", "qkv"[t], i, fd, an);
        pass = false;
      }
    }
  }
  std::printf(
      "%s finite differences (f32) sq%d skv%d hq%d hkv%d d%d dv%d causal%d w(%d,%d) "
      "cap%g: worst %.0f%% of tolerance\n",
      pass ? "ok  " : "FAIL", s.sq, s.skv, s.hq, s.hkv, s.d, s.dv, s.causal, s.wl, s.wr, s.softcap,
      100 * worst);
  free_problem(r);
  return pass;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s libflashattn_cuda.so\n", argv[0]);
    return 2;
  }
  const flash_backend_module* m = load_cuda_module(argv[1]);
  if (m == nullptr) return 1;
  flash_message reason{}, detail{};
  if (!m->probe(&reason, &detail)) {
    std::printf("SKIP: %s\n", reason.text);
    return 77;
  }
  std::printf("cuda module: %s\n", detail.text);
  // --quick: a reduced grid for compute-sanitizer runs (head dims 64 (with and without
  // softcap), 128 and 256 of the wgmma backward, a window with softcap on the mma.sync one).
  const bool quick = argc > 2 && std::strcmp(argv[2], "--quick") == 0;
  std::mt19937 rng(4321);
  int fails = 0, total = 0;
  const std::vector<Shape> det =
      quick ? std::vector<Shape>{{1, 200, 300, 4, 2, 64, 64, true, -1, -1, 0.f},
                                 {1, 140, 170, 2, 1, 64, 64, false, 40, 10, 20.f},
                                 {1, 150, 130, 2, 1, 256, 256, true, -1, -1, 0.f},
                                 {1, 130, 100, 2, 1, 128, 64, false, 30, 10, 20.f},
                                 {1, 170, 210, 2, 1, 128, 128, true, -1, -1, 0.f}}
            : std::vector<Shape>{
                  {2, 1000, 1000, 8, 2, 64, 64, true, -1, -1, 0.f},
                  {1, 777, 1300, 4, 4, 128, 128, false, -1, -1, 0.f},
                  {1, 513, 513, 4, 1, 128, 64, false, 100, 20, 30.f},
                  {1, 300, 200, 2, 2, 96, 96, true, -1, -1, 0.f},  // rows that see no key
                  {1, 200, 200, 2, 1, 256, 256, true, -1, -1, 0.f},
                  // D 256 (wgmma: shared keys; mma.sync: two dK/dV passes): a window with
                  // softcap and GQA; no mask (rotated arrival order, 16 key blocks).
                  {1, 700, 900, 4, 2, 256, 256, false, 100, 30, 25.f},
                  {2, 1000, 1000, 4, 4, 256, 256, false, -1, -1, 0.f},
                  {1, 150, 230, 2, 2, 160, 160, false, 40, 40, 0.f},
                  {1, 230, 150, 3, 1, 192, 128, true, -1, -1, 0.f},
                  // D 64 with softcap (its own config: 64-query tiles), a window.
                  {1, 600, 700, 4, 2, 64, 64, false, 90, 30, 30.f},
                  // Many (batch, kv head) pairs: fewer splits than key blocks, so each
                  // block walks several key blocks (the snake order) into its slice.
                  {4, 1000, 1000, 16, 16, 128, 128, true, -1, -1, 0.f},
                  {8, 700, 900, 16, 8, 64, 64, false, -1, -1, 0.f},
              };
  for (int dtype : {FLASH_BF16, FLASH_F16, FLASH_F32})
    for (const Shape& s : det) {
      ++total;
      if (!check_determinism(m, s, dtype, rng)) ++fails;
    }
  // Causal, a window with softcap at D 128 and 256 (both walk their tiles upward under the
  // mask band, bwd_wgmma_kernel.cuh) and no mask.
  for (int dtype : {FLASH_BF16, FLASH_F16})
    for (const Shape& s : quick ? std::vector<Shape>{det.front(), det.back()}
                                : std::vector<Shape>{det.front(), det[2], det[5], det.back()}) {
      ++total;
      if (!check_atomic_mode(m, s, dtype, rng)) ++fails;
    }
  const std::vector<Shape> fd =
      quick ? std::vector<Shape>{{1, 19, 23, 2, 1, 32, 32, true, -1, -1, 0.f}}
            : std::vector<Shape>{
                  {1, 37, 53, 2, 1, 32, 32, false, -1, -1, 0.f},
                  {1, 53, 37, 2, 2, 64, 32, true, -1, -1, 0.f},
                  {1, 61, 61, 2, 1, 32, 64, false, 9, 4, 0.f},
                  {1, 41, 41, 1, 1, 32, 32, false, -1, -1, 5.f},
              };
  for (const Shape& s : fd) {
    ++total;
    if (!check_finite_differences(m, s, rng)) ++fails;
  }
  std::printf("%d/%d backward checks passed\n", total - fails, total);
  return fails == 0 ? 0 : 1;
}
