// Environment variables read by the core. Read on every call (getenv is cheap), so
// a program or test may change them between calls.
#pragma once

#include <optional>
#include <string>

#include "flash/flash.hpp"

namespace flash::detail {

// FLASH_BACKEND: auto|reference|cpu|cuda|hip. Unset or empty -> nullopt; "auto" ->
// Backend::automatic. An unknown value throws flash::Error listing the valid ones.
std::optional<Backend> backend_from_env();

// Parses a backend name; nullopt when unknown.
std::optional<Backend> parse_backend(const std::string& name);

// FLASH_LOG=1 (any value but "" and "0"): print dispatch decisions to stderr.
bool log_enabled();

// Writes one line "flash: <message>" to stderr.
void log_line(const std::string& message);

}  // namespace flash::detail
