#!/usr/bin/env bash
# On the GPU device machine, one call: build cuda (sm_90) + hip-on-cuda + cpu; run the
# cross-backend suite for cuda and hip (every case, forward and backward, all dtypes)
# and the GPU module checks; the GPU reliability tests (> 2^31 elements, bad input)
# and the numerics edge cases on cuda/hip; compare_torch.py for cuda and hip-on-cuda;
# compute-sanitizer over a reduced grid. Logs under $OUT; a summary is printed.
# Usage (device, repo root, carry .carry): bash .ci/device_gpu.sh <commit>
set -uo pipefail
commit=${1:-unknown}
out=${OUT:-/tmp/out}
mkdir -p "$out"
source .ci/device_build.sh -DFLASHATTN_HIP_ON_CUDA=ON > "$out/build.log" 2>&1
set +e
grep -E "FAILED|error:" "$out/build.log" | head -10
[ -x build-device/tests/flashattn_tests ] || { tail -40 "$out/build.log"; exit 1; }
b=build-device
$b/tests/flashattn_tests --gtest_filter='All/Forward.*/cuda_*:All/Forward.*/hip_*:AllTargets/*cuda*:AllTargets/*hip*' \
  > "$out/suite_fwd.log" 2>&1 &
$b/tests/flashattn_tests --gtest_filter='All/Backward.*/cuda_*:All/Backward.*/hip_*' > "$out/suite_bwd.log" 2>&1 &
(cd $b && ctest -R 'cuda|hip' --output-on-failure > "$out/ctest_gpu.log" 2>&1) &
timeout 300 $b/tests/reliability/flashattn_reliability_tests \
  --gtest_filter='*cuda*:*hip*:Cuda*:Shapes/GpuLarge.*' > "$out/reliability_gpu.log" 2>&1 &
wait
summary() {  # log name
  echo "== $2 (commit $commit)"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$1"
  grep -E '^\[  FAILED  \] [A-Z]' "$1" | sed 's/, where.*//' | head -12
  grep -B1 -A3 'Failure$' "$1" | head -20
}
summary "$out/suite_fwd.log" "suite forward cuda+hip"
summary "$out/suite_bwd.log" "suite backward cuda+hip"
summary "$out/reliability_gpu.log" "reliability (GpuLarge, CudaBadInput, numerics on cuda/hip)"
grep -E "tests passed|Failed|Skipped|\*\*\*" "$out/ctest_gpu.log" | head -10
for who in cuda hip; do
  timeout 150 python3 bench/compare_torch.py --compare $b/bench/flashattn-compare --device cuda \
    --ours $who --dtype bf16 --head-dim 128 --seqlen 4096 16384 --causal both --iters 10 \
    --json "$out/torch_fwd_$who.json" > "$out/torch_fwd_$who.md" 2>&1
  tail -7 "$out/torch_fwd_$who.md"
done
OUT=$out TOOLS="memcheck racecheck initcheck" SKIP_LARGE=1 timeout 200 bash tests/gpu_sanitize.sh $b \
  > "$out/sanitize.log" 2>&1
grep -E "rc=|status" "$out/summary.txt" "$out/sanitize.log" | head -12
