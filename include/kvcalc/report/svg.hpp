#pragma once
/// SVG charts for people: a roofline (ceilings and points) and line charts on log axes.
/// Neutral data in, a standalone SVG document out.

#include <string>
#include <utility>
#include <vector>

namespace kvcalc::report {

enum class PointStyle {
  other,    ///< grey circle
  absorbed, ///< blue circle
  naive,    ///< orange square
};

struct ChartPoint {
  double x = 0; ///< FLOP per byte
  double y = 0; ///< achieved FLOP/s
  std::string label;
  PointStyle style = PointStyle::other;
};

struct RooflineChart {
  std::string title;
  double bandwidth_bytes_per_s = 0;
  std::vector<std::pair<std::string, double>> ceilings; ///< name, FLOP/s
  std::vector<ChartPoint> points;
};

struct LineSeries {
  std::string name;
  std::vector<double> xs;
  std::vector<double> ys;
};

enum class AxisScale { log, linear };

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<LineSeries> series;
  AxisScale x_scale = AxisScale::log;
  AxisScale y_scale = AxisScale::log;
  std::string y_unit;  ///< tick unit: "%", "tok/s", "s"; empty: guessed from the y label
  bool markers = true; ///< a dot at every point (off for dense timelines)
};

/// One SVG with the roofline on top and the line charts below it.
[[nodiscard]] std::string render_svg(const RooflineChart& roofline,
                                     const std::vector<LineChart>& charts);

/// One SVG of line charts, one above the other.
[[nodiscard]] std::string render_svg(const std::vector<LineChart>& charts);

} // namespace kvcalc::report
