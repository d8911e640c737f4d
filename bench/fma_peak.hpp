// The CPU's f32 FMA ceiling (see fma_peak.cpp), for stating CPU results as a share
// of peak.
#pragma once

namespace bench {

// FLOP/s of `threads` threads each running independent FMA chains in registers, with
// the widest of AVX-512F / AVX2+FMA; 0 when the CPU has neither. Takes ~20 ms.
double fma_peak_flops(int threads);

}  // namespace bench
