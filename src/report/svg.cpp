#include <kvcalc/report/svg.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include <kvcalc/report/table.hpp>

namespace kvcalc::report {

namespace {

constexpr double k_width = 960;
constexpr double k_panel = 520;
constexpr double k_left = 120;
constexpr double k_right = 250; // legend
constexpr double k_top = 50;
constexpr double k_bottom = 60;

const char* k_palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                           "#8c564b", "#e377c2", "#17becf", "#7f7f7f"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '&':
      out += "&amp;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

/// An axis onto [a, b] pixels: log-scaled from 10^lo to 10^hi, or linear from lo to hi.
struct Axis {
  double lo = 0;
  double hi = 1;
  double a = 0;
  double b = 1;
  bool log = true;
  double step = 1; ///< between ticks: one decade, or a linear step
  [[nodiscard]] double map(double v) const {
    double l = log ? std::log10(std::max(v, 1e-300)) : v;
    return a + (l - lo) / (hi - lo) * (b - a);
  }
  /// Tick positions in the axis's own units (exponents for log axes).
  [[nodiscard]] std::vector<double> ticks() const {
    std::vector<double> out;
    for (double e = lo; e <= hi + step * 1e-9; e += step) {
      out.push_back(e);
    }
    return out;
  }
  [[nodiscard]] double value(double tick) const { return log ? std::pow(10.0, tick) : tick; }
};

using LogAxis = Axis;

LogAxis fit(double min, double max, double a, double b) {
  double lo = std::floor(std::log10(min));
  double hi = std::ceil(std::log10(max));
  if (hi <= lo) {
    hi = lo + 1;
  }
  return {lo, hi, a, b, true, 1};
}

/// A linear axis from 0 (or the minimum, when negative) to a round maximum, 4–8 ticks.
Axis fit_linear(double min, double max, double a, double b) {
  double lo = std::min(0.0, min);
  double span = max > lo ? max - lo : 1;
  double raw = span / 5;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  }
  double hi = std::ceil(max / step) * step;
  if (hi <= lo) {
    hi = lo + step;
  }
  return {std::floor(lo / step) * step, hi, a, b, false, step};
}

std::string tick_label(const Axis& axis, double tick, const std::string& unit) {
  double v = axis.value(tick);
  if (unit == "%") {
    return fmt::format("{:g}%", v);
  }
  if (!axis.log && unit == "s") {
    return fmt::format("{:g}", v);
  }
  return unit.empty() || v == 0 ? fmt::format("{:g}", v) : si_rate(v, unit);
}

/// Frame, grid and ticks of one panel; returns the SVG.
std::string frame(const Axis& x, const Axis& y, double top, const std::string& title,
                  const std::string& x_label, const std::string& y_label, const std::string& x_unit,
                  const std::string& y_unit) {
  std::string s;
  double bottom = top + k_panel - k_top - k_bottom;
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
                   k_left, top - 18, escape(title));
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
                   "stroke=\"#333\"/>\n",
                   x.a, top, x.b - x.a, bottom - top);
  for (double e : x.ticks()) {
    double px = x.map(x.value(e));
    s +=
        fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n",
                    px, top, bottom);
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}</text>\n", px,
        bottom + 16, escape(tick_label(x, e, x_unit)));
  }
  for (double e : y.ticks()) {
    double py = y.map(y.value(e));
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n",
                     x.a, py, x.b, py);
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{}</text>\n",
                     x.a - 6, py + 4, escape(tick_label(y, e, y_unit)));
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"13\" text-anchor=\"middle\">{}</text>\n",
                   (x.a + x.b) / 2, bottom + 38, escape(x_label));
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"13\" text-anchor=\"middle\" "
                   "transform=\"rotate(-90 {} {})\">{}</text>\n",
                   16, (top + bottom) / 2, 16, (top + bottom) / 2, escape(y_label));
  return s;
}

std::string marker(PointStyle style, double x, double y, const char* color) {
  if (style == PointStyle::naive) {
    return fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"9\" height=\"9\" fill=\"{}\" "
                       "stroke=\"#000\" stroke-width=\"0.5\"/>\n",
                       x - 4.5, y - 4.5, color);
  }
  return fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4.5\" fill=\"{}\" stroke=\"#000\" "
                     "stroke-width=\"0.5\"/>\n",
                     x, y, color);
}

const char* style_color(PointStyle s) {
  switch (s) {
  case PointStyle::absorbed:
    return "#1f77b4";
  case PointStyle::naive:
    return "#ff7f0e";
  default:
    return "#9a9a9a";
  }
}

std::string roofline_panel(const RooflineChart& c, double top) {
  double peak = 0;
  for (const auto& [name, flops] : c.ceilings) {
    peak = std::max(peak, flops);
  }
  double xmin = 0.1;
  double xmax = 1e4;
  double ymin = std::numeric_limits<double>::max();
  for (const auto& p : c.points) {
    if (p.x > 0 && p.y > 0) {
      xmin = std::min(xmin, p.x);
      xmax = std::max(xmax, p.x);
      ymin = std::min(ymin, p.y);
    }
  }
  ymin = std::min(ymin, c.bandwidth_bytes_per_s * xmin);
  double bottom = top + k_panel - k_top - k_bottom;
  LogAxis x = fit(xmin, xmax, k_left, k_width - k_right);
  LogAxis y = fit(ymin, peak * 1.5, bottom, top);
  std::string s = frame(x, y, top, c.title, "arithmetic intensity (FLOP/byte)",
                        "attainable and achieved FLOP/s", "", "FLOP/s");
  // Ceilings: the bandwidth slope up to each compute roof.
  double x0 = std::pow(10.0, x.lo);
  for (std::size_t i = 0; i < c.ceilings.size(); ++i) {
    const auto& [name, flops] = c.ceilings[i];
    double ridge = flops / c.bandwidth_bytes_per_s;
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                     "stroke=\"#000\" stroke-width=\"1.5\"{}/>\n",
                     x.map(ridge), y.map(flops), x.b, y.map(flops),
                     i == 0 ? "" : " stroke-dasharray=\"6 3\"");
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">{} {} (ridge {:.0f} "
                     "FLOP/B)</text>\n",
                     x.map(ridge) - 60, y.map(flops) - 6, escape(name),
                     escape(si_rate(flops, "FLOP/s")), ridge);
  }
  double top_ridge = peak / c.bandwidth_bytes_per_s;
  s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                   "stroke=\"#000\" stroke-width=\"1.5\"/>\n",
                   x.map(x0), y.map(c.bandwidth_bytes_per_s * x0), x.map(top_ridge), y.map(peak));
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" transform=\"rotate(-32 "
                   "{:.1f} {:.1f})\">memory {}</text>\n",
                   x.map(x0 * 3), y.map(c.bandwidth_bytes_per_s * x0 * 3) - 6, x.map(x0 * 3),
                   y.map(c.bandwidth_bytes_per_s * x0 * 3) - 6,
                   escape(si_rate(c.bandwidth_bytes_per_s, "B/s")));
  // Labels that would overlap an earlier one move down a line at a time.
  std::vector<std::pair<double, double>> placed; // x, baseline of labels written so far
  for (const auto& p : c.points) {
    if (p.x <= 0 || p.y <= 0) {
      continue;
    }
    double px = x.map(p.x);
    double py = y.map(p.y);
    s += marker(p.style, px, py, style_color(p.style));
    if (p.label.empty()) {
      continue;
    }
    double ly = py + 3;
    for (bool moved = true; moved;) {
      moved = false;
      for (const auto& [qx, qy] : placed) {
        if (std::fabs(qx - px) < 120 && std::fabs(qy - ly) < 11) {
          ly = qy + 11;
          moved = true;
        }
      }
    }
    placed.emplace_back(px, ly);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" fill=\"#333\">{}</text>\n",
                     px + 7, ly, escape(p.label));
  }
  double lx = k_width - k_right + 20;
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" font-weight=\"bold\">ops</text>\n", lx,
                   top + 10);
  int row = 0;
  for (PointStyle st : {PointStyle::absorbed, PointStyle::naive, PointStyle::other}) {
    double ly = top + 30 + 18 * row++;
    s += marker(st, lx + 5, ly - 4, style_color(st));
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", lx + 16, ly,
                     st == PointStyle::absorbed ? "MLA absorbed"
                     : st == PointStyle::naive  ? "MLA naive"
                                                : "other ops");
  }
  return s;
}

std::string line_panel(const LineChart& c, double top) {
  double xmin = std::numeric_limits<double>::max();
  double xmax = 0;
  double ymin = std::numeric_limits<double>::max();
  double ymax = 0;
  for (const auto& sr : c.series) {
    for (std::size_t i = 0; i < sr.xs.size(); ++i) {
      xmin = std::min(xmin, sr.xs[i]);
      xmax = std::max(xmax, sr.xs[i]);
      ymin = std::min(ymin, sr.ys[i]);
      ymax = std::max(ymax, sr.ys[i]);
    }
  }
  double bottom = top + k_panel - k_top - k_bottom;
  Axis x = c.x_scale == AxisScale::log ? fit(xmin, xmax, k_left, k_width - k_right)
                                       : fit_linear(xmin, xmax, k_left, k_width - k_right);
  Axis y = c.y_scale == AxisScale::log ? fit(ymin, ymax, bottom, top)
                                       : fit_linear(ymin, ymax, bottom, top);
  std::string unit = !c.y_unit.empty()                                 ? c.y_unit
                     : c.y_label.find("tokens/s") != std::string::npos ? "tok/s"
                                                                       : "s";
  std::string s = frame(x, y, top, c.title, c.x_label, c.y_label,
                        c.x_scale == AxisScale::linear ? "s" : "", unit);
  double lx = k_width - k_right + 20;
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const auto& sr = c.series[k];
    const char* color = k_palette[k % 8];
    std::string path;
    for (std::size_t i = 0; i < sr.xs.size(); ++i) {
      path += fmt::format("{}{:.1f},{:.1f} ", i == 0 ? "M" : "L", x.map(sr.xs[i]), y.map(sr.ys[i]));
      if (c.markers) {
        s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n",
                         x.map(sr.xs[i]), y.map(sr.ys[i]), color);
      }
    }
    s += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", path,
                     color);
    double ly = top + 14 + 18 * static_cast<double>(k);
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" "
                     "stroke-width=\"2\"/>\n",
                     lx, ly - 4, lx + 14, ly - 4, color);
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", lx + 18, ly,
                     escape(sr.name));
  }
  return s;
}

} // namespace

std::string render_svg(const RooflineChart& roofline, const std::vector<LineChart>& charts) {
  double height = k_panel * static_cast<double>(1 + charts.size());
  std::string s = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
                              "height=\"{}\" viewBox=\"0 0 {} {}\" font-family=\"sans-serif\">\n",
                              k_width, height, k_width, height);
  s += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"#fff\"/>\n", k_width, height);
  s += roofline_panel(roofline, k_top);
  for (std::size_t i = 0; i < charts.size(); ++i) {
    s += line_panel(charts[i], k_panel * static_cast<double>(i + 1) + k_top);
  }
  return s + "</svg>\n";
}

std::string render_svg(const std::vector<LineChart>& charts) {
  double height = k_panel * static_cast<double>(charts.size());
  std::string s = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
                              "height=\"{}\" viewBox=\"0 0 {} {}\" font-family=\"sans-serif\">\n",
                              k_width, height, k_width, height);
  s += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"#fff\"/>\n", k_width, height);
  for (std::size_t i = 0; i < charts.size(); ++i) {
    s += line_panel(charts[i], k_panel * static_cast<double>(i) + k_top);
  }
  return s + "</svg>\n";
}

} // namespace kvcalc::report
