// The C API: converts the C descriptor, calls the C++ API, catches everything.
#include <new>
#include <string>
#include <vector>

#include "flash/flash.h"
#include "flash/flash.hpp"

namespace {

thread_local std::string last_error;

flash::AttentionDesc to_cpp(const flash_attention_desc& c) {
  flash::AttentionDesc d;
  d.batch = c.batch;
  d.seqlen_q = c.seqlen_q;
  d.seqlen_kv = c.seqlen_kv;
  d.heads_q = c.heads_q;
  d.heads_kv = c.heads_kv;
  d.head_dim = c.head_dim;
  d.head_dim_v = c.head_dim_v;
  // Out-of-range integers pass through unchanged; validation rejects them by name.
  d.dtype = static_cast<flash::DType>(c.dtype);
  d.scale = c.scale;
  d.causal = c.causal != 0;
  d.window_left = c.window_left;
  d.window_right = c.window_right;
  d.softcap = c.softcap;
  d.q_stride = {c.q_stride.batch, c.q_stride.seq, c.q_stride.head};
  d.k_stride = {c.k_stride.batch, c.k_stride.seq, c.k_stride.head};
  d.v_stride = {c.v_stride.batch, c.v_stride.seq, c.v_stride.head};
  d.o_stride = {c.o_stride.batch, c.o_stride.seq, c.o_stride.head};
  d.lse = c.lse;
  d.backend = static_cast<flash::Backend>(c.backend);
  d.stream = c.stream;
  d.deterministic = c.deterministic != 0;
  d.cu_seqlens_q = c.cu_seqlens_q;
  d.cu_seqlens_kv = c.cu_seqlens_kv;
  d.seqlens_kv = c.seqlens_kv;
  d.block_table = c.block_table;
  d.page_size = c.page_size;
  d.pages_per_seq = c.pages_per_seq;
  d.num_pages = c.num_pages;
  return d;
}

// Runs fn, turning every exception into a status and last_error.
template <class Fn>
flash_status guarded_call(Fn&& fn) {
  try {
    fn();
    last_error.clear();
    return FLASH_STATUS_OK;
  } catch (const flash::Error& e) {
    last_error = e.what();
    switch (e.kind()) {
      case flash::Error::Kind::invalid_argument:
        return FLASH_STATUS_INVALID_ARGUMENT;
      case flash::Error::Kind::unsupported:
        return FLASH_STATUS_UNSUPPORTED;
      default:
        return FLASH_STATUS_RUNTIME_ERROR;
    }
  } catch (const std::bad_alloc&) {
    last_error = "flash: out of host memory";
    return FLASH_STATUS_RUNTIME_ERROR;
  } catch (const std::exception& e) {
    last_error = std::string("flash: internal error: ") + e.what();
    return FLASH_STATUS_INTERNAL_ERROR;
  } catch (...) {
    last_error = "flash: internal error: unknown exception";
    return FLASH_STATUS_INTERNAL_ERROR;
  }
}

template <class Fn>
flash_status guarded(const flash_attention_desc* desc, Fn&& fn) {
  if (desc == nullptr) {
    last_error = "flash: desc = NULL is invalid; pass a flash_attention_desc";
    return FLASH_STATUS_INVALID_ARGUMENT;
  }
  return guarded_call([&] { fn(to_cpp(*desc)); });
}

// Strings handed out by flash_backend_info / flash_explain: per thread, like last_error,
// so a caller on another thread cannot invalidate them.
thread_local flash::BackendInfo backend_info;
thread_local flash::Plan explained;

}  // namespace

extern "C" {

void flash_desc_init(flash_attention_desc* desc) {
  if (desc == nullptr) return;
  *desc = flash_attention_desc{};
  const flash::AttentionDesc defaults;
  desc->batch = defaults.batch;
  desc->heads_q = defaults.heads_q;
  desc->heads_kv = defaults.heads_kv;
  desc->window_left = defaults.window_left;
  desc->window_right = defaults.window_right;
  desc->deterministic = defaults.deterministic ? 1 : 0;
}

flash_status flash_attention(const flash_attention_desc* desc, const void* q, const void* k,
                             const void* v, void* o) {
  return guarded(desc, [&](const flash::AttentionDesc& d) { flash::attention(d, q, k, v, o); });
}

flash_status flash_attention_backward(const flash_attention_desc* desc, const void* q,
                                      const void* k, const void* v, const void* o, const void* dout,
                                      const float* lse, void* dq, void* dk, void* dv) {
  return guarded(desc, [&](const flash::AttentionDesc& d) {
    flash::attention_backward(d, q, k, v, o, dout, lse, dq, dk, dv);
  });
}

flash_status flash_merge_partials(const flash_attention_desc* desc, int64_t parts,
                                  const void* o_parts, const float* lse_parts, void* o,
                                  float* lse) {
  return guarded(desc, [&](const flash::AttentionDesc& d) {
    flash::merge_partials(d, parts, o_parts, lse_parts, o, lse);
  });
}

int32_t flash_backend_count(void) {
  int32_t count = 0;
  guarded_call([&] { count = static_cast<int32_t>(flash::backends().size()); });
  return count;
}

flash_status flash_backend_info(int32_t index, int32_t* backend, int32_t* available,
                                const char** reason, const char** detail) {
  return guarded_call([&] {
    const std::vector<flash::BackendInfo> all = flash::backends();
    if (index < 0 || index >= static_cast<int32_t>(all.size()))
      throw flash::Error("flash: index = " + std::to_string(index) + " is invalid; allowed: 0 .. " +
                         std::to_string(static_cast<int64_t>(all.size()) - 1));
    backend_info = all[index];
    if (backend) *backend = static_cast<int32_t>(backend_info.backend);
    if (available) *available = backend_info.available ? 1 : 0;
    if (reason) *reason = backend_info.reason.c_str();
    if (detail) *detail = backend_info.detail.c_str();
  });
}

flash_status flash_explain(const flash_attention_desc* desc, int32_t backward, const void* q,
                           int32_t* backend, const char** kernel, const char** reason) {
  return guarded(desc, [&](const flash::AttentionDesc& d) {
    explained = flash::explain(d, backward != 0, q);
    if (backend) *backend = static_cast<int32_t>(explained.backend);
    if (kernel) *kernel = explained.kernel.c_str();
    if (reason) *reason = explained.reason.c_str();
  });
}

const char* flash_last_error(void) { return last_error.c_str(); }

const char* flash_version(void) { return flash::version(); }

}  // extern "C"
