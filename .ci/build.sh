#!/usr/bin/env bash
# Configures and builds into build/ (Release, every backend whose toolchain exists).
# Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
# The build's output is kept in build/build.log: .ci/test.sh reads ptxas's notes from it.
cmake --build build -j"$(nproc)" 2>&1 | tee build/build.log
