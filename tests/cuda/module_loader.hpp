// Loads libflashattn_cuda.so directly (no core library needed) for the CUDA checks.
#pragma once

#include <dlfcn.h>

#include <cstdio>

#include "dispatch/module_abi.h"

inline const flash_backend_module* load_cuda_module(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return nullptr;
  }
  auto entry = reinterpret_cast<flash_backend_module_entry>(dlsym(h, FLASH_MODULE_ENTRY_SYMBOL));
  return entry ? entry() : nullptr;
}
