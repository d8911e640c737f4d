// What the cross-backend suite runs on: every backend this build knows, and the
// cpu backend once per SIMD target it reports ("supported=" in its detail).
#pragma once

#include <string>
#include <vector>

#include "flash/flash.hpp"

namespace flash::test {

struct Target {
  Backend backend;
  std::string simd;   // cpu only: value for FLASH_CPU_TARGET, else ""
  std::string label;  // "cpu_avx2", "cuda", ...
  bool available;
  std::string reason;  // why unavailable
};

std::vector<Target> all_targets();

// Sets (or, with value == nullptr, unsets) an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_old_;
};

}  // namespace flash::test
