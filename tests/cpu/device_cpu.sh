#!/usr/bin/env bash
# One device call for the CPU backend's bf16 targets (issue 17) on the device host
# (16-core Xeon with AVX-512, AVX512-BF16 and AMX-BF16; Ubuntu 24.04, no internet):
#   build    cpu-only build in build-cpu/ (not build-device/: the GPU scripts keep theirs),
#            Highway / Google Benchmark from .carry/ as .ci/device_build.sh passes them
#   tests    flash_cpu_target_test, flash_cpu_bf16_kernel_test (amx on real tiles and
#            avx512bf16 vs the fp64 oracle, forward and backward),
#            flash_cpu_amx_emulated_test
#   suite    cross-backend suite for cpu with FLASH_CPU_TARGET=amx and =avx512bf16
#            (forward, backward and inference cases of both: each has its own bf16
#            backward, tiles / vdpbf16ps)
#   speed    bf16 forward (amx), f32 forward, bf16 backward (amx tiles) and f32
#            backward on 16 threads beside torch's CPU SDPA (bench/compare_torch.py
#            --device cpu), D = 64/128, S = 1k/4k, causal and not; then alternations of
#            flash_cpu_speed at B=1 H=8 S=2048 D=128: bf16 amx vs avx512bf16 and amx vs
#            f32, forward and backward; the fused f32 backward vs the two passes
#            (FLASH_CPU_BWD_FUSED=1/0) at B=1 H=16 D=128 S=1k/4k (SPEED_RUNS name
#            bwd_fused_vs_two_pass)
#   items    S = 1k at 16 threads: the default plan (32 items, cost-major order) against
#            head-major order and against 128 items
#   repro    the one odd point of the 2026-11-24 run (bf16 amx D=64 S=1k causal: 0.27 TF/s
#            in compare_torch, 1.3-1.7 ms in flash_cpu_speed): flashattn-compare alone on
#            that shape, then right after 200 ms of torch SDPA on 16 threads in the same
#            parent process (as compare_torch runs it), then 1 s later; median and min
#            of 20 calls each (bench/RESULTS.md, "Dev machine", issue 17 helper entry)
#   decode   CPU decode GB/s beside a host copy, two rounds (issue 14; run it alone);
#            DECODE_PREFETCH="l1 l2 none" alternates the prefetch policies, DECODE_DTYPES,
#            DECODE_BATCH, DECODE_KEYS narrow the grid
#   table    one table of the ratios to torch (from the compare_torch JSON files)
# The AMX backward against torch alone (~3 minutes with the build):
#   STEPS="build speed table" SPEED_RUNS="bf16_bwd_amx" bash tests/cpu/device_cpu.sh
# Each step has a time limit; the whole script stays under 8 minutes. Logs under $OUT.
# Usage (device, repo root, carry [".carry"]): COMMIT=<sha> bash tests/cpu/device_cpu.sh
#   STEPS="build tests suite speed items repro table" (default: all), THREADS=16,
#   BUILD_DIR=build-cpu.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
STEPS=${STEPS:-build tests suite speed items repro table}
THREADS=${THREADS:-16}
has() { [[ " $STEPS " == *" $1 "* ]]; }
root=$(pwd)
b=${BUILD_DIR:-build-cpu}
export CMAKE_PREFIX_PATH="$root/.carry/hwy/usr:$root/.carry/benchmark/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export LD_LIBRARY_PATH="$root/.carry/hwy/usr/lib/x86_64-linux-gnu:$root/.carry/benchmark/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
start_all=$(date +%s)
elapsed() { echo "$(($(date +%s) - start_all)) s"; }
# Timing runs start only while the script is within DEADLINE seconds (default 420): the
# whole call stays under 8 minutes even on a slow build.
in_time() {
  if [ $(($(date +%s) - start_all)) -lt "${DEADLINE:-420}" ]; then return 0; fi
  echo "skipped (past DEADLINE=${DEADLINE:-420} s): $*"
  return 1
}

# The device copy may have no .git: COMMIT names the tree (compare_torch.py records it).
export FLASHATTN_COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo "commit $FLASHATTN_COMMIT"
  grep -m1 "model name" /proc/cpuinfo
  echo "cores: $(nproc); flags: $(grep -m1 -o -w -E 'avx512_bf16|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  uname -r
} | tee "$OUT/machine.txt"

if has build; then
  t0=$(date +%s)
  targets="flashattn_tests flash_cpu_target_test flash_cpu_bf16_kernel_test flash_cpu_amx_emulated_test flash_cpu_speed flashattn-compare flashattn-decode-bench"
  (cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CPU=ON -DFLASHATTN_CUDA=OFF \
     -DFLASHATTN_HIP=OFF -DFLASHATTN_TESTS=ON -DFLASHATTN_BENCH=ON &&
    timeout "${BUILD_TIMEOUT:-300}" cmake --build $b -j"$(nproc)" --target $targets -- -k 0) > "$OUT/build.log" 2>&1
  echo "build rc=$? in $(($(date +%s) - t0)) s"
  grep -E "error|FAILED" "$OUT/build.log" | head -20
fi

if has tests; then
  t0=$(date +%s)
  $b/tests/cpu/flash_cpu_speed 1 1 64 64 bf16 1 2>&1 | head -1 | tee "$OUT/probe.txt"
  timeout 60 $b/tests/cpu/flash_cpu_target_test > "$OUT/target_test.log" 2>&1
  echo "flash_cpu_target_test rc=$?"
  # The oracle runs single-threaded in each: the two binaries side by side.
  timeout 150 $b/tests/cpu/flash_cpu_bf16_kernel_test > "$OUT/bf16_kernel_test.log" 2>&1 &
  real=$!
  timeout 150 $b/tests/cpu/flash_cpu_amx_emulated_test > "$OUT/amx_emulated_test.log" 2>&1 &
  emulated=$!
  wait $real
  echo "flash_cpu_bf16_kernel_test rc=$?"
  wait $emulated
  echo "flash_cpu_amx_emulated_test rc=$?"
  for log in target_test bf16_kernel_test amx_emulated_test; do
    echo "$log: $(grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]" "$OUT/$log.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \] [A-Z]" "$OUT/$log.log" | sort -u | head -10
  done
  grep -h -m1 "unavailable" "$OUT"/bf16_kernel_test.log "$OUT"/amx_emulated_test.log
  echo "tests: $(($(date +%s) - t0)) s"
fi

if has suite; then
  t0=$(date +%s)
  declare -A pids
  for target in amx avx512bf16; do
    FLASH_CPU_TARGET=$target timeout 200 $b/tests/flashattn_tests \
      --gtest_filter="All/Forward.*/cpu_${target}_*:Inference/*cpu_${target}:All/Backward.*/cpu_${target}_*" \
      > "$OUT/suite_$target.log" 2>&1 &
    pids[$target]=$!
  done
  for target in amx avx512bf16; do
    wait ${pids[$target]}
    echo "suite $target rc=$?"
  done
  for target in amx avx512bf16; do
    echo "$target: $(grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]" "$OUT/suite_$target.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \] [A-Z]" "$OUT/suite_$target.log" | sort -u | head -10
    grep -h -m1 "unavailable" "$OUT/suite_$target.log"
  done
  echo "suite: $(($(date +%s) - t0)) s"
fi

if has speed; then
  t0=$(date +%s)
  # name, dtype, direction, FLASH_CPU_TARGET ("" = the default: avx512 for f32).
  # SPEED_RUNS picks some by name (default: all four).
  for run in "bf16_amx bf16 forward amx" "f32 f32 forward " "bf16_bwd_amx bf16 backward amx" \
    "f32_bwd f32 backward "; do
    set -- $run
    [ -n "${SPEED_RUNS:-}" ] && [[ " $SPEED_RUNS " != *" $1 "* ]] && continue
    name=$1 dtype=$2 direction=$3 target=${4:-}
    in_time "compare_torch $name" || continue
    flag=""; [ "$direction" = backward ] && flag=--backward
    # The kernel that will run (FLASH_LOG), from one small call.
    FLASH_CPU_TARGET=$target FLASH_LOG=1 $b/bench/flashattn-compare --backends cpu --dtype "$dtype" \
      --seqlen 256 --iters 1 --check-budget 0.001 $flag 2>&1 | grep -m1 -o "$direction on cpu (kernel [^)]*)"
    FLASH_CPU_TARGET=$target PYTHONUNBUFFERED=1 timeout 150 python3 bench/compare_torch.py \
      --compare $b/bench/flashattn-compare --device cpu --dtype "$dtype" --head-dim 64 128 \
      --seqlen 1024 4096 --causal both --threads "$THREADS" --iters 5 $flag \
      --json "$OUT/torch_$name.json" > "$OUT/torch_$name.md" 2> "$OUT/torch_$name.err"
    echo "compare_torch $name rc=$? ($(elapsed))"
    tail -10 "$OUT/torch_$name.md"
  done
  # Our kernels against each other, alternating in one process (no torch).
  for run in "amx_vs_avx512bf16 bf16@amx/bf16@avx512bf16" "amx_vs_f32 bf16@amx/f32" \
    "bwd_amx_vs_avx512bf16 bf16@amx/bf16@avx512bf16 backward" "bwd_amx_vs_f32 bf16@amx/f32 backward"; do
    set -- $run
    [ -n "${SPEED_RUNS:-}" ] && [[ " $SPEED_RUNS " != *" $1 "* ]] && continue
    in_time "flash_cpu_speed $1" || continue
    OMP_NUM_THREADS=$THREADS timeout 60 $b/tests/cpu/flash_cpu_speed 1 8 2048 128 $2 4 ${3:-} \
      > "$OUT/speed_$1.log" 2>&1
  done
  # The fused f32 backward against the two passes, alternating (FLASH_CPU_BWD_FUSED=1/0;
  # issue 17), at compare_torch's shape: B=1 H=16 D=128, S = 1k and 4k.
  for S in 1024 4096; do
    [ -n "${SPEED_RUNS:-}" ] && [[ " $SPEED_RUNS " != *" bwd_fused_vs_two_pass "* ]] && continue
    in_time "flash_cpu_speed bwd_fused_vs_two_pass S=$S" || continue
    OMP_NUM_THREADS=$THREADS timeout 120 $b/tests/cpu/flash_cpu_speed 1 16 $S 128 'f32#1/f32#0' 4 \
      backward > "$OUT/speed_bwd_fused_vs_two_pass_s$S.log" 2>&1
  done
  for log in "$OUT"/speed_*.log; do
    echo "$(basename "$log"):"
    grep -E "median|FLASH_CPU_TARGET|Error|error" "$log" | head -4
  done
  echo "speed: $(($(date +%s) - t0)) s"
fi

# Short sequences: three plans at S = 1k, 16 heads, 16 threads, as separate processes
# in the order A B C C B A, best of 3 forwards and 2 backwards each:
#   32:1   the default: >= 32 items (48 of 384 rows), cost-major order (Plan::OrderForThreads)
#   32:0   the same items, head-major order (FLASH_CPU_COST_ORDER=0: the order before)
#   128:1  >= 128 items (176 of 96 rows: FLASH_CPU_MIN_ITEMS=128), cost-major order
if has items; then
  t0=$(date +%s)
  for spec in "64 bf16@amx" "128 bf16@amx" "64 f32" "128 f32"; do
    set -- $spec
    in_time "items $spec" >&2 || continue
    for config in 32:1 32:0 128:1 128:1 32:0 32:1; do
      FLASH_CPU_MIN_ITEMS=${config%:*} FLASH_CPU_COST_ORDER=${config#*:} OMP_NUM_THREADS=$THREADS \
        timeout 30 $b/tests/cpu/flash_cpu_speed 1 16 1024 "$1" "$2" 3 2>&1 |
        grep -E "threads: forward" | sed "s/^/$config /"
    done
  done | tee "$OUT/items.log" | awk '{print $1, $2, $6, $7, "forward", $11, "ms", $13, "GFLOP/s, backward", $21, "ms", $23, "GFLOP/s"}'
  echo "items: $(($(date +%s) - t0)) s"
fi

if has repro && in_time "repro"; then
  t0=$(date +%s)
  FLASH_CPU_TARGET=${REPRO_TARGET:-amx} THREADS=$THREADS COMPARE=$b/bench/flashattn-compare OUTDIR="$OUT" \
    timeout 60 python3 - <<'EOF' 2>&1 | tee "$OUT/repro.log"
import json, os, subprocess, time
import torch
import torch.nn.functional as F
threads = int(os.environ["THREADS"])
torch.set_num_threads(threads)
def ours(tag):
    out = os.path.join(os.environ["OUTDIR"], f"repro_{tag}.json")
    cmd = [os.environ["COMPARE"], "--backends", "cpu", "--dtype", "bf16", "--head-dim", "64",
           "--heads", "16", "--batch", "1", "--seqlen", "1024", "--causal", "--iters", "20",
           "--check-budget", "0", "--json", out]  # no oracle: timing starts at once
    t = time.perf_counter()
    subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS=str(threads)),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = json.load(open(out))["rows"][0]
    print(f"{tag:16s} {r['kernel']} median {r['median_ms']:.2f} ms min {r['min_ms']:.2f} ms "
          f"({r['runs']} runs; process {1e3 * (time.perf_counter() - t):.0f} ms)", flush=True)
q = torch.randn(1, 16, 4096, 64, dtype=torch.bfloat16)
for tag in ("alone", "after_torch", "after_torch_1s"):
    if tag != "alone":
        t = time.perf_counter()
        while time.perf_counter() - t < 0.2:
            F.scaled_dot_product_attention(q, q, q)
        if tag.endswith("1s"):
            time.sleep(1)
    ours(tag)
EOF
  echo "repro: $(($(date +%s) - t0)) s"
fi

# decode: issue 14's CPU decode bar (>= 0.8 of a host copy at 8k and 128k keys), f32 and
# bf16, B = 1 and 8, contiguous and paged 64, two rounds (the copy reference itself moves
# between runs); not in the default STEPS (it needs a quiet host: run it alone).
if has decode && in_time "decode"; then
  t0=$(date +%s)
  # DECODE_PREFETCH="l1 l2 none" alternates the software-prefetch policies
  # (FLASH_CPU_DECODE_PREFETCH) within each round; "default" = the kernel's choice.
  for round in 1 2; do
    for pf in ${DECODE_PREFETCH:-default}; do
      for dt in ${DECODE_DTYPES:-f32 bf16}; do
        env $([ "$pf" != default ] && echo FLASH_CPU_DECODE_PREFETCH=$pf) OMP_NUM_THREADS=$THREADS \
          timeout 120 $b/bench/flashattn-decode-bench --backend cpu --dtype $dt \
          --batch ${DECODE_BATCH:-1 8} --keys ${DECODE_KEYS:-8192 131072} --queries 1 --page 0 64 \
          --iters 10 2>&1 | grep -E "^\| cpu" | sed "s/^| cpu /| cpu r$round $pf /"
      done
    done
  done | tee "$OUT/decode.log"
  echo "decode: $(($(date +%s) - t0)) s"
fi

if has table; then
  python3 - "$OUT" <<'EOF' | tee "$OUT/table.md"
import json, os, sys
out = sys.argv[1]
runs = [("bf16 amx", "torch_bf16_amx.json"), ("f32", "torch_f32.json"),
        ("bf16 backward amx", "torch_bf16_bwd_amx.json"), ("f32 backward", "torch_f32_bwd.json"),
        ("bf16 backward vdpbf16ps (before)", "torch_bf16_bwd.json")]
rows = {}
for name, path in runs:
    try:
        with open(os.path.join(out, path)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        continue
    for r in data["rows"]:
        key = (r["head_dim"], r["seqlen"], r["causal"])
        mine, torch_cpu = r["ours"], r.get("cpu", {})
        timed = "tflops" in mine and "tflops" in torch_cpu
        cell = (f"{mine['tflops']:.2f} / {torch_cpu['tflops']:.2f} = {mine['tflops'] / torch_cpu['tflops']:.2f}"
                if timed else "-")
        if mine.get("status") != "ok":  # e.g. outside the tolerance: still timed
            cell += f" ({mine.get('status', '?')[:30]})"
        rows.setdefault(key, {})[name] = cell
print("ours / torch CPU SDPA TFLOP/s = ratio (forward columns, then backward), B=1 H=16")
print("| D | S | causal | " + " | ".join(n for n, _ in runs) + " |")
print("|---|---|---|" + "---|" * len(runs))
for key in sorted(rows):
    d, s, c = key
    print(f"| {d} | {s} | {'yes' if c else 'no'} | " +
          " | ".join(rows[key].get(n, "-") for n, _ in runs) + " |")
EOF
fi
echo "total: $(elapsed)"
