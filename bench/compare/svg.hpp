// A small self-contained SVG line-plot writer (no dependencies): axes with ticks,
// axis labels, a title, one polyline with markers per series, and a legend.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace compare {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in x order
};

struct LinePlot {
  std::string title, x_label, y_label;
  bool log2_x = false;  // powers-of-two sweeps read better on a log axis
  std::vector<Series> series;
};

// The SVG document. Throws std::invalid_argument when there is nothing to draw.
std::string render_svg(const LinePlot& plot);

// Writes render_svg(plot) to path; throws std::runtime_error when it cannot.
void write_svg(const std::string& path, const LinePlot& plot);

}  // namespace compare
