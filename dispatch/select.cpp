#include "dispatch/select.hpp"

#include "dispatch/env.hpp"

namespace flash::detail {
namespace {

const char* direction_name(int direction) {
  return direction == FLASH_FORWARD    ? "forward"
         : direction == FLASH_BACKWARD ? "backward"
                                       : "merge";
}

// Where the request came from, for messages: "desc.backend=cuda" / "FLASH_BACKEND=cuda".
struct Request {
  Backend backend;
  std::string origin;
};

Request resolve_request(Backend in_desc) {
  if (in_desc != Backend::automatic)
    return {in_desc, std::string("desc.backend=") + to_string(in_desc)};
  if (auto env = backend_from_env(); env && *env != Backend::automatic)
    return {*env, std::string("FLASH_BACKEND=") + to_string(*env)};
  return {Backend::automatic, "automatic"};
}

// Automatic choice: the GPU backend that owns q's memory, else the host backend.
const BackendSlot& automatic_slot(const void* q, std::string& why) {
  for (Backend gpu : {Backend::cuda, Backend::hip}) {
    const BackendSlot& s = slot(gpu);
    if (s.available && q && s.module->owns_pointer(q)) {
      why = std::string("q is ") + to_string(gpu) + " device memory";
      return s;
    }
  }
  const BackendSlot& cpu = slot(Backend::cpu);
  if (cpu.available) {
    why = "q is host memory";
    return cpu;
  }
  // Built in but unavailable means misconfigured (e.g. a bad FLASH_CPU_TARGET): say so
  // rather than quietly running the slow reference.
  if (cpu.module)
    throw Error("automatic: q is host memory but backend cpu is unavailable: " + cpu.reason,
                Error::Kind::invalid_argument);
  why = "q is host memory and the cpu backend is not built in";
  return slot(Backend::reference);
}

}  // namespace

Selection select_backend(Backend in_desc, const flash_problem& problem, const void* q,
                         int direction) {
  const Request request = resolve_request(in_desc);
  std::string why;
  const BackendSlot& chosen =
      request.backend == Backend::automatic ? automatic_slot(q, why) : slot(request.backend);
  if (request.backend != Backend::automatic) why = "requested by " + request.origin;

  if (!chosen.available)
    throw Error(
        request.origin + ": backend " + to_string(chosen.id) + " is unavailable: " + chosen.reason,
        Error::Kind::unsupported);

  flash_message decision{};
  const int status = chosen.module->choose(&problem, direction, &decision);
  if (status != FLASH_OK)
    throw Error(request.origin + ": backend " + to_string(chosen.id) + " cannot run this " +
                    direction_name(direction) + ": " + decision.text,
                status == FLASH_INVALID_ARGUMENT ? Error::Kind::invalid_argument
                                                 : Error::Kind::unsupported);

  if (log_enabled()) {
    std::string line = std::string(direction_name(direction)) + " on " + to_string(chosen.id) +
                       " (kernel " + decision.text + "): " + why;
    // Why every other backend was not used (declined, unavailable, or not asked).
    for (const BackendSlot& other : registry()) {
      if (&other == &chosen) continue;
      line += std::string("; ") + to_string(other.id) + ": ";
      if (!other.available) {
        line += "unavailable (" + other.reason + ")";
        continue;
      }
      flash_message answer{};
      if (other.module->choose(&problem, direction, &answer) != FLASH_OK)
        line += std::string("declines (") + answer.text + ")";
      else
        line += std::string("could run ") + answer.text + ", not selected";
    }
    log_line(line);
  }
  return {&chosen, decision.text, why};
}

}  // namespace flash::detail
