#!/usr/bin/env bash
# One device call for the Hopper forward (fwd_wgmma_kernel.cuh) and the decode kernels:
# build, the cuda forward + inference suites, numerics on cuda, SASS (HGMMA), the forward
# A/B (this tree, an older tree, a variant build or FLASH_CUDA_FWD=mma, alternating)
# beside torch SDPA flash / cuDNN, decode GB/s beside a device copy (decodebench) and
# torch (decode: compare_torch.py --decode, which also checks each problem against the
# reference: slow at 128k keys), ncu of the decode kernels, sanitizers on a reduced grid.
# Each step has a time limit (a pipeline deadlock must not eat the call). Logs under $OUT.
# Usage (device, repo root, carry .carry): STEPS="build abbuild suite numerics ptxas sass ab torch varlen decodebench decodeab decodetrace ncu ncufwd ncupeer decode sanitize" \
#   bash tests/cuda/device_hopper.sh
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
STEPS=${STEPS:-build suite numerics sass ab torch decode}
has() { [[ " $STEPS " == *" $1 "* ]]; }
b=build-device
# A/B builds, started first so that they compile beside the main build: the previous
# forward (a tree snapshot in .carry/old, e.g. `git archive <commit> | tar -x -C
# .carry/old`) and, with VARIANT_FLAGS / VARIANT2_FLAGS (CUDA -D flags; no commas in
# values: nvcc splits them), variants of this tree, each as a standalone cuda module.
ab_pids=()
if has abbuild; then
  if [ -d .carry/old ] && [[ " ${AB:-} " == *" old "* ]]; then
    (cmake -S .carry/old/backends/cuda -B build-old -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a &&
      cmake --build build-old -j16 --target flashattn_cuda) > "$OUT/build-old.log" 2>&1 &
    ab_pids+=($!)
  fi
  for vn in variant variant2; do
    vf=VARIANT_FLAGS; [ $vn = variant2 ] && vf=VARIANT2_FLAGS
    [ -n "${!vf:-}" ] || continue
    (cmake -S backends/cuda -B build-$vn -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DCMAKE_CUDA_FLAGS="${!vf}" && cmake --build build-$vn -j16 --target flashattn_cuda) \
      > "$OUT/build-$vn.log" 2>&1 &
    ab_pids+=($!)
  done
fi
if has build; then
  start=$(date +%s)
  source .ci/device_build.sh -DFLASHATTN_TESTS=ON > "$OUT/build.log" 2>&1 || true
  echo "build: $(($(date +%s) - start)) s"
  grep -E "error|FAILED" "$OUT/build.log" | head -20
fi
for pid in "${ab_pids[@]}"; do wait $pid; echo "abbuild pid $pid rc=$?"; done
old_mod=$(find build-old -name libflashattn_cuda.so 2>/dev/null | head -1)
variant_mod=$(find build-variant -name libflashattn_cuda.so 2>/dev/null | head -1)
variant2_mod=$(find build-variant2 -name libflashattn_cuda.so 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$PWD/.carry/hwy/usr/lib/x86_64-linux-gnu:$PWD/.carry/benchmark/usr/lib/x86_64-linux-gnu"
mod=$b/libflashattn_cuda.so
[ -f "$mod" ] || mod=$(find $b -name libflashattn_cuda.so | head -1)
tests=$b/tests/flashattn_tests
rel=$b/tests/reliability/flashattn_reliability_tests
# suite: once per value of SUITE_ENVS (e.g. "FLASH_CUDA_FWD_PERSISTENT=0
# FLASH_CUDA_FWD_PERSISTENT=1"; default: the build's defaults).
if has suite; then
  for suite_env in ${SUITE_ENVS:-none}; do
    log="$OUT/suite${SUITE_ENVS:+-$suite_env}.log"
    env $([ "$suite_env" != none ] && echo "$suite_env") timeout ${SUITE_S:-240} $tests \
      --gtest_filter="${SUITE_FILTER:-All/Forward.*/cuda_*:Inference/*cuda*}" > "$log" 2>&1
    echo "suite ($suite_env) rc=$?"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]" "$log" | head -30
  done
fi
if has numerics; then
  timeout 200 $rel --gtest_filter='*cuda*:Cuda*' > "$OUT/numerics.log" 2>&1
  echo "numerics rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) +\]" "$OUT/numerics.log" | head -20
fi
# ptxas: the Hopper forward's dense bf16 kernel for each D in PTXAS_DIMS (64 128 256),
# compiled alone and in parallel (~1 min) with -Xptxas -v: ptxas's serialisation notes
# (C7515, C7520: every wgmma waits for the one before) and spills, which the normal build
# hides. For trying kernel variants without the full build (bench/RESULTS.md, session 10).
if has ptxas; then
  mkdir -p build-ptxas
  for d in ${PTXAS_DIMS:-64 128 256}; do
    printf '#include "fwd_wgmma_kernel.cuh"\ntemplate __global__ void flash::cuda::fwd_wgmma_kernel<__nv_bfloat16, flash::cuda::FwdWgmmaConfig<%s>, false>(const __grid_constant__ flash::cuda::FwdTmaParams);\n' \
      "$d" > build-ptxas/fwd_$d.cu
    (nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -Ibackends/cuda -Iinclude -I. \
      -Xptxas -v -c build-ptxas/fwd_$d.cu -o /dev/null > "$OUT/ptxas-d$d.log" 2>&1) &
  done
  # PTXAS_VARIANTS="name:-DX=1 -DY=2;name2:..." compiles the first of PTXAS_DIMS again per
  # variant (flags without commas).
  IFS=';' read -ra variants <<< "${PTXAS_VARIANTS:-}"
  d0=$(echo ${PTXAS_DIMS:-64 128 256} | cut -d' ' -f1)
  for v in "${variants[@]}"; do
    (nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -Ibackends/cuda -Iinclude -I. \
      ${v#*:} -Xptxas -v -c build-ptxas/fwd_$d0.cu -o /dev/null > "$OUT/ptxas-d$d0-${v%%:*}.log" 2>&1) &
  done
  wait
  for log in "$OUT"/ptxas-d*.log; do
    echo "ptxas $(basename $log .log): $(grep -cE 'C7511|C7515|C7520' "$log") serialisation notes; $(grep -m1 -oE '[0-9]+ bytes spill stores' "$log" || echo 'no spill line')"
  done
fi
if has sass; then
  # HGMMA instructions per forward wgmma kernel (function headers start with "Function :").
  cuobjdump -sass "$mod" 2>/dev/null |
    awk '/Function :/ {f = $3} /HGMMA/ && f ~ /fwd_wgmma/ {n[f]++} END {for (k in n) print n[k], k}' |
    tee "$OUT/sass_fwd.txt" | head -4
  echo "sass: fwd_wgmma kernels with HGMMA: $(wc -l < "$OUT/sass_fwd.txt")"
  # A 64x8 HGMMA on zero registers is ptxas closing a group with a dummy product (a commit
  # it could not attach to a real one): it made a "wait for all but one" wait for all.
  cuobjdump -sass "$mod" 2>/dev/null |
    awk '/Function :/ {f = $3} /HGMMA.64x8x16/ && f ~ /wgmma/ {n[f]++} END {for (k in n) print n[k], k}' |
    tee "$OUT/sass_dummy_hgmma.txt" | head -4
  echo "sass: wgmma kernels with dummy HGMMAs: $(wc -l < "$OUT/sass_dummy_hgmma.txt")"
fi
# Forward A/B, alternating: "new" (this tree), "old" (build-old, if built), "mma"
# (this tree with FLASH_CUDA_FWD=mma), "persistent" / "grid" (this tree with
# FLASH_CUDA_FWD_PERSISTENT=1 / 0; since 179e7a8 the persistent grid is the default for
# every mask and =1 changes nothing), "headorder" (this tree with
# FLASH_CUDA_FWD_L2_SECTIONS=0), "persistent-headorder" (both), "nolpt" (this tree with
# FLASH_CUDA_FWD_LPT_TAIL=0: no longest-first tail in the causal tile order).
if has ab; then
  for round in $(seq ${ROUNDS:-2}); do
    for v in ${AB:-new mma}; do
      m=$mod; [ $v = old ] && m=$old_mod; [ $v = variant ] && m=$variant_mod; [ $v = variant2 ] && m=$variant2_mod
      [ -n "$m" ] || continue
      env $([ $v = mma ] && echo FLASH_CUDA_FWD=mma) $([[ $v == persistent* ]] && echo FLASH_CUDA_FWD_PERSISTENT=1) \
        $([ $v = grid ] && echo FLASH_CUDA_FWD_PERSISTENT=0) $([[ $v == *headorder ]] && echo FLASH_CUDA_FWD_L2_SECTIONS=0) \
        $([ $v = nolpt ] && echo FLASH_CUDA_FWD_LPT_TAIL=0) timeout 200 $b/tests/cuda/cuda_module_bench "$m" \
        --dtype ${DTYPE:-bf16} --dims ${DIMS:-64 128 256} --seqlens ${SEQLENS:-1024 4096 16384} \
        2>&1 | sed "s/^ours /$v /" | tee -a "$OUT/ab.log" | grep -E "^$v" | tr -s ' ' | cut -d' ' -f1,6,7,9
    done
  done
fi
if has torch; then
  PYTHONUNBUFFERED=1 timeout 200 python3 .carry/torch_sdpa.py --dtype ${DTYPE:-bf16} --head-dim ${DIMS:-64 128 256} \
    --seqlen ${SEQLENS:-1024 4096 16384} --backends flash cudnn 2>&1 | tee "$OUT/torch.log" | tail -20
fi
# varlen: packed-batch prefill (flashattn-compare --varlen, lengths VARLEN) on the Hopper
# forward and on the mma.sync kernels (FLASH_CUDA_FWD=mma), alternating, plain and causal;
# one FLASH_LOG=1 call first names the kernel each runs.
if has varlen; then
  vl=${VARLEN:-4096,1000,2048,17,8192,113,3000,1}
  for v in wgmma mma; do
    env FLASH_LOG=1 $([ $v = mma ] && echo FLASH_CUDA_FWD=mma) timeout 60 $b/bench/flashattn-compare \
      --backends cuda --dtype bf16 --heads 16 --head-dim ${VARLEN_DIM:-128} --varlen $vl --iters 1 \
      --check-budget 0 2>&1 | grep -m1 -iE "kernel|wgmma|mma_fwd" | sed "s/^/$v log: /" | tee -a "$OUT/varlen.log"
  done
  for round in $(seq ${ROUNDS:-2}); do
    for v in wgmma mma; do
      for causal in "" --causal; do
        env $([ $v = mma ] && echo FLASH_CUDA_FWD=mma) timeout 60 $b/bench/flashattn-compare \
          --backends cuda --dtype bf16 --heads 16 --head-dim ${VARLEN_DIM:-128} --varlen $vl \
          --check-budget 0 $causal 2>&1 | sed "s/^/$v${causal:+ causal} /" | tee -a "$OUT/varlen.log" |
          grep -E "cuda" | head -2
      done
    done
  done
fi
# Decode GB/s of K+V beside a device copy (flashattn-decode-bench: no reference run).
# decodebench: once per L2 flush mode in FLUSH_MODES (read: the default since
# 2026-11-24; write: the memset flush before it, bench/common/l2_flush.cu says why).
if has decodebench; then
  for flush in ${FLUSH_MODES:-read}; do
    echo "L2 flush: $flush" | tee -a "$OUT/decodebench.log"
    FLASH_BENCH_FLUSH=$flush timeout 150 $b/bench/flashattn-decode-bench --backend cuda --iters 30 \
      --queries ${DECODE_QUERIES:-1} --page 0 64 2>&1 | tee -a "$OUT/decodebench.log"
  done
fi
# decodeab: decode GB/s of this tree and variant builds (AB), alternating, each timed with
# and without FLASH_BENCH_GATE (whether host enqueue time leaks into the GPU timing).
# DECODE_ENVS (e.g. "FLASH_CUDA_DECODE_CLUSTER=1 FLASH_CUDA_DECODE_CLUSTER=0") instead
# alternates this tree's module under each environment setting; DECODE_BENCH_ARGS adds
# bench options (e.g. --sorted-pages).
if has decodeab; then
  for round in $(seq ${ROUNDS:-2}); do
    for v in ${DECODE_ENVS:-${AB:-new variant}}; do
      m=$mod; [ $v = old ] && m=$old_mod; [ $v = variant ] && m=$variant_mod; [ $v = variant2 ] && m=$variant2_mod
      [ -n "$m" ] || continue
      env_set=$([[ $v == *=* ]] && echo "$v" || echo "FLASH_AB_LABEL=$v")
      for gate in ${GATES:-0 1}; do
        env "$env_set" FLASH_BENCH_GATE=$gate FLASH_BACKEND_PATH=$(dirname "$m") timeout 120 \
          $b/bench/flashattn-decode-bench --backend cuda --iters 30 --queries ${DECODE_QUERIES:-1} \
          --batch 1 8 --keys ${DECODE_KEYS:-8192 32768 131072} --page ${DECODE_PAGES:-0} \
          ${DECODE_BENCH_ARGS:-} 2>&1 |
          sed "s/^| cuda /| ${v#FLASH_} gate$gate /" | tee -a "$OUT/decodeab.log" |
          grep -vE "^\|( backend|---)" | cut -d'|' -f2,4,7,8,10-13
      done
    done
  done
fi
# decodetrace: per-block timestamps of the decode kernel (the variant module built with
# VARIANT_FLAGS=-DFLASH_DECODE_TRACE, decode_trace.cuh), one bench process per problem
# (the summary covers the process's last launch): start skew, streaming time per block,
# merge tail.
if has decodetrace && [ -n "$variant_mod" ]; then
  for prob in ${TRACE_PROBLEMS:-1:8192 1:32768 1:131072 8:32768}; do
    echo "== batch ${prob%%:*} keys ${prob##*:}" | tee -a "$OUT/decodetrace.log"
    FLASH_BACKEND_PATH=$(dirname "$variant_mod") timeout 60 $b/bench/flashattn-decode-bench \
      --backend cuda --iters 5 --queries 1 --batch ${prob%%:*} --keys ${prob##*:} --page 0 \
      2>&1 | grep -vE "^\|---" | tee -a "$OUT/decodetrace.log" | tail -9
  done
fi
# ncu: kernel time and DRAM throughput of the decode kernels (split + combine) at B = 1,
# to tell kernel time from launch gaps.
if has ncu; then
  ncu --clock-control none --kernel-name regex:decode \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
    $b/bench/flashattn-decode-bench --backend cuda --batch 1 --keys 8192 32768 --queries 1 --page 0 \
    --iters 1 > "$OUT/ncu.log" 2>&1
  grep -E "^  [a-z_ ]*decode_|gpu__time|dram__|warps_active" "$OUT/ncu.log" | sed 's/(DecodeParams).*//' | head -24
fi
# ncufwd: one D = NCU_DIM (128) bf16 forward launch of the wgmma kernel at S = NCU_S
# (4096) under ncu (speed of light, warp states, scheduler, instruction mix, the source
# lines where warps stall), and that kernel's SASS, for reading off the device.
# NCU_SKIP (2) picks the launch: cuda_module_bench runs 3 warm-ups + 3 timed launches
# non-causal, then the same causal, so NCU_SKIP=8 profiles a causal launch.
if has ncufwd; then
  rep="$OUT/ncufwd"
  # NCU_KERNEL / NCU_RUN profile another kernel the same way (e.g. decode_mma and
  # "$b/bench/flashattn-decode-bench --backend cuda --batch 1 --keys 8192 --queries 1 --page 0 --iters 3").
  timeout 240 ncu --clock-control none --kernel-name regex:${NCU_KERNEL:-fwd_wgmma} --launch-skip ${NCU_SKIP:-2} --launch-count 1 \
    --set full --import-source no -o "$rep" -f \
    ${NCU_RUN:-$b/tests/cuda/cuda_module_bench "$mod" --dtype bf16 --dims ${NCU_DIM:-128} --seqlens ${NCU_S:-4096} --iters 3} \
    > "$OUT/ncufwd-run.log" 2>&1
  echo "ncufwd rc=$?"
  # Stall reasons (raw metrics), the SASS with per-instruction samples, then the report is
  # dropped (too large to bring back).
  ncu --import "$rep.ncu-rep" --page raw --csv > "$OUT/ncufwd-raw.csv" 2>&1
  python3 - "$OUT/ncufwd-raw.csv" <<'PY' | tee "$OUT/ncufwd-stalls.txt"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
names, units, vals = rows[0], rows[1], rows[2]
for n, v in zip(names, vals):
    if ("issue_stalled" in n and n.endswith("per_warp_active.pct")) or n in (
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "smsp__inst_executed.sum", "sm__cycles_elapsed.avg", "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "sm__cycles_active.avg", "gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__bytes_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum"):
        try:
            if float(v.replace(",", "")) > 0.5: print(f"{v:>14} {n}")
        except ValueError:
            pass
PY
  ncu --import "$rep.ncu-rep" --page source --print-source sass --csv 2>&1 | gzip > "$OUT/ncufwd-sass.csv.gz"
  echo "sass csv: $(zcat "$OUT/ncufwd-sass.csv.gz" | wc -l) lines"
  rm -f "$rep.ncu-rep"
fi
# ncupeer: the same counters for torch SDPA's cuDNN kernels and ours (D = NCU_DIM, S =
# NCU_S, bf16, non-causal, forward and backward; one launch each at ncu's default clocks):
# duration, tensor pipe, instructions and the stall reasons per issued instruction.
if has ncupeer; then
  m="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
  for r in barrier long_scoreboard short_scoreboard wait mio_throttle math_pipe_throttle dispatch_stall; do
    m="$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  d=${NCU_DIM:-128} s=${NCU_S:-4096}
  timeout 120 ncu --target-processes all -k regex:flash_fprop --launch-skip 2 --launch-count 1 --metrics "$m" \
    python3 tests/cuda/peer_sdpa_run.py --head-dim $d --seqlen $s > "$OUT/ncupeer-cudnn-fwd.log" 2>&1
  timeout 120 ncu --target-processes all -k regex:flash_bprop --launch-skip 2 --launch-count 1 --metrics "$m" \
    python3 tests/cuda/peer_sdpa_run.py --head-dim $d --seqlen $s --backward > "$OUT/ncupeer-cudnn-bwd.log" 2>&1
  timeout 120 ncu -k regex:fwd_wgmma --launch-skip 3 --launch-count 1 --metrics "$m" \
    $b/tests/cuda/cuda_module_bench "$mod" --dims $d --seqlens $s --iters 1 > "$OUT/ncupeer-ours-fwd.log" 2>&1
  timeout 120 ncu -k regex:bwd_wgmma --launch-skip 3 --launch-count 1 --metrics "$m" \
    $b/tests/cuda/cuda_backward_bench "$mod" --dims $d --seqlens $s --iters 1 > "$OUT/ncupeer-ours-bwd.log" 2>&1
  for f in cudnn-fwd ours-fwd cudnn-bwd ours-bwd; do
    echo "ncupeer $f:"
    grep -E "gpu__time|tensor_op|inst_executed|stalled" "$OUT/ncupeer-$f.log" |
      sed 's/smsp__average_warps_issue_stalled_//;s/_per_issue_active.ratio//;s/  */ /g'
  done
fi
# Decode: ours (contiguous and paged, beside the device copy) and torch SDPA flash /
# cuDNN in one table (bench/compare_torch.py --decode).
if has decode; then
  PYTHONUNBUFFERED=1 timeout 250 python3 bench/compare_torch.py --compare $b/bench/flashattn-compare \
    --decode --heads ${DECODE_HEADS:-32} --batch 1 8 --keys 8192 32768 131072 \
    --queries ${DECODE_QUERIES:-1 4} --paged 0 64 --flush ${FLUSH:-read} 2>&1 | tee "$OUT/decode.log" | tail -30
fi
if has sanitize; then
  for tool in memcheck racecheck synccheck; do
    timeout ${SANITIZE_S:-240} compute-sanitizer --tool $tool --error-exitcode 9 $tests \
      --gtest_filter="${SANITIZE_FILTER:-All/Forward.*/cuda_s17x113*:All/Forward.*/cuda_s113x17*:All/Forward.*/cuda_s257_d128*}" \
      > "$OUT/sanitize-$tool.log" 2>&1
    echo "compute-sanitizer $tool rc=$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize-$tool.log" | tail -2
  done
fi
