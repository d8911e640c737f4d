"""Per-call host overhead of the Python binding: the same tiny attention problem
(batch 1, 1 query, 1 key, 1 head, dim 8, f32, host memory: the kernel's own work is
negligible) called from C and from Python; per route the best and the median of 9
rounds. Clock: the calling thread's CPU time by default (on a shared machine it leaves
out the time the thread waits for a core), or --clock wall.

    python3 python/bench_overhead.py [--calls N] [--clock thread|wall]

Needs a C compiler (cc) and the library's headers (the repository's include/ or
FLASHATTN_INCLUDE). Prints ns per call for each route and the overhead over C."""
import argparse
import ctypes
import os
import statistics
import subprocess
import tempfile
import time

import flashattn
from flashattn import _abi, _library

HERE = os.path.dirname(os.path.abspath(__file__))


def c_call_ns(calls, clock):
    include = os.environ.get("FLASHATTN_INCLUDE", os.path.join(HERE, "..", "include"))
    lib = flashattn.library_path()
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "bench_overhead")
        subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "bench_overhead.c"), "-I", include, lib,
                        "-Wl,-rpath," + os.path.dirname(lib)], check=True)
        out = subprocess.run([exe, str(calls), clock], check=True, capture_output=True, text=True).stdout
        return tuple(float(x) for x in out.split())


CLOCK = time.thread_time_ns


def time_ns(fn, calls, sync=None):
    """(best, median) ns per call over 9 rounds; sync (GPU) ends each round."""
    rounds = []
    for _ in range(9):
        t0 = CLOCK()
        for _ in range(calls):
            fn()
        if sync:
            sync()
        rounds.append((CLOCK() - t0) / calls)
    return min(rounds), statistics.median(rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--clock", choices=["thread", "wall"], default="thread")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.thread_time_ns if args.clock == "thread" else time.perf_counter_ns
    c_ns = c_call_ns(args.calls, args.clock)
    rows = [("C flash_attention (bench_overhead.c)", c_ns)]

    # The floor of any ctypes binding: one foreign call with a prebuilt descriptor.
    lib = _library.load()
    buf = (ctypes.c_float * 32)(*([0.1] * 32))
    base = ctypes.addressof(buf)
    d = _abi.Desc()
    lib.flash_desc_init(ctypes.byref(d))
    d.seqlen_q = d.seqlen_kv = 1
    d.head_dim = 8
    ref = ctypes.byref(d)
    rows.append(("ctypes call, prebuilt descriptor",
                 time_ns(lambda: lib.flash_attention(ref, base, base + 32, base + 64, base + 96), args.calls)))
    try:
        import numpy as np
        q = np.full((1, 1, 1, 8), 0.1, dtype=np.float32)
        rows.append(("flashattn.attention(numpy)", time_ns(lambda: flashattn.attention(q, q, q), args.calls)))
    except ImportError:
        pass
    try:
        import torch
        t = torch.full((1, 1, 1, 8), 0.1)
        rows.append(("flashattn.attention(torch)", time_ns(lambda: flashattn.attention(t, t, t), args.calls)))
        from flashattn.compat import flash_attn_func
        rows.append(("compat.flash_attn_func(torch)", time_ns(lambda: flash_attn_func(t, t, t), args.calls)))
        rows.append(("t.new_empty alone (the output allocation)", time_ns(lambda: t.new_empty((1, 1, 1, 8)), args.calls)))
        if torch.cuda.is_available():  # host time per call on the GPU path (kernels queue)
            c = t.cuda()
            sync = torch.cuda.synchronize
            rows.append(("flashattn.attention(torch cuda), host time",
                         time_ns(lambda: flashattn.attention(c, c, c), 2000, sync)))
            sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
            if sdpa is not None:
                ct = c.transpose(1, 2)
                rows.append(("torch SDPA (cuda), host time", time_ns(lambda: sdpa(ct, ct, ct), 2000, sync)))
    except ImportError:
        pass
    print(f"libflashattn {flashattn.version()} at {flashattn.library_path()}; clock: {args.clock}")
    print(f"{'route':46s} {'best ns':>8s} {'over C':>8s} {'median':>8s} {'over C':>8s}")
    for name, (best, median) in rows:
        print(f"{name:46s} {best:8.0f} {best - c_ns[0]:8.0f} {median:8.0f} {median - c_ns[1]:8.0f}")


if __name__ == "__main__":
    main()
