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

}  // namespace
