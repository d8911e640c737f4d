#!/usr/bin/env python3
"""Where a kernel's warps spend their samples, grouped by how often the code runs.

  python3 tests/cuda/ncu_sass_buckets.py ncufwd-sass.csv.gz [--runs COUNT] [--top N] [--opcodes]

Input: the per-instruction SASS csv that tests/cuda/device_hopper.sh's "ncufwd" step
writes (ncu --page source --print-source sass --csv, gzipped). Every instruction has an
execution count (warp-level); code that runs once per work tile of a persistent kernel
shares one count (tiles x warps that run it), the K/V loop another, the producer warp a
third. Summing the stall samples per count splits the kernel's time into those parts
without reading the SASS (bench/RESULTS.md, session 10: per-work-tile code was 13 % of a
causal 4k forward's samples). --runs COUNT then lists the contiguous runs of
instructions with that count, largest first, and their top instructions. --opcodes
lists the samples per opcode with their largest stall reasons (session 21: MUFU.EX2 "wait"
was 14 % of a D 128 forward's samples).
"""
import argparse
import collections
import csv
import gzip


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    return list(csv.reader(opener(path, "rt")))


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def by_opcode(rows, top):
    """Samples per opcode (HGMMA / MUFU keep their shape / function) and top stall reasons."""
    header, data = rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    reasons = [n for n in header if n.startswith("stall_") and "Not Issued" not in n]
    samples = collections.Counter()
    stalls = collections.defaultdict(collections.Counter)
    for r in data:
        words = r[col["Source"]].split()
        if not words:
            continue
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        parts = op.split(".")
        op = ".".join(parts[:2]) if parts[0] in ("HGMMA", "MUFU") else parts[0]
        samples[op] += number(r[col["Warp Stall Sampling (All Samples)"]])
        for n in reasons:
            stalls[op][n] += number(r[col[n]])
    total = sum(samples.values()) or 1
    print("| opcode | share | largest stall reasons (points of all samples) |")
    print("|---|---|---|")
    for op, s in samples.most_common(top):
        largest = ", ".join(f"{n[6:]} {100 * v / total:.1f}" for n, v in stalls[op].most_common(3))
        print(f"| {op} | {100 * s / total:.1f} % | {largest} |")


def load(rows):
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
    ap.add_argument("--opcodes", action="store_true", help="samples per opcode and stall reason")
    a = ap.parse_args()
    rows = read_rows(a.csv)
    if a.opcodes:
        by_opcode(rows, a.top)
        return
    instrs = load(rows)
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
