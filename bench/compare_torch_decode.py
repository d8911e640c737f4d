#!/usr/bin/env python3
"""Decode anchor for flashattn-decode-bench: torch SDPA (flash, cuDNN; enable_gqa) on one
or a few query tokens against a long KV cache, GB/s of K+V read, with the L2 cache
flushed before each timed call (as flashattn-decode-bench does).

  python3 bench/compare_torch_decode.py [--heads-q 32 64] [--queries 1 4]

The query tokens see every key (no mask): with Sq < Sk torch's is_causal aligns top-left,
which would hide almost the whole cache; the bytes read are the same either way.
"""
import argparse
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend


def median_ms(fn, iters, flush):
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heads-q", type=int, nargs="+", default=[32])
    p.add_argument("--heads-kv", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--queries", type=int, nargs="+", default=[1, 4])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--keys", type=int, nargs="+", default=[8192, 32768, 131072])
    p.add_argument("--iters", type=int, default=30)
    a = p.parse_args()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # > L2
    print("| B | Sq | Hq/Hkv | keys | torch flash GB/s | cuDNN GB/s |\n|---|---|---|---|---|---|")
    for hq in a.heads_q:
        for sq in a.queries:
            for b in a.batch:
                for keys in a.keys:
                    q = torch.randn(b, hq, sq, a.head_dim, device="cuda", dtype=torch.bfloat16)
                    k = torch.randn(b, a.heads_kv, keys, a.head_dim, device="cuda", dtype=torch.bfloat16)
                    v = torch.randn_like(k)
                    kv_bytes = 2 * k.numel() * k.element_size()
                    row = []
                    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
                        try:
                            with sdpa_kernel(backend):
                                ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                                               a.iters, flush)
                            row.append(f"{kv_bytes / ms / 1e6:.0f}")
                        except Exception as ex:  # a backend that cannot run the shape
                            row.append("n/a (" + str(ex).split("\n")[0][:40] + ")")
                    print(f"| {b} | {sq} | {hq}/{a.heads_kv} | {keys} | {row[0]} | {row[1]} |", flush=True)


if __name__ == "__main__":
    main()
