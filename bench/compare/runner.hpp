// Runs one problem on each requested backend: times it, checks it against the
// reference, and returns one Row per backend (skipped ones included, with the reason).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "common/device.hpp"
#include "compare/args.hpp"
#include "compare/row.hpp"

namespace compare {

class Runner {
 public:
  explicit Runner(const Options& options) : options_(options) {}

  // desc: a complete problem (backend field ignored), its inference arrays in host
  // memory (each backend gets device copies). progress_prefix is shown on the stderr
  // progress line, e.g. "[2/5] Sq=4096".
  std::vector<Row> run(const flash::AttentionDesc& desc, const std::string& progress_prefix);

 private:
  bench::Device* device(flash::Backend backend, std::string* why_not);

  const Options& options_;
  // One per backend for the whole run: opening a GPU context is slow.
  std::map<flash::Backend, std::unique_ptr<bench::Device>> devices_;
  std::map<flash::Backend, std::string> device_failures_;
};

// Writes "text" over the previous progress line on a terminal, one line otherwise.
void show_progress(const std::string& text);
void clear_progress();

}  // namespace compare
