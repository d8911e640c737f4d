// Times the cuda module's backward alone on FlashAttention's benchmark shapes
// (batch*seqlen = 16384, heads*head_dim = 2048, packed [B,S,H,D], device pointers,
// random inputs, median of CUDA-event timings). O and lse come from the module's
// forward; if the forward fails (e.g. a forward config being tuned), lse is set to
// ln(Skv) + 1 and O to random values: the backward's time does not depend on them.
// FLOPs: 2.5 x forward (4·B·H·S²·D, half for causal). Run torch_sdpa.py --backward in
// the same device call and compare ratios (tests/cuda/device_bwd.sh does both).
//   cuda_backward_bench <libflashattn_cuda.so> [--dims 64 128] [--seqlens 1024 ...]
//                       [--dtype bf16|f16|f32] [--iters N] [--atomic] [--uniform]
//                       [--softcap C]
// Inputs: standard normal (torch.randn's, as torch_sdpa.py), --uniform: [-1, 1).
// --atomic also times nondeterministic = 1 (unordered atomic dQ), as row "ours-atomic".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_inputs.cuh"
#include "module_loader.hpp"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const flash_backend_module* m = load_cuda_module(argv[1]);
  if (!m) return 1;
  flash_message reason{}, detail{};
  if (!m->probe(&reason, &detail)) {
    std::printf("SKIP: %s\n", reason.text);
    return 77;
  }
  int dtype = FLASH_BF16, iters = 20;
  bool atomic = false;
  float softcap = 0.f;  // > 0: tanh softcap (the kernels' softcap instances)
  InputDist dist = InputDist::kNormal;
  std::vector<int> dims = {64, 128}, seqlens = {1024, 2048, 4096, 8192, 16384};
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto list = [&](std::vector<int>& out) {
      out.clear();
      while (i + 1 < argc && argv[i + 1][0] != '-') out.push_back(std::atoi(argv[++i]));
    };
    if (a == "--dims")
      list(dims);
    else if (a == "--seqlens")
      list(seqlens);
    else if (a == "--atomic")
      atomic = true;
    else if (a == "--uniform")
      dist = InputDist::kUniform;
    else if (a == "--softcap")
      softcap = std::atof(argv[++i]);
    else if (a == "--iters")
      iters = std::atoi(argv[++i]);
    else if (a == "--dtype") {
      const std::string d = argv[++i];
      dtype = d == "f32" ? FLASH_F32 : d == "f16" ? FLASH_F16 : FLASH_BF16;
    }
  }
  const char* dname = dtype == FLASH_F32 ? "f32" : dtype == FLASH_F16 ? "f16" : "bf16";
  const size_t eb = dtype == FLASH_F32 ? 4 : 2;
  std::printf("libflashattn cuda backward on %s, %s inputs, softcap %g\n", detail.text,
              dist == InputDist::kNormal ? "normal" : "uniform", softcap);
  std::printf("%-9s %-5s %3s %3s %6s %4s %6s %9s %9s %s\n", "backend", "dtype", "B", "H", "S", "D",
              "causal", "bwd ms", "bwd TF/s", "kernels");
  for (int D : dims)
    for (int S : seqlens) {
      const int B = std::max(1, 16384 / S), H = std::max(1, 2048 / D);
      const size_t n = (size_t)B * S * H * D;
      void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
      float* lse;
      for (void** ptr : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) cudaMalloc(ptr, n * eb);
      cudaMalloc(&lse, sizeof(float) * B * H * S);
      unsigned seed = 1;
      for (void* ptr : {q, k, v, o, dout}) fill_random<<<1024, 256>>>(ptr, n, seed++, dtype, dist);
      for (int causal = 0; causal < 2; ++causal)
        for (int mode = 0; mode < (atomic ? 2 : 1); ++mode) {
          flash_problem p = packed_problem(B, S, H, D, dtype, causal, lse);
          p.nondeterministic = mode;
          p.softcap = softcap;
          flash_message msg{}, choice{};
          m->choose(&p, FLASH_BACKWARD, &choice);
          const bool fwd_ok = m->forward(&p, q, k, v, o, &msg) == FLASH_OK &&
                              cudaDeviceSynchronize() == cudaSuccess;
          if (!fwd_ok) {
            cudaGetLastError();
            fill_value<<<1024, 256>>>(lse, (size_t)B * H * S, std::log((float)S) + 1.f);
          }
          bool ok = true;
          auto run = [&] {
            if (m->backward(&p, q, k, v, o, dout, lse, dq, dk, dv, &msg) != FLASH_OK) ok = false;
          };
          const float ms = median_ms(iters, run);
          if (!ok || cudaDeviceSynchronize() != cudaSuccess) {
            std::printf("backward failed: %s\n", msg.text);
            return 1;
          }
          const double flops = 2.5 * 4.0 * B * H * (double)S * S * D / (causal ? 2 : 1);
          std::printf("%-9s %-5s %3d %3d %6d %4d %6s %9.3f %9.1f %s%s\n",
                      mode ? "ours-atomic" : "ours", dname, B, H, S, D, causal ? "True" : "False",
                      ms, flops / ms * 1e-9, choice.text, fwd_ok ? "" : " (synthetic lse)");
          std::fflush(stdout);
        }
      for (void* ptr : {q, k, v, o, dout, dq, dk, dv, (void*)lse}) cudaFree(ptr);
    }
  return 0;
}
