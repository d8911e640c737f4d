#!/usr/bin/env bash
# On the GPU device machine, one call: build cuda (sm_90a) + hip-on-cuda + cpu; run the
# cross-backend suite for cuda and hip (every case, forward and backward, all dtypes),
# the inference suite (packed batches, caches, paged caches, decode, merge),
# the GPU module checks (ctest), the GPU reliability tests (> 2^31 elements, bad input,
# the numerics edge cases on cuda/hip), compare_torch.py for cuda and hip-on-cuda, and
# compute-sanitizer over a reduced grid. Logs under $OUT.
# The last line is the tally over everything it ran: "device_gpu: N passed, M failed,
# K skipped" (gtest tests, ctest tests, and one check each per torch comparison and
# sanitizer run). A step that did not run to its end (missing binary, crash before the
# summary, timeout) counts as one failure. Exit status: 0 only when M = 0.
# Usage (device, repo root, carry .carry): bash .ci/device_gpu.sh <commit>
set -uo pipefail
commit=${1:-unknown}
out=${OUT:-/tmp/out}
mkdir -p "$out"
passed=0 failed=0 skipped=0
fail_step() {  # what
  echo "device_gpu: FAILED to run: $1"
  failed=$((failed + 1))
}
# gtest log: adds its PASSED / FAILED / SKIPPED counts; no PASSED line = did not finish.
tally_gtest() {  # name log rc
  local p f s
  p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$2" | tail -1 | grep -oE '[0-9]+' | head -1)
  f=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$2" | tail -1 | grep -oE '[0-9]+' | head -1)
  s=$(grep -E '^\[  SKIPPED \] [0-9]+ test' "$2" | tail -1 | grep -oE '[0-9]+' | head -1)
  if [ -z "$p" ]; then fail_step "$1 (rc=$3, no gtest summary; log $2)"; return; fi
  passed=$((passed + p)) failed=$((failed + ${f:-0})) skipped=$((skipped + ${s:-0}))
  echo "== $1: ${p} passed, ${f:-0} failed, ${s:-0} skipped (rc=$3)"
  grep -E '^\[  FAILED  \] [A-Z]' "$2" | sed 's/, where.*//' | head -12
  grep -B1 -A3 'Failure$' "$2" | head -20
  if [ "$3" -ne 0 ] && [ -z "$f" ]; then fail_step "$1 (rc=$3 with no failed test)"; fi
}
# One check that passes when its exit status is 0.
tally_rc() {  # name rc
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else fail_step "$1 (rc=$2)"; fi
}

source .ci/device_build.sh -DFLASHATTN_HIP_ON_CUDA=ON > "$out/build.log" 2>&1
build_rc=$?
set +e
grep -E "FAILED|error:" "$out/build.log" | head -10
tally_rc "build" $build_rc
b=build-device
tests=$b/tests/flashattn_tests
rel=$b/tests/reliability/flashattn_reliability_tests
timeout 500 $tests --gtest_filter='All/Forward.*/cuda_*:All/Forward.*/hip_*:AllTargets/*cuda*:AllTargets/*hip*:Inference/*cuda*:Inference/*hip*' \
  > "$out/suite_fwd.log" 2>&1 &
p1=$!
timeout 500 $tests --gtest_filter='All/Backward.*/cuda_*:All/Backward.*/hip_*' > "$out/suite_bwd.log" 2>&1 &
p2=$!
(cd $b && timeout 500 ctest -R 'cuda|hip' --output-on-failure > "$out/ctest_gpu.log" 2>&1) &
p3=$!
timeout 400 $rel --gtest_filter='*cuda*:*hip*:Cuda*:Shapes/GpuLarge.*' > "$out/reliability_gpu.log" 2>&1 &
p4=$!
wait $p1; rc1=$?
wait $p2; rc2=$?
wait $p3; rc3=$?
wait $p4; rc4=$?
echo "commit $commit"
tally_gtest "suite forward cuda+hip" "$out/suite_fwd.log" $rc1
tally_gtest "suite backward cuda+hip" "$out/suite_bwd.log" $rc2
tally_gtest "reliability (GpuLarge, CudaBadInput, numerics on cuda/hip)" "$out/reliability_gpu.log" $rc4
# ctest: "100% tests passed out of 5" or "80% tests passed, 1 tests failed out of 5"
line=$(grep -E '[0-9]+% tests passed.* out of [0-9]+' "$out/ctest_gpu.log" | tail -1)
if [ -z "$line" ]; then
  fail_step "ctest cuda|hip (rc=$rc3, no summary)"
else
  nf=$(echo "$line" | grep -oE '[0-9]+ tests? failed' | grep -oE '^[0-9]+')
  nt=$(echo "$line" | sed -E 's/.*out of ([0-9]+).*/\1/')
  passed=$((passed + nt - ${nf:-0})) failed=$((failed + ${nf:-0}))
  echo "== ctest cuda|hip: $line"
  grep -E "\*\*\*|Failed|Not Run" "$out/ctest_gpu.log" | head -10
fi
for who in cuda hip; do
  timeout 150 python3 bench/compare_torch.py --compare $b/bench/flashattn-compare --device cuda \
    --ours $who --dtype bf16 --head-dim 128 --seqlen 4096 16384 --causal both --iters 10 \
    --json "$out/torch_fwd_$who.json" > "$out/torch_fwd_$who.md" 2>&1
  tally_rc "compare_torch.py --ours $who" $?
  tail -7 "$out/torch_fwd_$who.md"
done
OUT=$out TOOLS="memcheck racecheck initcheck" RELIABILITY=0 timeout 300 bash tests/gpu_sanitize.sh $b \
  > "$out/sanitize.log" 2>&1
sanitize_rc=$?
runs=$(grep -cE '^[a-z]+ [a-z]+check: rc=' "$out/summary.txt" 2>/dev/null)
if [ "${runs:-0}" -eq 0 ]; then
  fail_step "gpu_sanitize.sh (rc=$sanitize_rc, no run recorded)"
else
  while read -r san; do
    rc=$(echo "$san" | sed -E 's/.*: rc=([0-9]+).*/\1/')
    tally_rc "${san%%:*}" "$rc"
  done < <(grep -E '^[a-z]+ [a-z]+check: rc=' "$out/summary.txt")
  grep -E '^[a-z]+ [a-z]+check: rc=' "$out/summary.txt" | cut -c1-160
  [ "$sanitize_rc" -eq 124 ] && fail_step "gpu_sanitize.sh timed out"
fi
# The inference kernels (packed batches, paged caches: the decode kernel) under memcheck.
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 $tests \
  --gtest_filter='Inference/*.PackedBatches/cuda:Inference/*.PagedCaches/cuda:Inference/*.CacheLengths/cuda' \
  > "$out/sanitize_inference.log" 2>&1
tally_rc "memcheck inference suite (cuda)" $?
tail -3 "$out/sanitize_inference.log"
echo "device_gpu: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
