// The public entry points: validate, select a backend, run it, turn its status
// into flash::Error.
#include <string>

#include "dispatch/registry.hpp"
#include "dispatch/select.hpp"
#include "dispatch/validate.hpp"
#include "flash/flash.hpp"

#ifndef FLASHATTN_VERSION
#define FLASHATTN_VERSION "0.0.0"
#endif

namespace flash {
namespace {

void raise_on_failure(int status, const detail::BackendSlot& slot, const flash_message& error) {
  if (status == FLASH_OK) return;
  const std::string message =
      std::string("flash: backend ") + to_string(slot.id) + ": " + error.text;
  switch (status) {
    case FLASH_INVALID_ARGUMENT:
      throw Error(message, Error::Kind::invalid_argument);
    case FLASH_UNSUPPORTED:
      throw Error(message, Error::Kind::unsupported);
    default:
      throw Error(message, Error::Kind::runtime);
  }
}

}  // namespace

void attention(const AttentionDesc& desc, const void* q, const void* k, const void* v, void* o) {
  const flash_problem problem = detail::validate_forward(desc, {q, k, v, o});
  // Select even for an empty problem, so a bad FLASH_BACKEND is reported consistently.
  const detail::Selection selection =
      detail::select_backend(desc.backend, problem, q, FLASH_FORWARD);
  if (detail::is_empty(problem)) return;
  flash_message error{};
  const int status = selection.slot->module->forward(&problem, q, k, v, o, &error);
  raise_on_failure(status, *selection.slot, error);
}

void attention_backward(const AttentionDesc& desc, const void* q, const void* k, const void* v,
                        const void* o, const void* dout, const float* lse, void* dq, void* dk,
                        void* dv) {
  const flash_problem problem =
      detail::validate_backward(desc, {q, k, v, o, dout, lse, dq, dk, dv});
  const detail::Selection selection =
      detail::select_backend(desc.backend, problem, q, FLASH_BACKWARD);
  if (detail::is_empty(problem)) return;
  flash_message error{};
  const int status =
      selection.slot->module->backward(&problem, q, k, v, o, dout, lse, dq, dk, dv, &error);
  raise_on_failure(status, *selection.slot, error);
}

void merge_partials(const AttentionDesc& desc, int64_t parts, const void* o_parts,
                    const float* lse_parts, void* o, float* lse) {
  const flash_problem problem = detail::validate_merge(desc, parts, {o_parts, lse_parts, o, lse});
  const detail::Selection selection = detail::select_backend(desc.backend, problem, o, FLASH_MERGE);
  if (detail::is_empty(problem)) return;
  flash_message error{};
  const int status =
      selection.slot->module->merge(&problem, parts, o_parts, lse_parts, o, lse, &error);
  raise_on_failure(status, *selection.slot, error);
}

Plan explain(const AttentionDesc& desc, bool backward, const void* q) {
  const flash_problem problem = detail::validate_descriptor(desc);
  const detail::Selection s =
      detail::select_backend(desc.backend, problem, q, backward ? FLASH_BACKWARD : FLASH_FORWARD);
  return {s.slot->id, s.kernel, s.reason};
}

std::vector<BackendInfo> backends() {
  std::vector<BackendInfo> out;
  for (const detail::BackendSlot& s : detail::registry())
    out.push_back({s.id, s.available, s.reason, s.detail});
  return out;
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::automatic:
      return "automatic";
    case Backend::reference:
      return "reference";
    case Backend::cpu:
      return "cpu";
    case Backend::cuda:
      return "cuda";
    case Backend::hip:
      return "hip";
  }
  return "unknown";
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
  }
  return "unknown";
}

const char* version() { return FLASHATTN_VERSION; }

}  // namespace flash
