/* The interface between the core library and a backend, as plain C.
 *
 * Every backend (reference, cpu built in; cuda, hip loaded with dlopen from
 * libflashattn_<name>.so) is one flash_backend_module. A C ABI because GPU modules
 * are separate shared objects: no C++ exception or std:: type crosses it.
 *
 * Invariants the core guarantees before calling a backend:
 *  - the problem is validated (sizes, GQA divisibility, strides, scale, softcap,
 *    window) and resolved: head_dim_v, scale and all strides are filled in;
 *  - seqlen_q > 0 and batch > 0 (empty problems never reach a backend);
 *  - pointers are non-null (lse only when requested).
 */
#ifndef FLASH_DISPATCH_MODULE_ABI_H_
#define FLASH_DISPATCH_MODULE_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASH_MODULE_ABI_VERSION 3
#define FLASH_MODULE_MESSAGE_LEN 512

/* Storage type codes; equal to the values of flash::DType. */
enum { FLASH_F32 = 0, FLASH_F16 = 1, FLASH_BF16 = 2 };

/* Status codes of module calls (and of the public C API). */
enum {
  FLASH_OK = 0,
  FLASH_INVALID_ARGUMENT = 1, /* bad descriptor field or pointer */
  FLASH_UNSUPPORTED = 2,      /* backend cannot run this problem or is unavailable */
  FLASH_RUNTIME_ERROR = 3     /* e.g. a CUDA error */
};

enum { FLASH_FORWARD = 0, FLASH_BACKWARD = 1, FLASH_MERGE = 2 };

/* A validated, fully resolved problem. Strides are in elements: [batch, seq, head]. */
typedef struct flash_problem {
  int64_t batch, seqlen_q, seqlen_kv, heads_q, heads_kv, head_dim, head_dim_v;
  int32_t dtype;                     /* FLASH_F32 / FLASH_F16 / FLASH_BF16 */
  int32_t causal;                    /* 0 or 1 */
  float scale;                       /* resolved: > 0 and finite */
  float softcap;                     /* 0 = off, else > 0 */
  int64_t window_left, window_right; /* -1 = unbounded */
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
  float* lse; /* optional output [batch, heads_q, seqlen_q] */
  void* stream;
  int32_t nondeterministic; /* backward: 0 = bitwise reproducible (zero-initialised default),
                               1 = unordered atomic accumulation allowed */
  /* Inference fields (flash.hpp), null / 0 when unused; the arrays live where q lives.
   * Validated: page_size, pages_per_seq, num_pages > 0 with block_table; block_table
   * never with cu_seqlens_kv; seqlens_kv never with cu_seqlens_kv; backward: neither
   * seqlens_kv nor block_table. Host arrays are content-checked (sequence_arrays.hpp);
   * a GPU kernel must still clamp lengths to seqlen_q / seqlen_kv and skip page ids
   * outside [0, num_pages), as device arrays are not checked unless FLASH_CHECK=1. */
  const int32_t* cu_seqlens_q;  /* [batch + 1]: q, o, dout, dq are [total_q, heads, dim] */
  const int32_t* cu_seqlens_kv; /* [batch + 1]: k, v, dk, dv are [total_kv, heads, dim] */
  const int32_t* seqlens_kv;    /* [batch]: keys 0 .. seqlens_kv[b]-1 of each sequence */
  const int32_t* block_table;   /* [batch, pages_per_seq] page ids */
  int64_t page_size, pages_per_seq, num_pages;
  /* cu_seqlens_q[batch] / cu_seqlens_kv[batch] when that array is in host memory (the
   * packed row counts), else -1 (device arrays; the kernels read cu[batch]). */
  int64_t total_q, total_kv;
} flash_problem;

typedef struct flash_message {
  char text[FLASH_MODULE_MESSAGE_LEN];
} flash_message;

typedef struct flash_backend_module {
  int abi_version;  /* FLASH_MODULE_ABI_VERSION */
  const char* name; /* "cpu", "cuda", ... */
  /* 1 if usable on this machine; else 0 and reason says why. detail: device, ISA. */
  int (*probe)(flash_message* reason, flash_message* detail);
  /* 1 if p is memory this backend's device owns (device memory); 0 otherwise. */
  int (*owns_pointer)(const void* p);
  /* One decision: FLASH_OK and the kernel's name, or FLASH_UNSUPPORTED and why. */
  int (*choose)(const flash_problem* problem, int direction, flash_message* kernel_or_reason);
  int (*forward)(const flash_problem* problem, const void* q, const void* k, const void* v, void* o,
                 flash_message* error);
  int (*backward)(const flash_problem* problem, const void* q, const void* k, const void* v,
                  const void* o, const void* dout, const float* lse, void* dq, void* dk, void* dv,
                  flash_message* error);
  /* merge_partials (flash.hpp); choose() is asked first with direction FLASH_MERGE. */
  int (*merge)(const flash_problem* problem, int64_t parts, const void* o_parts,
               const float* lse_parts, void* o, float* lse, flash_message* error);
} flash_backend_module;

/* Symbol every loadable module exports. */
typedef const flash_backend_module* (*flash_backend_module_entry)(void);
#define FLASH_MODULE_ENTRY_SYMBOL "flash_backend_module_v1"

#ifdef __cplusplus
}
#endif

#endif /* FLASH_DISPATCH_MODULE_ABI_H_ */
