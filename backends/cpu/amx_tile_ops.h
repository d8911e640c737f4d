// The AMX tile instructions the AMX kernels use (forward_amx.cpp, backward_amx.cpp;
// through amx_gemm.h), as inline functions: ldtilecfg, tilerelease, tilezero,
// tileloadd, tilestored, tdpbf16ps.
//
// Written as inline asm rather than the _tile_* intrinsics: GCC's _tile_* macros
// stringify their tile-number argument (so a template parameter cannot name a tile)
// and clang's need the amx-tile target feature on every calling function; the asm is
// the same for both compilers and needs no target flag (binutils >= 2.36 and clang's
// assembler know the mnemonics). AT&T operand order: sources first, destination last.
// Loads and stores clobber "memory", so the compiler keeps every ordinary store before
// a tile load of the same buffer and every ordinary load after a tile store.
//
// FLASH_AMX_EMULATE selects amx_emulate.h instead (the same functions in scalar C++,
// for testing the kernel's layouts on CPUs without AMX).
#pragma once

#include <cstddef>

#include "backends/cpu/amx.h"

#if defined(FLASH_AMX_EMULATE)
#include "backends/cpu/amx_emulate.h"
#else

namespace flash::cpu::amx {
namespace {

// Loads the tile shapes for this thread (tile state is per thread).
inline void Configure(const AmxTileConfig& config) { asm volatile("ldtilecfg %0" ::"m"(config)); }

// Marks the tiles unused, so the kernel switch need not save 8 KiB of tile data.
inline void Release() { asm volatile("tilerelease" ::: "memory"); }

template <int kTile>
inline void Zero() {
  asm volatile("tilezero %%tmm%c0" ::"i"(kTile));
}

// Tile rows from base, base + stride, ... (stride in bytes).
template <int kTile>
inline void Load(const void* base, size_t stride) {
  asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(kTile) : "memory");
}

template <int kTile>
inline void Store(void* base, size_t stride) {
  asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(kTile) : "memory");
}

// C += A·B over bf16 pairs: C[m][n] += A[m][2k]·B[k][2n] + A[m][2k+1]·B[k][2n+1].
template <int kC, int kA, int kB>
inline void DotBf16() {
  asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(kC), "i"(kA), "i"(kB));
}

}  // namespace
}  // namespace flash::cpu::amx

#endif  // FLASH_AMX_EMULATE
