// One line of flashattn-compare's output: one problem on one backend.
#pragma once

#include <string>

#include "common/oracle.hpp"
#include "flash/flash.hpp"

namespace compare {

struct Row {
  // The problem (desc.backend: the backend of this row). Its inference arrays point
  // into the bench::Problem the row was run from, which main keeps for the whole run.
  flash::AttentionDesc desc;
  bool backward = false;
  std::string backend;
  std::string kernel;  // what ran: the backend's detail until flash::explain() exists
  std::string status;  // "ok", or "skipped: why" / "error: what"
  int runs = 0;
  double median_ms = 0.0, min_ms = 0.0;
  double tflops = 0.0;     // at the median time
  double gbps = 0.0;       // compulsory traffic at the median time
  double kv_gbps = 0.0;    // K and V rows the sequences see (bench::kv_bytes_read)
  double copy_gbps = 0.0;  // a device copy of as many bytes, same run; 0 = not measured
  bench::CheckResult check;
  bool is_oracle = false;  // the reference row: timed on the oracle's sample

  bool ok() const { return status == "ok"; }
};

}  // namespace compare
