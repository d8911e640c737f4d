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
