// The `cuda` backend module: device probe, pointer ownership, the one choose() that
// decides both "supported?" and which tile config runs, and the forward/backward
// entries (alignment checks, host-memory staging, launch on desc.stream).
// Built as libflashattn_cuda.so; the core loads it with dlopen.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "bwd_configs.hpp"
#include "cuda_check.hpp"
#include "decode.hpp"
#include "decode_mma_kernel.cuh"
#include "decode_plan.hpp"
#include "device_buffers.hpp"
#include "dispatch/backend_adapter.hpp"
#include "dispatch/env_switch.hpp"
#include "dispatch/sequence_arrays.hpp"
#include "fwd_grid_switches.hpp"
#include "fwd_tail_split.cuh"
#include "host_staging.hpp"
#include "kernel_params.hpp"
#include "merge.hpp"
#include "tile_configs.hpp"
#include "tile_dims.hpp"

namespace flash::cuda {
namespace {

constexpr int kHeadDimStep = 8, kMaxHeadDim = 256;
constexpr const char* kHeadDimRule = "a multiple of 8 from 8 to 256";
constexpr int64_t kMaxSeqlen = int64_t{1} << 30;  // kernels index rows with int

bool supported_head_dim(int64_t d) {
  return d >= kHeadDimStep && d <= kMaxHeadDim && d % kHeadDimStep == 0;
}

const char* dtype_name(int dtype) {
  return dtype == FLASH_F32 ? "f32" : dtype == FLASH_F16 ? "f16" : "bf16";
}
size_t dtype_bytes(int dtype) { return dtype == FLASH_F32 ? 4 : 2; }

// FLASH_CUDA_FWD=mma: the mma.sync forward even where the Hopper one could run (=wgmma or
// unset: the default).
bool fwd_forced_mma() {
  return flash::detail::env_switch("FLASH_CUDA_FWD", {"mma", "wgmma"}) == "mma";
}

// The Hopper forward (fwd_wgmma_kernel.cuh): sm_90a code built, a compute capability
// 9.0 device, f16/bf16 with head dims 33-256 (wgmma_tile_dim), dense or packed batches and cache
// lengths, not problems without keys (seqlen_kv = 0: k and v may be null, and a tensor
// map needs a tensor). FLASH_CUDA_FWD=mma forces the mma.sync kernels (what sm_80 runs;
// fwd_forced_mma).
bool fwd_wgmma_usable(const flash_problem& p, int cc_major, int cc_minor) {
  const bool forced_mma = fwd_forced_mma();
#ifdef FLASHATTN_CUDA_SM90A
  // Head dims up to 32 keep their 32-wide mma.sync tile (half of the 64-wide one unused).
  return p.dtype != FLASH_F32 && tile_dim(p) > 32 && cc_major == 9 && cc_minor == 0 &&
         p.seqlen_kv > 0 && !forced_mma;
#else
  (void)p, (void)cc_major, (void)cc_minor, (void)forced_mma;
  return false;
#endif
}

// Whether a causal mask or a window bounds the keys a row sees (MaskParams::bounded).
bool mask_bounded(const flash_problem& p) {
  return p.causal || p.window_left >= 0 || p.window_right >= 0;
}

// Whether a paged cache runs on the Hopper forward: more query rows (seqlen_q · group)
// than the decode kernel takes, and pages of whole kPagedBoxRows-row boxes (the kernel's
// page fields are ints). Any other paged cache runs on the decode kernel, which takes
// every page size (page 1 included) but reads K/V once per 16 query rows (decode.hpp).
bool fwd_paged_wgmma(const flash_problem& p, bool wgmma) {
  return wgmma && p.block_table != nullptr && p.page_size % kPagedBoxRows == 0 &&
         p.page_size < INT32_MAX && p.pages_per_seq < INT32_MAX && p.num_pages < INT32_MAX &&
         p.seqlen_q * (p.heads_q / p.heads_kv) > kDecodeMaxRows;
}

// Whether a problem's head dims fit the 128 tile's 96-column config (FwdWgmmaConfig<96>).
bool fwd_fits_96_columns(const flash_problem& p) {
  return widest_dim(p) <= FwdWgmmaConfig<96>::kUsedDim;
}

// Whether the Hopper forward runs FwdWgmmaBandConfig's 128-key tile (tile_configs.hpp) at
// tile dim 128: for a banded mask (causal, windows) with at most kFwdBandTileMaxKeys keys,
// an unmasked problem with at most kFwdShortTileMaxKeys (head dims up to 96: the *96 limits),
// and a paged cache (its K/V boxes may then be as wide as 128 rows; on 192-key tiles at most
// 64). FLASH_CUDA_FWD_BAND_TILE=0 / 1 turns it off for all three / on for every problem at
// that dim (tests run both tiles; A/B).
bool fwd_band_tile(const flash_problem& p, bool wgmma) {
  const std::string forced = flash::detail::env_switch("FLASH_CUDA_FWD_BAND_TILE", {"0", "1"});
  if (!wgmma || wgmma_tile_dim(p) != 128 || forced == "0") return false;
  if (fwd_paged_wgmma(p, wgmma) || forced == "1") return true;
  if (fwd_fits_96_columns(p))  // the other tile is the 96-column config
    return p.seqlen_kv <= (mask_bounded(p) ? kFwdBandTileMaxKeys96 : kFwdShortTileMaxKeys96);
  return p.seqlen_kv <= (mask_bounded(p) ? kFwdBandTileMaxKeys : kFwdShortTileMaxKeys);
}

// The head dim of the forward kernel a problem runs: fwd_tile_dim, except that problems of at
// most 96 columns on the 128-wide tile's regular config run its 96-column config
// (FwdWgmmaConfig<96>: the products cut to the used columns); the band tile stays 128 wide.
int fwd_kernel_dim(const flash_problem& p, bool wgmma) {
  const int dim = fwd_tile_dim(p, wgmma);
  if (wgmma && dim == 128 && fwd_fits_96_columns(p) && !fwd_band_tile(p, wgmma)) return 96;
  return dim;
}

// Every switch environment variable checked on every call (choose() runs first in
// forward / backward / merge), whichever kernel the call takes: a bad value fails even
// where its knob does not apply, and before any work is queued.
void validate_switches() {
  (void)fwd_forced_mma();
  (void)bwd_forced_mma();
  (void)fwd_wgmma_persistent();
  (void)fwd_tail_split_mode();
  (void)fwd_l2_section_bytes(0);
  (void)fwd_lpt_tail();
  (void)fwd_band_tile(flash_problem{}, false);
  (void)decode_cluster_mode();
  (void)decode_rows_mode();
  (void)bwd_dq_group(64, false, 1, 2);
}

std::string fwd_config_name(const flash_problem& p, bool wgmma) {
  const int dim = fwd_kernel_dim(p, wgmma);
  std::string name;
  if (wgmma)
    name = dim == 64                 ? FwdWgmmaConfig<64>::kName
           : dim == 96               ? FwdWgmmaConfig<96>::kName
           : fwd_band_tile(p, wgmma) ? FwdWgmmaBandConfig<128>::kName
           : dim == 128              ? FwdWgmmaConfig<128>::kName
           : dim == 192              ? FwdWgmmaConfig<192>::kName
                                     : FwdWgmmaConfig<256>::kName;
  else
    switch (dim) {
#define CASE(D)                                                                 \
  case D:                                                                       \
    name = p.dtype == FLASH_F32 ? FwdF32Config::kName : FwdMmaConfig<D>::kName; \
    break;
      CASE(32)
      CASE(64)
      CASE(96)
      CASE(128)
      CASE(160)
      CASE(192)
#undef CASE
      case 256:
        name = p.dtype == FLASH_F32 ? FwdF32Config::kName : FwdPairConfig<256>::kName;
        break;
    }
  if (wgmma && fwd_wgmma_persistent()) name += "_persistent";
  std::string sequences;
  if (p.cu_seqlens_q || p.cu_seqlens_kv) sequences += " packed";
  if (p.seqlens_kv) sequences += " cache-lengths";
  if (p.block_table) sequences += " paged(page " + std::to_string(p.page_size) + ")";
  return name + " " + dtype_name(p.dtype) + sequences + padding_note(p, dim);
}

int fwd_smem_bytes(const flash_problem& p, bool wgmma) {
  if (wgmma) switch (fwd_kernel_dim(p, wgmma)) {
      case 64:
        return FwdWgmmaDerived<FwdWgmmaConfig<64>>::kSmemBytes;
      case 96:
        return FwdWgmmaDerived<FwdWgmmaConfig<96>>::kSmemBytes;
      case 128:
        return fwd_band_tile(p, wgmma) ? FwdWgmmaDerived<FwdWgmmaBandConfig<128>>::kSmemBytes
                                       : FwdWgmmaDerived<FwdWgmmaConfig<128>>::kSmemBytes;
      case 192:
        return FwdWgmmaDerived<FwdWgmmaConfig<192>>::kSmemBytes;
      default:
        return FwdWgmmaDerived<FwdWgmmaConfig<256>>::kSmemBytes;
    }
  switch (tile_dim(p)) {
#define CASE(D)                                         \
  case D:                                               \
    return p.dtype == FLASH_F32 ? FwdF32Smem<D>::kBytes \
                                : FwdMmaDerived<FwdMmaConfig<D>>::kSmemBytes;
    CASE(32) CASE(64) CASE(96) CASE(128) CASE(160) CASE(192)
#undef CASE
                case 256 : return p.dtype == FLASH_F32
        ? FwdF32Smem<256>::kBytes
        : FwdPairDerived<FwdPairConfig<256>>::kSmemBytes;
  }
  return 0;
}

struct DeviceInfo {
  int device = -1;
  int major = 0, minor = 0;
  int smem_optin = 0;
  int sms = 1;  // streaming multiprocessors
  int l2_bytes = 0;
  std::string name;
};

// Properties of the current device, queried once per device: cudaGetDeviceProperties
// costs tens of microseconds, which would show in every call of a short problem.
DeviceInfo current_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  static std::mutex mutex;
  static std::map<int, DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  DeviceInfo info;
  info.device = device;
  cudaDeviceProp prop;
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  info.major = prop.major;
  info.minor = prop.minor;
  info.smem_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
  info.sms = prop.multiProcessorCount;
  info.l2_bytes = prop.l2CacheSize;
  info.name = prop.name;
  cache.emplace(device, info);
  return info;
}

// Elements spanned by a [batch, seq, heads, dim] view with these strides.
size_t extent_elems(const int64_t stride[3], int64_t batch, int64_t seq, int64_t heads,
                    int64_t dim) {
  return static_cast<size_t>((batch - 1) * stride[0] + (seq - 1) * stride[1] +
                             (heads - 1) * stride[2] + dim);
}

void check_aligned(const char* name, const void* ptr, const int64_t stride[3], size_t elem) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "cuda backend: %s pointer %p is not 16-byte aligned (the kernels load "
                  "16-byte vectors; allowed: 16-byte aligned base pointers)",
                  name, ptr);
    throw flash::Error(buf);
  }
  static const char* dims[3] = {"batch", "seq", "head"};
  for (int i = 0; i < 3; ++i) {
    if ((stride[i] * elem) % 16 != 0) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "cuda backend: %s stride.%s = %lld elements (%lld bytes) is not a multiple "
                    "of 16 bytes (allowed: strides of a multiple of %zu elements)",
                    name, dims[i], static_cast<long long>(stride[i]),
                    static_cast<long long>(stride[i] * elem), 16 / elem);
      throw flash::Error(buf);
    }
  }
}

MaskParams make_mask(const flash_problem& p) {
  MaskParams m;
  m.seqlen_q = static_cast<int>(p.seqlen_q);
  m.seqlen_kv = static_cast<int>(p.seqlen_kv);
  m.diag_offset = m.seqlen_kv - m.seqlen_q;
  auto clamp = [](int64_t w) {
    return w < 0 || w > MaskParams::kUnbounded ? MaskParams::kUnbounded : static_cast<int>(w);
  };
  m.left = clamp(p.window_left);
  m.right = p.causal ? 0 : clamp(p.window_right);
  m.bounded = mask_bounded(p);
  return m;
}

void fill_strides(int64_t dst[3], const int64_t src[3]) {
  for (int i = 0; i < 3; ++i) dst[i] = src[i];
}

// Calls fn(std::integral_constant<int, D>{}) for the tile head dim D == dim (tile_dim()).
template <class Fn>
void with_tile_dim(int dim, const Fn& fn) {
  switch (dim) {
    case 32:
      return fn(std::integral_constant<int, 32>{});
    case 64:
      return fn(std::integral_constant<int, 64>{});
    case 96:
      return fn(std::integral_constant<int, 96>{});
    case 128:
      return fn(std::integral_constant<int, 128>{});
    case 160:
      return fn(std::integral_constant<int, 160>{});
    case 192:
      return fn(std::integral_constant<int, 192>{});
    case 256:
      return fn(std::integral_constant<int, 256>{});
  }
}

template <Dtype kDtype>
void dispatch_forward(int dim, const FwdParams& f, int batch, cudaStream_t stream) {
  with_tile_dim(dim, [&](auto d) { launch_forward<kDtype, decltype(d)::value>(f, batch, stream); });
}

template <Dtype kDtype>
void dispatch_backward(int dim, const BwdParams& b, int batch, cudaStream_t stream) {
  with_tile_dim(dim,
                [&](auto d) { launch_backward<kDtype, decltype(d)::value>(b, batch, stream); });
}

}  // namespace

// Shape, strides, scale, softcap and mask of the kernel parameters (pointers are
// filled by the caller): shared by the forward and the backward.
void fill_shape(FwdParams& f, const flash_problem& p) {
  fill_strides(f.q_stride, p.q_stride);
  fill_strides(f.k_stride, p.k_stride);
  fill_strides(f.v_stride, p.v_stride);
  fill_strides(f.o_stride, p.o_stride);
  f.heads_q = static_cast<int>(p.heads_q);
  f.group = static_cast<int>(p.heads_q / p.heads_kv);
  f.head_dim = static_cast<int>(p.head_dim);
  f.head_dim_v = static_cast<int>(p.head_dim_v);
  f.scale = p.scale;
  f.softcap = p.softcap;
  f.mask = make_mask(p);
  f.cu_seqlens_q = p.cu_seqlens_q;
  f.cu_seqlens_kv = p.cu_seqlens_kv;
  f.seqlens_kv = p.seqlens_kv;
  f.num_seqs = static_cast<int>(p.batch);
}

// q / o and k / v extents for staging (dispatch/sequence_arrays.hpp); a packed view counts at
// least one row: its tensor map needs one.
flash::detail::SequenceExtents extents(const flash_problem& p) {
  return flash::detail::sequence_extents(p, 1);
}

// Host arrays travel with the host tensors (the staging path); device arrays stay. With
// FLASH_CHECK=1 device arrays are copied back and validated first (this synchronises).
void stage_sequence_arrays(HostStaging& staging, FwdParams& f, const flash_problem& p) {
  const size_t seqs = static_cast<size_t>(p.batch);
  staging.stage("cu_seqlens_q", f.cu_seqlens_q, sizeof(int) * (seqs + 1), false);
  staging.stage("cu_seqlens_kv", f.cu_seqlens_kv, sizeof(int) * (seqs + 1), false);
  staging.stage("seqlens_kv", f.seqlens_kv, sizeof(int) * seqs, false);
  flash::detail::check_device_sequence_arrays(
      p, [](const int32_t* a) { return is_device_pointer(a); },
      [](int32_t* dst, const int32_t* src, size_t count) {
        check_cuda(cudaMemcpy(dst, src, count * sizeof(int32_t), cudaMemcpyDeviceToHost),
                   "FLASH_CHECK: copying the sequence arrays to the host");
      });
}

DecodeDevice decode_device(const DeviceInfo& d) {
  return DecodeDevice{d.device, d.major, d.minor, d.sms, d.smem_optin};
}

// The decode plan of a forward (use = false: the prefill kernels run it).
DecodePlan forward_decode_plan(const flash_problem& p, const DeviceInfo& d) {
  if (fwd_paged_wgmma(p, fwd_wgmma_usable(p, d.major, d.minor))) return DecodePlan{};
  return decode_plan(p, decode_device(d));
}

std::string decode_name(const flash_problem& p, const DecodePlan& d) {
  std::string name = std::string(p.dtype == FLASH_F32 ? "decode_fma" : "decode_mma") + "_d" +
                     std::to_string(d.dim) + "_m" + std::to_string(d.rows) + "_w" +
                     std::to_string(d.shape.warps) + " " + dtype_name(p.dtype) +
                     " splits=" + std::to_string(d.splits);
  if (d.row_chunks > 1) name += " row_chunks=" + std::to_string(d.row_chunks);
  if (d.cluster > 1) name += " cluster-merge";
  if (p.block_table) name += " paged(page " + std::to_string(p.page_size) + ")";
  if (p.seqlens_kv) name += " cache-lengths";
  if (p.cu_seqlens_q || p.cu_seqlens_kv) name += " packed";
  return name;
}

struct CudaBackend {
  static const char* name() { return "cuda"; }

  static bool probe(std::string& reason, std::string& detail) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
      cudaGetLastError();
      reason = std::string("no CUDA device found (cudaGetDeviceCount: ") +
               (status != cudaSuccess ? cudaGetErrorString(status) : "0 devices") + ")";
      return false;
    }
    const DeviceInfo d = current_device();
    detail =
        d.name + ", compute capability " + std::to_string(d.major) + "." + std::to_string(d.minor);
#ifdef FLASHATTN_CUDA_SM90A
    // The Hopper kernels (wgmma forward / backward, the decode cluster merge) need them.
    if (d.major == 9 && d.minor == 0) detail += ", sm_90a kernels";
#endif
    if (d.major < 8) {
      reason = "CUDA device " + detail +
               " is older than compute capability 8.0 (the kernels "
               "use cp.async and bf16 mma.sync)";
      return false;
    }
    return true;
  }

  static bool owns_pointer(const void* p) { return is_device_pointer(p); }

  static flash::detail::Choice choose(const flash_problem& p, int direction) {
    using flash::detail::Choice;
    validate_switches();
    if (p.dtype != FLASH_F32 && p.dtype != FLASH_F16 && p.dtype != FLASH_BF16)
      return Choice::decline("cuda backend: unknown dtype " + std::to_string(p.dtype));
    if (direction == FLASH_MERGE) {
      if (p.batch * p.seqlen_q > INT32_MAX || p.heads_q > 65535)
        return Choice::decline(
            "cuda backend: merge_partials needs batch * seqlen_q < 2^31 and "
            "heads_q <= 65535 (one block per row and head)");
      return Choice::run(std::string("merge_rows ") + dtype_name(p.dtype));
    }

    if (!supported_head_dim(p.head_dim))
      return Choice::decline("cuda backend: head_dim = " + std::to_string(p.head_dim) +
                             " is not supported (allowed: " + kHeadDimRule + ")");
    if (!supported_head_dim(p.head_dim_v))
      return Choice::decline("cuda backend: head_dim_v = " + std::to_string(p.head_dim_v) +
                             " is not supported (allowed: " + kHeadDimRule + ")");
    if (p.seqlen_q >= kMaxSeqlen || p.seqlen_kv >= kMaxSeqlen)
      return Choice::decline("cuda backend: seqlen_q/seqlen_kv must be < 2^30 (got " +
                             std::to_string(p.seqlen_q) + ", " + std::to_string(p.seqlen_kv) + ")");
    if (p.heads_q > 65535)
      return Choice::decline("cuda backend: heads_q = " + std::to_string(p.heads_q) +
                             " exceeds 65535 (one grid row per head)");
    if (direction == FLASH_BACKWARD) {
      // Backward: f16/bf16 on tensor cores, f32 on the SIMT path, every forward head dim.
      const bool is_f32 = p.dtype == FLASH_F32;
      const DeviceInfo d = current_device();
      const auto [dim, wgmma] = bwd_tile(p, d.major, d.minor);
      const int smem = bwd_smem_bytes(is_f32, wgmma, dim, p.softcap > 0.f);
      const std::string name =
          bwd_config_name(is_f32, wgmma, dim, p.softcap > 0.f) + " " + dtype_name(p.dtype) +
          (p.cu_seqlens_q || p.cu_seqlens_kv ? " packed" : "") + padding_note(p, dim);
      if (smem > d.smem_optin)
        return Choice::decline("cuda backend: backward tile config " + name + " needs " +
                               std::to_string(smem) + " bytes of shared memory, device " + d.name +
                               " allows " + std::to_string(d.smem_optin));
      return Choice::run(name);
    }
    const DeviceInfo d = current_device();
    if (const DecodePlan dec = forward_decode_plan(p, d); dec.use) {
      if (static_cast<int64_t>(p.heads_kv) * dec.row_chunks > 65535)
        return Choice::decline(
            "cuda backend: decode grid too large: heads_kv = " + std::to_string(p.heads_kv) +
            " x " + std::to_string(dec.row_chunks) + " row chunks must be <= 65535");
      if (dec.shape.smem_bytes > d.smem_optin)
        return Choice::decline("cuda backend: " + decode_name(p, dec) + " needs " +
                               std::to_string(dec.shape.smem_bytes) +
                               " bytes of shared memory, device " + d.name + " allows " +
                               std::to_string(d.smem_optin));
      return Choice::run(decode_name(p, dec));
    }
    const bool wgmma = fwd_wgmma_usable(p, d.major, d.minor);
    const int smem = fwd_smem_bytes(p, wgmma);
    if (smem > d.smem_optin)
      return Choice::decline("cuda backend: tile config " + fwd_config_name(p, wgmma) + " needs " +
                             std::to_string(smem) + " bytes of shared memory, device " + d.name +
                             " allows " + std::to_string(d.smem_optin));
    return Choice::run(fwd_config_name(p, wgmma));
  }

  static void forward(const flash_problem& p, const void* q, const void* k, const void* v,
                      void* o) {
    const auto choice = choose(p, FLASH_FORWARD);
    if (!choice.ok) throw flash::Error(choice.reason, flash::Error::Kind::unsupported);
    const size_t eb = dtype_bytes(p.dtype);
    check_aligned("q", q, p.q_stride, eb);
    check_aligned("k", k, p.k_stride, eb);
    check_aligned("v", v, p.v_stride, eb);
    check_aligned("o", o, p.o_stride, eb);
    auto stream = static_cast<cudaStream_t>(p.stream);

    HostStaging staging(stream);
    FwdParams f{};
    fill_shape(f, p);
    f.q = q;
    f.k = k;
    f.v = v;
    f.o = o;
    f.lse = p.lse;
    const auto e = extents(p);
    staging.stage("q", f.q,
                  eb * extent_elems(p.q_stride, e.q_batch, e.q_rows, p.heads_q, p.head_dim), false);
    staging.stage("k", f.k,
                  eb * extent_elems(p.k_stride, e.kv_batch, e.kv_rows, p.heads_kv, p.head_dim),
                  false);
    staging.stage("v", f.v,
                  eb * extent_elems(p.v_stride, e.kv_batch, e.kv_rows, p.heads_kv, p.head_dim_v),
                  false);
    staging.stage("o", f.o,
                  eb * extent_elems(p.o_stride, e.q_batch, e.q_rows, p.heads_q, p.head_dim_v),
                  true);
    staging.stage("lse", f.lse, sizeof(float) * e.lse_count, true);
    stage_sequence_arrays(staging, f, p);
    const int* block_table = p.block_table;
    staging.stage("block_table", block_table,
                  sizeof(int) * static_cast<size_t>(p.batch * p.pages_per_seq), false);
    staging.commit();
    const int batch = static_cast<int>(p.batch);
    const DeviceInfo device = current_device();
    if (const DecodePlan dec = forward_decode_plan(p, device); dec.use) {
      DecodeParams dp{};
      dp.f = f;
      dp.block_table = block_table;
      dp.page_size = p.page_size;
      dp.pages_per_seq = p.pages_per_seq;
      dp.num_pages = p.num_pages;
      dp.heads_kv = static_cast<int>(p.heads_kv);
      dp.splits = dec.splits;
      dp.cluster = dec.cluster;
      dp.row_chunks = dec.row_chunks;
      // Split partials live in the cached per-stream workspace and the split counters in
      // the zeroed counter buffer, both held until the kernel is enqueued (another host
      // thread on this stream must not reuse them in between).
      LockedBuffer workspace, counters;
      if (dec.splits > 1 && dec.cluster == 1) {
        const size_t slots =
            static_cast<size_t>(p.batch * p.heads_kv) * dec.row_chunks * dec.splits * dec.rows;
        workspace = lock_device_buffer(stream, BufferPurpose::workspace,
                                       sizeof(float) * slots * (dec.dim + 1));
        dp.part_o = static_cast<float*>(workspace.ptr);
        dp.part_lse = dp.part_o + slots * dec.dim;
        counters = lock_device_buffer(
            stream, BufferPurpose::counters,
            sizeof(int) * static_cast<size_t>(p.batch * p.heads_kv) * dec.row_chunks);
        dp.split_done = static_cast<int*>(counters.ptr);
      }
      switch (p.dtype) {
        case FLASH_F32:
          launch_decode<Dtype::f32>(dp, dec.dim, dec.rows, batch, stream);
          break;
        case FLASH_F16:
          launch_decode<Dtype::f16>(dp, dec.dim, dec.rows, batch, stream);
          break;
        case FLASH_BF16:
          launch_decode<Dtype::bf16>(dp, dec.dim, dec.rows, batch, stream);
          break;
      }
      check_cuda(cudaGetLastError(), "decode kernel launch");
      staging.finish();
      return;
    }
    f.wgmma = fwd_wgmma_usable(p, device.major, device.minor);
    f.band_tile = fwd_band_tile(p, f.wgmma);
    if (p.block_table) {  // forward_decode_plan gave it to the Hopper forward
      if (!fwd_paged_wgmma(p, f.wgmma))
        throw flash::detail::RuntimeFailure("cuda backend: internal: a paged cache reached " +
                                            fwd_config_name(p, f.wgmma));
      f.block_table = block_table;
      f.page_size = static_cast<int>(p.page_size);
      f.pages_per_seq = static_cast<int>(p.pages_per_seq);
      f.num_pages = static_cast<int>(p.num_pages);
    }
    const int dim = fwd_kernel_dim(p, f.wgmma);
    // The persistent Hopper forward's tile counter and split-tail counters (held until the
    // launch is enqueued).
    LockedBuffer tile_counter;
    if (f.wgmma && fwd_wgmma_persistent()) {
      f.persistent_blocks = fwd_persistent_blocks(device.sms);
      f.tail_split = fwd_tail_split_mode();
      tile_counter = lock_device_buffer(
          stream, BufferPurpose::counters,
          sizeof(int) * (2 + static_cast<size_t>(fwd_tail_max_counts(f.persistent_blocks))));
      f.tile_counter = static_cast<int*>(tile_counter.ptr);
      f.tail_counts = f.tile_counter + 2;
    }
    // Packed batches: the tensor maps that the device completes (held until enqueued).
    LockedBuffer packed_maps;
    if (f.wgmma && (p.cu_seqlens_q || p.cu_seqlens_kv)) {
      packed_maps = lock_device_buffer(stream, BufferPurpose::tensor_maps, 3 * 128);
      f.packed_maps = packed_maps.ptr;
    }
    f.l2_section_bytes = fwd_l2_section_bytes(device.l2_bytes);
    f.tail_blocks = fwd_lpt_tail() ? device.sms : 0;
    switch (p.dtype) {
      case FLASH_F32:
        dispatch_forward<Dtype::f32>(dim, f, batch, stream);
        break;
      case FLASH_F16:
        dispatch_forward<Dtype::f16>(dim, f, batch, stream);
        break;
      case FLASH_BF16:
        dispatch_forward<Dtype::bf16>(dim, f, batch, stream);
        break;
    }
    check_cuda(cudaGetLastError(), "forward kernel launch");
    staging.finish();
  }

  // Backward: preprocess (Δ) -> dK/dV/dQ partials -> dQ on desc.stream, no
  // synchronisation (except when host memory is staged). Workspace: Δ, lse and the f32
  // dQ slices (bwd_dq_plan), O(rows · dim · slices), in the cached buffer.
  static void backward(const flash_problem& p, const void* q, const void* k, const void* v,
                       const void* o, const void* dout, const float* lse, void* dq, void* dk,
                       void* dv) {
    const auto choice = choose(p, FLASH_BACKWARD);
    if (!choice.ok) throw flash::Error(choice.reason, flash::Error::Kind::unsupported);
    const size_t eb = dtype_bytes(p.dtype);
    check_aligned("q", q, p.q_stride, eb);
    check_aligned("k", k, p.k_stride, eb);
    check_aligned("v", v, p.v_stride, eb);
    check_aligned("o", o, p.o_stride, eb);
    check_aligned("dout (o strides)", dout, p.o_stride, eb);
    check_aligned("dq (q strides)", dq, p.q_stride, eb);
    check_aligned("dk (k strides)", dk, p.k_stride, eb);
    check_aligned("dv (v strides)", dv, p.v_stride, eb);
    auto stream = static_cast<cudaStream_t>(p.stream);

    const auto e = extents(p);
    const size_t q_bytes =
        eb * extent_elems(p.q_stride, e.q_batch, e.q_rows, p.heads_q, p.head_dim);
    const size_t k_bytes =
        eb * extent_elems(p.k_stride, e.kv_batch, e.kv_rows, p.heads_kv, p.head_dim);
    const size_t v_bytes =
        eb * extent_elems(p.v_stride, e.kv_batch, e.kv_rows, p.heads_kv, p.head_dim_v);
    const size_t o_bytes =
        eb * extent_elems(p.o_stride, e.q_batch, e.q_rows, p.heads_q, p.head_dim_v);
    // Host tensors travel through the staging buffer (inputs in; outputs in and back).
    BwdParams b{};
    FwdParams& f = b.f;
    fill_shape(f, p);
    f.q = q;
    f.k = k;
    f.v = v;
    f.o = const_cast<void*>(o);  // read only by the backward
    f.lse = const_cast<float*>(lse);
    b.dout = dout;
    b.dq = dq;
    b.dk = dk;
    b.dv = dv;
    HostStaging staging(stream);
    staging.stage("q", f.q, q_bytes, false);
    staging.stage("k", f.k, k_bytes, false);
    staging.stage("v", f.v, v_bytes, false);
    staging.stage("o", f.o, o_bytes, false);
    staging.stage("dout", b.dout, o_bytes, false);
    staging.stage("lse", f.lse, sizeof(float) * e.lse_count, false);
    staging.stage("dq", b.dq, q_bytes, true);
    staging.stage("dk", b.dk, k_bytes, true);
    staging.stage("dv", b.dv, v_bytes, true);
    stage_sequence_arrays(staging, f, p);
    staging.commit();
    b.heads_kv = static_cast<int>(p.heads_kv);
    // Held until the last kernel using Δ/lse is enqueued: another host thread on the
    // same stream must not refill the workspace in between (stream order does the rest).
    const int batch = static_cast<int>(p.batch);
    const DeviceInfo device = current_device();
    const BwdTile tile = bwd_tile(p, device.major, device.minor);
    const int dim = tile.dim;
    b.wgmma = tile.wgmma;
    const BwdDqPlan plan =
        bwd_dq_plan(p.dtype == FLASH_F32, b.wgmma, dim, p.softcap > 0.f, p.nondeterministic == 0,
                    p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_kv, device.sms);
    const LockedBuffer workspace = lock_device_buffer(
        stream, BufferPurpose::workspace,
        sizeof(float) * bwd_workspace_floats(p.batch, p.heads_q, p.seqlen_q, plan));
    b.delta = static_cast<float*>(workspace.ptr);
    b.dq_accum = b.delta + 2 * p.batch * p.heads_q * bwd_rows_pad(p.seqlen_q);
    b.dq_slice_floats = plan.slice_floats;
    b.dq_splits = plan.splits;
    b.dq_slices = plan.slices;
    b.dq_row_floats = plan.row_floats;
    b.dq_exclusive = p.nondeterministic == 0 && !plan.ordered;
    b.dq_ordered = plan.ordered;
    // wgmma kernel: the key blocks of a head side by side (they share its Q, dO and dQ
    // tiles in L2: 1.3x at S = 2048); under a mask band each walks upward (walk_up below).
    // Without a mask band the ordered adds follow arrival order when a head's key blocks
    // all fit on the GPU at once with room to spare (sms / 2: other streams' kernels may
    // hold SMs). The atomic mode walks the same way (its dK and dV then equal the ordered
    // mode's bitwise).
    b.grid_kv_fastest = b.wgmma;
    // Packed batches: a sequence's key blocks are fewer than the launch's (the longest
    // sequence's), and rotated ranks assume every block of the head takes part.
    b.dq_rotate = b.wgmma && !b.f.mask.bounded && plan.splits <= device.sms / 2 &&
                  !flash::detail::has_sequence_arrays(p);
    b.walk_up = b.wgmma && b.f.mask.bounded;
    b.dq_group =
        b.walk_up && plan.ordered ? bwd_dq_group(dim, p.softcap > 0.f, plan.splits, device.sms) : 0;
    float* const dq_slices_end = b.dq_accum + plan.slices * plan.slice_floats;
    b.dq_counters = reinterpret_cast<unsigned*>(dq_slices_end);
    // The dQ slices and the counters behind them start at zero (f32: none); in the ordered
    // mode each tile's first add is a copy and only the counters need it.
    float* const dq_zero = plan.ordered ? dq_slices_end : b.dq_accum;
    const int64_t dq_words = (dq_slices_end - dq_zero) + plan.counters;
    if (dq_words > 0)
      check_cuda(cudaMemsetAsync(dq_zero, 0, sizeof(float) * dq_words, stream),
                 "cudaMemsetAsync (dQ accumulator)");
    switch (p.dtype) {
      case FLASH_F32:
        dispatch_backward<Dtype::f32>(dim, b, batch, stream);
        break;
      case FLASH_F16:
        dispatch_backward<Dtype::f16>(dim, b, batch, stream);
        break;
      case FLASH_BF16:
        dispatch_backward<Dtype::bf16>(dim, b, batch, stream);
        break;
    }
    check_cuda(cudaGetLastError(), "backward kernel launch");
    staging.finish();
  }

  static void merge(const flash_problem& p, int64_t parts, const void* o_parts,
                    const float* lse_parts, void* o, float* lse) {
    const auto choice = choose(p, FLASH_MERGE);
    if (!choice.ok) throw flash::Error(choice.reason, flash::Error::Kind::unsupported);
    auto stream = static_cast<cudaStream_t>(p.stream);
    const size_t eb = dtype_bytes(p.dtype);
    // Packed rows: total_q is known exactly when cu_seqlens_q is host memory, the only
    // case that stages (device arrays come with device tensors).
    const auto e = extents(p);
    const int64_t rows = p.cu_seqlens_q ? std::max<int64_t>(p.total_q, 0) : p.batch * p.seqlen_q;
    MergeParams m{};
    m.batch = p.batch;
    m.seqlen_q = p.seqlen_q;
    m.heads_q = p.heads_q;
    m.head_dim_v = p.head_dim_v;
    m.parts = parts;
    for (int i = 0; i < 3; ++i) m.o_stride[i] = p.o_stride[i];
    m.cu_seqlens_q = p.cu_seqlens_q;
    m.o_parts = o_parts;
    m.lse_parts = lse_parts;
    m.o = o;
    m.lse = lse;
    HostStaging staging(stream);
    staging.stage("o_parts", m.o_parts,
                  eb * static_cast<size_t>(rows * p.heads_q * p.head_dim_v * parts), false);
    staging.stage("lse_parts", m.lse_parts,
                  sizeof(float) * static_cast<size_t>(rows * p.heads_q * parts), false);
    staging.stage("o", m.o,
                  eb * extent_elems(p.o_stride, e.q_batch, e.q_rows, p.heads_q, p.head_dim_v),
                  true);
    staging.stage("lse", m.lse, sizeof(float) * static_cast<size_t>(rows * p.heads_q), true);
    staging.stage("cu_seqlens_q", m.cu_seqlens_q, sizeof(int) * static_cast<size_t>(p.batch + 1),
                  false);
    staging.commit();
    launch_merge(m, static_cast<Dtype>(p.dtype), stream);
    check_cuda(cudaGetLastError(), "merge kernel launch");
    staging.finish();
  }
};

}  // namespace flash::cuda

extern "C" __attribute__((visibility("default"))) const flash_backend_module*
flash_backend_module_v1(void) {
  return flash::detail::make_module<flash::cuda::CudaBackend>();
}
