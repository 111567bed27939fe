#include <kvcalc/model/weight_format.hpp>

#include <charconv>
#include <vector>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/units.hpp>

namespace kvcalc::model {

u64 WeightFormat::bytes(u64 rows, u64 cols) const {
  u64 elements = checked_mul(rows, cols, "weight elements");
  u64 scales = 0;
  switch (layout) {
  case ScaleLayout::none:
    break;
  case ScaleLayout::tensor:
    scales = 1;
    break;
  case ScaleLayout::row:
    scales = rows;
    break;
  case ScaleLayout::group:
    scales = checked_mul(rows, ceil_div(cols, group));
    break;
  case ScaleLayout::block:
    scales = checked_mul(ceil_div(rows, block_rows), ceil_div(cols, block_cols));
    break;
  case ScaleLayout::flat:
    scales = ceil_div(elements, group);
    break;
  }
  u64 out = dtype_storage_bytes(element, elements);
  out = checked_add(out, checked_mul(scales, scale_bytes), "weight bytes");
  out = checked_add(out, ceil_div(checked_mul(scales, zero_bits), 8), "weight bytes");
  if (group_index) {
    out = checked_add(out, checked_mul(cols, 4), "weight bytes");
  }
  if (nested_group > 0) {
    out = checked_add(out, checked_mul(ceil_div(scales, nested_group), nested_bytes));
  }
  return checked_add(out, matrix_bytes, "weight bytes");
}

WeightFormat WeightFormat::of(DType dtype) {
  WeightFormat f;
  f.element = dtype;
  switch (dtype) {
  case DType::fp8_e4m3:
  case DType::fp8_e5m2:
    f.layout = ScaleLayout::block;
    f.block_rows = 128;
    f.block_cols = 128;
    f.scale_bytes = 4;
    break;
  case DType::int8:
    f.layout = ScaleLayout::row;
    f.scale_bytes = 4;
    break;
  case DType::int4:
    f.layout = ScaleLayout::group;
    f.group = 128;
    f.scale_bytes = 2;
    break;
  case DType::nvfp4:
    f.layout = ScaleLayout::group;
    f.group = 16;
    f.scale_bytes = 1;
    f.matrix_bytes = 4;
    break;
  case DType::mxfp4:
    f.layout = ScaleLayout::group;
    f.group = 32;
    f.scale_bytes = 1;
    break;
  default:
    break;
  }
  return f;
}

DType WeightFormat::math_dtype(DType activation) const {
  return element == DType::fp8_e4m3 || element == DType::fp8_e5m2 ? element : activation;
}

std::string format_spec(const WeightFormat& f) {
  std::string out(dtype_name(f.element));
  switch (f.layout) {
  case ScaleLayout::none:
    break;
  case ScaleLayout::tensor:
    out += " tensor";
    break;
  case ScaleLayout::row:
    out += " row";
    break;
  case ScaleLayout::group:
    out += " group:" + std::to_string(f.group);
    break;
  case ScaleLayout::block:
    out += " block:" + std::to_string(f.block_rows) + "x" + std::to_string(f.block_cols);
    break;
  case ScaleLayout::flat:
    out += " flat:" + std::to_string(f.group);
    break;
  }
  if (f.layout != ScaleLayout::none) {
    out += " scale:" + std::to_string(f.scale_bytes);
  }
  if (f.zero_bits > 0) {
    out += " zero:" + std::to_string(f.zero_bits);
  }
  if (f.group_index) {
    out += " g_idx";
  }
  if (f.nested_group > 0) {
    out += " nested:" + std::to_string(f.nested_group) + ":" + std::to_string(f.nested_bytes);
  }
  if (f.matrix_bytes > 0) {
    out += " extra:" + std::to_string(f.matrix_bytes);
  }
  return out;
}

namespace {

/// A whole number of at most 2^32, or an InputError quoting the spec.
u64 spec_number(std::string_view digits, std::string_view spec) {
  u64 v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
      v > (u64{1} << 32)) {
    throw InputError("weight format '" + std::string(spec) + "': '" + std::string(digits) +
                     "' is not a whole number up to 2^32");
  }
  return v;
}

} // namespace

WeightFormat parse_format_spec(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t space = text.find(' ', start);
    std::string_view w = text.substr(start, space - start);
    if (!w.empty()) {
      words.push_back(w);
    }
    if (space == std::string_view::npos) {
      break;
    }
    start = space + 1;
  }
  if (words.empty()) {
    throw InputError("an empty weight format: expected e.g. 'int4 group:128 scale:2 zero:4'");
  }
  WeightFormat f;
  f.element = parse_dtype(words[0], "weight format element");
  auto bad = [&](std::string_view why) {
    throw InputError("weight format '" + std::string(text) + "': " + std::string(why) +
                     " (docs/model-format.md, weight_formats)");
  };
  for (std::size_t i = 1; i < words.size(); ++i) {
    std::string_view w = words[i];
    std::string_view key = w.substr(0, w.find(':'));
    std::string_view value = w.find(':') == std::string_view::npos ? "" : w.substr(w.find(':') + 1);
    if (key == "tensor" || key == "row") {
      f.layout = key == "tensor" ? ScaleLayout::tensor : ScaleLayout::row;
    } else if (key == "group" || key == "flat") {
      f.layout = key == "group" ? ScaleLayout::group : ScaleLayout::flat;
      f.group = spec_number(value, text);
    } else if (key == "block") {
      std::size_t x = value.find('x');
      if (x == std::string_view::npos) {
        bad("block needs ROWSxCOLS, e.g. block:128x128");
      }
      f.layout = ScaleLayout::block;
      f.block_rows = spec_number(value.substr(0, x), text);
      f.block_cols = spec_number(value.substr(x + 1), text);
    } else if (key == "scale") {
      f.scale_bytes = spec_number(value, text);
    } else if (key == "zero") {
      f.zero_bits = spec_number(value, text);
    } else if (key == "g_idx" && value.empty()) {
      f.group_index = true;
    } else if (key == "nested") {
      std::size_t colon = value.find(':');
      if (colon == std::string_view::npos) {
        bad("nested needs SCALES:BYTES, e.g. nested:256:4");
      }
      f.nested_group = spec_number(value.substr(0, colon), text);
      f.nested_bytes = spec_number(value.substr(colon + 1), text);
    } else if (key == "extra") {
      f.matrix_bytes = spec_number(value, text);
    } else {
      bad("unknown word '" + std::string(w) +
          "'; expected tensor, row, group:G, block:RxC, flat:G, scale:B, zero:BITS, g_idx, "
          "nested:N:B or extra:B");
    }
  }
  bool grouped = f.layout == ScaleLayout::group || f.layout == ScaleLayout::flat;
  if ((grouped && f.group == 0) ||
      (f.layout == ScaleLayout::block && (f.block_rows == 0 || f.block_cols == 0))) {
    bad("a group or block of 0 elements");
  }
  if (f.layout != ScaleLayout::none && f.scale_bytes == 0) {
    bad("scales need their size in bytes: scale:B");
  }
  if (f.layout == ScaleLayout::none && (f.zero_bits > 0 || f.nested_group > 0)) {
    bad("zero points and nested scales sit beside scales: give the scales' layout");
  }
  if (f.nested_group > 0 && f.layout != ScaleLayout::flat) {
    bad("nested scales are bitsandbytes' double quantization: they need flat:G");
  }
  return f;
}

std::string describe(const WeightFormat& f) {
  std::string out(dtype_name(f.element));
  if (f.layout == ScaleLayout::none) {
    return out;
  }
  std::string scale = std::to_string(f.scale_bytes) + "-byte scale";
  if (f.zero_bits > 0) {
    scale += " and a " + std::to_string(f.zero_bits) + "-bit zero";
  }
  switch (f.layout) {
  case ScaleLayout::tensor:
    out += ", one " + scale + " per matrix";
    break;
  case ScaleLayout::row:
    out += ", a " + scale + " per row";
    break;
  case ScaleLayout::group:
    out += ", a " + scale + " per " + std::to_string(f.group) + " inputs";
    break;
  case ScaleLayout::block:
    out += ", a " + scale + " per " + std::to_string(f.block_rows) + " × " +
           std::to_string(f.block_cols) + " block";
    break;
  case ScaleLayout::flat:
    out += ", a " + scale + " per " + std::to_string(f.group) + " elements";
    break;
  case ScaleLayout::none:
    break;
  }
  if (f.group_index) {
    out += ", an int32 group index per input";
  }
  if (f.nested_group > 0) {
    out += ", a " + std::to_string(f.nested_bytes) + "-byte scale per " +
           std::to_string(f.nested_group) + " scales";
  }
  if (f.matrix_bytes > 0) {
    out += ", " + std::to_string(f.matrix_bytes) + " B per matrix";
  }
  return out;
}

} // namespace kvcalc::model
