#!/usr/bin/env bash
# One device call for the cuda backward: build everything (cpu off), the cross-backend
# suite's backward cases on cuda, determinism + finite differences, compute-sanitizer,
# timing beside torch SDPA. Logs in $OUT (or ./out). Steps from $STEPS.
#   STEPS="build suite check sanitize bench ab ncu torch" bash tests/cuda/device_bwd.sh
#   STEPS=variants VARIANTS="a:-DFLASH_BWD_KV_TUNE_64=8,1,64;b:..." bash tests/cuda/device_bwd.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
STEPS=${STEPS:-build suite check bench torch}
has() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
if has build; then
  # .ci/device_build.sh's configure, but only the targets this script runs (other
  # work-in-progress tests need not compile for the backward to be checked).
  root=$(pwd)
  export CMAKE_PREFIX_PATH="$root/.carry/hwy/usr" PKG_CONFIG_PATH="$root/.carry/hwy/usr/lib/x86_64-linux-gnu/pkgconfig"
  export LD_LIBRARY_PATH="$root/.carry/hwy/usr/lib/x86_64-linux-gnu"
  sed -i "s|^prefix=.*|prefix=$root/.carry/hwy/usr|" "$PKG_CONFIG_PATH"/*.pc 2>/dev/null || true
  { cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CPU=OFF \
      -DFLASHATTN_CUDA=ON -DFLASHATTN_HIP=OFF -DFLASHATTN_BENCH=OFF \
      -DCMAKE_CUDA_ARCHITECTURES=90a ${CMAKE_EXTRA:-} &&
    cmake --build build-device -j16 --target flashattn_tests flashattn_cuda \
      cuda_backward_check cuda_backward_bench wgmma_check; } > "$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" "$OUT/build.log" | head -30; exit 1; }
  echo "build ok"
fi
MOD=$(find build-device -name libflashattn_cuda.so | head -1)
T=build-device/tests/cuda
if has suite; then
  build-device/tests/flashattn_tests --gtest_filter='All/Backward*cuda*' > "$OUT/suite.log" 2>&1
  echo "suite rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|max error" "$OUT/suite.log" | head -30
fi
if has check; then
  $T/cuda_backward_check "$MOD" > "$OUT/check.log" 2>&1; echo "check rc=$?"
  grep -E "FAIL|passed|finite" "$OUT/check.log" | head -30
fi
if has sanitize; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 $T/cuda_backward_check "$MOD" --quick \
      > "$OUT/sanitize-$tool.log" 2>&1; echo "compute-sanitizer $tool rc=$?"
    tail -2 "$OUT/sanitize-$tool.log"
  done
fi
if has bench; then
  $T/cuda_backward_bench "$MOD" --dims ${DIMS:-64 128} --atomic \
    --seqlens ${SEQLENS:-1024 2048 4096 8192 16384} 2>&1 | tee "$OUT/bench.log"
fi
# ab: this tree against an older one (build-old: device_hopper.sh's abbuild with AB=old
# and the snapshot in .carry/old) and / or a variant build of this tree (build-variant:
# abbuild with VARIANT_FLAGS), alternating ROUNDS times; rows "new" / "old" / "variant" (and
# "-atomic"), same columns as bench. To build them beside this script's build:
#   AB=old VARIANT_FLAGS=-DX STEPS=abbuild bash tests/cuda/device_hopper.sh & STEPS=build bash tests/cuda/device_bwd.sh; wait
if has ab; then
  OLD=$(find build-old -name libflashattn_cuda.so 2>/dev/null | head -1)
  VARIANT=$(find build-variant -name libflashattn_cuda.so 2>/dev/null | head -1)
  for round in $(seq ${ROUNDS:-2}); do
    for v in ${AB:-new old}; do
      m=$MOD; [ $v = old ] && m=$OLD; [ $v = variant ] && m=$VARIANT
      [ -n "$m" ] || continue
      $T/cuda_backward_bench "$m" --dims ${DIMS:-64 128} --atomic \
        --seqlens ${SEQLENS:-2048 8192 16384} 2>&1 | sed "s/^ours/$v/" | tee -a "$OUT/ab.log" |
        grep -E "^$v" | tr -s ' ' | cut -d' ' -f1,4-7,9
    done
  done
fi
if has f32; then  # the f32 path beside torch's f32 backends (small: SIMT FMA is slow)
  $T/cuda_backward_bench "$MOD" --dtype f32 --dims 64 128 --seqlens 1024 --iters 3 2>&1 |
    tee "$OUT/bench-f32.log"
  PYTHONUNBUFFERED=1 python3 .carry/torch_sdpa.py --backward --dtype f32 --head-dim 64 128 \
    --seqlen 1024 --causal both --backends efficient math --iters 3 2>&1 | tee "$OUT/torch-f32.log"
fi
if has ncu; then  # time of each backward kernel (one launch each), S=4096
  ncu --clock-control none --metrics gpu__time_duration.sum -k regex:bwd_ --launch-skip 12 \
    --launch-count 12 --csv $T/cuda_backward_bench "$MOD" --dims ${DIMS:-64 128} --seqlens 4096 \
    --iters 2 > "$OUT/ncu.csv" 2>&1
  python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; k = head.index("Kernel Name"); v = head.index("Metric Value")
for r in rows[1:]: print(f"{r[k][:60]:60} {float(r[v].replace(',', '')) / 1e3:9.1f} us")
PY
fi
if has ncu2; then  # why the main kernels run at the rate they do (S=4096, not causal)
  m=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
  m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
  m=$m,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
  for st in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait not_selected lg_throttle dispatch_stall no_instruction; do
    m=$m,smsp__average_warps_issue_stalled_${st}_per_issue_active.ratio
  done
  for d in ${DIMS:-64 128}; do
    ncu --clock-control none --metrics $m -k regex:'bwd_(kv|wgmma)_kernel' --launch-count 2 \
      $T/cuda_backward_bench "$MOD" --dims $d --seqlens 4096 --iters 1 2>&1 |
      grep -E "bwd_|pct|ratio|sum" | sed -E 's/ +/ /g' | tee -a "$OUT/ncu2.log"
  done
fi
# Tile-config variants: VARIANTS="name:-DFLASH_BWD_KV_TUNE_64=8,1,64 -D... ;name2:..."
if has variants; then
  IFS=';' read -ra vs <<< "${VARIANTS:-}"
  for v in "${vs[@]}"; do
    name=${v%%:*}; defs=${v#*:}
    ( cmake -S backends/cuda -B build-var-$name -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a \
        "-DCMAKE_CUDA_FLAGS=$defs" > "$OUT/var-$name.log" 2>&1 &&
      cmake --build build-var-$name -j8 --target flashattn_cuda cuda_backward_bench \
        >> "$OUT/var-$name.log" 2>&1 || echo "variant $name failed to build" ) &
  done
  wait
  for v in "${vs[@]}"; do
    name=${v%%:*}
    echo "== variant $name: ${v#*:}"
    build-var-$name/tests/cuda/cuda_backward_bench build-var-$name/libflashattn_cuda.so \
      --dims ${DIMS:-64 128} --seqlens ${VAR_SEQLENS:-2048 8192} --atomic 2>&1 | grep ours
  done
fi
if has torch; then
  cp /dev/null "$OUT/torch.log"
  PYTHONUNBUFFERED=1 python3 .carry/torch_sdpa.py --backward --dtype bf16 --head-dim ${DIMS:-64 128} \
    --seqlen ${SEQLENS:-1024 2048 4096 8192 16384} --causal both 2>&1 | tee "$OUT/torch.log"
fi
if has torch && has bench; then  # one Markdown table: ours / torch flash / cuDNN
  python3 - "$OUT/bench.log" "$OUT/torch.log" <<'PY' | tee "$OUT/table.md"
import sys
def rows(path, names):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 9 and f[0] in names:
            key = (int(f[5]), int(f[4]), f[6] in ("True", "yes"))
            out[(f[0], key)] = float(f[8]) if f[0].startswith("ours") else float(f[9])
    return out
r = rows(sys.argv[1], {"ours", "ours-atomic"}); r.update(rows(sys.argv[2], {"flash", "cudnn"}))
keys = sorted({k for (_, k) in r})
print("| D | S | causal | ours TF/s | ours atomic | torch flash | cuDNN | ours/flash | atomic/flash | ours/cuDNN |")
print("|---|---|---|---|---|---|---|---|---|---|")
for k in keys:
    o, a, f, c = (r.get((n, k)) for n in ("ours", "ours-atomic", "flash", "cudnn"))
    ratio = lambda x, y: f"{x / y:.2f}" if x and y else "-"
    print(f"| {k[0]} | {k[1]} | {'yes' if k[2] else 'no'} | {o or '-'} | {a or '-'} | {f or '-'} | {c or '-'} | {ratio(o, f)} | {ratio(a, f)} | {ratio(o, c)} |")
PY
fi
