// Replays the fuzz seed corpus (tests/fuzz/corpus) and every input the fuzzer once
// failed on (tests/fuzz/regressions) through the fuzzer's own check, in every build
// (no clang or libFuzzer needed).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_check.hpp"

namespace {

namespace fs = std::filesystem;

void replay(const char* sub, int min_files) {
  const fs::path dir = fs::path(FLASHATTN_FUZZ_DIR) / sub;
  int n = 0;
  if (fs::exists(dir))
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_regular_file() || entry.path().filename().string()[0] == '.') continue;
      std::ifstream f(entry.path(), std::ios::binary);
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                       std::istreambuf_iterator<char>());
      const std::string failure = flash::fuzz::check_one(bytes.data(), bytes.size());
      EXPECT_EQ(failure, "") << entry.path() << ": "
                             << flash::fuzz::describe(bytes.data(), bytes.size());
      ++n;
    }
  EXPECT_GE(n, min_files) << "inputs in " << dir;
}

TEST(FuzzReplay, SeedCorpus) { replay("corpus", 4); }
TEST(FuzzReplay, Regressions) { replay("regressions", 0); }

}  // namespace
