// Turns a C++ backend into a flash_backend_module, so backends are written with
// exceptions and std::string while the core/module boundary stays plain C.
//
// A backend is a class with static members:
//   static const char* name();
//   static bool probe(std::string& reason, std::string& detail);
//   static bool owns_pointer(const void* p);
//   static Choice choose(const flash_problem& p, int direction);   // the one decision
//   static void forward(const flash_problem&, q, k, v, o);          // throws on error
//   static void backward(const flash_problem&, q, k, v, o, dout, lse, dq, dk, dv);
//   static void merge(const flash_problem&, parts, o_parts, lse_parts, o, lse);
// forward/backward throw flash::Error for bad input (FLASH_INVALID_ARGUMENT) and
// flash::detail::RuntimeFailure for device failures (FLASH_RUNTIME_ERROR).
// Header-only: GPU modules include it without linking the core library.
#pragma once

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "flash/flash.hpp"
#include "module_abi.h"

namespace flash::detail {

// What choose() decided: ok + kernel name, or !ok + the reason it cannot run.
struct Choice {
  bool ok = false;
  std::string kernel;  // when ok
  std::string reason;  // when !ok

  static Choice run(std::string kernel) { return {true, std::move(kernel), {}}; }
  static Choice decline(std::string reason) { return {false, {}, std::move(reason)}; }
};

struct RuntimeFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void write_message(flash_message* m, const std::string& s) {
  if (!m) return;
  std::snprintf(m->text, sizeof(m->text), "%s", s.c_str());
}

// Runs fn, translating exceptions into status codes (none may cross the ABI).
template <class Fn>
int guarded(flash_message* error, Fn&& fn) {
  try {
    fn();
    return FLASH_OK;
  } catch (const Error& e) {
    write_message(error, e.what());
    return FLASH_INVALID_ARGUMENT;
  } catch (const RuntimeFailure& e) {
    write_message(error, e.what());
    return FLASH_RUNTIME_ERROR;
  } catch (const std::bad_alloc&) {
    write_message(error, "out of host memory");
    return FLASH_RUNTIME_ERROR;
  } catch (const std::exception& e) {
    write_message(error, e.what());
    return FLASH_RUNTIME_ERROR;
  } catch (...) {
    write_message(error, "unknown exception");
    return FLASH_RUNTIME_ERROR;
  }
}

template <class B>
const flash_backend_module* make_module() {
  static const flash_backend_module module = {
      FLASH_MODULE_ABI_VERSION,
      B::name(),
      [](flash_message* reason, flash_message* detail) -> int {
        std::string r, d;
        bool ok = false;
        int status = guarded(reason, [&] { ok = B::probe(r, d); });
        if (status != FLASH_OK) return 0;
        write_message(reason, r);
        write_message(detail, d);
        return ok ? 1 : 0;
      },
      [](const void* p) -> int {
        bool owns = false;
        guarded(nullptr, [&] { owns = B::owns_pointer(p); });
        return owns ? 1 : 0;
      },
      [](const flash_problem* p, int direction, flash_message* out) -> int {
        Choice c;
        // A choose() that throws (e.g. a bad FLASH_CPU_TARGET) reports the error's own
        // status; a decline is FLASH_UNSUPPORTED.
        int status = guarded(out, [&] { c = B::choose(*p, direction); });
        if (status != FLASH_OK) return status;
        write_message(out, c.ok ? c.kernel : c.reason);
        return c.ok ? FLASH_OK : FLASH_UNSUPPORTED;
      },
      [](const flash_problem* p, const void* q, const void* k, const void* v, void* o,
         flash_message* error) -> int {
        return guarded(error, [&] { B::forward(*p, q, k, v, o); });
      },
      [](const flash_problem* p, const void* q, const void* k, const void* v, const void* o,
         const void* dout, const float* lse, void* dq, void* dk, void* dv,
         flash_message* error) -> int {
        return guarded(error, [&] { B::backward(*p, q, k, v, o, dout, lse, dq, dk, dv); });
      },
      [](const flash_problem* p, int64_t parts, const void* o_parts, const float* lse_parts,
         void* o, float* lse, flash_message* error) -> int {
        return guarded(error, [&] { B::merge(*p, parts, o_parts, lse_parts, o, lse); });
      },
  };
  return &module;
}

}  // namespace flash::detail
