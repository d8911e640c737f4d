#!/usr/bin/env python3
"""Markdown table of a same-call forward A/B (tests/cuda/device_hopper.sh "ab" step) beside
torch SDPA flash / cuDNN from the same call.

  python3 tests/cuda/ab_table.py ab.log torch.log
ab.log: cuda_module_bench lines whose first column names the variant (new, old, mma,
variant), several rounds; each variant's TFLOP/s is the mean of its rounds, with the
spread (max - min) / mean beside it. torch.log: torch_sdpa.py output.
"""
import sys
from collections import defaultdict


def main():
    runs = defaultdict(list)  # (variant, dtype, D, S, causal) -> [TF/s]
    variants = []
    for line in open(sys.argv[1]):
        f = line.split()
        if len(f) < 9 or f[0] in ("backend", "libflashattn"):
            continue
        try:
            key = (f[0], f[1], int(f[5]), int(f[4]), f[6] == "yes")
            runs[key].append(float(f[8]))
        except ValueError:
            continue
        if f[0] not in variants:
            variants.append(f[0])
    torch = {}
    if len(sys.argv) > 2:
        for line in open(sys.argv[2]):
            f = line.split()
            if len(f) >= 9 and f[0] in ("flash", "cudnn"):
                torch[(f[0], f[1], int(f[5]), int(f[4]), f[6] == "True")] = float(f[8])
    shapes = sorted({k[1:] for k in runs}, key=lambda s: (s[0], s[1], s[3], s[2]))
    head = "| dtype | D | S | causal | " + " | ".join(f"{v} TF/s (spread)" for v in variants)
    head += " | flash | cuDNN | " + " | ".join(f"{v}/cuDNN" for v in variants) + " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for s in shapes:
        means = {}
        cells = []
        for v in variants:
            vals = runs.get((v,) + s, [])
            if not vals:
                cells.append("-")
                continue
            m = sum(vals) / len(vals)
            means[v] = m
            cells.append(f"{m:.0f} ({(max(vals) - min(vals)) / m * 100:.0f}%)")
        fl, cu = torch.get(("flash",) + s), torch.get(("cudnn",) + s)
        ratios = [f"{means[v] / cu:.2f}" if cu and v in means else "-" for v in variants]
        print(f"| {s[0]} | {s[1]} | {s[2]} | {'yes' if s[3] else 'no'} | " + " | ".join(cells) +
              f" | {fl or '-'} | {cu or '-'} | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
