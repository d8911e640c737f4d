// Work and traffic of one attention call, the denominators of TFLOP/s and GB/s.
//
// FLOPs (FlashAttention's count, so numbers compare with published figures):
//   forward  = 2·(D + Dv)·B·Hq·pairs   (Q·Kᵀ and P·V, one multiply-add = 2 FLOPs),
//              which is 4·B·Hq·Sq·Sk·D when Dv = D and nothing is masked;
//   backward = 2.5 × forward.
// pairs = visible (query, key) pairs of one head:
//   - no mask:                      Sq·Sk;
//   - causal, Sq = Sk, no window:   Sq·Sk/2 (the convention: "half for causal");
//   - any other mask (causal with Sq ≠ Sk, sliding windows): the exact count of
//     visible pairs under the bottom-right aligned mask, so a decode step
//     (Sq = 1, causal) counts all Sk keys instead of half of them.
// Softcap's tanh and the softmax exponentials are not counted (as upstream).
// Packed batches and caches count each sequence with its own lengths (Sq_b, Sk_b).
//
// Bytes: the compulsory traffic, each tensor read or written once:
//   forward  reads q, the K/V rows some query sees (kv_bytes_read) and writes o (+ lse
//            when requested);
//   backward reads q, k, v, o, dout, lse and writes dq, dk, dv.
// kv_bytes_read is what a decode step's speed is measured in: per sequence, the keys
// at least one of its rows sees (keys_read, sequences.hpp), K and V once, over the kv
// heads; a cache's unused capacity and a paged pool's other pages are not counted.
#pragma once

#include <cstdint>

#include "flash/flash.hpp"

namespace bench {

// Visible (query, key) pairs of one (batch, head) under desc's mask, counted exactly.
int64_t exact_visible_pairs(const flash::AttentionDesc& d);

// The pairs the FLOP count uses (see the rule above).
double counted_pairs(const flash::AttentionDesc& d);

double forward_flops(const flash::AttentionDesc& d);
double backward_flops(const flash::AttentionDesc& d);

double kv_bytes_read(const flash::AttentionDesc& d);
double forward_bytes(const flash::AttentionDesc& d, bool with_lse);
double backward_bytes(const flash::AttentionDesc& d);

}  // namespace bench
