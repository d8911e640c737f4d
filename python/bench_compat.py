#!/usr/bin/env python3
"""flashattn.compat.flash_attn_func against torch SDPA (flash = FlashAttention-2 inside
torch, and cuDNN) on the same shapes, in one process, on the GPU: the number a
FlashAttention user gets after changing the import (Python call overhead included).

    python3 python/bench_compat.py                          # bf16, D 64/128, S 1k..16k
    python3 python/bench_compat.py --backward --json out.json --commit abc1234

Shapes follow FlashAttention's benchmark: batch*seqlen = 16384 tokens, heads*head_dim =
2048. Each library gets its native layout with the same values: ours [B, S, H, D]
(FlashAttention's), torch [B, H, S, D]. Seqlen_q = seqlen_kv, so torch's top-left causal
mask equals ours (bottom-right). Timing: CUDA events, median of --iters calls after
warm-up, L2 flushed before every timed call for both. FLOPs: 4*B*H*S*S*D forward (half
causal); --backward times forward + backward (3.5x the forward's FLOPs). Prints a
Markdown table ready for bench/RESULTS.md: TFLOP/s of each and ours/torch (> 1: ours
faster), and the max error of each against torch's math SDPA in float32 on a slice."""
import argparse
import datetime
import json
import platform
import statistics
import subprocess

import torch
import torch.nn.functional as F

from flashattn.compat import flash_attn_func

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    TORCH_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
except ImportError:  # torch < 2.3 cannot pin SDPA's backend
    SDPBackend = sdpa_kernel = None
    TORCH_BACKENDS = {}

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


class Timer:
    """Median ms of fn over CUDA events; a buffer twice the L2 is zeroed before each
    timed call so neither library runs from a warm cache."""

    def __init__(self):
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")

    def __call__(self, fn, iters, warmup=3):
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(iters):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)


def flops(b, h, s, d, causal, backward):
    f = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
    return f * 3.5 if backward else f


def step(fn, inputs, backward):
    """One timed unit: the forward, or forward + backward with a fixed upstream grad."""
    if not backward:
        return lambda: fn(*inputs)
    grad = torch.randn_like(fn(*inputs))

    def run():
        for t in inputs:
            t.grad = None
        fn(*inputs).backward(grad)
    return run


def measure(args, dtype, d, causal, timer):
    s = args.seqlen
    b, h = max(1, 16384 // s), 2048 // d
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    ours_in = [t.clone().requires_grad_(args.backward) for t in (q, k, v)]
    torch_in = [t.transpose(1, 2).contiguous().requires_grad_(args.backward) for t in (q, k, v)]
    row = dict(dtype=args.dtype, batch=b, heads=h, seqlen=s, head_dim=d, causal=causal,
               backward=args.backward)
    ms = timer(step(lambda q_, k_, v_: flash_attn_func(q_, k_, v_, causal=causal), ours_in, args.backward),
               args.iters)
    row["ours_tflops"] = flops(b, h, s, d, causal, args.backward) / ms / 1e9
    # accuracy on the first batch entry, two heads: vs math SDPA in f32
    ref = F.scaled_dot_product_attention(*(t[:1, :2].float() for t in torch_in), is_causal=causal)
    with torch.no_grad():
        row["ours_err"] = (flash_attn_func(*(t[:1, :, :2] for t in ours_in), causal=causal).float()
                           .transpose(1, 2) - ref).abs().max().item()
    for name, backend in TORCH_BACKENDS.items():
        try:
            with sdpa_kernel([backend]):
                fn = step(lambda q_, k_, v_: F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal),
                          torch_in, args.backward)
                ms_t = timer(fn, args.iters)
            row[f"{name}_tflops"] = flops(b, h, s, d, causal, args.backward) / ms_t / 1e9
        except RuntimeError as e:  # a backend that cannot run the shape says so
            row[f"{name}_tflops"] = None
            row[f"{name}_error"] = str(e).splitlines()[0][:120]
    return row


def cell(x, digits=0):
    return "—" if x is None else f"{x:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--head-dim", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--seqlens", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--causal", choices=["no", "yes", "both"], default="both")
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json")
    parser.add_argument("--commit", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_compat: needs a CUDA device (torch.cuda.is_available() is False)")
    if not TORCH_BACKENDS:
        print(f"bench_compat: torch {torch.__version__} cannot pin SDPA backends (needs >= 2.3); ours only")
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                           text=True).stdout.strip() or "unknown"
    timer = Timer()
    rows = []
    for d in args.head_dim:
        for s in args.seqlens:
            args.seqlen = s
            for causal in {"no": [False], "yes": [True], "both": [False, True]}[args.causal]:
                rows.append(measure(args, DTYPES[args.dtype], d, causal, timer))
    gpu = torch.cuda.get_device_name(0)
    print(f"{datetime.date.today()} · {gpu} · torch {torch.__version__} · commit {commit} · "
          f"{'forward+backward' if args.backward else 'forward'} · {args.dtype} · median of {args.iters}")
    print()
    print("| B | H | S | D | causal | compat flash_attn_func TFLOP/s | torch flash | ratio | torch cuDNN | ratio | max err vs math f32 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = {n: (r["ours_tflops"] / r[f"{n}_tflops"]) if r.get(f"{n}_tflops") else None for n in ("flash", "cudnn")}
        print(f"| {r['batch']} | {r['heads']} | {r['seqlen']} | {r['head_dim']} | {'yes' if r['causal'] else 'no'} | "
              f"{cell(r['ours_tflops'])} | {cell(r.get('flash_tflops'))} | {cell(ratio['flash'], 2)} | "
              f"{cell(r.get('cudnn_tflops'))} | {cell(ratio['cudnn'], 2)} | {r['ours_err']:.2g} |")
    for r in rows:
        for n in ("flash", "cudnn"):
            if f"{n}_error" in r:
                print(f"torch {n} at S={r['seqlen']} D={r['head_dim']}: {r[f'{n}_error']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(date=str(datetime.date.today()), gpu=gpu, torch=torch.__version__, commit=commit,
                           host=platform.node(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
