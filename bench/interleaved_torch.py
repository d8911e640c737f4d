#!/usr/bin/env python3
"""libflashattn's cuda backend and PyTorch SDPA backends timed in one process, in turns.

Why: on the device machine one problem's timing moves by up to 10-20 % between processes
(the SM clock dips to ~1575 MHz for fractions of a second under load, bench/RESULTS.md,
session 19), for our kernels and for cuDNN alike, so two single runs a minute apart give
ratios good to about ±5 %. Here every library runs the same problem in the same process,
in rounds (the order a balanced Latin square: each library first once and right after each other
one once per cycle of rounds; one untimed call before each timing), so a clock dip
or a slow allocation falls on all of them alike; the ratio is the median over rounds of
the per-round ratio.

  PYTHONPATH=python FLASHATTN_LIBRARY=build/libflashattn.so \\
      python3 bench/interleaved_torch.py --dtype bf16 f16 --head-dim 64 128 256 \\
          --seqlen 1024 4096 16384 --torch flash cudnn [--backward [--atomic]]

--ours-env VAR=VALUE[,VAR2=VALUE2] ... adds ours with those environment variables set (e.g.
A/B switches of the cuda backend, read on every call) to the rotation, as `ours[VAR=VALUE]`,
with its speed over plain ours (median per-round ratio) beside the torch ratios: an A/B in one
process.

Shapes: FlashAttention's benchmark (batch * seqlen = 16384 tokens, heads * head_dim =
2048). Ours takes [B, S, H, D] tensors, torch [B, H, S, D] (each library's native layout,
the same values). A timing is `--iters` calls back to back between two CUDA events (no L2
flush: these problems are compute-bound); ours goes through the Python package (ctypes; its
host time overlaps the queued GPU work). FLOPs: 4·B·H·S²·D forward, half for causal,
backward 2.5x. Ours runs deterministic unless --atomic. Each problem's outputs are compared
with cuDNN's (or the first torch backend's) once: the largest absolute difference is printed.

--sustained SECONDS instead runs each library alone for that long per problem (calls back to
back) and prints its TFLOP/s beside the SM clock and board power `nvidia-smi` reports during
the run (median of samples every ~0.2 s): under sustained load the board can reach its power
limit, and then the clock, and with it the speed, depends on each kernel's energy per FLOP.
"""
import argparse
import itertools
import os
import statistics
import subprocess
import threading
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

import flashattn
# The shapes, dtypes, torch backends and FLOP count of the separate-process comparison.
from compare_torch import DTYPES, FA_MODEL_WIDTH, FA_TOKENS, TORCH_GPU_BACKENDS, flops


def ms_per_call(fn, iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def problem_calls(args, dtype, d, s, heads, causal):
    """{name: (call, output)} for ours and each torch backend on one problem (heads 0 and
    --batch 0: FlashAttention's shapes)."""
    b = args.batch or FA_TOKENS // s
    h = heads or FA_MODEL_WIDTH // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=DTYPES[dtype]) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2).contiguous().requires_grad_(args.backward) for x in (q, k, v))
    calls = {}
    det = not args.atomic
    if args.backward:
        o, lse = flashattn.attention(q, k, v, causal=causal, return_lse=True, backend="cuda")
        g = torch.randn_like(o)
        gt = g.transpose(1, 2).contiguous()
        calls["ours"] = lambda: flashattn.attention_backward(q, k, v, o, g, lse, causal=causal,
                                                             backend="cuda", deterministic=det)
        for name in args.torch:
            with sdpa_kernel([TORCH_GPU_BACKENDS[name]]):
                ot = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            calls[name] = (lambda ot=ot: torch.autograd.grad(ot, (qt, kt, vt), gt, retain_graph=True))
    else:
        calls["ours"] = lambda: flashattn.attention(q, k, v, causal=causal, backend="cuda")
        for name in args.torch:
            def call(name=name):
                with sdpa_kernel([TORCH_GPU_BACKENDS[name]]):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            calls[name] = call
    for spec in args.ours_env:
        calls[f"ours[{spec}]"] = lambda spec=spec: with_env(spec, calls["ours"])
    return calls, b, h


def with_env(spec, fn):
    """fn() with the environment variables of spec ("VAR=VALUE[,VAR2=VALUE2...]") set,
    restored after."""
    pairs = [item.split("=", 1) for item in spec.split(",")]
    before = {var: os.environ.get(var) for var, _ in pairs}
    os.environ.update(dict(pairs))
    try:
        return fn()
    finally:
        for var, value in before.items():
            if value is None:
                del os.environ[var]
            else:
                os.environ[var] = value


def first_output(result):
    """The output whose values are compared: o (forward) or dq (backward), as [B, S, H, D]."""
    return result[0] if isinstance(result, tuple) else result


def max_difference(calls):
    ref_name = "cudnn" if "cudnn" in calls else next(n for n in calls if n != "ours")
    mine = first_output(calls["ours"]()).float()
    ref = first_output(calls[ref_name]()).float().transpose(1, 2)
    return ref_name, (mine - ref).abs().max().item()


def sustained(calls, names, seconds):
    """{name: (calls per second, median MHz, median W)} with each library run alone."""
    out = {}
    for n in names:
        samples, stop = [], threading.Event()

        def poll():
            while not stop.is_set():
                line = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                                       "--format=csv,noheader,nounits"], capture_output=True,
                                      text=True).stdout.split(",")
                samples.append((float(line[0]), float(line[1])))
                time.sleep(0.2)

        ms_per_call(calls[n], 3)
        poller = threading.Thread(target=poll)
        poller.start()
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(10):
                calls[n]()
            torch.cuda.synchronize()
            done += 10
        rate = done / (time.perf_counter() - t0)
        stop.set()
        poller.join()
        late = samples[len(samples) // 3:] or samples  # past the first third: steady state
        out[n] = (rate, statistics.median(x[0] for x in late), statistics.median(x[1] for x in late))
    return out


def balanced_order(n, r):
    """Row r of a balanced Latin square (Williams): over n rounds (n even; 2n, the second n
    reversed, when odd) every library runs first once and right after each other one once.
    A plain rotation ran ours right after the last torch backend in every round but one, and
    ours' timings read 2-4 % low beside ours[...] variants of the same kernel (session 35)."""
    base, lo, hi = [0], 1, n - 1
    while len(base) < n:
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    row = [(x + r) % n for x in base]
    return row[::-1] if n % 2 and (r // n) % 2 else row


def interleaved_row(args, names, calls):
    """Seconds per call of each library (median over the rounds), the ours/torch cells
    (median per-round ratio and range) and the max-diff cell."""
    ref_name, diff = max_difference(calls)
    for fn in calls.values():  # warm-up
        fn()
    times = {n: [] for n in names}
    for r in range(args.rounds):
        for i in balanced_order(len(names), r):
            calls[names[i]]()  # untimed: the first call after another library pays the switch
            times[names[i]].append(ms_per_call(calls[names[i]], args.iters))
    ratios = []
    for n in args.torch + [f"ours[{spec}]" for spec in args.ours_env]:
        per_round = [a / o for a, o in zip(times[n], times["ours"])]
        if n.startswith("ours["):
            per_round = [1.0 / x for x in per_round]  # the variant's speed over ours
        ratios.append(f"{statistics.median(per_round):.3f} "
                      f"({min(per_round):.3f}-{max(per_round):.3f})" if n.startswith("ours[") else
                      f"{statistics.median(per_round):.2f} "
                      f"({min(per_round):.2f}-{max(per_round):.2f})")
    return {n: statistics.median(t) / 1e3 for n, t in times.items()}, ratios, \
        f"{diff:.1e} vs {ref_name}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtype", nargs="+", default=["bf16"], choices=["f16", "bf16"])
    p.add_argument("--head-dim", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--seqlen", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--causal", default="both", choices=["yes", "no", "both"])
    p.add_argument("--torch", nargs="+", default=["flash", "cudnn"], choices=TORCH_GPU_BACKENDS)
    p.add_argument("--backward", action="store_true")
    p.add_argument("--atomic", action="store_true", help="ours with unordered atomic dQ adds")
    p.add_argument("--batch", type=int, default=0,
                   help="batch size instead of FlashAttention's 16384 / S (0: theirs)")
    p.add_argument("--heads", type=int, nargs="+", default=[0],
                   help="head counts instead of FlashAttention's 2048 / D (0: theirs); e.g. "
                        "to see a persistent grid's last-wave fill: 16 vs 33 heads")
    p.add_argument("--ours-env", nargs="+", default=[], metavar="VAR=VALUE[,VAR=VALUE]",
                   help="also time ours with these environment variables set (A/B switches)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=10, help="calls per timing")
    p.add_argument("--sustained", type=float, default=0.0,
                   help="seconds each library runs alone per problem (clock and power beside)")
    args = p.parse_args()
    masks = {"yes": [True], "no": [False], "both": [False, True]}[args.causal]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, flashattn "
          f"{flashattn.version()}, {'backward' if args.backward else 'forward'}"
          f"{' (ours atomic)' if args.atomic else ''}, {args.rounds} rounds x {args.iters} calls")
    variants = [f"ours[{spec}]" for spec in args.ours_env]
    names = ["ours"] + variants + args.torch
    if args.sustained > 0:
        print("| dtype | D | S | B x H | causal | " + " | ".join(f"{n} TF/s, MHz, W" for n in names)
              + " |")
        print("|" + "---|" * (5 + len(names)))
    else:
        print(f"| dtype | D | S | B x H | causal | {' | '.join(f'{n} TF/s' for n in names)} | "
              f"{' | '.join([f'ours/{n}' for n in args.torch] + [f'{n}/ours' for n in variants])}"
              f" | max diff |")
        print("|" + "---|" * (6 + len(names) + len(args.torch) + len(variants)))
    for dtype, d, s, heads, causal in itertools.product(args.dtype, args.head_dim, args.seqlen,
                                                         args.heads, masks):
        calls, b, h = problem_calls(args, dtype, d, s, heads, causal)
        work = flops(b, h, s, d, causal, args.backward)
        if args.sustained > 0:
            res = sustained(calls, names, args.sustained)
            cells = [f"{work * res[n][0] / 1e12:.0f}, {res[n][1]:.0f}, {res[n][2]:.0f}"
                     for n in names]
        else:
            seconds, ratios, diff = interleaved_row(args, names, calls)
            cells = [f"{work / seconds[n] / 1e12:.0f}" for n in names] + ratios + [diff]
        print(f"| {dtype} | {d} | {s} | {b} x {h} | {'yes' if causal else 'no'} | "
              f"{' | '.join(cells)} |",
              flush=True)
        del calls
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
