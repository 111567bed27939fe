#pragma once
/// SVG charts for people: a roofline (ceilings and points) and line charts on log axes.
/// Neutral data in, a standalone SVG document out.

#include <cstddef>
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
  std::size_t series = 0; ///< the scenario it belongs to (RooflineChart::series)
};

struct RooflineChart {
  std::string title;
  std::string subtitle;            ///< a second, smaller line (the ceilings' source)
  std::vector<std::string> series; ///< scenario names; more than one colours points by scenario
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
  std::string y_unit;  ///< tick unit: "%", "tok/s", "s", "count" (1k, 1M); empty: from the label
  std::string x_unit;  ///< "count" or "s"; empty: seconds on a linear axis, plain on a log one
  bool markers = true; ///< a dot at every point (off for dense timelines)
};

/// A text label's box on the canvas, in pixels: top-left corner and size.
struct LabelBox {
  double x = 0;
  double y = 0;
  double w = 0;
  double h = 0;
  [[nodiscard]] bool overlaps(const LabelBox& o) const {
    return x < o.x + o.w && o.x < x + w && y < o.y + o.h && o.y < y + h;
  }
};

/// Where each label goes: beside its anchor point if there is room, else the nearest free spot
/// around it (then `leader` draws a line back to the point), never over another label, an
/// obstacle (markers, ceiling lines and their text) or outside `frame`, while a free spot is
/// found within 12 lines of the point.
struct PlacedLabel {
  LabelBox box;
  bool leader = false;
};
[[nodiscard]] std::vector<PlacedLabel>
place_labels(const std::vector<std::pair<double, double>>& anchors,
             const std::vector<std::string>& texts, const std::vector<LabelBox>& obstacles,
             const LabelBox& frame, double font_px);

/// One SVG with the roofline on top and the line charts below it.
[[nodiscard]] std::string render_svg(const RooflineChart& roofline,
                                     const std::vector<LineChart>& charts);

/// One SVG of line charts, one above the other.
[[nodiscard]] std::string render_svg(const std::vector<LineChart>& charts);

} // namespace kvcalc::report
