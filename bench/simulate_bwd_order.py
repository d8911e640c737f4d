#!/usr/bin/env python3
"""Grid efficiency of the wgmma backward per key-block dispatch order (a host model).

`sms` resident blocks take the backward's blocks (one per key block of a head) in dispatch
order, each as soon as it finishes the last. A block costs its query steps times `step`
cycles plus a prologue and an epilogue (bwd_wgmma_kernel.cuh's phase trace, session 30:
~4000 / ~3400 cycles plain); a persistent grid would hide the shorter of the two between a
block and the next on the same SM. Ordered-mode waits are not modelled. Prints, for
FlashAttention's shapes (B*S = 16k tokens, H*D = 2048), ideal time / modelled time for:
last-first (FLASH_CUDA_BWD_HEAVY_FIRST=0, and the ordered mode's order at D 256),
groups (the ordered mode's default at D 128: bwd_configs.hpp's bwd_dq_group, equal
groups of at most 32 key blocks, heaviest first inside a group, heads interleaved per
group), heaviest-first (the atomic mode) and longest-first over all heads (LPT, which the
ordered mode cannot take: a block would wait for blocks dispatched after it), each on the
one-block-per-key-block grid and on a persistent one.

  python3 bench/simulate_bwd_order.py [--sms 132] [--prologue 4000] [--epilogue 3400] [--group 32]
"""
import argparse
import heapq

# (head dim, keys per block, queries per step, plain cycles per step: traced / ~1.25; D 64's
# 128-query step not traced: twice the 64-query one x 0.9, its measured speed-up, session 37)
CONFIGS = [(64, 128, 128, 5900), (128, 128, 64, 4300)]


def grid_time(steps, sms, step, prologue, epilogue, persistent):
    free = [(0.0, False)] * sms
    heapq.heapify(free)
    end = 0.0
    for n in steps:
        t, warm = heapq.heappop(free)
        fixed = epilogue + (max(0, prologue - epilogue) if persistent and warm else prologue)
        t += n * step + fixed
        end = max(end, t)
        heapq.heappush(free, (t, True))
    return end


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--prologue", type=float, default=4000)
    ap.add_argument("--epilogue", type=float, default=3400)
    ap.add_argument("--group", type=int, default=32, help="key blocks a group at most")
    a = ap.parse_args()
    for dim, bk, bq, step in CONFIGS:
        for s in (2048, 8192, 16384):
            for causal in (False, True):
                heads = (16384 // s) * (2048 // dim)
                blocks = [(h, kb, s // bq - (kb * bk // bq if causal else 0))
                          for h in range(heads) for kb in range(s // bk)]
                ideal = sum(n for _, _, n in blocks) * step / a.sms
                kb_count = s // bk
                groups = -(-kb_count // min(a.group, a.sms // 2))
                size = -(-kb_count // groups)  # equal groups, the last one shorter
                group_of = lambda kb: (kb_count - 1 - kb) // size  # from the last key blocks
                orders = {
                    "last-first": sorted(blocks, key=lambda b: (b[0], -b[1])),
                    "groups": sorted(blocks, key=lambda b: (group_of(b[1]), b[0], b[1])),
                    "heaviest-first": sorted(blocks, key=lambda b: (b[0], b[1])),
                    "LPT": sorted(blocks, key=lambda b: -b[2]),
                }
                row = []
                for name, order in orders.items():
                    n = [b[2] for b in order]
                    one = ideal / grid_time(n, a.sms, step, a.prologue, a.epilogue, False)
                    per = ideal / grid_time(n, a.sms, step, a.prologue, a.epilogue, True)
                    row.append(f"{name} {one:.3f} / {per:.3f}")
                mask = "causal" if causal else "full"
                print(f"D {dim:3d} S {s:5d} {mask:6s} ({len(blocks)} blocks): " + ", ".join(row))
    print("(ideal / modelled time: one block per key block / persistent grid)")


if __name__ == "__main__":
    main()
