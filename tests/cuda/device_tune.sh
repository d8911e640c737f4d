#!/usr/bin/env bash
# Builds tile-config variants of the cuda module in parallel and benchmarks each.
#   VARIANTS="base:;w8:128=128,64,8 256=64,64,4" bash tests/cuda/device_tune.sh
# (each DIM=BQ,BKV,WARPS becomes a -include'd header: nvcc splits -D values at commas)
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
IFS=';' read -ra vs <<< "$VARIANTS"
for v in "${vs[@]}"; do
  name=${v%%:*}; spec=${v#*:}; hdr=$PWD/tune-$name.h; : > "$hdr"
  for t in $spec; do
    if [[ $t == FLASH_* ]]; then echo "#define ${t%%=*} ${t#*=}" >> "$hdr"  # any macro
    else echo "#define FLASH_FWD_TUNE_${t%%=*} ${t#*=}" >> "$hdr"; fi
  done
  flags="-include $hdr"
  ( cmake -S backends/cuda -B build-tune-$name -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a \
      "-DCMAKE_CUDA_FLAGS=$flags" > "$OUT/tune-build-$name.log" 2>&1 &&
    cmake --build build-tune-$name -j8 --target flashattn_cuda cuda_module_bench >> "$OUT/tune-build-$name.log" 2>&1 ||
    echo "build $name failed" ) &
done
wait
for v in "${vs[@]}"; do
  name=${v%%:*}
  echo "== variant $name: ${v#*:}"
  build-tune-$name/tests/cuda/cuda_module_bench build-tune-$name/libflashattn_cuda.so \
    ${TUNE_ARGS:---dims 64 128 256 --seqlens 2048 16384} 2>&1 | grep ours | tee -a "$OUT/tune.log"
done
