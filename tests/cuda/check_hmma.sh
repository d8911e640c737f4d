#!/bin/sh
# ctest cuda_module_has_hmma: the module's machine code uses tensor-core mma (HMMA).
#   check_hmma.sh <libflashattn_cuda.so> [cuobjdump]
# Exit 77 (ctest: skipped, with the reason) when no cuobjdump is installed.
module=$1
tool=${2:-}
[ -n "$tool" ] && [ -x "$tool" ] || tool=$(command -v cuobjdump || true)
if [ -z "$tool" ]; then
  echo "SKIP: cuobjdump not found (CUDA toolkit's cuda-cuobjdump, or Debian nvidia-cuda-toolkit)"
  exit 77
fi
n=$("$tool" --dump-sass "$module" | grep -c HMMA)
echo "HMMA instructions in $module: $n"
[ "$n" -gt 0 ]
