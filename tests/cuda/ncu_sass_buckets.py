#!/usr/bin/env python3
"""Where a kernel's warps spend their samples, grouped by how often the code runs.

  python3 tests/cuda/ncu_sass_buckets.py ncufwd-sass.csv.gz [--runs COUNT] [--top N]

Input: the per-instruction SASS csv that tests/cuda/device_hopper.sh's "ncufwd" step
writes (ncu --page source --print-source sass --csv, gzipped). Every instruction has an
execution count (warp-level); code that runs once per work tile of a persistent kernel
shares one count (tiles x warps that run it), the K/V loop another, the producer warp a
third. Summing the stall samples per count splits the kernel's time into those parts
without reading the SASS (bench/RESULTS.md, session 10: per-work-tile code was 13 % of a
causal 4k forward's samples). --runs COUNT then lists the contiguous runs of
instructions with that count, largest first, and their top instructions.
"""
import argparse
import collections
import csv
import gzip


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    rows = list(csv.reader(opener(path, "rt")))
    # Row 0 names the kernel, row 1 holds the column names.
    header, data = rows[1], rows[2:]
    col = {name: header.index(name) for name in
           ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed")}
    return [(i, int(r[col["Warp Stall Sampling (All Samples)"]]),
             int(r[col["Instructions Executed"]]), r[col["Source"]].strip())
            for i, r in enumerate(data)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--runs", type=int, help="list the code runs executed this many times")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    instrs = load(a.csv)
    total = sum(s for _, s, _, _ in instrs) or 1
    samples, count = collections.Counter(), collections.Counter()
    for _, s, ex, _ in instrs:
        samples[ex] += s
        count[ex] += 1
    print(f"{total} samples, {len(instrs)} instructions")
    print("| executed | samples | share | instructions |")
    print("|---|---|---|---|")
    for ex, s in samples.most_common(a.top):
        print(f"| {ex} | {s} | {100 * s / total:.1f} % | {count[ex]} |")
    if a.runs is None:
        return
    runs = []  # [first, last, samples, [(index, samples, source)]]
    for i, s, ex, src in instrs:
        if ex != a.runs:
            continue
        if runs and i - runs[-1][1] <= 3:  # a few instructions of other counts may interleave
            runs[-1][1] = i
            runs[-1][2] += s
            runs[-1][3].append((i, s, src))
        else:
            runs.append([i, i, s, [(i, s, src)]])
    for first, last, s, items in sorted(runs, key=lambda r: -r[2])[:8]:
        print(f"\ninstructions {first}-{last}: {s} samples ({100 * s / total:.1f} %)")
        for i, si, src in sorted(items, key=lambda x: -x[1])[:6]:
            print(f"  {i:6d} {si:6d}  {src[:96]}")


if __name__ == "__main__":
    main()
