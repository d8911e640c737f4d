#!/usr/bin/env bash
# Build on the lent GPU machine (Ubuntu 24.04, nvcc 13, no Highway installed).
# Highway travels unpacked in .carry/hwy: apt-get download libhwy-dev libhwy1, then
# dpkg -x each into .carry/hwy (and libbenchmark-dev libbenchmark1debian into
# .carry/benchmark); run with carry [".carry"]. Source this script so that
# LD_LIBRARY_PATH stays set for the programs run afterwards.
# Usage: source .ci/device_build.sh [extra cmake args]   -> build in build-device/
set -uo pipefail
root=$(pwd)
# Google Benchmark (Debian's package, unpacked the same way) for flashattn_bench.
export CMAKE_PREFIX_PATH="$root/.carry/hwy/usr:$root/.carry/benchmark/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export LD_LIBRARY_PATH="$root/.carry/hwy/usr/lib/x86_64-linux-gnu:$root/.carry/benchmark/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$root/.carry/hwy/usr/lib/x86_64-linux-gnu/pkgconfig"
# The carried .pc file names /usr as prefix; point it at the carried copy.
sed -i "s|^prefix=.*|prefix=$root/.carry/hwy/usr|" "$PKG_CONFIG_PATH"/*.pc 2>/dev/null || true
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFLASHATTN_CPU=ON -DFLASHATTN_CUDA=ON -DFLASHATTN_HIP=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DFLASHATTN_CUDA_SPILL_CHECK=ON "$@" >/dev/null
# Keep going past a failing target (ninja -k 0) so one broken test binary does not
# stop the others; the failure is printed and the status says so.
# BUILD_TARGETS (space-separated) limits the build to those targets and what they need.
if ! cmake --build build-device -j16 ${BUILD_TARGETS:+--target $BUILD_TARGETS} -- -k 0; then
  echo "device_build: some targets failed to build (see above)"
  false
fi
