// Times the cuda module's forward (and backward, when the module supports it) on
// FlashAttention's benchmark shapes: batch*seqlen = 16384, heads*head_dim = 2048,
// packed [B,S,H,D], random inputs, device pointers, median of CUDA-event timings.
// Run torch_sdpa.py in the same device call and compare ratios.
//   cuda_module_bench <libflashattn_cuda.so> [--dtype bf16|f16|f32] [--dims 64 128 256]
//   [--dim-v DV] (V / O head dim for every D, e.g. DeepSeek's --dims 192 --dim-v 128)
//                     [--seqlens 512 ... 16384] [--backward] [--iters N] [--uniform]
// Inputs: standard normal (torch.randn's, as torch_sdpa.py), --uniform: [-1, 1).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_inputs.cuh"
#include "module_loader.hpp"

#define CHECK(x)                                                   \
  do {                                                             \
    cudaError_t e = (x);                                           \
    if (e != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); \
      std::exit(1);                                                \
    }                                                              \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const flash_backend_module* m = load_cuda_module(argv[1]);
  if (!m) return 1;
  int dtype = FLASH_BF16, iters = 20, dim_v = 0;
  bool backward = false;
  InputDist dist = InputDist::kNormal;
  std::vector<int> dims = {64, 128, 256}, seqlens = {512, 1024, 2048, 4096, 8192, 16384};
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto list = [&](std::vector<int>& out) {
      out.clear();
      while (i + 1 < argc && argv[i + 1][0] != '-') out.push_back(std::atoi(argv[++i]));
    };
    if (a == "--dtype") {
      std::string d = argv[++i];
      dtype = d == "f32" ? FLASH_F32 : d == "f16" ? FLASH_F16 : FLASH_BF16;
    } else if (a == "--dims")
      list(dims);
    else if (a == "--seqlens")
      list(seqlens);
    else if (a == "--backward")
      backward = true;
    else if (a == "--dim-v")
      dim_v = std::atoi(argv[++i]);
    else if (a == "--iters")
      iters = std::atoi(argv[++i]);
    else if (a == "--uniform")
      dist = InputDist::kUniform;
  }
  flash_message reason{}, detail{};
  if (!m->probe(&reason, &detail)) {
    std::printf("SKIP: %s\n", reason.text);
    return 77;
  }
  const char* dname = dtype == FLASH_F32 ? "f32" : dtype == FLASH_F16 ? "f16" : "bf16";
  std::printf("libflashattn cuda on %s, %s inputs\n", detail.text,
              dist == InputDist::kNormal ? "normal" : "uniform");
  std::printf("%-9s %-5s %3s %3s %6s %4s %6s %9s %9s %9s %9s\n", "backend", "dtype", "B", "H", "S",
              "D", "causal", "fwd ms", "fwd TF/s", "bwd ms", "bwd TF/s");
  const size_t eb = dtype == FLASH_F32 ? 4 : 2;
  for (int D : dims)
    for (int S : seqlens) {
      const int B = std::max(1, 16384 / S), H = std::max(1, 2048 / D);
      const size_t n = (size_t)B * S * H * D;
      void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
      float* lse;
      CHECK(cudaMalloc(&q, n * eb));
      CHECK(cudaMalloc(&k, n * eb));
      CHECK(cudaMalloc(&v, n * eb));
      CHECK(cudaMalloc(&o, n * eb));
      CHECK(cudaMalloc(&dout, n * eb));
      CHECK(cudaMalloc(&dq, n * eb));
      CHECK(cudaMalloc(&dk, n * eb));
      CHECK(cudaMalloc(&dv, n * eb));
      CHECK(cudaMalloc(&lse, (size_t)B * H * S * 4));
      fill_random<<<1024, 256>>>(q, n, 1, dtype, dist);
      fill_random<<<1024, 256>>>(k, n, 2, dtype, dist);
      fill_random<<<1024, 256>>>(v, n, 3, dtype, dist);
      fill_random<<<1024, 256>>>(dout, n, 4, dtype, dist);
      CHECK(cudaDeviceSynchronize());
      for (int causal = 0; causal < 2; ++causal) {
        flash_problem p = packed_problem(B, S, H, D, dtype, causal, lse);
        const int Dv = dim_v > 0 && dim_v <= D ? dim_v : D;  // v, o, dO use the first Dv of D
        p.head_dim_v = Dv;
        const int64_t stv[3] = {(int64_t)S * H * Dv, (int64_t)H * Dv, Dv};
        for (int j = 0; j < 3; ++j) p.v_stride[j] = p.o_stride[j] = stv[j];
        flash_message msg{};
        bool ok = true;
        const float fwd_ms = median_ms(iters, [&] {
          if (m->forward(&p, q, k, v, o, &msg) != FLASH_OK) ok = false;
        });
        if (!ok) {
          std::printf("forward failed: %s\n", msg.text);
          return 1;
        }
        CHECK(cudaDeviceSynchronize());
        const double flops = 2.0 * B * H * (double)S * S * (D + Dv) / (causal ? 2 : 1);
        float bwd_ms = NAN;
        if (backward) {
          bwd_ms = median_ms(iters, [&] {
            if (m->backward(&p, q, k, v, o, dout, lse, dq, dk, dv, &msg) != FLASH_OK) ok = false;
          });
          if (!ok) {
            std::printf("backward failed: %s\n", msg.text);
            return 1;
          }
          CHECK(cudaDeviceSynchronize());
        }
        std::printf("%-9s %-5s %3d %3d %6d %4d %6s %9.3f %9.1f %9.3f %9.1f\n", "ours", dname, B, H,
                    S, D, causal ? "yes" : "no", fwd_ms, flops / fwd_ms * 1e-9, bwd_ms,
                    2.5 * flops / bwd_ms * 1e-9);
        std::fflush(stdout);
      }
      cudaFree(q);
      cudaFree(k);
      cudaFree(v);
      cudaFree(o);
      cudaFree(dout);
      cudaFree(dq);
      cudaFree(dk);
      cudaFree(dv);
      cudaFree(lse);
    }
  return 0;
}
