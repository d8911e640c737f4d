// ctest cuda_work_tile_order (host only, no GPU): every order work_tile_slot gives is a
// permutation of the tiles, causal / banded orders start the longest query blocks of
// each L2 section first, the longest-first tail follows the sections, and
// work_tile_section_pairs / work_tile_tail_pairs size the sections and the tail; the split
// tail (fwd_tail_split.cuh) covers every step of its tiles once. The device
// suite runs small problems, whose pairs all fit one section: the multi-section orders
// (and a short last section) are checked here.
#include <cstdio>
#include <vector>

#include "fwd_tail_split.cuh"
#include "work_tile_order.cuh"

namespace {

int failures = 0;

// index: the tile number, or the (pair, query block) slot for "each tile exactly once".
void expect(bool ok, const char* what, int qblocks, int pairs, bool bounded, int section, int tail,
            int index) {
  if (ok) return;
  if (++failures <= 10)
    std::printf("FAIL %s: qblocks %d pairs %d bounded %d section_pairs %d tail_pairs %d index %d\n",
                what, qblocks, pairs, bounded, section, tail, index);
}

void expect_pairs(int got, int want, const char* what) {
  if (got == want) return;
  ++failures;
  std::printf("FAIL section pairs, %s: got %d, want %d\n", what, got, want);
}

void check(int qblocks, int pairs, bool bounded, int section, int tail) {
  using flash::cuda::work_tile_slot;
  const int total = qblocks * pairs;
  std::vector<int> seen(static_cast<size_t>(total), 0);
  int prev_section = -1, prev_qblock = 0;
  for (int t = 0; t < total; ++t) {
    const flash::cuda::WorkTileSlot w = work_tile_slot(t, qblocks, pairs, bounded, section, tail);
    const bool in_range = w.qblock >= 0 && w.qblock < qblocks && w.pair >= 0 && w.pair < pairs;
    expect(in_range, "slot out of range", qblocks, pairs, bounded, section, tail, t);
    if (!in_range) continue;
    ++seen[static_cast<size_t>(w.pair) * qblocks + w.qblock];
    if (!bounded) {
      expect(w.qblock == t % qblocks && w.pair == t / qblocks, "unmasked order", qblocks, pairs,
             bounded, section, tail, t);
      continue;
    }
    // Sections run in order, then the tail (one run of its own); inside either the query
    // blocks never grow.
    const int body = pairs - tail;
    const int s = w.pair < body ? w.pair / section : pairs;
    expect(s >= prev_section, "sections in order", qblocks, pairs, bounded, section, tail, t);
    if (s == prev_section)
      expect(w.qblock <= prev_qblock, "longest first in a section", qblocks, pairs, bounded,
             section, tail, t);
    prev_section = s;
    prev_qblock = w.qblock;
  }
  for (int i = 0; i < total; ++i)
    expect(seen[static_cast<size_t>(i)] == 1, "each tile exactly once", qblocks, pairs, bounded,
           section, tail, i);
}

// The split tail (fwd_tail_split.cuh) of `total` tiles of `steps` steps on `blocks` blocks:
// the items enumerate the whole tiles once and then the ranges; every step of every split tile
// lies in exactly one segment, in order; a range has one or two segments (the second at the
// start of the next tile); fwd_tail_pieces names each tile's segments; the partial indices
// are unique and below the buffer's count.
void check_tail(int total, int steps, int blocks, bool forced) {
  using namespace flash::cuda;
  const FwdTailSplit s = fwd_tail_plan(total, steps, blocks, forced);
  const int rest = total % blocks;
  const int64_t range_steps = forced ? 1 : kFwdTailMinRangeSteps;
  const bool want =
      total >= blocks && rest > 0 && steps >= 2 &&
      static_cast<int64_t>(rest) * steps >= blocks * range_steps &&
      (forced || static_cast<int64_t>(blocks - rest) * steps >= blocks * kFwdTailMinSavedSteps);
  char what[96];
  std::snprintf(what, sizeof what, "tail total %d steps %d blocks %d forced %d", total, steps,
                blocks, forced);
  if ((s.ranges > 0) != want) {
    ++failures;
    std::printf("FAIL %s: split %d, want %d\n", what, s.ranges > 0, want);
    return;
  }
  const int items = fwd_tail_items(s, total);
  if (s.ranges == 0) {
    if (items != total) ++failures, std::printf("FAIL %s: items %d\n", what, items);
    return;
  }
  const int split = total - s.first;
  std::vector<int> covered(static_cast<size_t>(split) * steps, 0);
  std::vector<int> parts(static_cast<size_t>(s.ranges + split), 0);
  std::vector<std::vector<int>> pieces_of(static_cast<size_t>(split));
  for (int item = 0; item < items; ++item) {
    const int slot = fwd_tail_slot_of_item(s, total, item);
    if (item < s.first) {
      if (slot != item) ++failures, std::printf("FAIL %s: whole item %d\n", what, item);
      continue;
    }
    for (int k = 0; k < 2; ++k) {
      const int j = (slot - total) / 2;
      const FwdTailSegment seg = fwd_tail_segment(s, total, j, k);
      if (seg.steps == 0) {
        if (k == 0) ++failures, std::printf("FAIL %s: range %d empty\n", what, j);
        continue;
      }
      const bool in_range = seg.tile >= s.first && seg.tile < total && seg.step_begin >= 0 &&
                            seg.step_begin + seg.steps <= steps && (k == 0 || seg.step_begin == 0);
      if (!in_range) {
        ++failures, std::printf("FAIL %s: range %d segment %d out of range\n", what, j, k);
        continue;
      }
      for (int u = seg.step_begin; u < seg.step_begin + seg.steps; ++u)
        ++covered[static_cast<size_t>(seg.tile - s.first) * steps + u];
      ++parts[static_cast<size_t>(fwd_tail_part_index(s, j, seg.tile))];
      pieces_of[static_cast<size_t>(seg.tile - s.first)].push_back(j);
    }
  }
  for (size_t u = 0; u < covered.size(); ++u)
    if (covered[u] != 1)
      ++failures, std::printf("FAIL %s: step %zu covered %d\n", what, u, covered[u]);
  for (size_t i = 0; i < parts.size(); ++i)
    if (parts[i] > 1) ++failures, std::printf("FAIL %s: partial %zu shared\n", what, i);
  for (int a = 0; a < split; ++a) {
    const FwdTailPieces p = fwd_tail_pieces(s, total, s.first + a);
    const std::vector<int>& got = pieces_of[static_cast<size_t>(a)];
    bool ok = p.count == static_cast<int>(got.size());
    for (int q = 0; ok && q < p.count; ++q) ok = got[static_cast<size_t>(q)] == p.j_first + q;
    ok = ok && p.first_is_second_segment ==
                   (fwd_tail_range_start(s, total, p.j_first) < static_cast<int64_t>(a) * steps);
    if (!ok) ++failures, std::printf("FAIL %s: pieces of split tile %d\n", what, a);
  }
}

}  // namespace

int main() {
  int cases = 0;
  for (int qblocks : {1, 2, 3, 7, 32, 129})
    for (int pairs : {1, 2, 3, 5, 16, 33, 64})
      for (int section = 1; section <= pairs; section += section < 4 ? 1 : 3) {
        for (int s : {section, pairs})  // every sweep ends with one section of all pairs
          for (int tail : {0, 1, pairs / 2, pairs - 1, pairs}) {  // none, some, all pairs
            check(qblocks, pairs, true, s, tail);
            check(qblocks, pairs, false, s, tail);
            cases += 2;
          }
      }
  // Sections: 50 MiB L2 / 4 at D 128, bf16: 4k keys (2 MiB of K/V a head) -> 6 pairs,
  // 16k (8 MiB) -> 1; GQA group 4 reads a quarter per query head; no budget, or less
  // than one head, -> 1; never more than the launch's pairs.
  using flash::cuda::work_tile_section_pairs;
  const int64_t quarter_l2 = 50ll * 1024 * 1024 / 4;
  expect_pairs(work_tile_section_pairs(quarter_l2, 4096, 128, 128, 2, 1, 64), 6, "4k D128");
  expect_pairs(work_tile_section_pairs(quarter_l2, 16384, 128, 128, 2, 1, 16), 1, "16k D128");
  expect_pairs(work_tile_section_pairs(quarter_l2, 4096, 128, 128, 2, 4, 64), 25, "GQA 4");
  expect_pairs(work_tile_section_pairs(0, 4096, 128, 128, 2, 1, 64), 1, "no budget");
  expect_pairs(work_tile_section_pairs(1000, 4096, 128, 128, 2, 1, 64), 1, "under one head");
  expect_pairs(work_tile_section_pairs(quarter_l2, 1, 64, 64, 2, 1, 5), 5, "all pairs");
  expect_pairs(work_tile_section_pairs(quarter_l2, 0, 64, 64, 2, 1, 5), 5, "no keys");
  // Tail: 3 waves of 132 blocks over 32 query blocks a pair -> 13 pairs (416 tiles), at
  // most the launch's pairs; 1 query block a pair -> 396 pairs.
  using flash::cuda::work_tile_tail_pairs;
  expect_pairs(work_tile_tail_pairs(32, 64, 132), 13, "tail at 4k");
  expect_pairs(work_tile_tail_pairs(128, 16, 132), 4, "tail at 16k");
  expect_pairs(work_tile_tail_pairs(32, 8, 132), 8, "tail of all pairs");
  expect_pairs(work_tile_tail_pairs(1, 1000, 132), 396, "tail of single tiles");
  // The split tail: FlashAttention's D 128 shapes on 132 SMs (2048 tiles of 22 / 86 steps),
  // the tests' grids of two and three blocks, and small odd cuts.
  int tails = 0;
  for (int blocks : {2, 3, 5, 7, 132})
    for (int total : {1, 2, 3, 4, 5, 8, 13, 137, 2048, 2111})
      for (int steps : {1, 2, 3, 6, 8, 22, 86})
        for (bool forced : {true, false}) {
          check_tail(total, steps, blocks, forced);
          ++tails;
        }
  // FlashAttention's shapes on 132 SMs: D 256 1k (1024 tiles of 13 steps) and D 128 4k (2048
  // of 22) take no split, D 128 16k (2048 of 86) and D 64 4k (2816 of 32) do.
  using flash::cuda::fwd_tail_plan;
  const bool d256_1k = fwd_tail_plan(1024, 13, 132, false).ranges > 0;
  const bool d128_4k = fwd_tail_plan(2048, 22, 132, false).ranges > 0;
  const bool d128_16k = fwd_tail_plan(2048, 86, 132, false).ranges > 0;
  const bool d64_4k = fwd_tail_plan(2816, 32, 132, false).ranges > 0;
  if (d256_1k || d128_4k || !d128_16k || !d64_4k) {
    ++failures;
    std::printf("FAIL tail plans at the benchmark shapes: %d %d %d %d\n", d256_1k, d128_4k,
                d128_16k, d64_4k);
  }
  std::printf("%d orders and %d tail splits checked, %d failures\n", cases, tails, failures);
  return failures == 0 ? 0 : 1;
}
