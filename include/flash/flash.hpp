// libflashattn public C++ API.
//
// Exact attention O = softmax(Q·Kᵀ·scale)·V computed tile by tile with online
// softmax (FlashAttention), so no seqlen_q × seqlen_kv matrix is ever stored.
// One call, dispatched at run time to the reference, CPU, CUDA or HIP backend.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(_WIN32)
#define FLASH_API __declspec(dllexport)
#else
#define FLASH_API __attribute__((visibility("default")))
#endif

namespace flash {

// Storage type of q, k, v, o (and dout, dq, dk, dv). Accumulation is f32 or better.
enum class DType { f32, f16, bf16 };

enum class Backend { automatic, reference, cpu, cuda, hip };

// Element strides. All zero means packed [batch, seq, heads, dim] (FlashAttention's
// layout). The last dimension (head_dim or head_dim_v) is always contiguous.
struct Strides {
  int64_t batch = 0, seq = 0, head = 0;
};

struct AttentionDesc {
  int64_t batch = 1;
  int64_t seqlen_q = 0;
  int64_t seqlen_kv = 0;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;    // heads_q % heads_kv == 0 (GQA/MQA)
  int64_t head_dim = 0;    // of q and k
  int64_t head_dim_v = 0;  // of v and o; 0 = head_dim
  DType dtype = DType::f32;
  float scale = 0.0f;  // 0 = 1/sqrt(head_dim)
  bool causal = false;
  // Mask (FlashAttention >= 2.1, bottom-right aligned): with
  // diag = i + seqlen_kv - seqlen_q, row i sees key j iff
  // (!causal || j <= diag) && (window_left < 0 || j >= diag - window_left)
  //                        && (window_right < 0 || j <= diag + window_right).
  int64_t window_left = -1;   // -1 = unbounded
  int64_t window_right = -1;  // -1 = unbounded
  float softcap = 0.0f;       // 0 = off; else s <- softcap * tanh(s / softcap) after scaling
  // Backward: dout uses o_stride, dq q_stride, dk k_stride, dv v_stride.
  Strides q_stride, k_stride, v_stride, o_stride;
  float* lse = nullptr;  // optional output, f32 [batch, heads_q, seqlen_q], natural log
  Backend backend = Backend::automatic;
  void* stream = nullptr;  // cudaStream_t / hipStream_t for GPU backends; null = default
  // Backward: true = bitwise-identical dq/dk/dv run to run. false lets the cuda backend
  // add dQ partials with unordered f32 atomics (less workspace; see backends/cuda/README.md).
  // The cpu, hip and reference backends are deterministic either way.
  bool deterministic = true;

  // ---- Inference: packed batches, KV caches, paged caches (forward; see README) ----
  // Packed variable-length batches (FlashAttention's varlen): when set, q/o (resp. k/v)
  // are [total, heads, dim] (seq and head strides honoured, batch stride unused) and
  // sequence b owns rows cu[b] .. cu[b+1]-1; batch = number of sequences, seqlen_q /
  // seqlen_kv = the maximum lengths. With cu_seqlens_q, lse is f32 [heads_q, total_q].
  const int32_t* cu_seqlens_q = nullptr;   // [batch + 1], cu[0] = 0, non-decreasing
  const int32_t* cu_seqlens_kv = nullptr;  // [batch + 1]
  // KV cache lengths: sequence b sees keys 0 .. seqlens_kv[b]-1 of its seqlen_kv rows.
  const int32_t* seqlens_kv = nullptr;  // [batch]
  // Paged K/V: k and v are [num_pages, page_size, heads_kv, dim] (k_stride.batch /
  // v_stride.batch = the page stride); key j of sequence b is row j % page_size of page
  // block_table[b * pages_per_seq + j / page_size]; seqlen_kv <= pages_per_seq * page_size.
  const int32_t* block_table = nullptr;  // [batch, pages_per_seq]
  int64_t page_size = 0, pages_per_seq = 0, num_pages = 0;
  // Masks align per sequence: diag = i + Sk_b - Sq_b with that sequence's lengths.
  // The arrays live where q lives (device memory for GPU backends). The backward
  // accepts cu_seqlens_q/kv; seqlens_kv and block_table are forward-only.
};

// Thrown for every bad input or unavailable backend. The message names the field
// or backend, the value, and what is allowed.
class FLASH_API Error : public std::runtime_error {
 public:
  // What kind of failure; the C API maps it to its status code.
  enum class Kind { invalid_argument, unsupported, runtime };

  explicit Error(const std::string& message, Kind kind = Kind::invalid_argument)
      : std::runtime_error(message), kind_(kind) {}
  Kind kind() const noexcept { return kind_; }

 private:
  Kind kind_;
};

// Forward. Rows that see no key get o = 0 and lse = -inf. seqlen_q = 0 is a no-op.
FLASH_API void attention(const AttentionDesc& desc, const void* q, const void* k, const void* v,
                         void* o);

// Backward. lse is the forward's (natural log). dk/dv are summed over the query
// heads that share a KV head.
FLASH_API void attention_backward(const AttentionDesc& desc, const void* q, const void* k,
                                  const void* v, const void* o, const void* dout, const float* lse,
                                  void* dq, void* dk, void* dv);

// Combines attention of the same queries over disjoint key sets (split-KV, caches
// merged with new tokens): lse = ln sum_i exp(lse_i), o = sum_i exp(lse_i - lse) o_i.
// o_parts: `parts` outputs stacked, each packed the way attention() writes o for desc
// when o_stride is packed ([batch, seqlen_q, heads_q, head_dim_v], or [total_q, heads_q,
// head_dim_v] with cu_seqlens_q), in desc.dtype. lse_parts: f32, `parts` lse arrays in
// desc's lse layout, stacked. o: desc.dtype with desc.o_stride; lse: optional (null).
// Parts with lse = -inf contribute nothing; all -inf gives o = 0, lse = -inf.
// Uses desc's sizes, dtype, o_stride, cu_seqlens_q, backend and stream; masks and k/v
// fields are ignored.
FLASH_API void merge_partials(const AttentionDesc& desc, int64_t parts, const void* o_parts,
                              const float* lse_parts, void* o, float* lse);

struct BackendInfo {
  Backend backend;
  bool available;
  std::string reason;  // why not available
  std::string detail;  // device name, SIMD target, ...
};

// What attention() (or attention_backward(), with backward = true) would run for this
// descriptor, without running it: the backend, its kernel/config name, and why that
// backend. q (optional) is used only for automatic selection by memory location.
// Throws flash::Error exactly as the call would (pointers other than q unchecked).
struct Plan {
  Backend backend;
  std::string kernel;
  std::string reason;
};
FLASH_API Plan explain(const AttentionDesc& desc, bool backward = false, const void* q = nullptr);

// Every backend this build knows, available or not.
FLASH_API std::vector<BackendInfo> backends();

// "automatic", "reference", "cpu", "cuda", "hip" / "f32", "f16", "bf16".
FLASH_API const char* to_string(Backend backend);
FLASH_API const char* to_string(DType dtype);

// Library version, "MAJOR.MINOR.PATCH".
FLASH_API const char* version();

}  // namespace flash
