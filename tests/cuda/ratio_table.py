#!/usr/bin/env python3
"""Markdown table of ours vs torch SDPA (flash, cuDNN) from one device call's logs.

  python3 tests/cuda/ratio_table.py bench.log torch.log [--backward]
bench.log: cuda_module_bench output; torch.log: torch_sdpa.py output (same call).
"""
import sys

def rows(path, ours):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) < 10 or f[0] not in (("ours",) if ours else ("flash", "cudnn")):
            continue
        dtype, S, D = f[1], int(f[4]), int(f[5])
        causal = f[6] in ("yes", "True")
        if ours:
            val = float(f[10]) if "--backward" in sys.argv else float(f[8])
        else:
            val = float(f[9]) if "--backward" in sys.argv else float(f[8])
        out[(f[0], dtype, D, S, causal)] = val
    return out

ours = rows(sys.argv[1], True)
torch = rows(sys.argv[2], False)
kind = "backward" if "--backward" in sys.argv else "forward"
print(f"| dtype | D | S | causal | ours {kind} TF/s | torch flash | ours/flash | torch cuDNN | ours/cuDNN |")
print("|---|---|---|---|---|---|---|---|---|")
for (name, dtype, D, S, causal), v in sorted(ours.items(), key=lambda x: (x[0][1], x[0][2], x[0][4], x[0][3])):
    fl = torch.get(("flash", dtype, D, S, causal))
    cu = torch.get(("cudnn", dtype, D, S, causal))
    r = lambda t: f"{v / t:.2f}" if t else "-"
    print(f"| {dtype} | {D} | {S} | {'yes' if causal else 'no'} | {v:.0f} | {fl or '-'} | {r(fl)} | {cu or '-'} | {r(cu)} |")
