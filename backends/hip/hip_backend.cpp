// The `hip` backend module: device probe, pointer ownership, the one choose() that
// decides both "supported?" and which kernel runs (MFMA on CDNA, portable otherwise),
// and the forward/backward entries (host-memory staging, launch on desc.stream).
// Built as libflashattn_hip.so by hipcc for AMD GPUs, or by nvcc as the hip-on-cuda
// build (portable kernels only); the core loads it with dlopen either way.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "dispatch/backend_adapter.hpp"
#include "dispatch/env_switch.hpp"
#include "dispatch/sequence_arrays.hpp"
#include "kernels.h"
#include "mfma_tiles.h"
#include "portability.h"
#include "portable_tiles.h"
#include "split_kv.h"

#ifndef FLASHATTN_HIP_TARGETS
#define FLASHATTN_HIP_TARGETS ""
#endif

namespace flash::hip {
namespace {

using flash::detail::Choice;
using flash::detail::RuntimeFailure;

// Grids are one-dimensional (x allows 2^31 - 1 blocks; y/z only 65535).
constexpr int64_t kMaxBlocks = (int64_t{1} << 31) - 1;

void check(gpu::Error e, const char* what) {
  if (e != gpu::kSuccess)
    throw RuntimeFailure(std::string("hip backend: ") + what + ": " + gpu::error_string(e));
}

const char* dtype_name(int dtype) {
  return dtype == FLASH_F32 ? "f32" : dtype == FLASH_F16 ? "f16" : "bf16";
}

#if FLASH_HIP_ON_AMD
// Targets this module carries code for ("gfx90a,gfx908").
bool compiled_for(const std::string& arch) {
  const std::string list = std::string(",") + FLASHATTN_HIP_TARGETS + ",";
  return list.find("," + arch + ",") != std::string::npos;
}
#endif

struct Device {
  bool ok = false;
  std::string reason;
  gpu::DeviceInfo info;
};

// A device as choose() and probe() see it; queried once per device id (device
// properties are slow to read on some runtimes, and choose() runs on every call).
Device query_device(int id) {
  Device dev;
  gpu::Error e = gpu::device_info(id, &dev.info);
  if (e != gpu::kSuccess) {
    dev.reason = std::string("cannot query the ") + gpu::kRuntime + " device " +
                 std::to_string(id) + ": " + gpu::error_string(e);
    return dev;
  }
#if FLASH_HIP_ON_AMD
  if (!compiled_for(dev.info.arch)) {
    dev.reason = "AMD device " + dev.info.name + " is " + dev.info.arch +
                 ", but libflashattn_hip.so was built for " + FLASHATTN_HIP_TARGETS +
                 " (rebuild with -DFLASHATTN_HIP_ARCHITECTURES=" + dev.info.arch + ")";
    return dev;
  }
#endif
  dev.ok = true;
  return dev;
}

Device current_device() {
  int count = 0;
  gpu::Error e = gpu::device_count(&count);
  if (e != gpu::kSuccess || count == 0) {
    Device none;
#if FLASH_HIP_ON_AMD
    none.reason = std::string("no HIP device found (hipGetDeviceCount: ") +
                  (e != gpu::kSuccess ? gpu::error_string(e) : "0 devices") +
                  "); the hip backend needs an AMD GPU (built for " + FLASHATTN_HIP_TARGETS + ")";
#else
    none.reason = std::string("no HIP device found (hip-on-cuda build, cudaGetDeviceCount: ") +
                  (e != gpu::kSuccess ? gpu::error_string(e) : "0 devices") + ")";
#endif
    (void)gpu::get_last_error();
    return none;
  }
  int id = 0;
  if ((e = gpu::current_device(&id)) != gpu::kSuccess) {
    Device none;
    none.reason =
        std::string("cannot get the current ") + gpu::kRuntime + " device: " + gpu::error_string(e);
    return none;
  }
  static std::mutex mutex;
  static std::map<int, Device> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(id);
  if (it == cache.end()) it = cache.emplace(id, query_device(id)).first;
  return it->second;
}

// FLASH_HIP_KERNEL=portable forces the portable path on CDNA (to compare the two; =mfma
// or unset: the default). decide() reads it on every call, also where no MFMA path exists.
bool portable_forced() {
  return flash::detail::env_switch("FLASH_HIP_KERNEL", {"portable", "mfma"}) == "portable";
}

// FLASH_HIP_DECODE=0 runs decode shapes on the forward kernels instead of the decode kernel
// (A/B runs; =1 or unset: the default).
bool decode_kernel_off() {
  return flash::detail::env_switch("FLASH_HIP_DECODE", {"0", "1"}) == "0";
}

enum class Path { portable, mfma, decode };
struct Plan {
  Path path;
  int tile_dim;     // padded head dim of the chosen tile
  int decode_rows;  // Path::decode: packed rows per block (portable_tiles.h)
  SplitPlan split;  // forward only: the keys cut into split.splits ranges (split_kv.h)
};

// The one decision: which kernel runs this problem, or why none can.
Choice decide(const flash_problem& p, int direction, Plan* plan) {
  const bool portable = portable_forced();  // checked even where MFMA does not apply
  const Device dev = current_device();
  if (!dev.ok) return Choice::decline(dev.reason);
  if (direction == FLASH_MERGE) {
    if (p.batch * p.seqlen_q > kMaxBlocks)
      return Choice::decline(
          "merge_partials: batch * seqlen_q = " + std::to_string(p.batch * p.seqlen_q) +
          " rows > " + std::to_string(kMaxBlocks) + " (one block per row)");
    return Choice::run(std::string("portable_merge ") + dtype_name(p.dtype) + " on " +
                       dev.info.name);
  }
  const int64_t dim = p.head_dim > p.head_dim_v ? p.head_dim : p.head_dim_v;
  if (dim > kPortableMaxHeadDim)
    return Choice::decline("head_dim " + std::to_string(p.head_dim) + " / head_dim_v " +
                           std::to_string(p.head_dim_v) + ": hip supports up to " +
                           std::to_string(kPortableMaxHeadDim));
  // Every kernel puts (row block, head, batch) on grid x; the smallest row block is 16.
  const auto blocks = [&](int64_t seq, int64_t heads) {
    return static_cast<double>((seq + 15) / 16) * static_cast<double>(heads) *
           static_cast<double>(p.batch);
  };
  const double grid = direction == FLASH_FORWARD ? blocks(p.seqlen_q, p.heads_q)
                                                 : std::max(blocks(p.seqlen_q, p.heads_q),
                                                            blocks(p.seqlen_kv, p.heads_kv));
  if (grid > static_cast<double>(kMaxBlocks))
    return Choice::decline("batch * heads * seqlen too large for one hip grid (" +
                           std::to_string(static_cast<long long>(grid)) + " blocks of 16 rows > " +
                           std::to_string(kMaxBlocks) + ")");

  bool mfma = false;
#if FLASHATTN_HIP_MFMA
  mfma = p.dtype != FLASH_F32 && dim <= kMfmaMaxHeadDim && dev.info.wave_size == 64 &&
         (dev.info.arch == "gfx90a" || dev.info.arch == "gfx908") && !portable;
#else
  (void)portable;
#endif
  // Decode: few query rows per kv head (GQA heads x query tokens), on every device.
  const int64_t rows_per_kv_head = p.seqlen_q * (p.heads_q / p.heads_kv);
  const int decode =
      direction == FLASH_FORWARD && !decode_kernel_off() ? decode_rows(rows_per_kv_head) : 0;
  Plan chosen{decode ? Path::decode : mfma ? Path::mfma : Path::portable, 0, decode, {}};
  std::string name;
  int64_t rows_per_block = 1;  // query rows of one forward block
  const auto take = [&](auto t) {
    chosen.tile_dim = decltype(t)::kDim;
    rows_per_block = decltype(t)::kRowsPerBlock;
  };
  if (chosen.path == Path::mfma) {
    with_mfma_tile(dim, take);
    name = "mfma32x32x8_d" + std::to_string(chosen.tile_dim);
  } else {
    with_portable_tile(dim, take);
    name = (decode ? "portable_decode_d" : "portable_fma_d") + std::to_string(chosen.tile_dim) +
           (decode ? "_r" + std::to_string(decode) : "");
  }
  if (direction == FLASH_FORWARD) {
    // Blocks of the unsplit grid: (row block, head, sequence), or for the decode kernel
    // (row chunk, kv head, sequence).
    const int64_t forward_blocks =
        decode ? (rows_per_kv_head + decode - 1) / decode * p.heads_kv * p.batch
               : (p.seqlen_q + rows_per_block - 1) / rows_per_block * p.heads_q * p.batch;
    const int64_t partial_bytes =
        p.batch * p.seqlen_q * p.heads_q * (p.head_dim_v + 1) * int64_t{sizeof(float)};
    chosen.split = plan_split_kv(forward_blocks, dev.info.compute_units, p.seqlen_kv, partial_bytes,
                                 flash::detail::env_positive_int("FLASH_HIP_SPLITS"));
    // (Only a forced split can reach the grids' limits: the merge's x is batch * seqlen_q.)
    if (static_cast<double>(forward_blocks) * static_cast<double>(chosen.split.splits) >
            static_cast<double>(kMaxBlocks) ||
        p.batch * p.seqlen_q > kMaxBlocks)
      chosen.split = SplitPlan{};
    if (chosen.split.splits > 1) name += " split-kv(" + std::to_string(chosen.split.splits) + ")";
  }
  // Packed batches, cache lengths and paged caches run on the same kernels (each block
  // in its sequence's rows); the name says which, for FLASH_LOG.
  if (p.cu_seqlens_q || p.cu_seqlens_kv) name += " packed";
  if (p.seqlens_kv) name += " cache-lengths";
  if (p.block_table) name += " paged(page " + std::to_string(p.page_size) + ")";
  if (plan) *plan = chosen;
  return Choice::run(name + " " + dtype_name(p.dtype) + " on " + dev.info.name + " (" +
                     dev.info.arch + ")");
}

Plan plan_or_throw(const flash_problem& p, int direction) {
  Plan plan{};
  const Choice c = decide(p, direction, &plan);
  if (!c.ok) throw Error("hip backend cannot run this problem: " + c.reason);
  return plan;
}

KernelProblem to_kernel_problem(const flash_problem& p) {
  KernelProblem k{};
  k.batch = p.batch;
  k.seqlen_q = p.seqlen_q;
  k.seqlen_kv = p.seqlen_kv;
  k.heads_q = p.heads_q;
  k.heads_kv = p.heads_kv;
  k.head_dim = p.head_dim;
  k.head_dim_v = p.head_dim_v;
  k.group = p.heads_q / p.heads_kv;
  for (int a = 0; a < 3; ++a) {
    k.q_stride[a] = p.q_stride[a];
    k.k_stride[a] = p.k_stride[a];
    k.v_stride[a] = p.v_stride[a];
    k.o_stride[a] = p.o_stride[a];
  }
  // A window of seqlen_q + seqlen_kv or more hides nothing: store it as unbounded (-1),
  // so no kernel evaluates diag ± window near INT64_MAX. Keeping every comparison
  // overflow-free in source was not enough: nvcc's optimiser re-associated
  // `cap < j0 - shift` in rows_seeing into an overflowing sum (hip-on-cuda dk/dv were 0).
  const auto unbounded_if_huge = [&](int64_t w) {
    return w >= p.seqlen_q + p.seqlen_kv ? int64_t{-1} : w;
  };
  k.window_left = unbounded_if_huge(p.window_left);
  k.window_right = unbounded_if_huge(p.window_right);
  k.causal = p.causal;
  k.scale = p.scale;
  k.softcap = p.softcap;
  k.scale_log2 = p.scale * kLog2e;
  k.cu_seqlens_q = p.cu_seqlens_q;
  k.cu_seqlens_kv = p.cu_seqlens_kv;
  k.seqlens_kv = p.seqlens_kv;
  k.block_table = p.block_table;
  k.page_size = p.page_size;
  k.pages_per_seq = p.pages_per_seq;
  k.num_pages = p.num_pages;
  return k;
}

// FLASH_CHECK=1: device sequence arrays copied to the host and checked like host arrays
// (dispatch/sequence_arrays.hpp; this synchronises).
void flash_check_device_arrays(const flash_problem& p) {
  flash::detail::check_device_sequence_arrays(
      p, [](const int32_t* a) { return gpu::is_device_pointer(a); },
      [](int32_t* dst, const int32_t* src, size_t count) {
        check(gpu::copy_to_host(dst, src, count * sizeof(int32_t), nullptr),
              "FLASH_CHECK: copying the sequence arrays to the host");
        check(gpu::synchronize(nullptr), "FLASH_CHECK: copying the sequence arrays to the host");
      });
}

// Elements spanned by a [batch, seq, heads, dim] view with these strides.
size_t span_elems(const int64_t* stride, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  if (batch == 0 || seq == 0 || heads == 0 || dim == 0) return 0;
  return static_cast<size_t>((batch - 1) * stride[0] + (seq - 1) * stride[1] +
                             (heads - 1) * stride[2] + dim);
}

// Host tensors are copied through device memory (synchronously); device tensors are
// used in place. Frees its buffers on every path.
class Staging {
 public:
  explicit Staging(gpu::Stream s) : stream_(s) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    for (auto& b : buffers_) (void)gpu::free_device(b.device);
  }

  // Returns a device pointer for p (input copied in; output copied back by finish()).
  template <class P>
  P* on_device(P* p, size_t bytes, bool output) {
    if (p == nullptr || bytes == 0 || gpu::is_device_pointer(p)) return p;
    void* d = nullptr;
    check(gpu::malloc_device(&d, bytes), "staging a host tensor (device allocation)");
    buffers_.push_back({d, const_cast<void*>(static_cast<const void*>(p)), bytes, output});
    // Outputs are copied in too: a strided output has gaps the kernels never write.
    check(gpu::copy_to_device(d, p, bytes, stream_), "staging a host tensor (copy in)");
    return static_cast<P*>(d);
  }

  void finish() {
    for (auto& b : buffers_)
      if (b.output) check(gpu::copy_to_host(b.host, b.device, b.bytes, stream_), "copy back");
    if (!buffers_.empty()) check(gpu::synchronize(stream_), "synchronizing staged copies");
  }

 private:
  struct Buffer {
    void* device;
    void* host;
    size_t bytes;
    bool output;
  };
  gpu::Stream stream_;
  std::vector<Buffer> buffers_;
};

size_t dtype_bytes(int dtype) { return dtype == FLASH_F32 ? 4 : 2; }

// Whether every K and V row of p (at device addresses k, v) starts 16-byte aligned and
// both head dims are whole 16-byte pieces (portable_kv_tile.h: 16-byte loads).
bool rows_are_16_byte_pieces(const flash_problem& p, const void* k, const void* v) {
  const int64_t w = 16 / static_cast<int64_t>(dtype_bytes(p.dtype));  // elements per piece
  bool ok = p.head_dim % w == 0 && p.head_dim_v % w == 0 &&
            reinterpret_cast<uintptr_t>(k) % 16 == 0 && reinterpret_cast<uintptr_t>(v) % 16 == 0;
  for (int a = 0; a < 3; ++a) ok = ok && p.k_stride[a] % w == 0 && p.v_stride[a] % w == 0;
  return ok;
}

// The split-KV partials' device memory: one buffer per (device, stream), kept for later
// calls (a steady workload allocates nothing) and grown when a launch needs more, the old
// one freed once its stream has finished with it. Held (lock) until the forward's two
// launches are queued, so host threads sharing a stream do not interleave them.
struct SplitWorkspace {
  float* ptr = nullptr;
  std::unique_lock<std::mutex> lock;
};
SplitWorkspace split_workspace(gpu::Stream stream, size_t bytes) {
  struct Slot {
    std::mutex mutex;
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  static std::mutex map_mutex;
  static std::map<std::pair<int, gpu::Stream>, Slot> slots;
  int device = 0;
  check(gpu::current_device(&device), "split-kv workspace (current device)");
  Slot* slot = nullptr;
  {
    std::lock_guard<std::mutex> guard(map_mutex);
    slot = &slots[{device, stream}];  // std::map: the slot's address is stable
  }
  SplitWorkspace w;
  w.lock = std::unique_lock<std::mutex>(slot->mutex);
  if (slot->bytes < bytes) {
    if (slot->ptr != nullptr) {
      check(gpu::synchronize(stream), "split-kv workspace (waiting to grow it)");
      check(gpu::free_device(slot->ptr), "split-kv workspace (free)");
      slot->ptr = nullptr, slot->bytes = 0;
    }
    check(gpu::malloc_device(&slot->ptr, bytes), "split-kv workspace (device allocation)");
    slot->bytes = bytes;
  }
  w.ptr = static_cast<float*>(slot->ptr);
  return w;
}

// The problem the kernels see, its arrays in device memory (host arrays staged).
KernelProblem staged_kernel_problem(const flash_problem& p, Staging& st) {
  KernelProblem k = to_kernel_problem(p);
  const size_t seqs = static_cast<size_t>(p.batch), ints = sizeof(int32_t);
  k.cu_seqlens_q = st.on_device(p.cu_seqlens_q, ints * (seqs + 1), false);
  k.cu_seqlens_kv = st.on_device(p.cu_seqlens_kv, ints * (seqs + 1), false);
  k.seqlens_kv = st.on_device(p.seqlens_kv, ints * seqs, false);
  k.block_table =
      st.on_device(p.block_table, ints * seqs * static_cast<size_t>(p.pages_per_seq), false);
  return k;
}

struct HipBackend {
  static const char* name() { return "hip"; }

  static bool probe(std::string& reason, std::string& detail) {
    const Device dev = current_device();
    if (!dev.ok) {
      reason = dev.reason;
      return false;
    }
    detail = dev.info.name + " (" + dev.info.arch + ", wave" + std::to_string(dev.info.wave_size) +
             ", " + gpu::kRuntime +
#if FLASHATTN_HIP_MFMA
             ", MFMA and portable kernels"
#else
             ", portable kernels"
#endif
             + ")";
    return true;
  }

  static bool owns_pointer(const void* p) { return gpu::is_device_pointer(p); }

  static Choice choose(const flash_problem& p, int direction) {
    return decide(p, direction, nullptr);
  }

  static void forward(const flash_problem& p, const void* q, const void* k, const void* v,
                      void* o) {
    const Plan plan = plan_or_throw(p, FLASH_FORWARD);
    flash_check_device_arrays(p);
    gpu::Stream stream = static_cast<gpu::Stream>(p.stream);
    const size_t eb = dtype_bytes(p.dtype);
    const auto x = flash::detail::sequence_extents(p, 0);
    Staging st(stream);
    ForwardArgs a{};
    a.q = st.on_device(q, eb * span_elems(p.q_stride, x.q_batch, x.q_rows, p.heads_q, p.head_dim),
                       false);
    a.k = st.on_device(
        k, eb * span_elems(p.k_stride, x.kv_batch, x.kv_rows, p.heads_kv, p.head_dim), false);
    a.v = st.on_device(
        v, eb * span_elems(p.v_stride, x.kv_batch, x.kv_rows, p.heads_kv, p.head_dim_v), false);
    a.o = st.on_device(o, eb * span_elems(p.o_stride, x.q_batch, x.q_rows, p.heads_q, p.head_dim_v),
                       true);
    a.lse = st.on_device(p.lse, sizeof(float) * x.lse_count, true);
    KernelProblem kp = staged_kernel_problem(p, st);
    kp.vector_kv = rows_are_16_byte_pieces(p, a.k, a.v);
    SplitWorkspace workspace;
    if (plan.split.splits > 1) {  // f32 partials: o then lse (split_kv.h)
      kp.kv_splits = plan.split.splits;
      kp.split_keys = plan.split.split_keys;
      const size_t rows = static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q),
                   splits = static_cast<size_t>(kp.kv_splits);
      workspace = split_workspace(
          stream, sizeof(float) * splits * rows * static_cast<size_t>(p.head_dim_v + 1));
      a.o_partial = workspace.ptr;
      a.lse_partial = workspace.ptr + splits * rows * static_cast<size_t>(p.head_dim_v);
    }
    gpu::Error e = gpu::kSuccess;
#if FLASHATTN_HIP_MFMA
    if (plan.path == Path::mfma) e = launch_mfma_forward(kp, p.dtype, a, stream);
#endif
    if (plan.path == Path::portable) e = launch_portable_forward(kp, p.dtype, a, stream);
    if (plan.path == Path::decode)
      e = launch_portable_decode(kp, p.dtype, plan.decode_rows, a, stream);
    check(e, "forward kernel launch");
    if (kp.kv_splits > 1)
      check(launch_split_merge(kp, p.dtype, a, stream), "split-kv merge launch");
    st.finish();
  }

  static void backward(const flash_problem& p, const void* q, const void* k, const void* v,
                       const void* o, const void* dout, const float* lse, void* dq, void* dk,
                       void* dv) {
    const Plan plan = plan_or_throw(p, FLASH_BACKWARD);
    flash_check_device_arrays(p);
    gpu::Stream stream = static_cast<gpu::Stream>(p.stream);
    const size_t eb = dtype_bytes(p.dtype);
    const auto x = flash::detail::sequence_extents(p, 0);
    const size_t q_bytes = eb * span_elems(p.q_stride, x.q_batch, x.q_rows, p.heads_q, p.head_dim);
    const size_t k_bytes =
        eb * span_elems(p.k_stride, x.kv_batch, x.kv_rows, p.heads_kv, p.head_dim);
    const size_t v_bytes =
        eb * span_elems(p.v_stride, x.kv_batch, x.kv_rows, p.heads_kv, p.head_dim_v);
    const size_t o_bytes =
        eb * span_elems(p.o_stride, x.q_batch, x.q_rows, p.heads_q, p.head_dim_v);
    Staging st(stream);
    BackwardArgs a{};
    a.q = st.on_device(q, q_bytes, false);
    a.k = st.on_device(k, k_bytes, false);
    a.v = st.on_device(v, v_bytes, false);
    a.o = st.on_device(o, o_bytes, false);
    a.dout = st.on_device(dout, o_bytes, false);
    a.lse = st.on_device(lse, sizeof(float) * x.lse_count, false);
    a.dq = st.on_device(dq, q_bytes, true);
    a.dk = st.on_device(dk, k_bytes, true);
    a.dv = st.on_device(dv, v_bytes, true);
    const KernelProblem kp = staged_kernel_problem(p, st);
    gpu::Error e = gpu::kSuccess;
#if FLASHATTN_HIP_MFMA
    if (plan.path == Path::mfma) e = launch_mfma_backward(kp, p.dtype, a, stream);
#endif
    if (plan.path == Path::portable) e = launch_portable_backward(kp, p.dtype, a, stream);
    check(e, "backward kernel launch");
    st.finish();
  }

  static void merge(const flash_problem& p, int64_t parts, const void* o_parts,
                    const float* lse_parts, void* o, float* lse) {
    const Choice c = decide(p, FLASH_MERGE, nullptr);
    if (!c.ok) throw Error("hip backend cannot merge: " + c.reason, Error::Kind::unsupported);
    gpu::Stream stream = static_cast<gpu::Stream>(p.stream);
    const size_t eb = dtype_bytes(p.dtype);
    // Packed rows: total_q is known exactly when cu_seqlens_q is host memory (the only
    // case that stages); device arrays keep every pointer in place.
    const bool packed = p.cu_seqlens_q != nullptr;
    const int64_t rows = packed ? std::max<int64_t>(p.total_q, 0) : p.batch * p.seqlen_q;
    const size_t part_elems = static_cast<size_t>(rows * p.heads_q * p.head_dim_v);
    Staging st(stream);
    MergeArgs a{};
    a.o_parts = st.on_device(o_parts, eb * part_elems * static_cast<size_t>(parts), false);
    a.lse_parts = st.on_device(
        lse_parts, sizeof(float) * static_cast<size_t>(rows * p.heads_q * parts), false);
    a.o = st.on_device(o,
                       eb * span_elems(p.o_stride, packed ? 1 : p.batch, packed ? rows : p.seqlen_q,
                                       p.heads_q, p.head_dim_v),
                       true);
    a.lse = st.on_device(lse, sizeof(float) * static_cast<size_t>(rows * p.heads_q), true);
    MergeProblem m{};
    m.batch = p.batch;
    m.seqlen_q = p.seqlen_q;
    m.heads_q = p.heads_q;
    m.head_dim_v = p.head_dim_v;
    m.parts = parts;
    for (int i = 0; i < 3; ++i) m.o_stride[i] = p.o_stride[i];
    m.cu_seqlens_q =
        st.on_device(p.cu_seqlens_q, sizeof(int32_t) * static_cast<size_t>(p.batch + 1), false);
    check(launch_portable_merge(m, p.dtype, a, stream), "merge kernel launch");
    st.finish();
  }
};

}  // namespace
}  // namespace flash::hip

extern "C" __attribute__((visibility("default"))) const flash_backend_module*
flash_backend_module_v1(void) {
  return flash::detail::make_module<flash::hip::HipBackend>();
}
