// ctest cuda_work_tile_order (host only, no GPU): every order work_tile_slot gives is a
// permutation of the tiles, causal / banded orders start the longest query blocks of
// each L2 section first, the longest-first tail follows the sections, and
// work_tile_section_pairs / work_tile_tail_pairs size the sections and the tail. The device
// suite runs small problems, whose pairs all fit one section: the multi-section orders
// (and a short last section) are checked here.
#include <cstdio>
#include <vector>

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
  std::printf("%d orders checked, %d failures\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
