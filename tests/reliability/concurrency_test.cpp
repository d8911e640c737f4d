// Concurrency: 8 threads call attention and attention_backward at the same time, with
// different shapes, dtypes, masks and backends (reference, cpu), plus the C API with a
// bad descriptor (its last-error message is per thread). Every result must be bitwise
// equal to the same call made alone on one thread, and every error message must be
// the caller's own.
//
// The concurrent phase runs first in the process, so the library's lazy
// initialisation (registry, module probing, SIMD target selection, per-thread
// workspaces) is itself exercised concurrently. Built and run under ThreadSanitizer
// by .ci/reliability.sh with OMP_NUM_THREADS=1: libgomp/libomp are not instrumented,
// so the OpenMP team's own synchronisation would be reported as races (false
// positives); with one OpenMP thread each call runs on its calling thread and TSan
// sees every access. The normal build runs it with the default OpenMP width.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flash/flash.h"
#include "flash/flash.hpp"

namespace {

struct Job {
  const char* name;
  flash::Backend backend;
  flash::DType dtype;
  bool backward;
  int64_t batch, sq, sk, hq, hkv, d, dv;
  bool causal;
  int64_t window_left;
  float softcap;
};

// Every job is small enough that 8 threads x a few rounds stays quick under TSan.
const Job kJobs[] = {
    {"ref_fwd_f32", flash::Backend::reference, flash::DType::f32, false, 2, 17, 33, 4, 2, 16, 16,
     false, -1, 0},
    {"cpu_fwd_bf16_causal", flash::Backend::cpu, flash::DType::bf16, false, 1, 65, 65, 2, 2, 64, 64,
     true, -1, 0},
    {"cpu_bwd_f32", flash::Backend::cpu, flash::DType::f32, true, 1, 31, 47, 2, 1, 32, 32, false,
     -1, 0},
    {"ref_bwd_f16_window", flash::Backend::reference, flash::DType::f16, true, 1, 13, 21, 2, 2, 8,
     8, false, 4, 0},
    {"cpu_fwd_f16_gqa_softcap", flash::Backend::cpu, flash::DType::f16, false, 2, 40, 70, 4, 1, 32,
     16, false, -1, 20},
    {"cpu_bwd_bf16_causal", flash::Backend::cpu, flash::DType::bf16, true, 1, 50, 30, 2, 2, 64, 64,
     true, 8, 0},
    {"cpu_fwd_f32_d1", flash::Backend::cpu, flash::DType::f32, false, 3, 9, 120, 1, 1, 1, 1, false,
     -1, 0},
    {"ref_fwd_bf16_dv", flash::Backend::reference, flash::DType::bf16, false, 1, 11, 19, 2, 1, 24,
     40, true, -1, 0},
};
constexpr int kThreads = 8;
constexpr int kRounds = 3;

size_t elem_bytes(flash::DType t) { return t == flash::DType::f32 ? 4 : 2; }

// Inputs and outputs of one job, packed. Inputs are deterministic per job.
struct JobRun {
  flash::AttentionDesc desc;
  std::vector<uint8_t> q, k, v, o, dout, dq, dk, dv;
  std::vector<float> lse;
  std::string error;  // empty when the call succeeded

  explicit JobRun(const Job& j) {
    desc.batch = j.batch;
    desc.seqlen_q = j.sq;
    desc.seqlen_kv = j.sk;
    desc.heads_q = j.hq;
    desc.heads_kv = j.hkv;
    desc.head_dim = j.d;
    desc.head_dim_v = j.dv;
    desc.dtype = j.dtype;
    desc.causal = j.causal;
    desc.window_left = j.window_left;
    desc.softcap = j.softcap;
    desc.backend = j.backend;
    const size_t eb = elem_bytes(j.dtype);
    q.resize(j.batch * j.sq * j.hq * j.d * eb);
    k.resize(j.batch * j.sk * j.hkv * j.d * eb);
    v.resize(j.batch * j.sk * j.hkv * j.dv * eb);
    o.resize(j.batch * j.sq * j.hq * j.dv * eb);
    dout.resize(o.size());
    dq.resize(q.size());
    dk.resize(k.size());
    dv.resize(v.size());
    lse.resize(j.batch * j.hq * j.sq);
    std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(j.name)));
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (auto* t : {&q, &k, &v, &dout}) fill(*t, j.dtype, rng, dist);
  }

  static void fill(std::vector<uint8_t>& t, flash::DType dtype, std::mt19937& rng,
                   std::uniform_real_distribution<float>& dist) {
    for (size_t i = 0; i < t.size(); i += elem_bytes(dtype)) {
      const float x = dist(rng);
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      if (dtype == flash::DType::f32) {
        std::memcpy(&t[i], &bits, 4);
      } else {
        // Small finite 16-bit patterns: bf16 = top half of the float; f16 built from
        // a 10-bit mantissa and exponents 13..15 (values in [2^-2, 2)), random sign.
        const uint16_t h =
            dtype == flash::DType::bf16
                ? static_cast<uint16_t>(bits >> 16)
                : static_cast<uint16_t>((bits & 0x8000'0000u) >> 16 |
                                        (13 + (bits >> 10) % 3) << 10 | (bits & 0x3ff));
        std::memcpy(&t[i], &h, 2);
      }
    }
  }

  void execute(bool backward) {
    try {
      if (!backward) {
        desc.lse = lse.data();
        flash::attention(desc, q.data(), k.data(), v.data(), o.data());
      } else {
        // The backward needs the forward's o and lse: run it first, on this thread.
        desc.lse = lse.data();
        flash::attention(desc, q.data(), k.data(), v.data(), o.data());
        desc.lse = nullptr;
        flash::attention_backward(desc, q.data(), k.data(), v.data(), o.data(), dout.data(),
                                  lse.data(), dq.data(), dk.data(), dv.data());
      }
    } catch (const flash::Error& e) {
      error = e.what();
    }
  }

  bool same_as(const JobRun& other, std::string& why) const {
    if (error != other.error) {
      why = "error '" + error + "' vs '" + other.error + "'";
      return false;
    }
    const std::pair<const char*,
                    std::pair<const std::vector<uint8_t>*, const std::vector<uint8_t>*>>
        outputs[] = {{"o", {&o, &other.o}},
                     {"dq", {&dq, &other.dq}},
                     {"dk", {&dk, &other.dk}},
                     {"dv", {&dv, &other.dv}}};
    for (const auto& [name, pair] : outputs)
      if (*pair.first != *pair.second) {
        why = std::string(name) + " differs bitwise";
        return false;
      }
    if (std::memcmp(lse.data(), other.lse.data(), lse.size() * sizeof(float)) != 0) {
      why = "lse differs bitwise";
      return false;
    }
    return true;
  }
};

// The C API from many threads: each thread's bad descriptor names its own field.
std::string c_api_error(int which) {
  flash_attention_desc d;
  flash_desc_init(&d);
  d.seqlen_q = 4;
  d.seqlen_kv = 4;
  d.head_dim = 8;
  d.backend = FLASH_BACKEND_REFERENCE;
  const char* field = "";
  switch (which % 4) {
    case 0:
      d.head_dim = -1, field = "head_dim";
      break;
    case 1:
      d.window_left = -5, field = "window_left";
      break;
    case 2:
      d.dtype = 9, field = "dtype";
      break;
    case 3:
      d.softcap = -1, field = "softcap";
      break;
  }
  float buf[4 * 8 * 4] = {};
  const flash_status s = flash_attention(&d, buf, buf + 32, buf + 64, buf + 96);
  const std::string msg = flash_last_error();
  if (s != FLASH_STATUS_INVALID_ARGUMENT) return "status " + std::to_string(s);
  if (msg.find(field) == std::string::npos) return "message of another call: " + msg;
  return "";
}

TEST(Concurrency, EightThreadsMatchSingleThreadedResultsBitwise) {
  constexpr int n_jobs = sizeof(kJobs) / sizeof(kJobs[0]);
  // Concurrent phase first (see the file comment): thread t runs jobs t, t+1, ...
  std::vector<std::vector<JobRun>> concurrent(kThreads);
  std::vector<std::string> c_api_failures(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      for (int r = 0; r < kRounds; ++r) {
        const Job& job = kJobs[(t + r) % n_jobs];
        concurrent[t].emplace_back(job);
        concurrent[t].back().execute(job.backward);
        if (c_api_failures[t].empty()) c_api_failures[t] = c_api_error(t + r);
      }
    });
  }
  for (std::thread& th : threads) th.join();

  // Single-threaded results, one per job.
  std::vector<JobRun> alone;
  for (const Job& job : kJobs) {
    alone.emplace_back(job);
    alone.back().execute(job.backward);
    EXPECT_EQ(alone.back().error, "") << job.name;
  }
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(c_api_failures[t], "") << "thread " << t;
    for (int r = 0; r < kRounds; ++r) {
      const int j = (t + r) % n_jobs;
      std::string why;
      EXPECT_TRUE(concurrent[t][r].same_as(alone[j], why))
          << kJobs[j].name << " on thread " << t << " round " << r << ": " << why;
    }
  }
}

// Repeated calls on one thread are bitwise reproducible too (no state leaks between
// calls through the per-thread workspaces).
TEST(Concurrency, RepeatedCallsAreBitwiseReproducible) {
  for (const Job& job : kJobs) {
    JobRun a(job), b(job);
    a.execute(job.backward);
    JobRun other(kJobs[(&job - kJobs + 1) % (sizeof(kJobs) / sizeof(kJobs[0]))]);
    other.execute(true);  // a different shape in between
    b.execute(job.backward);
    std::string why;
    EXPECT_TRUE(a.same_as(b, why)) << job.name << ": " << why;
  }
}

}  // namespace
