#!/usr/bin/env bash
# Reliability jobs of CI (called by .ci/run after .ci/test.sh; see tests/README.md):
#   asan  clang build with ASan + UBSan (+ libFuzzer coverage), reference + cpu
#         backends; runs the test suite (filtered, see below) and the bad-input matrix,
#         two test processes at a time (see "Two lanes" below)
#   fuzz  60 s of libFuzzer on tests/fuzz/fuzz_attention (uses the asan build; with asan,
#         as one of its two lanes)
#   tsan  clang build with TSan; runs the concurrency test with OMP_NUM_THREADS=1
#         (libomp is not TSan-instrumented: its team synchronisation is reported as
#         races, so each call runs on its calling thread) and tests/reliability/
#         tsan.supp (libomp's own allocator calls, which race even with one thread)
# Usage: bash .ci/reliability.sh [asan] [fuzz] [tsan]      (default: all three)
# Env: FUZZ_SECONDS (default 60), JOBS (default nproc), ASAN_FILTER (gtest filter of the
# cross-backend suite under ASan; default: its cases up to ~130 rows, see below).
# Build dirs: build-rel-asan, build-rel-tsan (kept between runs: incremental).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
steps=${*:-asan fuzz tsan}
jobs=${JOBS:-$(nproc)}
has() { [[ " $steps " == *" $1 "* ]]; }
start=$(date +%s)
stamp() { echo "reliability: $1 ($(( $(date +%s) - start )) s)"; }

# clang, its sanitizer/libFuzzer runtimes and LLVM's OpenMP (clang's -fopenmp).
packages=(clang libclang-rt-14-dev libomp-dev cmake ninja-build libgtest-dev libhwy-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "reliability: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# RelWithDebInfo with line tables only: the sanitizers' reports keep file:line (inlined
# frames too); full debug info made the asan build ~7% slower and nothing here reads it.
configure() {  # dir sanitizers extra-args...
  local dir=$1 san=$2; shift 2
  mkdir -p "$dir"
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DFLASHATTN_CPU=ON -DFLASHATTN_CUDA=OFF -DFLASHATTN_HIP=OFF -DFLASHATTN_BENCH=OFF \
    -DFLASHATTN_SANITIZE="$san" -DFLASHATTN_HWY_DISABLED_TARGETS="$hwy_disabled" "$@" \
    >"$dir/reliability-configure.log" 2>&1 ||
    { tail -30 "$dir/reliability-configure.log"; exit 1; }
}

# Highway targets this machine cannot run are not compiled in the sanitizer builds: a
# sanitizer checks only code that runs, and on a machine without AVX-512 the AVX3 variants
# were ~30 % of the asan build (the normal build compiles every target; the tests skip the
# targets a machine lacks either way).
hwy_disabled=HWY_SSSE3
for flag in avx512f avx512vl avx512dq avx512bw; do
  grep -qw "$flag" /proc/cpuinfo || { hwy_disabled="(HWY_SSSE3|HWY_AVX3|HWY_AVX3_DL)"; break; }
done

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/reliability/ubsan.supp
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/reliability/tsan.supp

if has asan || has fuzz; then
  # One build serves both: -fsanitize=fuzzer-no-link instruments everything for
  # libFuzzer's coverage; the tests link without libFuzzer's main.
  configure build-rel-asan address,undefined,fuzzer-no-link -DFLASHATTN_FUZZ=ON
  targets=(flashattn_reliability_tests)
  has asan && targets+=(flashattn_tests flashattn_concurrency_test flash_cpu_exp_test
                        flash_cpu_target_test flash_cpu_determinism_test)
  has fuzz && targets+=(fuzz_attention)
  cmake --build build-rel-asan -j"$jobs" --target "${targets[@]}" >build-rel-asan/reliability-build.log 2>&1 ||
    { grep -B2 -A20 -m3 'error' build-rel-asan/reliability-build.log | head -80; exit 1; }
  stamp "asan build done"
fi

# fuzz: a function, so that it can run as a lane beside the asan tests (below).
fuzz() {
  # New inputs go to a scratch corpus; the seed corpus in the tree is only read.
  local work=build-rel-asan/fuzz-work
  mkdir -p "$work/corpus" "$work/artifacts"
  # A fixed seed keeps CI reproducible (a random one made CI red at random: an f32
  # softcap-0.5 input at 150% of the bound, see the closing note); explore with
  # FUZZ_SEED=<n> or -seed=0 by hand.
  build-rel-asan/tests/reliability/fuzz/fuzz_attention "$work/corpus" tests/fuzz/corpus \
    tests/fuzz/regressions -seed="${FUZZ_SEED:-1}" -max_total_time="${FUZZ_SECONDS:-60}" -max_len=1024 -timeout=30 \
    -rss_limit_mb=4096 -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
    >"$work/fuzz.log" 2>&1 || {
    tail -40 "$work/fuzz.log"
    echo "reliability: fuzzing found a failure; the input is in $work/artifacts/ --"
    echo "copy it to tests/fuzz/regressions/ (tests/README.md)"
    return 1
  }
  grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$work/fuzz.log" || true
  stamp "fuzz: ${FUZZ_SECONDS:-60} s without a failure"
}

if has asan; then
  bin=build-rel-asan/tests
  rel=$bin/reliability/flashattn_reliability_tests
  # The cross-backend suite under ASan+UBSan on reference and cpu (every SIMD target),
  # on its cases up to ~130 rows: odd sizes, Sq != Sk both ways, empty rows, head_dim
  # 1/8/40/64/128, GQA, causal, windows, large logits, bhsd and padded layouts, every
  # dtype, forward and backward. The larger cases run the same code paths (more
  # tiles) at 10-100x the cost under ASan; the normal build runs them all.
  small='*_s1x1_*:*_s17x113_*:*_s113x17_*:*_s113_d40_*:*_s64_d64_*:*_s77x129_*:*_s113_d128_*:*_s128_d64_large*'
  filter=${ASAN_FILTER:-$small}
  for name in flash_cpu_exp_test flash_cpu_target_test flash_cpu_determinism_test; do
    [ -x "$bin/cpu/$name" ] || { echo "reliability: $bin/cpu/$name missing"; exit 1; }
  done
  # step NAME CMD...: CMD's output goes to build-rel-asan/reliability-NAME.log; prints
  # its time and last lines (gtest's summary) when it passes, the last 60 when it fails.
  step() {
    local name=$1 log=build-rel-asan/reliability-$1.log t0=$SECONDS
    shift
    if "$@" >"$log" 2>&1; then
      echo "reliability: asan $name passed in $((SECONDS - t0)) s:" \
        "$(grep -E '^\[(==========|  PASSED  |  SKIPPED )\] [0-9]+ test' "$log" | tr -s '\n ' ' ')"
    else
      tail -60 "$log"
      echo "reliability: asan $name FAILED (log: $log)"
      return 1
    fi
  }
  # Two lanes at once: these processes run on one core nearly all the time (the fp64
  # oracle and ASan's checks; the cpu backend's OpenMP teams are short; libFuzzer runs
  # one input at a time), and CI has two. The inference suite's five longest tests
  # (~120 s) and the fuzzing (60 s) in one, everything else (~180 s) in the other (with
  # the paged tests in the second lane it ran ~225 s, the first ~135 s).
  # (Under sanitizers those tests and a few others take smaller shapes,
  # tests/support/sanitized.hpp; before, with full shapes and the fuzzing after, the
  # asan tests took ~270 s and the fuzzing 60 s.)
  # Passive OpenMP waiting: a team's idle worker would otherwise spin up to 200 ms after
  # each call on the core the other lane needs (scheduling only; the code run is the same).
  inference_long='Inference/*.PackedBatches/*:Inference/*.CacheLengths/*:Inference/*.DecodeLongCache/*'
  inference_long+=':Inference/*.PagedPrefill/*:Inference/*.PagedCaches/*'
  lane_inference() {
    step inference "$bin/flashattn_tests" --gtest_filter="$inference_long" --gtest_brief=1 &&
      { ! has fuzz || fuzz; }
  }
  lane_rest() {
    step suite "$bin/flashattn_tests" --gtest_filter="$filter" --gtest_brief=1 &&
      # the other non-parametrised tests: the rest of the inference suite, api,
      # validation, edge
      step api "$bin/flashattn_tests" --gtest_filter="-All/*:$inference_long" --gtest_brief=1 &&
      step bad-inputs "$rel" --gtest_filter="Rows/*:Edges/*:HostBackends/*:BadInputCApi.*:FuzzReplay.*" \
        --gtest_brief=1 &&
      # The numerics, less MillionKeys: rows of 2^20 keys check f32 accumulation over a
      # million terms (precision, not memory), through the same kernels and key splits
      # as the shorter rows here and the inference suite's long caches; ~75 s under ASan.
      # The normal build runs them (ctest reliability_numerics).
      step numerics "$rel" --gtest_filter="AllTargets/*:CudaBadInput.*:-AllTargets/MillionKeys.*" \
        --gtest_brief=1 &&
      step concurrency "$bin/reliability/flashattn_concurrency_test" --gtest_brief=1 &&
      # The cpu backend's own tests, except flash_cpu_rss_test (RSS means nothing under
      # ASan's shadow memory) and flash_cpu_kernel_test (1.5-5 min under ASan on 2 cores;
      # the cross-backend suite and the numerics above run the same kernels).
      step flash_cpu_exp_test "$bin/cpu/flash_cpu_exp_test" --gtest_brief=1 &&
      step flash_cpu_target_test "$bin/cpu/flash_cpu_target_test" --gtest_brief=1 &&
      # FusedBackwardChoice asks only choose() about shapes at its thresholds (up to 16
      # heads x 4097 x 128); under ASan its ~18 s are filling inputs no kernel reads.
      step flash_cpu_determinism_test "$bin/cpu/flash_cpu_determinism_test" \
        --gtest_filter=-CpuDeterminism.FusedBackwardChoice --gtest_brief=1
  }
  export OMP_WAIT_POLICY=passive
  lane_inference &
  inference_pid=$!
  lane_rest &
  rest_pid=$!
  failed=0
  wait "$inference_pid" || failed=1
  wait "$rest_pid" || failed=1
  unset OMP_WAIT_POLICY
  [ "$failed" -eq 0 ] || exit 1
  stamp "asan: suite, inference + api, bad inputs + fuzz replay, numerics, concurrency + cpu tests passed"
elif has fuzz; then
  fuzz || exit 1
fi

if has tsan; then
  configure build-rel-tsan thread
  cmake --build build-rel-tsan -j"$jobs" --target flashattn_concurrency_test >build-rel-tsan/reliability-build.log 2>&1 ||
    { grep -B2 -A20 -m3 'error' build-rel-tsan/reliability-build.log | head -80; exit 1; }
  stamp "tsan build done"
  OMP_NUM_THREADS=1 build-rel-tsan/tests/reliability/flashattn_concurrency_test --gtest_brief=1 |
    tail -3
  stamp "tsan: concurrency test passed"
fi
stamp "all reliability jobs passed"
