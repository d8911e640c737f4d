// Validation rules (see validate.hpp). Element counts and byte spans are checked
// for int64 overflow before anything multiplies them, so a backend can index with
// int64 offsets without further checks.
#include "dispatch/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "dispatch/registry.hpp"
#include "dispatch/sequence_arrays.hpp"

namespace flash::detail {
namespace {

[[noreturn]] void fail(const std::string& field, const std::string& value,
                       const std::string& allowed) {
  throw Error("flash: " + field + " = " + value + " is invalid; " + allowed);
}

// Numbers and pointers in messages go through snprintf, not iostreams: a process may hold
// a second (static) libstdc++ whose locale facets make `ostream << double` crash when it
// was loaded first (seen under Python with torch 2.11 on the device; bench/RESULTS.md).
std::string str(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", x);
  return text;
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(what, str(static_cast<double>(a)) + " x " + str(static_cast<double>(b)),
         "the element count overflows int64");
  return r;
}

void require_at_least(const char* field, int64_t value, int64_t min) {
  if (value < min) fail(field, std::to_string(value), "must be >= " + std::to_string(min));
}

size_t dtype_bytes(int32_t dtype) { return dtype == FLASH_F32 ? 4 : 2; }

// One tensor's shape [batch, seq, heads, dim] and its (resolved) strides.
struct TensorView {
  const char* name;  // "q", "k", ...
  const char* stride_field;
  int64_t batch, seq, heads, dim;
  int64_t* stride;  // [3]: batch, seq, head

  // Packed [batch, seq, heads, dim] when the user gave all-zero strides.
  void resolve(const Strides& given) {
    if (given.batch == 0 && given.seq == 0 && given.head == 0) {
      stride[2] = dim;
      stride[1] = checked_mul(heads, dim, name);
      stride[0] = checked_mul(seq, stride[1], name);
      return;
    }
    stride[0] = given.batch;
    stride[1] = given.seq;
    stride[2] = given.head;
    check_layout();
  }

  // Strides must be non-negative and must not make two elements share an address:
  // sorted by stride, each dimension must skip past the whole extent of the one
  // below it (the contiguous last dimension is the innermost).
  void check_layout() const {
    const char* dim_names[3] = {".batch", ".seq", ".head"};
    const int64_t extents[3] = {batch, seq, heads};
    struct Dim {
      int64_t stride, extent;
      int index;
    } dims[3];
    int n = 0;
    for (int i = 0; i < 3; ++i) {
      if (stride[i] < 0)
        fail(std::string(stride_field) + dim_names[i], std::to_string(stride[i]),
             "strides are element counts and must be >= 0");
      if (extents[i] > 1) dims[n++] = {stride[i], extents[i], i};
    }
    // An empty tensor has no two elements to overlap (torch reports e.g. {0, D, 0} for
    // the bhsd strides of [B, H, 0, D]).
    if (batch == 0 || seq == 0 || heads == 0) return;
    for (int i = 1; i < n; ++i)  // insertion sort of at most 3 entries
      for (int j = i; j > 0 && dims[j].stride < dims[j - 1].stride; --j)
        std::swap(dims[j], dims[j - 1]);
    int64_t covered = dim;  // the contiguous last dimension spans `dim` elements
    for (int i = 0; i < n; ++i) {
      if (dims[i].stride < covered)
        fail(std::string(stride_field) + dim_names[dims[i].index], std::to_string(dims[i].stride),
             "must be >= " + std::to_string(covered) +
                 " (the extent it skips over); overlapping layouts are not allowed");
      covered = checked_mul(dims[i].stride, dims[i].extent, stride_field);
    }
  }

  int64_t elements() const {
    return checked_mul(checked_mul(checked_mul(batch, seq, name), heads, name), dim, name);
  }

  // Bytes from the first to one past the last element (0 when empty).
  int64_t span_bytes(int32_t dtype) const {
    if (elements() == 0) return 0;
    int64_t last = dim - 1;
    const int64_t extents[3] = {batch, seq, heads};
    for (int i = 0; i < 3; ++i) last += checked_mul(extents[i] - 1, stride[i], stride_field);
    return checked_mul(last + 1, static_cast<int64_t>(dtype_bytes(dtype)), name);
  }
};

void require_pointer(const void* p, const TensorView& t, int32_t dtype) {
  if (p == nullptr && t.elements() > 0)
    fail(t.name, "nullptr", "a non-empty tensor needs a valid pointer");
  // Elements are read as float / 16-bit values: a misaligned pointer is undefined
  // behaviour on every backend (GPU backends may require more; they check).
  const auto address = reinterpret_cast<uintptr_t>(p);
  if (address % dtype_bytes(dtype) != 0) {
    char text[32];
    std::snprintf(text, sizeof(text), "%p", p);
    fail(t.name, text,
         "must be aligned to its element size (" + std::to_string(dtype_bytes(dtype)) + " bytes)");
  }
}

struct Range {
  const char* name;
  uintptr_t begin, end;
};

// Outputs must not overlap any other tensor of the call.
void check_no_overlap(const Range* outputs, int n_out, const Range* all, int n_all) {
  for (int i = 0; i < n_out; ++i) {
    const Range& out = outputs[i];
    if (out.begin == out.end) continue;
    for (int j = 0; j < n_all; ++j) {
      const Range& other = all[j];
      if (other.name == out.name || other.begin == other.end) continue;
      if (out.begin < other.end && other.begin < out.end)
        fail(out.name, "a buffer overlapping " + std::string(other.name),
             "outputs must not share memory with inputs or other outputs");
    }
  }
}

Range range_of(const void* p, const TensorView& t, int32_t dtype, bool known = true) {
  auto b = reinterpret_cast<uintptr_t>(p);
  return {t.name, b, p && known ? b + static_cast<uintptr_t>(t.span_bytes(dtype)) : b};
}

// Where a pointer lives: the GPU backend whose device memory it is, else host.
Backend memory_of(const void* ptr) {
  for (Backend gpu : {Backend::cuda, Backend::hip}) {
    const BackendSlot& s = slot(gpu);
    if (s.available && ptr && s.module->owns_pointer(ptr)) return gpu;
  }
  return Backend::automatic;  // host
}

std::string memory_name(Backend where) {
  return where == Backend::automatic ? "host memory"
                                     : std::string(to_string(where)) + " device memory";
}

// The inference fields: scalar rules always; array contents when the arrays are host
// memory (device arrays are the kernels' to clamp, or FLASH_CHECK=1's to copy back).
void validate_sequence_fields(const AttentionDesc& d, flash_problem& p) {
  p.cu_seqlens_q = d.cu_seqlens_q;
  p.cu_seqlens_kv = d.cu_seqlens_kv;
  p.seqlens_kv = d.seqlens_kv;
  p.block_table = d.block_table;
  p.page_size = d.page_size;
  p.pages_per_seq = d.pages_per_seq;
  p.num_pages = d.num_pages;
  p.total_q = p.total_kv = -1;
  if (d.block_table) {
    require_at_least("page_size", d.page_size, 1);
    require_at_least("pages_per_seq", d.pages_per_seq, 1);
    require_at_least("num_pages", d.num_pages, 1);
    if (d.cu_seqlens_kv)
      fail("cu_seqlens_kv", "set together with block_table",
           "a paged cache gives each sequence its keys through block_table (lengths in "
           "seqlens_kv); packed keys (cu_seqlens_kv) cannot also be paged");
    const int64_t capacity = checked_mul(d.pages_per_seq, d.page_size, "pages_per_seq");
    if (d.seqlen_kv > capacity)
      fail("seqlen_kv", std::to_string(d.seqlen_kv),
           "must be <= pages_per_seq * page_size = " + std::to_string(capacity) +
               " (the keys a block_table row can address)");
  } else if (d.page_size != 0 || d.pages_per_seq != 0 || d.num_pages != 0) {
    fail(d.page_size != 0       ? "page_size"
         : d.pages_per_seq != 0 ? "pages_per_seq"
                                : "num_pages",
         std::to_string(d.page_size != 0       ? d.page_size
                        : d.pages_per_seq != 0 ? d.pages_per_seq
                                               : d.num_pages),
         "is set without block_table; page fields must be 0 unless k/v are paged");
  }
  if (d.seqlens_kv && d.cu_seqlens_kv)
    fail("seqlens_kv", "set together with cu_seqlens_kv",
         "each gives the key lengths; use one (cu_seqlens_kv for packed keys, seqlens_kv for a "
         "cache of seqlen_kv rows per sequence)");
  if (!has_sequence_arrays(p)) return;
  // All arrays in one kind of memory (validate_* then checks it is q's).
  const struct {
    const char* name;
    const int32_t* ptr;
  } arrays[] = {{"cu_seqlens_q", d.cu_seqlens_q},
                {"cu_seqlens_kv", d.cu_seqlens_kv},
                {"seqlens_kv", d.seqlens_kv},
                {"block_table", d.block_table}};
  Backend first = Backend::automatic;
  const char* first_name = nullptr;
  for (const auto& a : arrays) {
    if (!a.ptr) continue;
    if (reinterpret_cast<uintptr_t>(a.ptr) % alignof(int32_t) != 0)
      fail(a.name, "a misaligned pointer", "int32 arrays must be aligned to 4 bytes");
    const Backend m = memory_of(a.ptr);
    if (!first_name) {
      first = m;
      first_name = a.name;
    } else if (m != first) {
      fail(a.name, memory_name(m),
           std::string("must be in the same memory as ") + first_name + " (" + memory_name(first) +
               ")");
    }
  }
  if (first != Backend::automatic) return;  // device arrays: checked on the device side
  check_sequence_arrays(p, arrays_of(p));
  if (p.cu_seqlens_q) p.total_q = p.cu_seqlens_q[p.batch];
  if (p.cu_seqlens_kv) p.total_kv = p.cu_seqlens_kv[p.batch];
}

// The arrays live where q lives: a GPU kernel cannot read host arrays, nor the cpu
// backend device ones.
void require_arrays_beside(const flash_problem& p, const void* q) {
  if (!has_sequence_arrays(p) || !q) return;
  const Backend q_memory = memory_of(q);
  for (const auto& [name, ptr] :
       {std::pair<const char*, const int32_t*>{"cu_seqlens_q", p.cu_seqlens_q},
        {"cu_seqlens_kv", p.cu_seqlens_kv},
        {"seqlens_kv", p.seqlens_kv},
        {"block_table", p.block_table}})
    if (ptr && memory_of(ptr) != q_memory)
      fail(name, memory_name(memory_of(ptr)),
           "the arrays live where q lives (" + memory_name(q_memory) + ")");
}

flash_problem validate_common(const AttentionDesc& d) {
  require_at_least("batch", d.batch, 0);
  require_at_least("seqlen_q", d.seqlen_q, 0);
  require_at_least("seqlen_kv", d.seqlen_kv, 0);
  require_at_least("heads_q", d.heads_q, 1);
  require_at_least("heads_kv", d.heads_kv, 1);
  require_at_least("head_dim", d.head_dim, 1);
  require_at_least("head_dim_v", d.head_dim_v, 0);
  if (d.heads_q % d.heads_kv != 0)
    fail("heads_q", std::to_string(d.heads_q),
         "must be a multiple of heads_kv = " + std::to_string(d.heads_kv) + " (GQA/MQA)");
  const int dtype = static_cast<int>(d.dtype);
  if (dtype < 0 || dtype > 2)
    fail("dtype", std::to_string(dtype), "allowed: f32 (0), f16 (1), bf16 (2)");
  const int backend = static_cast<int>(d.backend);
  if (backend < 0 || backend > 4)
    fail("backend", std::to_string(backend), "allowed: automatic, reference, cpu, cuda, hip");
  if (!std::isfinite(d.scale) || d.scale < 0)
    fail("scale", str(d.scale), "must be finite and > 0 (0 = 1/sqrt(head_dim))");
  if (!std::isfinite(d.softcap) || d.softcap < 0)
    fail("softcap", str(d.softcap), "must be finite and > 0 (0 = off)");
  require_at_least("window_left", d.window_left, -1);
  require_at_least("window_right", d.window_right, -1);

  flash_problem p{};
  p.batch = d.batch;
  p.seqlen_q = d.seqlen_q;
  p.seqlen_kv = d.seqlen_kv;
  p.heads_q = d.heads_q;
  p.heads_kv = d.heads_kv;
  p.head_dim = d.head_dim;
  p.head_dim_v = d.head_dim_v == 0 ? d.head_dim : d.head_dim_v;
  p.dtype = dtype;
  p.causal = d.causal ? 1 : 0;
  p.scale =
      d.scale == 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim))) : d.scale;
  p.softcap = d.softcap;
  p.window_left = d.window_left;
  p.window_right = d.window_right;
  p.lse = d.lse;
  p.stream = d.stream;
  p.nondeterministic = d.deterministic ? 0 : 1;
  validate_sequence_fields(d, p);
  return p;
}

struct Views {
  TensorView q, k, v, o;
};

// The [batch, seq] extents a tensor spans: packed rows [1, total] with cu_seqlens (an
// unknown total, device arrays, counts as 1 row: layout checked, spans not known),
// pages [num_pages, page_size] with a block table, else [batch, seqlen].
struct Extent {
  int64_t batch, seq;
};
Extent q_extent(const flash_problem& p) {
  if (!p.cu_seqlens_q) return {p.batch, p.seqlen_q};
  return {1, p.total_q >= 0 ? p.total_q : 1};
}
Extent kv_extent(const flash_problem& p) {
  if (p.block_table) return {p.num_pages, p.page_size};
  if (!p.cu_seqlens_kv) return {p.batch, p.seqlen_kv};
  return {1, p.total_kv >= 0 ? p.total_kv : 1};
}
// False when a tensor's byte span is unknown (packed rows counted on the device).
bool q_span_known(const flash_problem& p) { return !p.cu_seqlens_q || p.total_q >= 0; }
bool kv_span_known(const flash_problem& p) { return !p.cu_seqlens_kv || p.total_kv >= 0; }

// lse entries: [batch, heads_q, seqlen_q], or [heads_q, total_q] with cu_seqlens_q.
int64_t lse_count(const flash_problem& p) {
  if (p.cu_seqlens_q) return checked_mul(p.heads_q, p.total_q >= 0 ? p.total_q : 0, "lse");
  return checked_mul(checked_mul(p.batch, p.heads_q, "lse"), p.seqlen_q, "lse");
}

Views resolve_views(const AttentionDesc& d, flash_problem& p) {
  const Extent qe = q_extent(p), kve = kv_extent(p);
  Views t{
      {"q", "q_stride", qe.batch, qe.seq, p.heads_q, p.head_dim, p.q_stride},
      {"k", "k_stride", kve.batch, kve.seq, p.heads_kv, p.head_dim, p.k_stride},
      {"v", "v_stride", kve.batch, kve.seq, p.heads_kv, p.head_dim_v, p.v_stride},
      {"o", "o_stride", qe.batch, qe.seq, p.heads_q, p.head_dim_v, p.o_stride},
  };
  t.q.resolve(d.q_stride);
  t.k.resolve(d.k_stride);
  t.v.resolve(d.v_stride);
  t.o.resolve(d.o_stride);
  // Byte spans must fit in int64 too (checked inside span_bytes).
  for (const TensorView* view : {&t.q, &t.k, &t.v, &t.o}) view->span_bytes(p.dtype);
  return t;
}

}  // namespace

bool is_empty(const flash_problem& p) { return p.seqlen_q == 0 || p.batch == 0; }

flash_problem validate_descriptor(const AttentionDesc& desc) {
  flash_problem p = validate_common(desc);
  resolve_views(desc, p);
  return p;
}

flash_problem validate_forward(const AttentionDesc& desc, const ForwardArgs& a) {
  flash_problem p = validate_common(desc);
  Views t = resolve_views(desc, p);
  require_pointer(a.q, t.q, p.dtype);
  require_pointer(a.k, t.k, p.dtype);
  require_pointer(a.v, t.v, p.dtype);
  require_pointer(a.o, t.o, p.dtype);
  require_arrays_beside(p, a.q);
  const bool qk = q_span_known(p), kvk = kv_span_known(p);
  const Range all[] = {range_of(a.q, t.q, p.dtype, qk), range_of(a.k, t.k, p.dtype, kvk),
                       range_of(a.v, t.v, p.dtype, kvk), range_of(a.o, t.o, p.dtype, qk)};
  check_no_overlap(all + 3, 1, all, 4);
  if (p.lse) {
    if (reinterpret_cast<uintptr_t>(p.lse) % alignof(float) != 0)
      fail("lse", "a misaligned pointer", "must be aligned to 4 bytes (f32)");
    const int64_t lse_bytes = checked_mul(lse_count(p), static_cast<int64_t>(sizeof(float)), "lse");
    const auto lse_begin = reinterpret_cast<uintptr_t>(p.lse);
    const Range with_lse[] = {all[0],
                              all[1],
                              all[2],
                              all[3],
                              {"lse", lse_begin, lse_begin + static_cast<uintptr_t>(lse_bytes)}};
    check_no_overlap(with_lse + 4, 1, with_lse, 5);
    check_no_overlap(with_lse + 3, 1, with_lse, 5);
  }
  return p;
}

flash_problem validate_backward(const AttentionDesc& desc, const BackwardArgs& a) {
  flash_problem p = validate_common(desc);
  p.lse = nullptr;  // the backward reads the forward's lse argument, never desc.lse
  if (p.block_table)
    fail("block_table", "set in a backward",
         "paged caches are forward-only (inference); the backward takes packed batches "
         "(cu_seqlens_q / cu_seqlens_kv) or dense k/v");
  if (p.seqlens_kv)
    fail("seqlens_kv", "set in a backward",
         "KV-cache lengths are forward-only (inference); the backward takes packed batches "
         "(cu_seqlens_q / cu_seqlens_kv) or dense k/v");
  Views t = resolve_views(desc, p);
  TensorView dout = t.o, dq = t.q, dk = t.k, dv = t.v;
  dout.name = "dout";
  dq.name = "dq";
  dk.name = "dk";
  dv.name = "dv";
  require_pointer(a.q, t.q, p.dtype);
  require_pointer(a.k, t.k, p.dtype);
  require_pointer(a.v, t.v, p.dtype);
  require_pointer(a.o, t.o, p.dtype);
  require_pointer(a.dout, dout, p.dtype);
  require_pointer(a.dq, dq, p.dtype);
  require_pointer(a.dk, dk, p.dtype);
  require_pointer(a.dv, dv, p.dtype);
  require_arrays_beside(p, a.q);
  const int64_t lse_entries = lse_count(p);
  if (a.lse == nullptr && (lse_entries > 0 || p.cu_seqlens_q))
    fail("lse", "nullptr",
         p.cu_seqlens_q ? "the backward needs the forward's lse [heads_q, total_q]"
                        : "the backward needs the forward's lse [batch, heads_q, seqlen_q]");
  if (reinterpret_cast<uintptr_t>(a.lse) % alignof(float) != 0)
    fail("lse", "a misaligned pointer", "must be aligned to 4 bytes (f32)");
  const auto lse_begin = reinterpret_cast<uintptr_t>(a.lse);
  const bool qk = q_span_known(p), kvk = kv_span_known(p);
  const Range all[] = {
      range_of(a.dq, dq, p.dtype, qk),
      range_of(a.dk, dk, p.dtype, kvk),
      range_of(a.dv, dv, p.dtype, kvk),
      range_of(a.q, t.q, p.dtype, qk),
      range_of(a.k, t.k, p.dtype, kvk),
      range_of(a.v, t.v, p.dtype, kvk),
      range_of(a.o, t.o, p.dtype, qk),
      range_of(a.dout, dout, p.dtype, qk),
      {"lse", lse_begin, lse_begin + static_cast<uintptr_t>(checked_mul(lse_entries, 4, "lse"))}};
  check_no_overlap(all, 3, all, 9);
  return p;
}

flash_problem validate_merge(const AttentionDesc& desc, int64_t parts, const MergeArgs& a) {
  flash_problem p = validate_common(desc);
  p.lse = a.lse;
  require_at_least("parts", parts, 0);
  Views t = resolve_views(desc, p);
  // o_parts: parts packed outputs (packed strides, whatever desc.o_stride says).
  TensorView part = t.o;
  part.name = "o_parts";
  part.stride_field = "o_parts";
  int64_t packed[3];
  part.stride = packed;
  part.resolve(Strides{});
  const bool qk = q_span_known(p);
  const int64_t part_elems = part.elements();
  const int64_t parts_elems = checked_mul(part_elems, parts, "o_parts");
  if (parts > 0 && part_elems > 0 && a.o_parts == nullptr)
    fail("o_parts", "nullptr", "a non-empty merge needs the partial outputs");
  require_pointer(a.o_parts, part, p.dtype);
  require_pointer(a.o, t.o, p.dtype);
  const int64_t lse_entries = checked_mul(lse_count(p), parts, "lse_parts");
  if (a.lse_parts == nullptr && (lse_entries > 0 || (p.cu_seqlens_q && parts > 0)))
    fail("lse_parts", "nullptr", "a non-empty merge needs each part's lse");
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"lse_parts", a.lse_parts},
                                  std::pair<const char*, const void*>{"lse", a.lse}})
    if (reinterpret_cast<uintptr_t>(ptr) % alignof(float) != 0)
      fail(name, "a misaligned pointer", "must be aligned to 4 bytes (f32)");
  require_arrays_beside(p, a.o);
  const auto begin = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr); };
  const int64_t bytes = dtype_bytes(p.dtype);
  const Range all[] = {
      range_of(a.o, t.o, p.dtype, qk),
      {"lse", begin(a.lse), begin(a.lse) + (a.lse ? 4 * static_cast<uintptr_t>(lse_count(p)) : 0)},
      {"o_parts", begin(a.o_parts),
       begin(a.o_parts) + static_cast<uintptr_t>(checked_mul(parts_elems, bytes, "o_parts"))},
      {"lse_parts", begin(a.lse_parts),
       begin(a.lse_parts) + static_cast<uintptr_t>(checked_mul(lse_entries, 4, "lse_parts"))}};
  check_no_overlap(all, 2, all, 4);
  return p;
}

}  // namespace flash::detail
