#include "compare/json.hpp"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/problem.hpp"

namespace compare {
namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", c);
          out += esc;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// JSON has no inf or nan: those become null.
std::string number(double x) {
  if (!std::isfinite(x)) return "null";
  std::ostringstream s;
  s.precision(6);
  s << x;
  return s.str();
}

// An inference array as a JSON list, or null when unset.
std::string array(const int32_t* values, int64_t count) {
  if (!values) return "null";
  std::string out = "[";
  for (int64_t i = 0; i < count; ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

std::string layout(const flash::AttentionDesc& d) {
  const std::string label = bench::layout_label(d);
  return label.empty() ? "dense" : label;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

}  // namespace

void write_json(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("--json: cannot write '" + path + "'");
  out << "{\n \"tool\": \"flashattn-compare\",\n \"flashattn_version\": "
      << quoted(flash::version()) << ",\n \"date\": " << quoted(utc_now()) << ",\n \"backends\": [";
  const char* sep = "\n  ";
  for (const flash::BackendInfo& b : flash::backends()) {
    out << sep << "{\"name\": " << quoted(flash::to_string(b.backend))
        << ", \"available\": " << (b.available ? "true" : "false")
        << ", \"detail\": " << quoted(b.detail) << ", \"reason\": " << quoted(b.reason) << "}";
    sep = ",\n  ";
  }
  out << "],\n \"rows\": [";
  sep = "\n  ";
  for (const Row& r : rows) {
    const flash::AttentionDesc& d = r.desc;
    out << sep << "{\"backend\": " << quoted(r.backend) << ", \"kernel\": " << quoted(r.kernel)
        << ", \"status\": " << quoted(r.status)
        << ", \"direction\": " << quoted(r.backward ? "backward" : "forward")
        << ", \"dtype\": " << quoted(flash::to_string(d.dtype)) << ", \"batch\": " << d.batch
        << ", \"heads_q\": " << d.heads_q << ", \"heads_kv\": " << d.heads_kv
        << ", \"seqlen_q\": " << d.seqlen_q << ", \"seqlen_kv\": " << d.seqlen_kv
        << ", \"head_dim\": " << d.head_dim << ", \"head_dim_v\": " << bench::value_dim(d)
        << ", \"causal\": " << (d.causal ? "true" : "false")
        << ", \"window_left\": " << d.window_left << ", \"window_right\": " << d.window_right
        << ", \"softcap\": " << number(d.softcap) << ", \"layout\": " << quoted(layout(d))
        << ", \"cu_seqlens_q\": " << array(d.cu_seqlens_q, d.batch + 1)
        << ", \"cu_seqlens_kv\": " << array(d.cu_seqlens_kv, d.batch + 1)
        << ", \"seqlens_kv\": " << array(d.seqlens_kv, d.batch)
        << ", \"page_size\": " << d.page_size << ", \"pages_per_seq\": " << d.pages_per_seq
        << ", \"num_pages\": " << d.num_pages << ", \"runs\": " << r.runs
        << ", \"median_ms\": " << number(r.median_ms) << ", \"min_ms\": " << number(r.min_ms)
        << ", \"tflops\": " << number(r.tflops) << ", \"gbps\": " << number(r.gbps)
        << ", \"kv_gbps\": " << number(r.kv_gbps)
        << ", \"copy_gbps\": " << (r.copy_gbps > 0 ? number(r.copy_gbps) : "null")
        << ", \"of_copy\": " << (r.copy_gbps > 0 ? number(r.kv_gbps / r.copy_gbps) : "null")
        << ", \"is_oracle\": " << (r.is_oracle ? "true" : "false")
        << ", \"checked\": " << (r.check.checked ? "true" : "false")
        << ", \"check_coverage\": " << quoted(r.check.coverage)
        << ", \"relative_error\": " << number(r.check.relative_error)
        << ", \"tolerance\": " << number(r.check.tolerance)
        << ", \"tolerance_used\": " << number(r.check.tolerance_used) << "}";
    sep = ",\n  ";
  }
  out << "\n ]\n}\n";
  if (!out) throw std::runtime_error("--json: error writing '" + path + "'");
}

}  // namespace compare
