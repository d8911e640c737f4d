/* libflashattn C API: for callers from C, Python ctypes, Rust. No exception crosses
 * it: every call returns a status, and flash_last_error() holds the message of the
 * last failed call on the calling thread. Semantics are those of flash.hpp. */
#ifndef FLASH_FLASH_H_
#define FLASH_FLASH_H_

#include <stdint.h>

#if defined(_WIN32)
#define FLASH_C_API __declspec(dllexport)
#else
#define FLASH_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum flash_status {
  FLASH_STATUS_OK = 0,
  FLASH_STATUS_INVALID_ARGUMENT = 1, /* a descriptor field or pointer is invalid */
  FLASH_STATUS_UNSUPPORTED = 2,      /* backend unavailable or cannot run the problem */
  FLASH_STATUS_RUNTIME_ERROR = 3,    /* e.g. a CUDA error, out of memory */
  FLASH_STATUS_INTERNAL_ERROR = 4    /* a bug: please report it */
} flash_status;

typedef enum flash_dtype {
  FLASH_DTYPE_F32 = 0,
  FLASH_DTYPE_F16 = 1,
  FLASH_DTYPE_BF16 = 2
} flash_dtype;

typedef enum flash_backend {
  FLASH_BACKEND_AUTOMATIC = 0,
  FLASH_BACKEND_REFERENCE = 1,
  FLASH_BACKEND_CPU = 2,
  FLASH_BACKEND_CUDA = 3,
  FLASH_BACKEND_HIP = 4
} flash_backend;

typedef struct flash_strides {
  int64_t batch, seq, head; /* element strides; all 0 = packed [batch, seq, heads, dim] */
} flash_strides;

typedef struct flash_attention_desc {
  int64_t batch, seqlen_q, seqlen_kv, heads_q, heads_kv, head_dim, head_dim_v;
  int32_t dtype;                     /* flash_dtype */
  float scale;                       /* 0 = 1/sqrt(head_dim) */
  int32_t causal;                    /* 0 or 1 */
  int64_t window_left, window_right; /* -1 = unbounded */
  float softcap;                     /* 0 = off */
  flash_strides q_stride, k_stride, v_stride, o_stride;
  float* lse;            /* optional output [batch, heads_q, seqlen_q] */
  int32_t backend;       /* flash_backend */
  void* stream;          /* cudaStream_t / hipStream_t; NULL = default stream */
  int32_t deterministic; /* backward: 1 = bitwise reproducible (flash_desc_init's default),
                            0 = cuda may accumulate dQ with unordered atomics */
  /* Inference (flash.hpp's AttentionDesc): packed batches, cache lengths, paged K/V.
   * NULL / 0 when unused; the arrays live where q lives. */
  const int32_t* cu_seqlens_q;  /* [batch + 1] */
  const int32_t* cu_seqlens_kv; /* [batch + 1] */
  const int32_t* seqlens_kv;    /* [batch] */
  const int32_t* block_table;   /* [batch, pages_per_seq] */
  int64_t page_size, pages_per_seq, num_pages;
} flash_attention_desc;

/* Fills *desc with the defaults of flash::AttentionDesc (windows -1, batch 1, ...). */
FLASH_C_API void flash_desc_init(flash_attention_desc* desc);

FLASH_C_API flash_status flash_attention(const flash_attention_desc* desc, const void* q,
                                         const void* k, const void* v, void* o);

FLASH_C_API flash_status flash_attention_backward(const flash_attention_desc* desc, const void* q,
                                                  const void* k, const void* v, const void* o,
                                                  const void* dout, const float* lse, void* dq,
                                                  void* dk, void* dv);

/* Combines attention over disjoint key sets: see flash::merge_partials. */
FLASH_C_API flash_status flash_merge_partials(const flash_attention_desc* desc, int64_t parts,
                                              const void* o_parts, const float* lse_parts, void* o,
                                              float* lse);

/* The backends this build knows (flash::backends()), available or not: their number,
 * then each by index (0 <= index < count). *reason and *detail stay valid until the next
 * flash_backend_info call on this thread. */
FLASH_C_API int32_t flash_backend_count(void);
FLASH_C_API flash_status flash_backend_info(int32_t index, int32_t* backend, int32_t* available,
                                            const char** reason, const char** detail);

/* What flash_attention (backward = 0) or flash_attention_backward (backward = 1) would run
 * for desc, without running it (flash::explain). q: optional, used only for automatic
 * selection by memory location. *kernel and *reason stay valid until the next
 * flash_explain call on this thread. Fails exactly as the call would. */
FLASH_C_API flash_status flash_explain(const flash_attention_desc* desc, int32_t backward,
                                       const void* q, int32_t* backend, const char** kernel,
                                       const char** reason);

/* Message of the last failed call on this thread ("" if none). Valid until the next
 * call on this thread. */
FLASH_C_API const char* flash_last_error(void);

FLASH_C_API const char* flash_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASH_FLASH_H_ */
