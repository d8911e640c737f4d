#!/usr/bin/env bash
# The README's main job: set up, build, and run flashattn-compare (the cross-backend
# comparison on its default problem). Extra arguments go to flashattn-compare.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh
bash .ci/build.sh -DFLASHATTN_TESTS=OFF >/dev/null
if [ -x build/bench/flashattn-compare ]; then
  build/bench/flashattn-compare "$@"
else
  echo "flashattn-compare not built; running the example instead"
  cmake --install build --prefix build/install >/dev/null
  cmake -S examples -B build/examples -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
  cmake --build build/examples >/dev/null
  build/examples/attention_example
fi
