// Switch environment variables: the A/B and tuning knobs of the backends
// (FLASH_CUDA_FWD_PERSISTENT, FLASH_CPU_DECODE_PREFETCH, ...). Header-only: the backend
// modules include it too. A value outside the allowed set is an error naming the
// variable, the value and what is allowed (a typo in an A/B run must not silently measure
// the default). Read on every call: getenv is cheap beside a kernel launch, and tests and
// A/B timings may switch a knob between calls.
#pragma once

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "flash/flash.hpp"

namespace flash::detail {

// The value of switch `name`: "" when unset or empty, else one of `allowed`.
inline std::string env_switch(const char* name, std::initializer_list<const char*> allowed) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return "";
  std::string list;
  for (const char* a : allowed) {
    if (std::strcmp(value, a) == 0) return value;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  throw Error(std::string("flash: ") + name + " = '" + value + "' is invalid; allowed: " + list +
              " (or unset for the default)");
}

// The value of a positive-integer knob `name`: 0 when unset or empty.
inline long long env_positive_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return 0;
  // Digits only (no sign, no spaces), at most 9 of them: no overflow to think about.
  long long v = 0;
  const size_t n = std::strlen(value);
  bool digits = n <= 9;
  for (size_t i = 0; digits && i < n; ++i) {
    digits = value[i] >= '0' && value[i] <= '9';
    v = v * 10 + (value[i] - '0');
  }
  if (!digits || v <= 0)
    throw Error(std::string("flash: ") + name + " = '" + value +
                "' is invalid; allowed: a positive integer (or unset for the default)");
  return v;
}

}  // namespace flash::detail
