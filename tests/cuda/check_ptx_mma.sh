#!/bin/sh
# ctest cuda_ptx_has_mma: where no disassembler is installed (CI, the dev image: the
# CUDA toolkit there has no cuobjdump), check one step earlier that the forward and
# backward kernels are written with tensor-core mma: the PTX of the head_dim-128
# translation units must contain mma.sync.aligned.m16n8k16 (which ptxas turns into
# HMMA; cuda_module_has_hmma checks the SASS where cuobjdump exists).
#   check_ptx_mma.sh <nvcc> <repository root>
nvcc=$1
root=$2
status=0
for unit in fwd_d128 bwd_d128; do
  n=$("$nvcc" -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I"$root" -I"$root/include" \
        -I"$root/backends/cuda" -ptx "$root/backends/cuda/$unit.cu" -o - |
      grep -c 'mma.sync.aligned.m16n8k16')
  echo "$unit.cu: $n mma.sync.aligned.m16n8k16 instructions in the sm_90 PTX"
  [ "$n" -gt 0 ] || status=1
done
exit $status
