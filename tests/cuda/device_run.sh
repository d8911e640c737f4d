#!/usr/bin/env bash
# One device call: build the cuda module standalone, check it, sanitize, benchmark
# against torch SDPA. Logs go to $OUT (or ./out). Steps chosen by $STEPS
# (default "build check bench"); also "sanitize", "torch", "bwdbench".
#   STEPS="build check bench torch" bash tests/cuda/device_run.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
STEPS=${STEPS:-build check bench}
BUILD=build-device-cuda
has() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
if has build; then
  cmake -S backends/cuda -B $BUILD -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/build.log" 2>&1 &&
    cmake --build $BUILD -j16 >> "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
  echo "build ok"
fi
MOD=$BUILD/libflashattn_cuda.so
if has check; then
  $BUILD/tests/cuda/cuda_module_check $MOD > "$OUT/check.log" 2>&1; echo "check rc=$?"
  grep -E "FAIL|passed" "$OUT/check.log" | head -40
fi
if has sanitize; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 $BUILD/tests/cuda/cuda_module_check $MOD --quick \
      > "$OUT/sanitize-$tool.log" 2>&1; echo "compute-sanitizer $tool rc=$?"; tail -3 "$OUT/sanitize-$tool.log"
  done
fi
if has bench; then
  for dt in ${DTYPES:-bf16}; do
    $BUILD/tests/cuda/cuda_module_bench $MOD --dtype $dt ${BENCH_ARGS:-} 2>&1 | tee -a "$OUT/bench.log"
  done
fi
if has bwdbench; then
  $BUILD/tests/cuda/cuda_module_bench $MOD --backward --dims 64 128 --seqlens 1024 2048 4096 8192 16384 2>&1 | tee -a "$OUT/bench-bwd.log"
fi
if has torch; then
  for dt in ${DTYPES:-bf16}; do
    PYTHONUNBUFFERED=1 python3 .carry/torch_sdpa.py --dtype $dt --head-dim 64 128 256 \
      --seqlen ${TORCH_SEQLENS:-512 1024 2048 4096 8192 16384} 2>&1 | tee -a "$OUT/torch.log"
  done
fi
if has torchbwd; then
  PYTHONUNBUFFERED=1 python3 .carry/torch_sdpa.py --dtype bf16 --head-dim 64 128 --backward \
    --seqlen 1024 2048 4096 8192 16384 2>&1 | tee -a "$OUT/torch-bwd.log"
fi
