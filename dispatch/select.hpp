// Backend selection: desc.backend if set, else FLASH_BACKEND, else automatic (the
// GPU backend whose device owns q, otherwise cpu, otherwise reference). The chosen
// backend's choose() must accept the problem; there is never a silent fallback.
#pragma once

#include <string>

#include "dispatch/registry.hpp"

namespace flash::detail {

struct Selection {
  const BackendSlot* slot;
  std::string kernel;  // what the backend's choose() picked
  std::string reason;  // why this backend (requested by ..., or q's memory)
};

// Throws flash::Error when the requested backend is unavailable or declines.
// direction: FLASH_FORWARD, FLASH_BACKWARD or FLASH_MERGE.
Selection select_backend(const Backend requested_in_desc, const flash_problem& problem,
                         const void* q, int direction);

}  // namespace flash::detail
