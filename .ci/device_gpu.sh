#!/usr/bin/env bash
# On the GPU device machine: build cuda + hip-on-cuda + cpu, run the cross-backend
# suite for cuda and hip (every case, forward and backward, all dtypes), the GPU
# module checks in ctest, then compute-sanitizer over a reduced grid and the
# > 2^31-element test (tests/gpu_sanitize.sh). Logs under $OUT.
# Usage (device, repo root, carry .carry): bash .ci/device_gpu.sh <commit>
set -uo pipefail
commit=${1:-unknown}
out=${OUT:-/tmp/out}
mkdir -p "$out"
source .ci/device_build.sh -DFLASHATTN_HIP_ON_CUDA=ON > "$out/build.log" 2>&1
set +e
grep -E "FAILED|error:" "$out/build.log" | head -10
[ -x build-device/tests/flashattn_tests ] || { tail -40 "$out/build.log"; exit 1; }
cd build-device
./tests/flashattn_tests --gtest_filter='All/Forward.*/cuda_*:All/Forward.*/hip_*:AllTargets/*cuda*:AllTargets/*hip*' \
  > "$out/suite_fwd.log" 2>&1 &
./tests/flashattn_tests --gtest_filter='All/Backward.*/cuda_*:All/Backward.*/hip_*' > "$out/suite_bwd.log" 2>&1 &
ctest -R 'cuda|hip' --output-on-failure > "$out/ctest_gpu.log" 2>&1 &
wait
for f in suite_fwd suite_bwd; do
  echo "== $f (commit $commit)"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out/$f.log"
  grep -E '^\[  FAILED  \] All' "$out/$f.log" | head -20
  # why cases were skipped (declined), counted by reason
  grep -A1 'Skipped$' "$out/$f.log" | grep -v -E 'Skipped|^--' | sed 's/(searched.*//' | sort | uniq -c | sort -rn | head -8
done
tail -12 "$out/ctest_gpu.log"
cd ..
TOOLS="memcheck racecheck" timeout 240 bash tests/gpu_sanitize.sh build-device > "$out/sanitize.log" 2>&1
tail -15 "$out/sanitize.log"
