#include "cases.hpp"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>

namespace flash::test {

// Sizes follow DEVELOPERS.md: 1, 17, 113, 257, 1000; Sq != Sk both ways; GQA 1/2/8;
// head_dim 1, 8, 40, 64, 96, 128, 256 (+160/192 for the GPU set), and multiples of 8 that
// sit between the GPU tile dims (8, 16, 24, 48, 80, 112, 136, 200, 248: the cuda backend
// runs them on the next wider tile with the columns past them zero); every mask kind.
const std::vector<Case>& forward_cases() {
  static const std::vector<Case> cases = {
      // name                      B  Sq    Sk    Hq Hkv D    Dv   causal wl  wr  cap scale layout
      // amp
      {"s1x1_d64", 1, 1, 1, 1, 1, 64, 64},
      {"s17x113_d64_gqa2_causal", 1, 17, 113, 4, 2, 64, 64, true},
      {"s113x17_d64_causal_emptyrows", 1, 113, 17, 2, 2, 64, 64, true},
      {"s257_d128_b3_gqa8", 3, 257, 257, 8, 1, 128, 128},
      {"s1000_d64_causal", 1, 1000, 1000, 2, 2, 64, 64, true},
      {"s1000_d128_window100_0", 1, 1000, 1000, 1, 1, 128, 128, false, 100, 0},
      {"s17x113_d1", 2, 17, 113, 2, 1, 1, 1},
      {"s113x17_d8", 1, 113, 17, 1, 1, 8, 8},
      {"s113_d40_dv24_causal", 1, 113, 113, 2, 1, 40, 24, true},
      {"s257_d64_dv128", 1, 257, 257, 2, 2, 64, 128},
      {"s257_d96_causal", 1, 257, 257, 2, 2, 96, 96, true},
      {"s113x257_d256_gqa2_causal", 1, 113, 257, 2, 1, 256, 256, true},
      {"s100_d160", 1, 100, 100, 1, 1, 160, 160},
      {"s100_d192_causal", 1, 100, 100, 1, 1, 192, 192, true},
      {"s257_d32_softcap30", 1, 257, 257, 2, 2, 32, 32, false, -1, -1, 30.f, 0, Layout::packed, 6},
      {"s128_d64_large_logits", 1, 128, 128, 2, 2, 64, 64, false, -1, -1, 0, 0, Layout::packed, 8},
      {"s200x300_d64_window32_16", 1, 200, 300, 2, 2, 64, 64, false, 32, 16},
      {"s300_d64_causal_window64", 2, 300, 300, 2, 1, 64, 64, true, 64, -1},
      {"s77x129_d64_gqa2_causal_bhsd", 3, 77, 129, 4, 2, 64, 64, true, -1, -1, 0, 0, Layout::bhsd},
      {"s113_d128_padded", 2, 113, 113, 2, 2, 128, 128, false, -1, -1, 0, 0, Layout::padded},
      {"s64_d64_scale0.3_windowright0", 1, 64, 64, 1, 1, 64, 64, false, -1, 0, 0, 0.3f},
      {"s17x113_d16_gqa2_causal", 1, 17, 113, 4, 2, 16, 16, true},
      {"s113_d24_b2", 2, 113, 113, 2, 2, 24, 24},
      {"s257x113_d48_window40_8", 1, 257, 113, 2, 1, 48, 48, false, 40, 8},
      {"s113_d80_causal", 1, 113, 113, 2, 2, 80, 80, true},
      {"s257_d112_softcap20", 1, 257, 257, 2, 2, 112, 112, false, -1, -1, 20.f, 0, Layout::packed,
       4},
      {"s113x257_d136_causal_bhsd", 1, 113, 257, 2, 2, 136, 136, true, -1, -1, 0, 0, Layout::bhsd},
      {"s100_d200_padded", 2, 100, 100, 2, 1, 200, 200, false, -1, -1, 0, 0, Layout::padded},
      {"s77_d248_dv200_causal", 1, 77, 77, 2, 2, 248, 200, true},
      {"s113_d48_dv80", 1, 113, 113, 2, 2, 48, 80},
      // D 128 causal with GQA, rows that see no key and several K/V tiles a row block (the
      // banded-mask Hopper tile's three-stage ring across work tiles, cuda_backend.cu).
      {"s300x170_d128_gqa4_causal", 2, 300, 170, 8, 2, 128, 128, true},
      // Keys that end within the first 64 of the last 176-key tile (the Hopper forward's
      // narrow last tile, tile_configs.hpp; D 64 reaches it on causal diagonals, e.g.
      // s77x129_d64): after two full tiles (400 = 2 x 176 + 48, with
      // softcap), as the only tile (40 keys, head dim 120 on the 128 tile), and on causal
      // diagonals (the runs with the band tile off).
      {"s77x400_d128_gqa2_softcap10", 1, 77, 400, 4, 2, 128, 128, false, -1, -1, 10.f, 0,
       Layout::packed, 6},
      {"s200x40_d120", 2, 200, 40, 2, 2, 120, 120},
      {"s300x400_d128_causal", 1, 300, 400, 2, 1, 128, 128, true},
      // DeepSeek's head dims (192 / 128) with 58 keys past one 112-key tile (the 192 tile's
      // narrow last tile).
      {"s130x170_d192_dv128_gqa2", 1, 130, 170, 4, 2, 192, 128},
      // Five unmasked work tiles of 1000 keys: on a grid of three blocks (the cross-backend
      // test's second cuda run) the Hopper forward splits the last two into three key ranges,
      // the middle one crossing from one tile into the next (fwd_tail_split.cuh): MQA at
      // D 128 (6 K/V steps of 192 keys), five sequences at D 64 (8 steps of 128).
      {"s100x1000_d128_mqa5", 1, 100, 1000, 5, 1, 128, 128},
      {"s100x1000_d64_b5", 5, 100, 1000, 1, 1, 64, 64},
      // Head dims 72-96 on the Hopper forward's 96-column config (the runs with the band tile
      // off): GQA with softcap and Sq < Sk (8 work tiles: the tail split on three blocks), a
      // window with Sq > Sk.
      {"s200x700_d96_gqa2_softcap20", 1, 200, 700, 4, 2, 96, 96, false, -1, -1, 20.f},
      {"s400x257_d72_dv96_window50_10", 1, 400, 257, 2, 1, 72, 96, false, 50, 10},
  };
  return cases;
}

const std::vector<Case>& backward_cases() {
  static const std::vector<Case> cases = {
      {"s1x1_d64", 1, 1, 1, 1, 1, 64, 64},
      {"s17x113_d64_gqa2_causal", 1, 17, 113, 4, 2, 64, 64, true},
      {"s113x17_d64_causal_emptyrows", 1, 113, 17, 2, 2, 64, 64, true},
      {"s257_d64_b3_gqa8_causal", 3, 257, 257, 8, 1, 64, 64, true},
      {"s17x113_d1", 2, 17, 113, 2, 1, 1, 1},
      {"s113_d40_dv24", 1, 113, 113, 2, 1, 40, 24},
      {"s257_d128_dv64_window48_8", 1, 257, 257, 2, 2, 128, 64, false, 48, 8},
      {"s113x257_d256_causal", 1, 113, 257, 1, 1, 256, 256, true},
      {"s257_d32_softcap30", 1, 257, 257, 2, 2, 32, 32, false, -1, -1, 30.f, 0, Layout::packed, 6},
      {"s77x129_d96_gqa2_bhsd", 2, 77, 129, 4, 2, 96, 96, false, -1, -1, 0, 0, Layout::bhsd},
      {"s113_d128_causal_padded", 2, 113, 113, 2, 2, 128, 128, true, -1, -1, 0, 0, Layout::padded},
      {"s113x17_d8", 1, 113, 17, 1, 1, 8, 8},
      {"s17x113_d16_gqa2_causal", 1, 17, 113, 4, 2, 16, 16, true},
      {"s113_d24_window16_16", 1, 113, 113, 2, 2, 24, 24, false, 16, 16},
      {"s257x113_d48_causal", 1, 257, 113, 2, 1, 48, 48, true},
      {"s113_d80_dv112", 1, 113, 113, 2, 2, 80, 112},
      {"s113_d136_softcap20_bhsd", 1, 113, 113, 2, 2, 136, 136, false, -1, -1, 20.f, 0,
       Layout::bhsd, 4},
      {"s100_d200_causal", 1, 100, 100, 2, 1, 200, 200, true},
      {"s77_d248", 1, 77, 77, 1, 1, 248, 248},
      // D 256 on the Hopper backward's shared-key tiles: a window, softcap, GQA and bhsd
      // strides, lengths that leave partial query and key tiles.
      {"s300x257_d256_gqa2_window64_16_softcap15_bhsd", 1, 300, 257, 4, 2, 256, 256, false, 64, 16,
       15.f, 0, Layout::bhsd, 3},
      // D 64 with softcap: the Hopper backward runs its own config there (64-query tiles, K / V
      // register fragments; plain D 64: 128-query tiles; bwd_configs.hpp, BwdWgmmaSoftcapConfig).
      {"s200x257_d64_gqa2_causal_softcap30", 1, 200, 257, 4, 2, 64, 64, true, -1, -1, 30.f, 0,
       Layout::packed, 6},
      // Head dims 72-96 on the Hopper backward's 96-column config (the 128 tile, products cut to
      // 96 columns): a causal mask with partial tiles, softcap, and head_dim != head_dim_v.
      {"s257x200_d96_causal_softcap15", 1, 257, 200, 2, 2, 96, 96, true, -1, -1, 15.f},
      {"s200x113_d72_dv96_gqa2_window24_8", 1, 200, 113, 4, 2, 72, 96, false, 24, 8},
      // Head dims 136-192 on the 192-column config (the 256 tile's shared keys, Sᵀ / dPᵀ over
      // 192 columns): DeepSeek's 192 / 128 under a causal mask, 160 / 64 with a window, softcap
      // and bhsd strides, and 176 / 192.
      {"s130x170_d192_dv128_gqa2_causal", 1, 130, 170, 4, 2, 192, 128, true},
      {"s200x257_d160_dv64_gqa2_window48_16_softcap10_bhsd", 1, 200, 257, 4, 2, 160, 64, false, 48,
       16, 10.f, 0, Layout::bhsd},
      {"s200_d176_dv192_softcap10_bhsd", 1, 200, 200, 2, 2, 176, 192, false, -1, -1, 10.f, 0,
       Layout::bhsd},
  };
  return cases;
}

flash_problem problem_fields(const AttentionDesc& d) {
  flash_problem p{};
  p.batch = d.batch;
  p.seqlen_q = d.seqlen_q;
  p.seqlen_kv = d.seqlen_kv;
  p.heads_q = d.heads_q;
  p.heads_kv = d.heads_kv;
  p.head_dim = d.head_dim;
  p.head_dim_v = d.head_dim_v ? d.head_dim_v : d.head_dim;
  p.dtype = static_cast<int32_t>(d.dtype);
  p.causal = d.causal;
  p.scale = d.scale > 0 ? d.scale : static_cast<float>(1.0 / std::sqrt(double(d.head_dim)));
  p.softcap = d.softcap;
  p.window_left = d.window_left;
  p.window_right = d.window_right;
  return p;
}

flash_problem resolve(const AttentionDesc& d, const HostTensor& q, const HostTensor& k,
                      const HostTensor& v, const HostTensor& o) {
  flash_problem p = problem_fields(d);
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = q.resolved[i];
    p.k_stride[i] = k.resolved[i];
    p.v_stride[i] = v.resolved[i];
    p.o_stride[i] = o.resolved[i];
  }
  return p;
}

namespace {

uint64_t seed_of(const std::string& key) {
  // FLASH_TEST_SEED varies the inputs between runs; the default is reproducible.
  const char* env = std::getenv("FLASH_TEST_SEED");
  return std::hash<std::string>{}(key) ^ (env ? std::strtoull(env, nullptr, 10) : 0x5eedULL);
}

std::unique_ptr<Prepared> build(const Case& c, DType dtype, bool backward) {
  auto p = std::make_unique<Prepared>();
  AttentionDesc& d = p->desc;
  d.batch = c.batch;
  d.seqlen_q = c.seqlen_q;
  d.seqlen_kv = c.seqlen_kv;
  d.heads_q = c.heads_q;
  d.heads_kv = c.heads_kv;
  d.head_dim = c.head_dim;
  d.head_dim_v = c.head_dim_v;
  d.dtype = dtype;
  d.scale = c.scale;
  d.causal = c.causal;
  d.window_left = c.window_left;
  d.window_right = c.window_right;
  d.softcap = c.softcap;
  p->q = HostTensor(dtype, c.batch, c.seqlen_q, c.heads_q, c.head_dim, c.layout);
  p->k = HostTensor(dtype, c.batch, c.seqlen_kv, c.heads_kv, c.head_dim, c.layout);
  p->v = HostTensor(dtype, c.batch, c.seqlen_kv, c.heads_kv, c.head_dim_v, c.layout);
  p->o = HostTensor(dtype, c.batch, c.seqlen_q, c.heads_q, c.head_dim_v, c.layout);
  d.q_stride = p->q.stride;
  d.k_stride = p->k.stride;
  d.v_stride = p->v.stride;
  d.o_stride = p->o.stride;
  std::mt19937_64 rng(seed_of(c.name + to_string(dtype) + (backward ? "bwd" : "fwd")));
  p->q.fill_random(rng, c.amplitude);
  p->k.fill_random(rng, c.amplitude);
  p->v.fill_random(rng, 1.0);
  p->problem = resolve(d, p->q, p->k, p->v, p->o);
  p->ref = reference::forward(p->problem, p->q.data(), p->k.data(), p->v.data());
  if (!backward) {
    p->naive = reference::naive_forward(p->problem, p->q.data(), p->k.data(), p->v.data());
    return p;
  }
  // Backward inputs: the forward's o and lse as a forward in this dtype returns them.
  p->dout = HostTensor(dtype, c.batch, c.seqlen_q, c.heads_q, c.head_dim_v, c.layout);
  p->dout.fill_random(rng, 1.0);
  const int64_t dv = c.head_dim_v;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t s = 0; s < c.seqlen_q; ++s)
      for (int64_t h = 0; h < c.heads_q; ++h)
        for (int64_t e = 0; e < dv; ++e)
          p->o.set(b, s, h, e, p->ref.o[((b * c.seqlen_q + s) * c.heads_q + h) * dv + e]);
  p->lse.assign(p->ref.lse.begin(), p->ref.lse.end());
  p->ref_grad =
      reference::backward(p->problem, p->q.data(), p->k.data(), p->v.data(), p->dout.data());
  p->naive_grad =
      reference::naive_backward(p->problem, p->q.data(), p->k.data(), p->v.data(), p->dout.data());
  return p;
}

}  // namespace

const Prepared& prepare(const Case& c, DType dtype, bool backward) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Prepared>> cache;
  const std::string key = c.name + "/" + to_string(dtype) + (backward ? "/bwd" : "/fwd");
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[key];
  if (!slot) slot = build(c, dtype, backward);
  return *slot;
}

}  // namespace flash::test
