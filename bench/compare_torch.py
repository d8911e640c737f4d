#!/usr/bin/env python3
"""libflashattn against PyTorch SDPA on the same shapes, in one call, as ratios.

Runs flashattn-compare --json for our backend and times PyTorch's SDPA on the same
shapes in the same process tree, then prints one Markdown table (ready for
bench/RESULTS.md) with TFLOP/s of both and the ratio ours/torch (> 1: we are faster).

  # GPU (device machine): our cuda backend vs torch flash and cuDNN, bf16, forward
  python3 bench/compare_torch.py --compare build-device/bench/flashattn-compare \\
      --device cuda --dtype bf16 --head-dim 64 128 --seqlen 1024 4096 16384 --causal both
  # CPU: our cpu backend vs torch's CPU flash kernel, same thread count
  python3 bench/compare_torch.py --compare build/bench/flashattn-compare \\
      --device cpu --dtype f32 --head-dim 64 128 --seqlen 1024 4096 --threads 16
  # Decode: 1 or 4 query tokens against 8k..128k cached keys, contiguous and paged (ours)
  python3 bench/compare_torch.py --compare build-device/bench/flashattn-compare --decode \\
      --heads 32 64 --heads-kv 8 --queries 1 4 --batch 1 8 --keys 8192 32768 131072 --paged 0 64

Decode (--decode): GB/s of K+V read (each cached key row, K and V once, over the kv
heads), ours from flashattn-compare (beside its copy ceiling: a device copy of as many
bytes in the same run, and "of copy") and torch SDPA with enable_gqa=True: flash and
cuDNN on the GPU, its CPU kernel on the CPU. Torch has no paged cache: its columns on a
paged row are its contiguous numbers. Our query tokens are causal (bottom-right: the
decode step's mask), torch's see every key (its is_causal aligns top-left, which would
hide almost the whole cache); both read every key.

Shapes: GPU defaults follow FlashAttention's benchmark (batch*seqlen = 16384 tokens,
heads*head_dim = 2048); CPU defaults are batch 1, 16 heads. Torch uses [B, H, S, D]
tensors, we use [B, S, H, D] (each library's native layout).
Timing: median of --iters after warm-up. GPU: CUDA events, L2 flushed before every
timed call for both libraries in the same way (--flush; flashattn-compare gets it as
FLASH_BENCH_FLUSH): "read" (default) reads a buffer twice the L2 size that is never
written, so the timed call finds L2 holding clean lines only and pays for its own
traffic; "write" zeroes that buffer (the usual flush, and ours before 2026-11-24),
which leaves L2 full of dirty lines that the timed call writes back (up to ~50 MB on
an H100: it weighs on short memory-bound calls such as decode). CPU: wall clock,
torch.set_num_threads(T) and OMP_NUM_THREADS=T for ours.
FLOPs (both columns): 4*B*H*Sq*Sk*D forward, half for causal, backward 2.5x; the
ratio does not depend on the count.
"""
import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # torch < 2.3: CPU rows run torch's default choice, GPU rows refuse
    SDPBackend = sdpa_kernel = None

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TORCH_GPU_BACKENDS = {} if SDPBackend is None else {
    "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
FA_TOKENS = 16384       # FlashAttention benchmark: batch * seqlen
FA_MODEL_WIDTH = 2048   # FlashAttention benchmark: heads * head_dim
CPU_HEADS = 16          # torch CPU anchor in shared/design/ANCHORS.md
L2_EVICTION_FACTOR = 2  # flush with a buffer twice the L2 size before each timed GPU call
BACKWARD_WORK = 2.5


def flops(batch, heads, seqlen, head_dim, causal, backward, head_dim_v=0):
    # 2·(D + Dv) per visible pair (bench/RESULTS.md's counting rules): 4·D when Dv = D.
    pair = 2.0 * (head_dim + (head_dim_v or head_dim))
    forward = pair * batch * heads * seqlen * seqlen / (2 if causal else 1)
    return forward * (BACKWARD_WORK if backward else 1.0)


class GpuTimer:
    """Median milliseconds of fn over CUDA events, L2 flushed before each call (module
    docstring: "read" reads self.scratch, never written after its first read; "write"
    zeroes it)."""

    def __init__(self, flush="read"):
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.scratch = torch.empty(L2_EVICTION_FACTOR * l2 // 4, dtype=torch.float32,
                                   device="cuda")
        self.flush = flush

    def flush_l2(self):
        if self.flush == "write":
            self.scratch.zero_()
        else:
            self.scratch.amax()  # a read-only reduction over every line

    def __call__(self, fn, iters, warmup=3):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            self.flush_l2()
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        return sorted(times)[len(times) // 2]


def cpu_timer(fn, iters, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def torch_kernel(device, name):
    """Context that makes SDPA use torch backend `name` (GPU), or its CPU flash kernel."""
    if device == "cuda":
        return sdpa_kernel([TORCH_GPU_BACKENDS[name]])
    if sdpa_kernel is None:
        return contextlib.nullcontext()
    # torch's CPU flash kernel, with the math path as its own fallback
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH])


def time_torch(args, name, batch, heads, seqlen, head_dim, causal, timer):
    """Milliseconds of torch SDPA (forward or backward) with one torch backend."""
    device = args.device
    grad = args.backward
    q = torch.randn(batch, heads, seqlen, head_dim, device=device, dtype=DTYPES[args.dtype],
                    requires_grad=grad)
    k = torch.randn_like(q, requires_grad=grad)
    v = torch.randn(batch, heads, seqlen, args.head_dim_v or head_dim, device=device,
                    dtype=DTYPES[args.dtype], requires_grad=grad)
    with torch_kernel(device, name):
        if not grad:
            return timer(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                         args.iters)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        g = torch.randn_like(o)
        return timer(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True), args.iters)


def run_ours(args, head_dim, causal, batch, heads):
    """Rows of flashattn-compare --json for one head dim and mask, all seqlens."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ours.json")
        cmd = [args.compare, "--backends", args.ours, "--dtype", args.dtype,
               "--head-dim", str(head_dim), "--heads", str(heads),
               "--seqlen", ",".join(str(s) for s in args.seqlen),
               "--iters", str(args.iters), "--check-budget", str(args.check_budget),
               "--json", out]
        cmd += ["--batch", str(batch)] if batch else ["--tokens", str(FA_TOKENS)]
        if args.head_dim_v:
            cmd += ["--head-dim-v", str(args.head_dim_v)]
        if causal:
            cmd.append("--causal")
        if args.backward:
            cmd.append("--backward")
        env = dict(os.environ, FLASH_BENCH_FLUSH=args.flush)
        if args.device == "cpu" and args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
        # Exit status 1 means "outside tolerance": still a measurement, reported below.
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
        if done.returncode not in (0, 1):
            sys.exit(f"flashattn-compare failed with status {done.returncode}")
        with open(out) as f:
            return json.load(f)["rows"]


def machine_line(args):
    if args.device == "cuda":
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {args.threads or os.cpu_count()} threads, torch {torch.__version__}"


def commit_line():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("FLASHATTN_COMMIT", "unknown (set FLASHATTN_COMMIT)")



def error_cell(mine, ok):
    """Our error against the reference and the share of the tolerance it used."""
    if ok and mine["checked"]:
        return f"{mine['relative_error']:.1e} ({100 * mine['tolerance_used']:.0f}%)"
    return "-"


def write_json(args, rows, **extra):
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(machine=machine_line(args), commit=commit_line(), argv=sys.argv,
                           **extra, rows=rows), f, indent=1)

def has_enable_gqa():
    """torch >= 2.5: SDPA takes fewer K/V heads than query heads (enable_gqa=True)."""
    q, kv = torch.zeros(1, 2, 1, 8), torch.zeros(1, 1, 1, 8)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
        return True
    except TypeError:
        return False


def time_torch_decode(args, name, q, k, v, gqa, timer):
    """Milliseconds of one torch SDPA decode call. Without enable_gqa (torch < 2.5) K/V
    are repeated to the query heads beforehand: torch then reads group x the bytes."""
    if not gqa:
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    kwargs = dict(enable_gqa=True) if gqa else {}
    with torch_kernel(args.device, name):
        return timer(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs), args.iters)


def run_ours_decode(args, head_dim, heads, batch, keys, page):
    """Rows of flashattn-compare --json for one cache shape, one per query count."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ours.json")
        cmd = [args.compare, "--backends", args.ours, "--dtype", args.dtype,
               "--head-dim", str(head_dim), "--heads-q", str(heads),
               "--heads-kv", str(args.heads_kv), "--batch", str(batch),
               "--seqlen-q", ",".join(str(q) for q in args.queries), "--seqlen-kv", str(keys),
               "--causal", "--iters", str(args.iters), "--check-budget", str(args.check_budget),
               "--json", out]
        if page:
            cmd += ["--paged", str(page)]
        env = dict(os.environ, FLASH_BENCH_FLUSH=args.flush)
        if args.device == "cpu" and args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
        if done.returncode not in (0, 1):  # 1: outside tolerance, still reported
            sys.exit(f"flashattn-compare failed with status {done.returncode}")
        with open(out) as f:
            return [r for r in json.load(f)["rows"] if r["backend"] == args.ours]


def run_decode(args, gpu, torch_names, timer):
    """Decode rows: ours (contiguous and paged) beside torch SDPA, in GB/s of K+V."""
    head_dims = args.head_dim or [128]
    heads_list = args.heads or [32]
    batches = args.batch or ([1, 8] if gpu else [1])
    key_counts = args.keys or ([8192, 32768, 131072] if gpu else [8192, 131072])
    gqa = has_enable_gqa()
    dtype = DTYPES[args.dtype]
    results = []
    for head_dim in head_dims:
        for heads in heads_list:
            for batch in batches:
                for keys in key_counts:
                    ours = {page: run_ours_decode(args, head_dim, heads, batch, keys, page)
                            for page in args.paged}
                    k = torch.randn(batch, args.heads_kv, keys, head_dim, device=args.device,
                                    dtype=dtype)
                    v = torch.randn_like(k)
                    kv_bytes = 2 * k.numel() * k.element_size()
                    for queries in args.queries:
                        q = torch.randn(batch, heads, queries, head_dim, device=args.device,
                                        dtype=dtype)
                        theirs = {}
                        for name in torch_names:
                            print(f"torch {name} D={head_dim} Hq={heads} B={batch} keys={keys} "
                                  f"Sq={queries}", file=sys.stderr, flush=True)
                            try:
                                ms = time_torch_decode(args, name, q, k, v, gqa, timer)
                                theirs[name] = dict(ms=ms, gbps=kv_bytes / ms / 1e6)
                            except RuntimeError as e:  # a torch backend declines the shape
                                theirs[name] = dict(error=str(e).splitlines()[0][:100])
                        for page in args.paged:
                            mine = next(r for r in ours[page] if r["seqlen_q"] == queries)
                            results.append(dict(head_dim=head_dim, heads=heads, batch=batch,
                                                keys=keys, queries=queries, page=page,
                                                ours=mine, **theirs))
                    del k, v
                    if gpu:
                        torch.cuda.empty_cache()
    print_decode(args, torch_names, gqa, results)


def gbps_text(x):
    """GB/s to three significant digits: 4219 on a GPU, 0.812 on a slow host."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def print_decode(args, torch_names, gqa, results):
    print(f"\n### decode {args.dtype}, ours = {args.ours}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {machine_line(args)}; commit {commit_line()}")
    print("command: " + " ".join(["python3"] + sys.argv))
    print("GB/s: K+V bytes read (each cached key, K and V once, over the kv heads) per second; "
          f"L2 flushed ({args.flush}) before each GPU call. Torch has no paged cache: its columns on paged rows "
          "are its contiguous numbers." +
          ("" if gqa else f" torch {torch.__version__} has no enable_gqa: K/V repeated to the "
                          "query heads, so it reads group x the bytes counted."))
    print()
    names = {"flash": "torch flash", "cudnn": "cuDNN", "cpu": "torch CPU"}
    head = ["D", "B", "Sq", "Hq/Hkv", "keys", "cache", "ours GB/s"]
    head += [f"{names.get(n, 'torch ' + n)} GB/s" for n in torch_names]
    head += ["copy GB/s", "ours of copy"] + [f"ours/{n}" for n in torch_names]
    head += ["ours err (tol used)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in results:
        mine = r["ours"]
        ok = mine["status"] == "ok"
        cells = [str(r["head_dim"]), str(r["batch"]), str(r["queries"]),
                 f"{r['heads']}/{args.heads_kv}", str(r["keys"]),
                 f"paged {r['page']}" if r["page"] else "contiguous",
                 gbps_text(mine["kv_gbps"]) if ok else mine["status"][:60]]
        for name in torch_names:
            t = r[name]
            cells.append(t["error"][:40] if "error" in t else gbps_text(t["gbps"]))
        copy = mine.get("copy_gbps") if ok else None
        cells += [gbps_text(copy) if copy else "-", f"{mine['of_copy']:.2f}" if copy else "-"]
        for name in torch_names:
            t = r[name]
            cells.append(f"{mine['kv_gbps'] / t['gbps']:.2f}" if ok and "gbps" in t else "-")
        cells.append(error_cell(mine, ok))
        print("| " + " | ".join(cells) + " |")
    write_json(args, results, mode="decode", flush=args.flush)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compare", required=True, help="path of the flashattn-compare executable")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--ours", default=None, help="our backend (default: cuda on GPU, cpu on CPU)")
    p.add_argument("--torch", nargs="+", default=None,
                   help="torch GPU backends (default: flash cudnn); CPU: its default kernel")
    p.add_argument("--dtype", default="bf16", choices=DTYPES)
    p.add_argument("--head-dim", type=int, nargs="+", default=None,
                   help="default: 64 128 (prefill), 128 (decode)")
    p.add_argument("--head-dim-v", type=int, default=0,
                   help="head dim of v and o (0: each --head-dim); DeepSeek's shape: "
                        "--head-dim 192 --head-dim-v 128")
    p.add_argument("--seqlen", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--batch", type=int, nargs="+", default=None,
                   help="prefill, one value: 0 = GPU 16384 // seqlen, CPU 1; "
                        "decode, a list: default 1 8 (GPU), 1 (CPU)")
    p.add_argument("--heads", type=int, nargs="+", default=None,
                   help="query heads; prefill, one value: 0 = GPU 2048 // head_dim, CPU 16; "
                        "decode, a list: default 32")
    p.add_argument("--causal", default="both", choices=["yes", "no", "both"])
    p.add_argument("--backward", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for both (0: all cores)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--flush", default="read", choices=["read", "write"],
                   help="GPU L2 flush before each timed call, for both libraries (see above)")
    p.add_argument("--check-budget", type=float, default=0.2,
                   help="GFLOP of reference work per problem for our error column")
    p.add_argument("--json", help="also write the rows as JSON")
    d = p.add_argument_group("decode (--decode): GB/s of K+V against a KV cache")
    d.add_argument("--decode", action="store_true", help="decode rows instead of prefill")
    d.add_argument("--heads-kv", type=int, default=8)
    d.add_argument("--queries", type=int, nargs="+", default=[1, 4],
                   help="query tokens per sequence (speculative decoding: a few)")
    d.add_argument("--keys", type=int, nargs="+", default=None,
                   help="cached keys per sequence (default: GPU 8192 32768 131072, CPU 8192 131072)")
    d.add_argument("--paged", type=int, nargs="+", default=[0, 64],
                   help="our cache's page size, 0 = contiguous")
    args = p.parse_args()

    gpu = args.device == "cuda"
    if not hasattr(F, "scaled_dot_product_attention"):
        sys.exit(f"torch {torch.__version__} has no scaled_dot_product_attention (needs >= 2.0)")
    if gpu and sdpa_kernel is None:
        sys.exit(f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel (needs >= 2.3) "
                 "to pick its GPU kernels")
    args.ours = args.ours or ("cuda" if gpu else "cpu")
    torch_names = (args.torch or ["flash", "cudnn"]) if gpu else ["cpu"]
    if not gpu:
        args.threads = args.threads or os.cpu_count()
        torch.set_num_threads(args.threads)
    timer = GpuTimer(args.flush) if gpu else cpu_timer
    if args.decode:
        run_decode(args, gpu, torch_names, timer)
        return
    args.head_dim = args.head_dim or [64, 128]
    for name in ("batch", "heads"):
        values = getattr(args, name) or [0]
        if len(values) != 1:
            p.error(f"--{name} takes one value without --decode")
        setattr(args, name, values[0])
    causal_options = {"yes": [True], "no": [False], "both": [False, True]}[args.causal]

    results = []
    for head_dim in args.head_dim:
        heads = args.heads or (FA_MODEL_WIDTH // head_dim if gpu else CPU_HEADS)
        fixed_batch = args.batch or (0 if gpu else 1)
        for causal in causal_options:
            ours = run_ours(args, head_dim, causal, fixed_batch, heads)
            for seqlen in args.seqlen:
                mine = next(r for r in ours if r["seqlen_q"] == seqlen)
                batch = mine["batch"]
                row = dict(head_dim=head_dim, seqlen=seqlen, batch=batch, heads=heads,
                           causal=causal, ours=mine)
                work = flops(batch, heads, seqlen, head_dim, causal, args.backward,
                             args.head_dim_v)
                for name in torch_names:
                    print(f"torch {name} D={head_dim} S={seqlen} causal={causal}",
                          file=sys.stderr, flush=True)
                    try:
                        ms = time_torch(args, name, batch, heads, seqlen, head_dim, causal, timer)
                        row[name] = dict(ms=ms, tflops=work / ms / 1e9)
                    except RuntimeError as e:  # torch backend declines this shape/dtype
                        row[name] = dict(error=str(e).splitlines()[0][:100])
                    if gpu:
                        torch.cuda.empty_cache()
                results.append(row)

    direction = "backward" if args.backward else "forward"
    print(f"\n### {args.dtype} {direction}, ours = {args.ours}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {machine_line(args)}; commit {commit_line()}")
    print("command: " + " ".join(["python3"] + sys.argv))
    print()
    head = ["D", "S", "B", "H", "causal", "ours TF/s"]
    for name in torch_names:
        head += [f"torch {name} TF/s", f"ours/{name}"]
    head += ["ours err (tol used)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    rate = "{:.1f}" if gpu else "{:.3g}"  # GPU: hundreds of TF/s; CPU: ~0.01-2 TF/s
    for r in results:
        mine = r["ours"]
        ok = mine["status"] == "ok"
        dims = str(r["head_dim"]) + (f"/{args.head_dim_v}" if args.head_dim_v else "")
        cells = [dims, str(r["seqlen"]), str(r["batch"]), str(r["heads"]),
                 "yes" if r["causal"] else "no",
                 rate.format(mine["tflops"]) if ok else mine["status"][:60]]
        for name in torch_names:
            t = r[name]
            if "error" in t:
                cells += [t["error"][:40], "-"]
            else:
                cells += [rate.format(t["tflops"]),
                          f"{mine['tflops'] / t['tflops']:.2f}" if ok else "-"]
        cells.append(error_cell(mine, ok))
        print("| " + " | ".join(cells) + " |")
    write_json(args, results, flush=args.flush)


if __name__ == "__main__":
    main()
