#include "targets.hpp"

#include <cstdlib>
#include <sstream>

namespace flash::test {

std::vector<Target> all_targets() {
  std::vector<Target> out;
  for (const BackendInfo& info : backends()) {
    const std::string name = to_string(info.backend);
    const auto key = info.detail.find("supported=");
    if (info.backend == Backend::cpu && info.available && key != std::string::npos) {
      std::string list = info.detail.substr(key + 10);
      list = list.substr(0, list.find(';'));
      std::stringstream s(list);
      std::string simd;
      while (std::getline(s, simd, ','))
        if (!simd.empty()) out.push_back({info.backend, simd, name + "_" + simd, true, ""});
      // "unsupported=amx (needs AMX-TILE ...), avx512bf16 (needs AVX512_BF16 ...)": listed
      // too, so the suite reports a skip naming the missing CPU feature instead of
      // leaving the target out. Entries are separated by commas outside parentheses (a
      // reason may hold commas and parentheses of its own).
      const auto missing = info.detail.find("unsupported=");
      if (missing != std::string::npos) {
        const std::string& d = info.detail;
        size_t at = missing + 12;
        while (at < d.size() && d[at] != ';') {
          size_t end = at;
          for (int depth = 0; end < d.size(); ++end) {
            depth += d[end] == '(' ? 1 : d[end] == ')' ? -1 : 0;
            if (depth == 0 && (d[end] == ',' || d[end] == ';')) break;
          }
          const std::string entry = d.substr(at, end - at);
          const std::string simd_name = entry.substr(0, entry.find(' '));
          out.push_back({info.backend, simd_name, name + "_" + simd_name, false, entry});
          at = end;
          while (at < d.size() && (d[at] == ',' || d[at] == ' ')) ++at;
        }
      }
      continue;
    }
    out.push_back({info.backend, "", name, info.available, info.reason});
  }
  return out;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  const char* old = std::getenv(name);
  had_old_ = old != nullptr;
  if (old) old_ = old;
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
}

ScopedEnv::~ScopedEnv() {
  if (had_old_)
    setenv(name_.c_str(), old_.c_str(), 1);
  else
    unsetenv(name_.c_str());
}

}  // namespace flash::test
