#!/usr/bin/env python3
"""Runs torch SDPA on one backend a few times, for a profiler to pick its kernels.

  ncu --target-processes all -k regex:flash_fprop --launch-skip 2 --launch-count 1 \\
      python3 tests/cuda/peer_sdpa_run.py --backend cudnn --head-dim 128 --seqlen 4096

FlashAttention's shapes (B·S = 16384, H·D = 2048), standard normal inputs, bf16 unless
named; --backward adds a backward pass per call. Used by device_hopper.sh's "ncupeer" step
(session 21: cuDNN's forward is one persistent kernel of 132 x 384 threads).
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cudnn", choices=BACKENDS)
    p.add_argument("--dtype", default="bf16", choices=DTYPES)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--backward", action="store_true")
    p.add_argument("--calls", type=int, default=3)
    a = p.parse_args()
    batch, heads = 16384 // a.seqlen, 2048 // a.head_dim
    q, k, v = (torch.randn(batch, heads, a.seqlen, a.head_dim, device="cuda",
                           dtype=DTYPES[a.dtype], requires_grad=a.backward) for _ in range(3))
    with sdpa_kernel([BACKENDS[a.backend]]):
        for _ in range(a.calls):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=a.causal)
            if a.backward:
                o.backward(torch.randn_like(o))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
