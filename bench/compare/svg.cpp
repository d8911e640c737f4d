#include "compare/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace compare {
namespace {

// Canvas layout in SVG user units (pixels).
constexpr double kWidth = 760, kHeight = 440;
constexpr double kLeft = 70, kRight = 170, kTop = 40, kBottom = 60;  // margins
constexpr double kTickLength = 5, kMarkerRadius = 3.5;
constexpr int kTargetTicks = 6;
// Share of the x range left empty at each end, so end markers clear the axes.
constexpr double kXPadding = 0.04;
// Distinguishable colours (Okabe-Ito palette, readable with colour blindness).
const char* const kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                               "#E69F00", "#56B4E9", "#F0E442", "#000000"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string num(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", x);
  return text;
}

std::string tick_label(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", x);  // 1-2-5 steps print exactly
  return text;
}

// A 1-2-5 step that puts about kTargetTicks ticks on [0, top].
double nice_step(double top) {
  const double raw = top / kTargetTicks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * magnitude >= raw) return m * magnitude;
  return 10.0 * magnitude;
}

}  // namespace

std::string render_svg(const LinePlot& plot) {
  double x_min = INFINITY, x_max = -INFINITY, y_max = 0.0;
  for (const Series& s : plot.series)
    for (const auto& [x, y] : s.points) {
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_max = std::max(y_max, y);
    }
  if (!std::isfinite(x_min)) throw std::invalid_argument("plot: no points to draw");
  const bool log_x = plot.log2_x && x_min > 0.0;
  auto x_axis = [&](double x) { return log_x ? std::log2(x) : x; };
  double ax_lo = x_axis(x_min), ax_hi = x_axis(x_max);
  if (ax_hi == ax_lo) {  // one point: give it some room
    ax_lo -= 1.0;
    ax_hi += 1.0;
  }
  const double pad = kXPadding * (ax_hi - ax_lo);
  ax_lo -= pad;
  ax_hi += pad;
  const double y_step = nice_step(y_max > 0.0 ? y_max : 1.0);
  const double y_top = std::ceil((y_max > 0.0 ? y_max : 1.0) / y_step) * y_step;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x_axis(x) - ax_lo) / (ax_hi - ax_lo) * plot_w; };
  auto py = [&](double y) { return kTop + plot_h - y / y_top * plot_h; };

  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << " " << kHeight
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << num(kWidth / 2) << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">"
    << escape(plot.title) << "</text>\n";

  // Horizontal grid lines with y tick labels.
  for (double y = 0.0; y <= y_top * (1 + 1e-9); y += y_step) {
    s << "<line x1=\"" << num(kLeft) << "\" x2=\"" << num(kLeft + plot_w) << "\" y1=\""
      << num(py(y)) << "\" y2=\"" << num(py(y)) << "\" stroke=\"#ddd\"/>\n"
      << "<text x=\"" << num(kLeft - kTickLength - 3) << "\" y=\"" << num(py(y) + 4)
      << "\" text-anchor=\"end\">" << tick_label(y) << "</text>\n";
  }
  // X ticks at the data's x values (sweep points), or evenly on a linear axis.
  std::vector<double> x_ticks;
  for (const Series& series : plot.series)
    for (const auto& point : series.points) x_ticks.push_back(point.first);
  std::sort(x_ticks.begin(), x_ticks.end());
  x_ticks.erase(std::unique(x_ticks.begin(), x_ticks.end()), x_ticks.end());
  for (double x : x_ticks)
    s << "<line x1=\"" << num(px(x)) << "\" x2=\"" << num(px(x)) << "\" y1=\"" << num(kTop + plot_h)
      << "\" y2=\"" << num(kTop + plot_h + kTickLength) << "\" stroke=\"black\"/>\n"
      << "<text x=\"" << num(px(x)) << "\" y=\"" << num(kTop + plot_h + kTickLength + 14)
      << "\" text-anchor=\"middle\">" << tick_label(x) << "</text>\n";
  // Axes and their labels.
  s << "<path d=\"M" << num(kLeft) << " " << num(kTop) << " V" << num(kTop + plot_h) << " H"
    << num(kLeft + plot_w) << "\" fill=\"none\" stroke=\"black\"/>\n"
    << "<text x=\"" << num(kLeft + plot_w / 2) << "\" y=\"" << num(kHeight - 15)
    << "\" text-anchor=\"middle\">" << escape(plot.x_label) << (log_x ? " (log scale)" : "")
    << "</text>\n"
    << "<text transform=\"translate(18 " << num(kTop + plot_h / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">" << escape(plot.y_label) << "</text>\n";

  // Series and legend.
  const size_t palette = sizeof(kColors) / sizeof(kColors[0]);
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const char* color = kColors[i % palette];
    std::vector<std::pair<double, double>> points = plot.series[i].points;
    std::sort(points.begin(), points.end());
    s << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    for (const auto& [x, y] : points) s << num(px(x)) << "," << num(py(y)) << " ";
    s << "\"/>\n";
    for (const auto& [x, y] : points)
      s << "<circle cx=\"" << num(px(x)) << "\" cy=\"" << num(py(y)) << "\" r=\"" << kMarkerRadius
        << "\" fill=\"" << color << "\"/>\n";
    const double ly = kTop + 10 + 20.0 * static_cast<double>(i);
    const double lx = kLeft + plot_w + 15;
    s << "<line x1=\"" << num(lx) << "\" x2=\"" << num(lx + 22) << "\" y1=\"" << num(ly)
      << "\" y2=\"" << num(ly) << "\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n"
      << "<text x=\"" << num(lx + 28) << "\" y=\"" << num(ly + 4) << "\">"
      << escape(plot.series[i].name) << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

void write_svg(const std::string& path, const LinePlot& plot) {
  const std::string svg = render_svg(plot);
  std::ofstream out(path);
  if (!out || !(out << svg)) throw std::runtime_error("--plot: cannot write '" + path + "'");
}

}  // namespace compare
