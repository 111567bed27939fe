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
  if (unit == "GiB") {
    return fmt::format("{:g} GiB", v);
  }
  if (unit == "count") { // 1, 10, 100, 1k, 10k, 1M
    return v >= 1e6   ? fmt::format("{:g}M", v / 1e6)
           : v >= 1e3 ? fmt::format("{:g}k", v / 1e3)
                      : fmt::format("{:g}", v);
  }
  if (!axis.log && unit == "s") {
    return fmt::format("{:g}", v);
  }
  if (unit == "s" && v > 0) { // 100 µs, 1 ms, 10 s: never "0.000 s"
    return v >= 1      ? fmt::format("{:g} s", v)
           : v >= 1e-3 ? fmt::format("{:g} ms", v * 1e3)
                       : fmt::format("{:g} µs", v * 1e6);
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

double text_width(const std::string& text, double font_px);

/// A legend entry at (x, y): one line, or two split at the last ", " that makes the first fit
/// the legend's width; returns the height it took beyond one line.
double legend_text(std::string& s, double x, double y, const std::string& text) {
  constexpr double k_room = k_right - 40;
  std::string first = text;
  std::string rest;
  while (text_width(first, 11) > k_room) {
    std::size_t comma = first.rfind(", ");
    if (comma == std::string::npos) {
      break;
    }
    rest = text.substr(comma + 2);
    first = text.substr(0, comma + 1);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", x, y, escape(first));
  if (rest.empty()) {
    return 0;
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", x + 6, y + 13,
                   escape(rest));
  return 13;
}

/// The width of `text` at `font_px`: DejaVu Sans averages 0.6 em a character.
double text_width(const std::string& text, double font_px) {
  std::size_t chars = 0;
  for (char ch : text) {
    auto byte = static_cast<unsigned char>(ch);
    chars += (byte & 0xC0) != 0x80 ? 1 : 0; // UTF-8: count characters, not bytes
  }
  return 0.6 * font_px * static_cast<double>(chars);
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
  if (!c.subtitle.empty()) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#555\">{}</text>\n", k_left,
                     top - 5, escape(c.subtitle));
  }
  std::vector<LabelBox> obstacles;
  // Ceilings: the bandwidth slope up to each compute roof; their text sits above the roof's
  // right end, clear of the slope.
  double x0 = std::pow(10.0, x.lo);
  for (std::size_t i = 0; i < c.ceilings.size(); ++i) {
    const auto& [name, flops] = c.ceilings[i];
    double ridge = flops / c.bandwidth_bytes_per_s;
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                     "stroke=\"#000\" stroke-width=\"1.5\"{}/>\n",
                     x.map(ridge), y.map(flops), x.b, y.map(flops),
                     i == 0 ? "" : " stroke-dasharray=\"6 3\"");
    obstacles.push_back({x.map(ridge), y.map(flops) - 2, x.b - x.map(ridge), 4});
    std::string text =
        fmt::format("{} {} (ridge {:.0f} FLOP/B)", name, si_rate(flops, "FLOP/s"), ridge);
    double w = text_width(text, 11);
    double tx = x.b - w - 4;
    double ty = y.map(flops) - 5;
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">{}</text>\n", tx, ty,
                     escape(text));
    obstacles.push_back({tx, ty - 10, w, 13});
  }
  double top_ridge = peak / c.bandwidth_bytes_per_s;
  s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                   "stroke=\"#000\" stroke-width=\"1.5\"/>\n",
                   x.map(x0), y.map(c.bandwidth_bytes_per_s * x0), x.map(top_ridge), y.map(peak));
  // The memory slope's label, left of every point, rotated with it.
  double mx = x.map(x0 * 1.5);
  double my = y.map(c.bandwidth_bytes_per_s * x0 * 1.5) - 8;
  std::string memory = "memory " + si_rate(c.bandwidth_bytes_per_s, "B/s");
  s += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" transform=\"rotate({:.1f} "
      "{:.1f} {:.1f})\">{}</text>\n",
      mx, my,
      -std::atan2(y.map(c.bandwidth_bytes_per_s * x0) - y.map(peak), x.map(top_ridge) - x.map(x0)) *
          180 / 3.14159265358979,
      mx, my, escape(memory));
  obstacles.push_back({mx, my - 40, text_width(memory, 11), 48});

  // Points: colour by scenario where there are several, else by MLA mode; shape by mode.
  bool by_series = c.series.size() > 1;
  auto color_of = [&](const ChartPoint& p) {
    return by_series ? k_palette[p.series % 8] : style_color(p.style);
  };
  std::vector<std::pair<double, double>> anchors;
  std::vector<std::string> texts;
  for (const auto& p : c.points) {
    if (p.x <= 0 || p.y <= 0) {
      continue;
    }
    double px = x.map(p.x);
    double py = y.map(p.y);
    s += marker(p.style, px, py, color_of(p));
    obstacles.push_back({px - 5, py - 5, 10, 10});
    if (!p.label.empty()) {
      anchors.emplace_back(px, py);
      texts.push_back(p.label);
    }
  }
  LabelBox area{x.a, top, x.b - x.a, bottom - top};
  std::vector<PlacedLabel> placed = place_labels(anchors, texts, obstacles, area, 10);
  for (std::size_t i = 0; i < placed.size(); ++i) {
    const LabelBox& b = placed[i].box;
    if (placed[i].leader) {
      double cx = std::clamp(anchors[i].first, b.x, b.x + b.w);
      double cy = std::clamp(anchors[i].second, b.y, b.y + b.h);
      s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                       "stroke=\"#999\" stroke-width=\"0.7\"/>\n",
                       anchors[i].first, anchors[i].second, cx, cy);
    }
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" fill=\"#333\">{}</text>\n",
                     b.x, b.y + b.h - 2, escape(texts[i]));
  }

  // The legend names only what is drawn.
  double lx = k_width - k_right + 20;
  double ly = top + 10;
  auto present = [&](PointStyle st) {
    return std::any_of(c.points.begin(), c.points.end(),
                       [&](const ChartPoint& p) { return p.style == st; });
  };
  if (by_series) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" font-weight=\"bold\">"
                     "scenarios</text>\n",
                     lx, ly);
    for (std::size_t k = 0; k < c.series.size(); ++k) {
      ly += 18;
      s += marker(PointStyle::other, lx + 5, ly - 4, k_palette[k % 8]);
      ly += legend_text(s, lx + 16, ly, c.series[k]);
    }
    ly += 12;
  }
  bool mla = present(PointStyle::absorbed) || present(PointStyle::naive);
  if (mla || !by_series) {
    ly += 18;
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" font-weight=\"bold\">ops</text>\n",
                     lx, ly);
    for (PointStyle st : {PointStyle::absorbed, PointStyle::naive, PointStyle::other}) {
      if (!present(st)) {
        continue;
      }
      ly += 18;
      s += marker(st, lx + 5, ly - 4, by_series ? "#ffffff" : style_color(st));
      s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", lx + 16, ly,
                       st == PointStyle::absorbed ? "MLA absorbed"
                       : st == PointStyle::naive  ? "MLA naive (square)"
                                                  : (mla ? "other ops" : "ops"));
    }
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
  std::string x_unit = !c.x_unit.empty() ? c.x_unit : c.x_scale == AxisScale::linear ? "s" : "";
  std::string s = frame(x, y, top, c.title, c.x_label, c.y_label, x_unit, unit);
  double lx = k_width - k_right + 20;
  double legend_y = top + 14;
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
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" "
                     "stroke-width=\"2\"/>\n",
                     lx, legend_y - 4, lx + 14, legend_y - 4, color);
    legend_y += 18 + legend_text(s, lx + 18, legend_y, sr.name);
  }
  return s;
}

} // namespace

std::vector<PlacedLabel> place_labels(const std::vector<std::pair<double, double>>& anchors,
                                      const std::vector<std::string>& texts,
                                      const std::vector<LabelBox>& obstacles, const LabelBox& frame,
                                      double font_px) {
  std::vector<PlacedLabel> out;
  std::vector<LabelBox> taken = obstacles;
  double h = font_px + 2;
  for (std::size_t i = 0; i < anchors.size(); ++i) {
    auto [px, py] = anchors[i];
    double w = text_width(texts[i], font_px);
    auto inside = [&](const LabelBox& b) {
      return b.x >= frame.x && b.y >= frame.y && b.x + b.w <= frame.x + frame.w &&
             b.y + b.h <= frame.y + frame.h;
    };
    auto free = [&](const LabelBox& b) {
      return inside(b) && std::none_of(taken.begin(), taken.end(),
                                       [&](const LabelBox& t) { return t.overlaps(b); });
    };
    // Beside the point first (right, left, above, below), then line by line further up and
    // down, to the right and to the left.
    std::vector<std::pair<LabelBox, bool>> candidates{{{px + 7, py - h / 2, w, h}, false},
                                                      {{px - 7 - w, py - h / 2, w, h}, false},
                                                      {{px - w / 2, py - 7 - h, w, h}, false},
                                                      {{px - w / 2, py + 7, w, h}, false}};
    for (int k = 1; k <= 12; ++k) {
      double dy = (h + 1) * k;
      for (double sign : {1.0, -1.0}) {
        candidates.push_back({{px + 12, py - h / 2 + sign * dy, w, h}, true});
        candidates.push_back({{px - 12 - w, py - h / 2 + sign * dy, w, h}, true});
      }
    }
    auto chosen = std::find_if(candidates.begin(), candidates.end(),
                               [&](const auto& c) { return free(c.first); });
    PlacedLabel placed{candidates.front().first, false};
    if (chosen != candidates.end()) {
      placed = {chosen->first, chosen->second};
    }
    taken.push_back(placed.box);
    out.push_back(placed);
  }
  return out;
}

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
