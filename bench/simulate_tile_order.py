#!/usr/bin/env python3
"""Idle share at the end of the Hopper forward's persistent grid, per causal tile order.

A host model of backends/cuda/work_tile_order.cuh: `blocks` resident blocks take work
tiles in tile-number order, each as soon as it finishes the last; a tile of query block
qb costs its K/V tiles (causal, Sq = Sk) plus a fixed per-tile cost. Prints, for the
causal benchmark shapes (FlashAttention's: B*S = 16k tokens, H*D = 2048), the time of
the grid over the ideal (total work / blocks) for the L2 sections alone and with the
longest-first tail of `waves` waves of tiles (work_tile_tail_pairs).

  python3 bench/simulate_tile_order.py [--blocks 132] [--waves 1 2 3 4]
"""
import argparse
import heapq
import math

# (head dim, query rows per tile, keys per K/V tile): tile_configs.hpp's FwdWgmmaConfig.
CONFIGS = [(64, 192, 128), (128, 128, 176), (256, 128, 64)]
L2_SECTION_BYTES = 50 * 2**20 // 4  # a quarter of the L2 (cuda_backend.cu)


def slot(t, nq, pairs, section, tail):
    """work_tile_slot for a causal mask: (query block, pair) of tile t."""
    body = pairs - tail
    if t >= body * nq:
        w = t - body * nq
        return nq - 1 - w // tail, body + w % tail
    per = section * nq
    sec, w = divmod(t, per)
    first = sec * section
    here = min(section, body - first)
    return nq - 1 - w // here, first + w % here


def grid_over_ideal(S, D, BM, BN, blocks, tail_waves, fixed_cost):
    B, H = max(1, 16384 // S), 2048 // D
    pairs, nq = B * H, math.ceil(S / BM)
    section = max(1, min(pairs, L2_SECTION_BYTES // (S * 2 * D * 2)))
    tail = min(pairs, math.ceil(tail_waves * blocks / nq)) if tail_waves else 0
    cost = [math.ceil(min(qb * BM + BM, S) / BN) + fixed_cost for qb in range(nq)]
    free = [0.0] * blocks  # a heap of the times the blocks are next free
    end = total = 0.0
    for t in range(nq * pairs):
        qb, _ = slot(t, nq, pairs, section, tail)
        done = heapq.heappop(free) + cost[qb]
        heapq.heappush(free, done)
        end, total = max(end, done), total + cost[qb]
    return end / (total / blocks)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=132, help="resident blocks (SMs)")
    ap.add_argument("--waves", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--fixed-cost", type=float, default=1.0, help="per work tile, in K/V tiles")
    a = ap.parse_args()
    print("| D | S | sections only | " + " | ".join(f"tail {w} waves" for w in a.waves) + " |")
    print("|---" * (3 + len(a.waves)) + "|")
    for D, BM, BN in CONFIGS:
        for S in (1024, 4096, 16384):
            cells = [grid_over_ideal(S, D, BM, BN, a.blocks, w, a.fixed_cost) for w in [0] + a.waves]
            print(f"| {D} | {S // 1024}k | " + " | ".join(f"{c:.3f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
