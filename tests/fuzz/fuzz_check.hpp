// One fuzz input, checked: the bytes are decoded into a small attention problem
// (sizes <= 32, any dtype, mask, softcap, scale, per-tensor layouts, sometimes an
// invalid field, an aliased output or NaN/inf inputs), which is run on the
// reference and cpu backends (forward or backward, cpu on a SIMD target the bytes
// pick). The call must either raise flash::Error on both backends -- exactly when
// the descriptor is invalid -- or produce results equal to the double reference
// within the suite's tolerance rule (non-finite values exactly where the reference
// has them), writing nothing outside the output views.
//
// Shared by the libFuzzer target (fuzz_attention.cpp, abort() on failure) and the
// regression test that replays tests/fuzz/corpus and tests/fuzz/regressions in the
// normal build (tests/reliability/fuzz_replay_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace flash::fuzz {

// Returns "" when the input passes, else a description of the failure.
std::string check_one(const uint8_t* data, size_t size);

// A description of what the bytes decode to (for crash reports).
std::string describe(const uint8_t* data, size_t size);

}  // namespace flash::fuzz
