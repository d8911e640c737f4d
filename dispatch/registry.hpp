// The backend registry: built-in backends (reference, cpu) and GPU modules loaded
// at run time with dlopen (libflashattn_cuda.so, libflashattn_hip.so), looked up in
// FLASH_BACKEND_PATH (colon-separated) and then next to libflashattn.so. The core
// links no GPU runtime; a missing module is an unavailable backend with a reason.
#pragma once

#include <string>
#include <vector>

#include "dispatch/module_abi.h"
#include "flash/flash.hpp"

namespace flash::detail {

struct BackendSlot {
  Backend id;
  const flash_backend_module* module;  // null when not built in / not loadable
  bool available;
  std::string reason;  // why unavailable
  std::string detail;  // device, ISA, module path
};

// All backends in a fixed order (reference, cpu, cuda, hip). Loaded and probed once,
// thread-safely, on first use.
const std::vector<BackendSlot>& registry();

const BackendSlot& slot(Backend id);

}  // namespace flash::detail
