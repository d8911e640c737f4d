// Work items of a CPU call (backends/cpu/cpu_plan.h): in either order (head-major, or
// cost-major for few items per thread) every (batch, kv head, block) is one item
// exactly once, the cost-major order starts with the costliest blocks, and the order
// does not change what an item covers (results are checked bitwise across thread
// counts in flash_cpu_determinism_test and flash_cpu_bf16_kernel_test).
#include "backends/cpu/cpu_plan.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace flash::cpu {
namespace {

// The avx512 target's tiles (what the AVX-512 kernels use).
constexpr TargetTiles kTiles{16, 96, 96, 48, 24};

flash_problem Problem(int64_t batch, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, bool causal) {
  flash_problem p{};
  p.batch = batch;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seqlen_q = sq;
  p.seqlen_kv = sk;
  p.head_dim = p.head_dim_v = 64;
  p.causal = causal;
  p.window_left = p.window_right = -1;
  return p;
}

// Every (b, hkv, block) appears once among the q items and the kv items.
void ExpectEachItemOnce(const Plan& plan) {
  std::set<std::tuple<int64_t, int64_t, int64_t>> q, kv;
  for (int64_t item = 0; item < plan.q_items(); ++item) {
    int64_t b, h, qb;
    plan.decode_q_item(item, b, h, qb);
    ASSERT_TRUE(b >= 0 && b < plan.a.p->batch && h >= 0 && h < plan.a.p->heads_kv && qb >= 0 &&
                qb < plan.q_blocks);
    EXPECT_TRUE(q.insert({b, h, qb}).second) << "q item " << item << " repeats";
  }
  for (int64_t item = 0; item < plan.kv_items(); ++item) {
    int64_t b, h, kb;
    plan.decode_kv_item(item, b, h, kb);
    ASSERT_TRUE(kb >= 0 && kb < plan.kv_blocks && kb % plan.kv_per_item == 0);
    EXPECT_TRUE(kv.insert({b, h, kb}).second) << "kv item " << item << " repeats";
  }
  EXPECT_EQ(static_cast<int64_t>(q.size()), plan.q_items());
  EXPECT_EQ(static_cast<int64_t>(kv.size()), plan.kv_items());
}

TEST(CpuPlan, EveryItemOnceInEitherOrder) {
  if (!Plan::CostOrderEnabled()) GTEST_SKIP() << "FLASH_CPU_COST_ORDER=0 keeps head-major order";
  for (bool causal : {false, true})
    for (auto [batch, hq, hkv, sq, sk] :
         {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{1, 16, 16, 1024, 1024},
          {2, 6, 2, 257, 1000},
          {1, 1, 1, 17, 113},
          {3, 8, 8, 4096, 4096},
          {1, 4, 1, 1000, 17}}) {
      const flash_problem p = Problem(batch, hq, hkv, sq, sk, causal);
      const CallArgs args{&p,      nullptr, nullptr, nullptr, nullptr, nullptr,
                          nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
      for (int64_t threads : {1, 2, 16, 64}) {
        Plan plan = Plan::Make(args, kTiles, Plan::kMaxPasses, Plan::kMaxPasses);
        plan.OrderForThreads(threads);
        const bool few_q = plan.q_items() < Plan::kHeadMajorItemsPerThread * threads;
        EXPECT_EQ(plan.q_order.empty(), !few_q);
        ExpectEachItemOnce(plan);
      }
    }
}

// S = 1k, 16 heads, 16 threads: 48 forward items, cost-major. Causal: the last q block
// (the most keys) first, then the middle one, for every head before the next block.
// Non-causal: the two full blocks before the short last one.
TEST(CpuPlan, CostMajorStartsWithTheCostliestBlocks) {
  if (!Plan::CostOrderEnabled()) GTEST_SKIP() << "FLASH_CPU_COST_ORDER=0 keeps head-major order";
  for (bool causal : {false, true}) {
    const flash_problem p = Problem(1, 16, 16, 1024, 1024, causal);
    const CallArgs args{&p,      nullptr, nullptr, nullptr, nullptr, nullptr,
                        nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    Plan plan = Plan::Make(args, kTiles, Plan::kMaxPasses, Plan::kMaxPasses);
    plan.OrderForThreads(16);
    ASSERT_EQ(plan.q_blocks, 3);
    ASSERT_EQ(plan.q_order.size(), 3u);
    if (causal) {
      EXPECT_EQ(plan.q_order[0], 2);
      EXPECT_EQ(plan.q_order[2], 0);
      EXPECT_EQ(plan.kv_order.front(), 0);  // the first keys are seen by every row
    } else {
      EXPECT_EQ(plan.q_order[2], 2);  // 256 rows against 384
    }
    for (int64_t item = 0; item < 16; ++item) {  // the first 16 items: one block, all heads
      int64_t b, h, qb;
      plan.decode_q_item(item, b, h, qb);
      EXPECT_EQ(qb, plan.q_order[0]);
      EXPECT_EQ(h, item);
    }
  }
}

}  // namespace
}  // namespace flash::cpu
