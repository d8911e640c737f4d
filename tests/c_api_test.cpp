// The C API: status codes, thread-local messages, no exception escapes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>

#include "flash/flash.h"

extern "C" int flash_c_check_run(float* out_first);
extern "C" int flash_c_check_bad(int which);
extern "C" int flash_c_check_inference(float* max_diff);
extern "C" int flash_c_check_bad_page(void);

namespace {

TEST(CApi, RunsAndReportsOk) {
  float first = 0;
  EXPECT_EQ(flash_c_check_run(&first), FLASH_STATUS_OK) << flash_last_error();
  EXPECT_TRUE(std::isfinite(first));
  EXPECT_STREQ(flash_last_error(), "");
  EXPECT_STRNE(flash_version(), "");
}

TEST(CApi, BadInputsReturnCodesAndMessages) {
  const char* expected[] = {"head_dim", "dtype", "backend", "desc", "q = nullptr"};
  for (int which = 0; which < 5; ++which) {
    EXPECT_EQ(flash_c_check_bad(which), FLASH_STATUS_INVALID_ARGUMENT) << which;
    EXPECT_NE(std::string(flash_last_error()).find(expected[which]), std::string::npos)
        << flash_last_error();
  }
}

TEST(CApi, LastErrorIsPerThread) {
  EXPECT_EQ(flash_c_check_bad(0), FLASH_STATUS_INVALID_ARGUMENT);
  std::string other;
  std::thread([&] { other = flash_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(flash_last_error()), "");
}

TEST(CApi, InferenceFieldsAndMerge) {
  float diff = -1;
  EXPECT_EQ(flash_c_check_inference(&diff), FLASH_STATUS_OK) << flash_last_error();
  EXPECT_EQ(diff, 0.0f) << "merge with an empty part changed the result";
  EXPECT_EQ(flash_c_check_bad_page(), FLASH_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flash_last_error()).find("page_size = 16"), std::string::npos)
      << flash_last_error();
}

// flash_backend_count/info and flash_explain: what Python's flashattn.backends() and
// explain() read through ctypes.
TEST(CApi, BackendsAndExplain) {
  const int32_t count = flash_backend_count();
  ASSERT_GE(count, 1);
  bool reference_available = false;
  for (int32_t i = 0; i < count; ++i) {
    int32_t backend = -1, available = -1;
    const char* reason = nullptr;
    const char* detail = nullptr;
    ASSERT_EQ(flash_backend_info(i, &backend, &available, &reason, &detail), FLASH_STATUS_OK)
        << flash_last_error();
    ASSERT_NE(reason, nullptr);
    ASSERT_NE(detail, nullptr);
    if (backend == FLASH_BACKEND_REFERENCE) reference_available = available == 1;
  }
  EXPECT_TRUE(reference_available);
  EXPECT_EQ(flash_backend_info(count, nullptr, nullptr, nullptr, nullptr),
            FLASH_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flash_last_error()).find("index"), std::string::npos);

  flash_attention_desc desc;
  flash_desc_init(&desc);
  desc.seqlen_q = 2;
  desc.seqlen_kv = 3;
  desc.head_dim = 4;
  desc.backend = FLASH_BACKEND_REFERENCE;
  int32_t backend = -1;
  const char* kernel = nullptr;
  const char* reason = nullptr;
  ASSERT_EQ(flash_explain(&desc, 0, nullptr, &backend, &kernel, &reason), FLASH_STATUS_OK)
      << flash_last_error();
  EXPECT_EQ(backend, FLASH_BACKEND_REFERENCE);
  ASSERT_NE(kernel, nullptr);
  desc.head_dim = 0;
  EXPECT_EQ(flash_explain(&desc, 1, nullptr, &backend, &kernel, &reason),
            FLASH_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flash_last_error()).find("head_dim"), std::string::npos);
}

}  // namespace
