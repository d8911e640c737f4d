#!/usr/bin/env bash
# One device call for the cuda backward: build everything (cpu off), the cross-backend
# suite's backward cases on cuda, determinism + finite differences, compute-sanitizer,
# timing beside torch SDPA. Logs in $OUT (or ./out). Steps from $STEPS.
#   STEPS="build suite check sanitize bench torch" bash tests/cuda/device_bwd.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
STEPS=${STEPS:-build suite check bench torch}
has() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
git log --oneline -1
if has build; then
  bash .ci/device_build.sh -DFLASHATTN_CPU=OFF -DFLASHATTN_BENCH=OFF ${CMAKE_EXTRA:-} \
    > "$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -30; exit 1; }
  echo "build ok"
fi
MOD=$(find build-device -name libflashattn_cuda.so | head -1)
T=build-device/tests/cuda
if has suite; then
  build-device/tests/flashattn_tests --gtest_filter='All/Backward*cuda*' > "$OUT/suite.log" 2>&1
  echo "suite rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|Failure|max error" "$OUT/suite.log" | head -40
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
  $T/cuda_module_bench "$MOD" --backward --dims ${DIMS:-64 128} \
    --seqlens ${SEQLENS:-1024 2048 4096 8192 16384} 2>&1 | tee "$OUT/bench.log"
fi
if has torch; then
  cp /dev/null "$OUT/torch.log"
  PYTHONUNBUFFERED=1 python3 .carry/torch_sdpa.py --backward --dtype bf16 --head-dim ${DIMS:-64 128} \
    --seqlen ${SEQLENS:-1024 2048 4096 8192 16384} --causal both 2>&1 | tee "$OUT/torch.log"
fi
