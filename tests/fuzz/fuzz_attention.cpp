// libFuzzer target: random bytes -> a small attention problem, run on the reference
// and cpu backends; abort() unless both raise flash::Error for an invalid descriptor
// or both match the double reference within tolerance (see fuzz_check.hpp for the
// decoding and the checks). Build and run: tests/README.md ("Fuzzing"), e.g.
//   bash .ci/reliability.sh fuzz            # builds with clang, fuzzes for 60 s
//   build-rel-asan/tests/reliability/fuzz/fuzz_attention tests/fuzz/corpus -max_total_time=60
// A crash leaves crash-<sha1> in the working directory: copy it to
// tests/fuzz/regressions/ and the replay test (flashattn_reliability_tests,
// FuzzReplay.*) checks it on every build.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string failure = flash::fuzz::check_one(data, size);
  if (!failure.empty()) {
    std::fprintf(stderr, "fuzz_attention: %s\n%s", flash::fuzz::describe(data, size).c_str(),
                 failure.c_str());
    std::abort();
  }
  return 0;
}
