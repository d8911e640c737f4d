#include "dispatch/registry.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

extern "C" const flash_backend_module* flash_reference_module(void);
#ifdef FLASHATTN_HAVE_CPU
extern "C" const flash_backend_module* flash_cpu_module(void);
#endif

namespace flash::detail {
namespace {

// Directory holding libflashattn.so itself (where GPU modules are installed).
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || !info.dli_fname) return ".";
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::vector<std::string> module_directories() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("FLASH_BACKEND_PATH")) {
    // Split at ':' by hand (no iostreams in the library: see validate.cpp's str()).
    const std::string list = env;
    for (size_t begin = 0; begin <= list.size();) {
      const size_t end = std::min(list.find(':', begin), list.size());
      if (end > begin) dirs.push_back(list.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  dirs.push_back(own_directory());
  return dirs;
}

void probe(BackendSlot& slot) {
  flash_message reason{}, detail{};
  slot.available = slot.module->probe(&reason, &detail) == 1;
  slot.reason = reason.text;
  if (!slot.detail.empty() && detail.text[0])
    slot.detail = std::string(detail.text) + "; " + slot.detail;
  else if (detail.text[0])
    slot.detail = detail.text;
}

BackendSlot builtin(Backend id, const flash_backend_module* module) {
  BackendSlot slot{id, module, false, {}, {}};
  probe(slot);
  return slot;
}

// Loads libflashattn_<name>.so. The handle is never closed: modules live as long as
// the process (their static state, e.g. a CUDA context, must not be torn down early).
BackendSlot load_module(Backend id, const std::string& name) {
  BackendSlot slot{id, nullptr, false, {}, {}};
  const std::string file = "libflashattn_" + name + ".so";
  std::string searched, errors;
  for (const std::string& dir : module_directories()) {
    const std::string path = dir + "/" + file;
    searched += (searched.empty() ? "" : ", ") + dir;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* err = dlerror();
      // "cannot open shared object file" just means it is not in this directory.
      if (err && std::string(err).find("No such file") == std::string::npos)
        errors += std::string("; ") + err;
      continue;
    }
    auto entry =
        reinterpret_cast<flash_backend_module_entry>(dlsym(handle, FLASH_MODULE_ENTRY_SYMBOL));
    const flash_backend_module* module = entry ? entry() : nullptr;
    if (!module || module->abi_version != FLASH_MODULE_ABI_VERSION) {
      slot.reason = path + " is not a compatible flashattn backend module (ABI version " +
                    std::to_string(FLASH_MODULE_ABI_VERSION) + " expected)";
      return slot;
    }
    slot.module = module;
    slot.detail = path;
    probe(slot);
    return slot;
  }
  slot.reason = file + " not found (searched: " + searched + ")" + errors;
  return slot;
}

}  // namespace

const std::vector<BackendSlot>& registry() {
  static std::vector<BackendSlot> slots;
  static std::once_flag once;
  std::call_once(once, [] {
    slots.push_back(builtin(Backend::reference, flash_reference_module()));
#ifdef FLASHATTN_HAVE_CPU
    slots.push_back(builtin(Backend::cpu, flash_cpu_module()));
#else
    slots.push_back({Backend::cpu, nullptr, false,
                     "not built in (libflashattn was built without Highway/OpenMP)", {}});
#endif
    slots.push_back(load_module(Backend::cuda, "cuda"));
    slots.push_back(load_module(Backend::hip, "hip"));
  });
  return slots;
}

const BackendSlot& slot(Backend id) {
  for (const BackendSlot& s : registry())
    if (s.id == id) return s;
  throw Error("flash: backend value " + std::to_string(static_cast<int>(id)) +
              " is not a backend; allowed: reference, cpu, cuda, hip");
}

}  // namespace flash::detail
