#!/usr/bin/env bash
# On the device machine's host CPU (16 cores, AVX-512): the cpu backend's part of
# the cross-backend suite on the avx512 target, then the side-by-side with torch's
# CPU kernel (f32, bf16; forward and backward) and the FMA ceiling.
# Usage (device, repo root, carry .carry): bash .ci/device_cpu.sh <commit>
set -uo pipefail
commit=${1:-unknown}
out=${OUT:-/tmp/out}
source .ci/device_build.sh -DFLASHATTN_CUDA=OFF
set +e
(cd build-device && ./tests/flashattn_tests --gtest_filter='All/Forward*cpu_avx512*:AllTargets/*cpu*' \
   > "$out/cpu_tests_fwd.log" 2>&1; tail -3 "$out/cpu_tests_fwd.log") &
(cd build-device && ./tests/flashattn_tests --gtest_filter='All/Backward*cpu_avx512*' \
   > "$out/cpu_tests_bwd.log" 2>&1; tail -3 "$out/cpu_tests_bwd.log") &
wait
for dir in fwd bwd; do
  flag=""; [ $dir = bwd ] && flag="--backward"
  for t in f32 bf16; do
    FLASHATTN_COMMIT=$commit python3 bench/compare_torch.py --compare build-device/bench/flashattn-compare \
      --device cpu --dtype $t --head-dim 64 128 --seqlen 1024 4096 --causal both --threads 16 \
      --iters 5 $flag --json "$out/cpu_${t}_$dir.json" > "$out/cpu_${t}_$dir.md" 2>&1
    tail -14 "$out/cpu_${t}_$dir.md"
  done
done
build-device/bench/flashattn_bench --benchmark_filter='BM_cpu_fma_peak|attn/fwd/cpu/f32/B1_Hq8_Hkv8_Sq2048_Sk2048_D128' \
  --benchmark_min_time=0.2 2>&1 | tail -8 | tee "$out/cpu_peak.txt"
