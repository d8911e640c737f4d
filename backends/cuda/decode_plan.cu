// Host plan of the split-KV decode (decode_plan.hpp).
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "decode_plan.hpp"
#include "dispatch/env_switch.hpp"

namespace flash::cuda {
namespace {

// The least share of its planned splits that a decode keeps when they become one cluster
// per unit (B 1, 8 kv heads on an H100: 16 splits do not fit as 8 clusters at once, 14 do).
struct DecodeShare {
  int num, den;
};
constexpr DecodeShare kDecodeClusterMinShare{7, 8};

// The largest cluster size from 2 to max_size of which `clusters` clusters of the
// tensor-core decode kernel (head dim `dim`, `rows` rows per block) run at once on the
// current device (`device`), or 1 where none does; asked of cudaOccupancyMaxActiveClusters
// once per (device, dim, rows, max_size, clusters).
int decode_largest_cluster(int device, int dim, int rows, int max_size, int64_t clusters) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int, int64_t>, int> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, dim, rows, max_size, clusters);
  auto it = cache.find(key);
  if (it == cache.end()) {
    int size = max_size;
    while (size >= 2 && decode_max_active_clusters(dim, rows, size) < clusters) --size;
    it = cache.emplace(key, std::max(size, 1)).first;
  }
  return it->second;
}

}  // namespace

DecodeClusterMode decode_cluster_mode() {
  const std::string v = flash::detail::env_switch("FLASH_CUDA_DECODE_CLUSTER", {"0", "1", "any"});
  return v == "0"     ? DecodeClusterMode::off
         : v == "any" ? DecodeClusterMode::any
                      : DecodeClusterMode::on;
}

DecodeRowsMode decode_rows_mode() {
  const std::string v = flash::detail::env_switch("FLASH_CUDA_DECODE_ROWS", {"16", "32"});
  return v == "16"   ? DecodeRowsMode::one_tile
         : v == "32" ? DecodeRowsMode::two_tiles
                     : DecodeRowsMode::automatic;
}

DecodePlan decode_plan(const flash_problem& p, const DecodeDevice& device) {
  DecodePlan d;
  const int64_t group = p.heads_q / p.heads_kv, rows = p.seqlen_q * group;
  d.use = p.block_table != nullptr || rows <= kDecodeMaxRows;
  if (!d.use) return d;
  const Dtype dtype = static_cast<Dtype>(p.dtype);
  d.dim = decode_dim(static_cast<int>(std::max(p.head_dim, p.head_dim_v)));
  // Splits: one wave of blocks over the SMs (as many as fit at once: a second, partial
  // wave would leave most SMs idle at its end), each split at least
  // kDecodeMinTilesPerWarp key tiles per warp so a split streams more than it merges.
  const auto units = [&] { return std::max<int64_t>(1, p.batch * p.heads_kv * d.row_chunks); };
  const auto plan_rows = [&](int rows_per_block) {
    d.rows = rows_per_block;
    d.row_chunks = static_cast<int>((rows + d.rows - 1) / d.rows);
    d.shape = decode_shape_info(dtype, d.dim, d.rows);
    const int64_t per_sm = std::max(1, device.smem_optin / std::max(1, d.shape.smem_bytes));
    const int64_t wave = static_cast<int64_t>(device.sms) * per_sm * kDecodeWaves;
    const int64_t want = std::max<int64_t>(1, wave / units());
    const int64_t by_keys = std::max<int64_t>(
        1, p.seqlen_kv /
               (static_cast<int64_t>(d.shape.warps) * d.shape.tile_keys * kDecodeMinTilesPerWarp));
    d.splits = static_cast<int>(std::clamp<int64_t>(std::min(want, by_keys), 1, kDecodeMaxSplits));
  };
  const DecodeRowsMode rows_mode = decode_rows_mode();
  plan_rows(
      decode_rows(dtype, d.dim, static_cast<int>(rows), rows_mode != DecodeRowsMode::one_tile));
  // Two tiles halve the blocks of a unit's keys: on a short cache their splits become too
  // short to pay for the block's start and merge, and 16-row chunks (which read the K/V
  // twice, mostly from L2) are faster (bench/RESULTS.md, session 25).
  if (d.rows == kDecodeRowsTwoTiles && rows_mode == DecodeRowsMode::automatic &&
      p.seqlen_kv < static_cast<int64_t>(d.splits) * d.shape.warps * d.shape.tile_keys *
                        kDecodeTwoTileMinTilesPerWarp)
    plan_rows(kDecodeRowsLarge);
  // A contiguous cache whose decode shape does not fit the device's shared memory (the
  // 192 KB ring at head dims 128 / 256 on an sm_80 GPU, which allows 163 KB) runs on the
  // prefill kernels instead; a paged cache has no other kernel, and choose() declines it
  // naming the bytes.
  if (p.block_table == nullptr && d.shape.smem_bytes > device.smem_optin) {
    d.use = false;
    return d;
  }
  // The cluster merge (f16 / bf16, sm_90a code on compute capability 9.0: cluster_ops.cuh):
  // a unit's splits become one cluster of the largest size up to kDecodeMaxCluster for which
  // every unit's cluster runs at once (a second wave of clusters would idle most SMs), if
  // that keeps at least kDecodeClusterMinShare of the blocks the plan above wants.
  bool sm90a = false;
#ifdef FLASHATTN_CUDA_SM90A
  sm90a = device.cc_major == 9 && device.cc_minor == 0;
#endif
  const DecodeClusterMode mode = decode_cluster_mode();
  if (p.dtype != FLASH_F32 && sm90a && d.splits > 1 && mode != DecodeClusterMode::off) {
    const int size = decode_largest_cluster(device.device, d.dim, d.rows,
                                            std::min(d.splits, kDecodeMaxCluster), units());
    if (size >= 2 && (size * kDecodeClusterMinShare.den >= d.splits * kDecodeClusterMinShare.num ||
                      mode == DecodeClusterMode::any))
      d.splits = d.cluster = size;
  }
  return d;
}

}  // namespace flash::cuda
