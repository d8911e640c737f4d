#!/usr/bin/env python3
"""Work items of the cpu backward's two passes and how busy a dynamic schedule keeps T
threads: a model of Plan::Make (backends/cpu/cpu_plan.h: items as large as possible
while >= MIN_ITEMS, up to 4 K/V tiles per dK/dV item and 4 x 96 rows per dQ item) and
Plan::OrderForThreads (cost-major with fewer than 8 items per thread, else head-major),
with each item's cost its visible (row, key) pairs and no per-item overhead. Prints, per
shape, the items of each pass and the share of the threads' time the longest-first
list schedule keeps busy (1.00 = no thread idles before the last item ends).

  python3 tests/cpu/items_model.py [--threads 16] [--seqlen 1024] [--min-items 32 64 128]
"""
import argparse
import heapq
import math

ROWS, KEYS = 96, 96  # tiles-inl.h TileConfig<32>


def plan(batch, heads, seqlen, min_items, causal):
    for passes in (4, 2, 1):
        rows = min(ROWS * passes, seqlen)
        q_blocks = math.ceil(seqlen / rows)
        if batch * heads * q_blocks >= min_items:
            break
    kv_blocks = math.ceil(seqlen / KEYS)
    for per_item in (4, 2, 1):
        groups = math.ceil(kv_blocks / per_item)
        if batch * heads * groups >= min_items:
            break
    hi = (lambda i: i) if causal else (lambda i: seqlen - 1)  # last key row i sees
    seen_by = (lambda j: seqlen - j) if causal else (lambda j: seqlen)  # rows seeing key j
    q_cost = [sum(hi(i) + 1 for i in range(b * rows, min(seqlen, (b + 1) * rows)))
              for b in range(q_blocks)]
    kv_cost = [sum(seen_by(j) for j in range(g * per_item * KEYS,
                                             min(seqlen, (g + 1) * per_item * KEYS)))
               for g in range(groups)]
    return (q_blocks, rows, q_cost), (groups, per_item, kv_cost)


def busy(block_costs, heads_total, threads):
    """Share of thread time used by a dynamic schedule of the items in plan order."""
    order = sorted(block_costs, reverse=True)
    if len(order) * heads_total < 8 * threads:  # cost-major: each block across all heads
        items = [c for c in order for _ in range(heads_total)]
    else:  # head-major
        items = [c for _ in range(heads_total) for c in order]
    clocks = [0.0] * threads
    for c in items:
        heapq.heappush(clocks, heapq.heappop(clocks) + c)
    return sum(items) / threads / max(clocks)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--min-items", type=int, nargs="+", default=[32, 64, 128])
    args = p.parse_args()
    print(f"S={args.seqlen}, {args.threads} threads")
    print("| B | H | min items | causal | dK/dV items (tiles each) | busy | dQ items (rows) | busy |")
    print("|---|---|---|---|---|---|---|---|")
    for batch in (1, 2, 4):
        for heads in (8, 16):
            for min_items in args.min_items:
                for causal in (False, True):
                    (qb, rows, qc), (groups, per, kc) = plan(batch, heads, args.seqlen,
                                                             min_items, causal)
                    bh = batch * heads
                    print(f"| {batch} | {heads} | {min_items} | {'yes' if causal else 'no'} | "
                          f"{bh * groups} ({per}) | {busy(kc, bh, args.threads):.2f} | "
                          f"{bh * qb} ({rows}) | {busy(qc, bh, args.threads):.2f} |")


if __name__ == "__main__":
    main()
