#!/usr/bin/env bash
# GPU memory checking (device machine): compute-sanitizer memcheck, racecheck and
# initcheck over a reduced grid of the cross-backend suite on the cuda backend and,
# when the hip-on-cuda module is built, on the hip backend; then the GPU-only
# reliability tests (CudaBadInput, and GpuLarge: > 2^31 elements per tensor).
#
#   bash tests/gpu_sanitize.sh [build-dir]          (default build-device)
#
# Builds nothing: run `source .ci/device_build.sh` first (and, for hip-on-cuda,
# `source .ci/device_build.sh -DFLASHATTN_HIP=ON -DFLASHATTN_HIP_ON_CUDA=ON`).
# Logs go to $OUT (default ./out): sanitize-<backend>-<tool>.log, large.log,
# summary.txt. Record the summary with date, GPU and commit in tests/README.md.
# Env: TOOLS (default "memcheck racecheck initcheck"), SKIP_LARGE=1, RELIABILITY=0 (only
# the sanitizer runs; .ci/device_gpu.sh runs the reliability tests itself), FILTER (gtest
# filter of the reduced grid, default below).
set -uo pipefail
build=${1:-build-device}
OUT=${OUT:-out}
mkdir -p "$OUT"
tests=$build/tests/flashattn_tests
rel=$build/tests/reliability/flashattn_reliability_tests
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$tests" ] || { echo "no $tests: build first (source .ci/device_build.sh)"; exit 2; }
[ -x "$cs" ] || { echo "compute-sanitizer not found"; exit 2; }

summary=$OUT/summary.txt
{
  echo "date: $(date -u +%F\ %T) UTC"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "compute-sanitizer: $("$cs" --version | tail -1)"
} | tee "$summary"

# Reduced grid: odd sizes, empty rows, GQA, windows, softcap, strided/padded layouts,
# head_dim 16..256 (48 and 248/200: tiles wider than the problem), f16/bf16/f32,
# forward and backward, paged prefill (the Hopper forward's paged producer) and the Hopper
# forward's narrow last K/V tile (s77x400, s200x40, s130x170). Sanitizers
# slow kernels 10-100x, so the s1000 cases are left out.
grid=${FILTER:-"All/*.*/BACKEND_s1x1_d64_*:All/*.*/BACKEND_s17x113_d64_gqa2_causal_*:All/*.*/BACKEND_s113x17_d64_causal_emptyrows_*:All/*.*/BACKEND_s257_d32_softcap30_*:All/*.*/BACKEND_s77x129_d64_gqa2_causal_bhsd_*:All/*.*/BACKEND_s113_d128_padded_*:All/*.*/BACKEND_s100_d160_*:All/*.*/BACKEND_s113x257_d256_gqa2_causal_bf16:All/*.*/BACKEND_s200x300_d64_window32_16_f16:All/*.*/BACKEND_s17x113_d16_gqa2_causal_*:All/*.*/BACKEND_s257x113_d48_*:All/*.*/BACKEND_s77_d248*_bf16:All/*.*/BACKEND_s77x400_d128_gqa2_softcap10_*:All/*.*/BACKEND_s200x40_d120_bf16:All/*.*/BACKEND_s130x170_d192_dv128_gqa2_bf16:Inference/Inference.PagedPrefill/BACKEND"}

backends=(cuda)
if [ -e "$build/libflashattn_hip.so" ]; then backends+=(hip); fi
status=0
for backend in "${backends[@]}"; do
  filter=${grid//BACKEND/$backend}
  for tool in ${TOOLS:-memcheck racecheck initcheck}; do
    extra=()
    case $tool in
      memcheck) extra=() ;;  # no --leak-check: the modules keep cached device buffers for the process lifetime by design
      initcheck) extra=() ;;
    esac
    log=$OUT/sanitize-$backend-$tool.log
    "$cs" --tool "$tool" --error-exitcode 9 "${extra[@]}" "$tests" --gtest_filter="$filter" \
      --gtest_brief=1 >"$log" 2>&1
    rc=$?
    ran=$(grep -cE '^\[       OK \]|^\[  PASSED  \]' "$log")
    line="$backend $tool: rc=$rc; $(grep -E 'ERROR SUMMARY' "$log" | tail -1); $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | tr '\n' ' ')"
    echo "$line" | tee -a "$summary"
    [ $rc -eq 0 ] || status=1
  done
done

# GPU-only reliability tests; GpuLarge allocates ~18 GB on the device, ~40 GB on the host.
if [ -x "$rel" ] && [ "${RELIABILITY:-1}" != 0 ]; then
  filter='CudaBadInput.*'
  [ "${SKIP_LARGE:-0}" = 1 ] || filter+=':Shapes/GpuLarge.*'
  /usr/bin/time -v "$rel" --gtest_filter="$filter" >"$OUT/large.log" 2>&1
  rc=$?
  echo "gpu reliability tests ($filter): rc=$rc; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) |Elapsed|Maximum resident' "$OUT/large.log" | tr '\n' ' ')" |
    tee -a "$summary"
  [ $rc -eq 0 ] || status=1
  # The numerical edge cases on the GPU backends too (all_targets includes them).
  "$rel" --gtest_filter='AllTargets/Numerics.*/cuda:AllTargets/Numerics.*/hip' >"$OUT/numerics.log" 2>&1
  rc=$?
  echo "gpu numerics: rc=$rc; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/numerics.log" | tr '\n' ' ')" | tee -a "$summary"
  [ $rc -eq 0 ] || status=1
fi
echo "status: $status" | tee -a "$summary"
exit $status
