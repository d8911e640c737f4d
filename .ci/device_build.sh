#!/usr/bin/env bash
# Build on the lent GPU machine (Ubuntu 24.04, nvcc 13, no Highway installed).
# Highway travels unpacked in .carry/hwy (see README "Working on the device").
# Usage: source .ci/device_build.sh [extra cmake args]   -> build in build-device/
set -euo pipefail
root=$(pwd)
export CMAKE_PREFIX_PATH="$root/.carry/hwy/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export LD_LIBRARY_PATH="$root/.carry/hwy/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$root/.carry/hwy/usr/lib/x86_64-linux-gnu/pkgconfig"
# The carried .pc file names /usr as prefix; point it at the carried copy.
sed -i "s|^prefix=.*|prefix=$root/.carry/hwy/usr|" "$PKG_CONFIG_PATH"/*.pc 2>/dev/null || true
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFLASHATTN_CPU=ON -DFLASHATTN_CUDA=ON -DFLASHATTN_HIP=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 "$@" >/dev/null
cmake --build build-device -j16
