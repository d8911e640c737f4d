#include "dispatch/env.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace flash::detail {

std::optional<Backend> parse_backend(const std::string& name) {
  if (name == "auto" || name == "automatic") return Backend::automatic;
  if (name == "reference") return Backend::reference;
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  if (name == "hip") return Backend::hip;
  return std::nullopt;
}

std::optional<Backend> backend_from_env() {
  const char* value = std::getenv("FLASH_BACKEND");
  if (value == nullptr || *value == '\0') return std::nullopt;
  auto backend = parse_backend(value);
  if (!backend)
    throw Error(std::string("flash: FLASH_BACKEND = '") + value +
                "' is not a backend; allowed: auto, reference, cpu, cuda, hip");
  return backend;
}

bool log_enabled() {
  const char* value = std::getenv("FLASH_LOG");
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

void log_line(const std::string& message) { std::fprintf(stderr, "flash: %s\n", message.c_str()); }

}  // namespace flash::detail
