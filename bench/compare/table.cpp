#include "compare/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace compare {
namespace {

std::string format(const char* fmt, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), fmt, value);
  return text;
}

// Three significant digits: 0.000452, 1.23, 315; whole numbers from 1000 up.
std::string significant(double value) {
  if (value == 0.0) return "0";
  if (!std::isfinite(value)) return value > 0 ? "inf" : "nan";
  if (std::fabs(value) >= 1000) return format("%.0f", value);  // no exponent for big times
  return format("%.3g", value);
}

std::string error_text(const Row& r) {
  if (r.is_oracle) return "(oracle)";
  if (!r.check.checked) return "-";
  return format("%.2e", r.check.relative_error);
}

std::string of_copy_text(const Row& r) {
  if (r.is_oracle || r.copy_gbps <= 0) return "-";
  return format("%.2f", r.kv_gbps / r.copy_gbps);
}

std::string share_text(const Row& r) {
  if (r.is_oracle || !r.check.checked) return "-";
  if (!std::isfinite(r.check.tolerance_used)) return "FAIL (nan)";
  const std::string pct = format("%.1f%%", 100.0 * r.check.tolerance_used);
  return r.check.tolerance_used > 1.0 ? "FAIL " + pct : pct;
}

}  // namespace

void print_table(std::FILE* out, const std::vector<Row>& rows) {
  const bool sweep = std::any_of(rows.begin(), rows.end(), [&](const Row& r) {
    return r.desc.seqlen_q != rows.front().desc.seqlen_q ||
           r.desc.seqlen_kv != rows.front().desc.seqlen_kv;
  });
  // Decode rows: the rate of the K/V reads against the device's copy, same run.
  const bool copy =
      std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.copy_gbps > 0; });
  std::vector<std::string> header = {"backend",   "kernel / status", "runs",
                                     "median ms", "TFLOP/s",         "GB/s"};
  if (copy) header.insert(header.end(), {"K+V GB/s", "copy GB/s", "of copy"});
  header.insert(header.end(), {"max rel err", "tol used"});
  if (sweep) header.insert(header.begin(), {"Sq", "Sk", "B"});
  // A backend skipped for the same reason at every sweep point is listed once.
  std::vector<const Row*> shown;
  for (const Row& r : rows) {
    const bool repeat = !r.ok() && std::any_of(shown.begin(), shown.end(), [&](const Row* s) {
      return s->backend == r.backend && s->status == r.status;
    });
    if (!repeat) shown.push_back(&r);
  }
  std::vector<std::vector<std::string>> cells;
  for (const Row* row : shown) {
    const Row& r = *row;
    std::vector<std::string> line;
    if (sweep)
      line = {std::to_string(r.desc.seqlen_q), std::to_string(r.desc.seqlen_kv),
              std::to_string(r.desc.batch)};
    line.push_back(r.backend);
    if (!r.ok()) {
      line.push_back(r.status);
      line.resize(header.size());  // the status spans the numeric columns
    } else {
      line.push_back(r.kernel);
      line.push_back(std::to_string(r.runs));
      line.push_back(significant(r.median_ms));
      line.push_back(significant(r.tflops));
      line.push_back(r.is_oracle ? "-" : significant(r.gbps));
      if (copy) {
        line.push_back(r.is_oracle ? "-" : significant(r.kv_gbps));
        line.push_back(r.is_oracle || r.copy_gbps <= 0 ? "-" : significant(r.copy_gbps));
        line.push_back(of_copy_text(r));
      }
      line.push_back(error_text(r));
      line.push_back(share_text(r));
    }
    cells.push_back(line);
  }
  // The status of a skipped row may be long: it spans the remaining columns, so it
  // does not widen the kernel column.
  const size_t kernel_col = sweep ? 4 : 1;
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (size_t i = 0; i < shown.size(); ++i)
    for (size_t c = 0; c < header.size(); ++c)
      if (c != kernel_col || shown[i]->ok()) width[c] = std::max(width[c], cells[i][c].size());

  auto print_line = [&](const std::vector<std::string>& line, bool spans) {
    std::string text;
    for (size_t c = 0; c < line.size(); ++c) {
      if (spans && c == kernel_col) {
        text += line[c];
        break;
      }
      const bool left = c <= kernel_col;  // names left, numbers right
      std::string cell = line[c];
      const std::string pad(width[c] - std::min(width[c], cell.size()), ' ');
      text += (left ? cell + pad : pad + cell) + (c + 1 < line.size() ? "  " : "");
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    std::fprintf(out, "%s\n", text.c_str());
  };
  print_line(header, false);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  std::fprintf(out, "%s\n", std::string(total - 2, '-').c_str());
  for (size_t i = 0; i < shown.size(); ++i) print_line(cells[i], !shown[i]->ok());
}

}  // namespace compare
