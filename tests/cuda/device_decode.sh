#!/usr/bin/env bash
# One device call for the decode kernels: build the library, the cuda module and
# flashattn-decode-bench; time ours (contiguous and paged) beside a device copy; ncu
# kernel durations and DRAM throughput of the decode + combine kernels (to tell kernel
# time from launch gaps); torch SDPA flash / cuDNN decode in the same call.
# Usage (device, repo root, carry .carry): STEPS="build bench ncu torch" bash tests/cuda/device_decode.sh
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
STEPS=${STEPS:-build bench ncu torch}
has() { [[ " $STEPS " == *" $1 "* ]]; }
b=build-device
if has build; then
  start=$(date +%s)
  source .ci/device_build.sh -DFLASHATTN_TESTS=ON > "$OUT/build.log" 2>&1 || true
  echo "build: $(($(date +%s) - start)) s"
  grep -E "error|FAILED" "$OUT/build.log" | head -20
else
  export LD_LIBRARY_PATH="$PWD/.carry/hwy/usr/lib/x86_64-linux-gnu:$PWD/.carry/benchmark/usr/lib/x86_64-linux-gnu"
fi
bench=$b/bench/flashattn-decode-bench
if has bench; then
  $bench --backend cuda --iters 30 ${DECODE_ARGS:-} 2>&1 | tee "$OUT/decode.log"
fi
if has ncu; then
  ncu --clock-control none --kernel-name regex:decode \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread \
    $bench --backend cuda --batch 1 8 --keys 8192 32768 --queries 1 --page 0 --iters 2 \
    > "$OUT/ncu.log" 2>&1
  grep -E "decode_|gpu__time|dram__|warps_active|grid_size|registers|\| cuda" "$OUT/ncu.log" | head -120
  ncu --clock-control none --kernel-name regex:decode_mma --launch-skip 3 --launch-count 1 \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    $bench --backend cuda --batch 1 --keys 32768 --queries 1 --page 0 --iters 2 \
    > "$OUT/ncu-stalls.log" 2>&1
  grep -E "Stall|Warp Cycles|Issued|Eligible|Active Warps|Throughput|Bandwidth" "$OUT/ncu-stalls.log" | head -60
fi
if has torch; then
  PYTHONUNBUFFERED=1 python3 bench/compare_torch.py --compare $b/bench/flashattn-compare --decode \
    --heads 32 --queries 1 --paged 0 2>&1 | tee "$OUT/torch-decode.log"
fi
