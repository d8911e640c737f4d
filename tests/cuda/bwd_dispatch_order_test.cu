// ctest cuda_bwd_dispatch_order (host only, no GPU): the ordered backward's key-block groups
// (bwd_dq_order.cuh, bwd_group_slot; bwd_configs.hpp, bwd_dq_group) dispatch every (head, key
// block) once, and a block waits for another dispatched after it only inside its own group:
// under a causal mask the adds into a query tile go from the highest key block down, so key
// block j waits for key blocks j' > j of its head; when one of those is dispatched later, it
// must be in the same group, whose blocks (at most sms / 2) are resident together — otherwise
// the waits could form a cycle through blocks that no SM is free to run. The device suite's
// problems have a few key blocks a head; the many-group orders are checked here.
#include <cstdio>
#include <vector>

#include "bwd_dq_order.cuh"

namespace {

int failures = 0;

void fail(const char* what, int n, int group, int heads, int x) {
  if (++failures <= 10)
    std::printf("FAIL %s: key blocks %d group %d heads %d block %d\n", what, n, group, heads, x);
}

void check(int n, int group, int heads) {
  using flash::cuda::bwd_group_slot;
  std::vector<int> position(static_cast<size_t>(n) * heads, -1), group_of(position.size(), -1);
  for (int x = 0; x < n * heads; ++x) {
    const auto s = bwd_group_slot(x, n, group, heads);
    if (s.head < 0 || s.head >= heads || s.key_block < 0 || s.key_block >= n) {
      fail("slot out of range", n, group, heads, x);
      continue;
    }
    const size_t i = static_cast<size_t>(s.head) * n + s.key_block;
    if (position[i] >= 0) fail("slot taken twice", n, group, heads, x);
    position[i] = x;
    group_of[i] = (n - 1 - s.key_block) / group;  // groups counted from the last key blocks
  }
  for (int h = 0; h < heads; ++h)
    for (int j = 0; j < n; ++j)
      for (int later = j + 1; later < n; ++later) {
        const size_t a = static_cast<size_t>(h) * n + j, b = static_cast<size_t>(h) * n + later;
        if (position[b] > position[a] && group_of[b] != group_of[a])
          fail("waits for a later block of another group", n, group, heads, position[a]);
      }
  // Inside a group the key blocks go from the group's first (the heaviest under a causal
  // mask) up, and every head's group g comes before any head's group g + 1.
  for (int x = 1; x < n * heads; ++x) {
    const auto a = bwd_group_slot(x - 1, n, group, heads), b = bwd_group_slot(x, n, group, heads);
    const int ga = (n - 1 - a.key_block) / group, gb = (n - 1 - b.key_block) / group;
    if (gb < ga || (gb == ga && a.head == b.head && b.key_block != a.key_block + 1))
      fail("group order", n, group, heads, x);
  }
}

}  // namespace

int main() {
  int cases = 0;
  for (int n = 1; n <= 40; ++n)
    for (int cap = 1; cap <= n + 1; ++cap)
      for (int heads : {1, 2, 3, 5}) {
        // bwd_dq_group: equal groups of at most cap key blocks.
        check(n, flash::cuda::bwd_equal_group(n, cap), heads);
        ++cases;
      }
  // FlashAttention's causal 16k shapes on 132 SMs: 128 key blocks a head in four groups of
  // 32 (D 128: 16 heads, D 64: 32).
  check(128, 32, 16);
  check(128, 32, 32);
  std::printf("%d group orders checked, %d failures\n", cases + 2, failures);
  return failures == 0 ? 0 : 1;
}
