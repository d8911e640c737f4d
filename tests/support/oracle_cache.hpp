// The oracle's results shared by the targets of one test. Tests that run the same
// problem on the same inputs on every backend / SIMD target (inputs from fixed seeds)
// compute the fp64 reference and the naive attention in the dtype once per problem
// instead of once per target: under CI's sanitizer build the recomputation was most of
// those tests' time, and it never depended on the target.
//
// The key holds every flash_problem field the oracle reads (array contents included)
// and a hash of each input's bytes, taken when the oracle is asked for, after the
// backend ran: a backend that wrote into an input gets the oracle of what it left
// there, as when each target computed its own. Entries live while the same test (gtest
// suite and test name, without the parameter) asks: the next test's first request
// drops them, so large results (2^20-key gradients) are not kept to the end.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "dispatch/module_abi.h"

namespace flash::test {

// Bytes of one input tensor (its whole buffer, padding included).
inline std::string_view bytes_of(const void* data, size_t bytes) {
  return std::string_view(static_cast<const char*>(data), bytes);
}

inline std::string oracle_key(const flash_problem& p,
                              std::initializer_list<std::string_view> inputs) {
  std::string key;
  const auto put = [&](const void* data, size_t bytes) {
    key.append(static_cast<const char*>(data), bytes);
  };
  for (int64_t x : {p.batch, p.seqlen_q, p.seqlen_kv, p.heads_q, p.heads_kv, p.head_dim,
                    p.head_dim_v, p.window_left, p.window_right, p.page_size, p.pages_per_seq,
                    p.num_pages, p.total_q, p.total_kv})
    put(&x, sizeof x);
  for (int32_t x : {p.dtype, p.causal}) put(&x, sizeof x);
  put(&p.scale, sizeof p.scale);
  put(&p.softcap, sizeof p.softcap);
  for (const int64_t* s : {p.q_stride, p.k_stride, p.v_stride, p.o_stride}) put(s, 3 * sizeof *s);
  const auto array = [&](const int32_t* a, int64_t n) {
    const char tag = a ? 1 : 0;  // null and empty differ
    put(&tag, 1);
    if (a && n > 0) put(a, static_cast<size_t>(n) * sizeof *a);
  };
  array(p.cu_seqlens_q, p.batch + 1);
  array(p.cu_seqlens_kv, p.batch + 1);
  array(p.seqlens_kv, p.batch);
  array(p.block_table, p.batch * p.pages_per_seq);
  for (std::string_view in : inputs) {
    const uint64_t size = in.size();
    const size_t hash = std::hash<std::string_view>{}(in);
    put(&size, sizeof size);
    put(&hash, sizeof hash);
  }
  return key;
}

// compute()'s result for key (and Result's type), computed on the first request of the
// running test.
template <class Result, class Compute>
const Result& oracle_cached(const std::string& key, Compute&& compute) {
  static std::mutex mutex;
  static std::string scope;
  static std::map<std::string, std::unique_ptr<Result>> cache;
  std::string test;
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    const std::string name = info->name();
    test = std::string(info->test_suite_name()) + "." + name.substr(0, name.find('/'));
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (test != scope) {
    cache.clear();
    scope = test;
  }
  auto& slot = cache[key];
  if (!slot) slot = std::make_unique<Result>(compute());
  return *slot;
}

}  // namespace flash::test
