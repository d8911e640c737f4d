#!/usr/bin/env bash
# The README's test command: set up, build, run the whole test suite (ctest), then
# install the package and build + run the examples against the installed copy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh
# FLASHATTN_CI_CUDA_ARCHS (set by .ci/run): compile the CUDA module for fewer GPU
# architectures than the default (80, 90 and PTX) to fit CI's time budget.
bash .ci/build.sh -DFLASHATTN_TESTS=ON ${FLASHATTN_CI_CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$FLASHATTN_CI_CUDA_ARCHS}
ctest --test-dir build --output-on-failure -j"$(nproc)"
rm -rf build/install build/examples
cmake --install build --prefix build/install >/dev/null
cmake -S examples -B build/examples -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/examples -j"$(nproc)" >/dev/null
if ldd build/install/lib/libflashattn.so | grep -Ei 'cuda|hip|amdhip'; then
  echo "libflashattn.so must not link a GPU runtime"; exit 1
fi
build/examples/attention_example
build/examples/install_check
build/examples/inference_example
