#include <kvcalc/core/units.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include <kvcalc/core/spell.hpp>

namespace kvcalc {

namespace {

std::string fmt_number(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') {
    s.pop_back();
  }
  if (!s.empty() && s.back() == '.') {
    s.pop_back();
  }
  return s;
}

[[noreturn]] void bad_count(std::string_view text, std::string_view what, std::string_view why) {
  throw InputError("invalid " + std::string(what) + " '" + std::string(text) +
                   "': " + std::string(why) +
                   "; expected a count such as 4096, 4k (= 4,096), 128k (= 131,072) or 1M "
                   "(= 1,048,576)");
}

} // namespace

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) {
    s.remove_prefix(1);
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) {
    s.remove_suffix(1);
  }
  return s;
}

u64 parse_count(std::string_view raw, std::string_view what) {
  std::string_view text = trim(raw);
  if (text.empty()) {
    bad_count(raw, what, "empty value");
  }
  if (text.front() == '-') {
    bad_count(raw, what, "a count cannot be negative");
  }
  u64 multiplier = 1;
  char last = static_cast<char>(std::tolower(static_cast<unsigned char>(text.back())));
  if (last == 'k' || last == 'm') {
    multiplier = last == 'k' ? u64{1} << 10 : u64{1} << 20;
    text.remove_suffix(1);
  }
  u64 whole = 0;
  u64 fraction = 0;
  u64 fraction_scale = 1;
  bool seen_digit = false;
  bool in_fraction = false;
  for (char c : text) {
    if (c == '.' && !in_fraction) {
      in_fraction = true;
      continue;
    }
    if (c < '0' || c > '9') {
      bad_count(raw, what, "not a number");
    }
    seen_digit = true;
    auto digit = static_cast<u64>(c - '0');
    if (in_fraction) {
      if (fraction_scale >= 1'000'000'000'000ULL) {
        bad_count(raw, what, "too many decimals");
      }
      fraction = fraction * 10 + digit;
      fraction_scale *= 10;
    } else {
      if (whole > (UINT64_MAX - digit) / 10) {
        bad_count(raw, what, "too large for 64 bits");
      }
      whole = whole * 10 + digit;
    }
  }
  if (!seen_digit) {
    bad_count(raw, what, "not a number");
  }
  u64 value = 0;
  try {
    value = checked_mul(whole, multiplier, "count");
    u64 fraction_part = checked_mul(fraction, multiplier, "count");
    if (fraction_part % fraction_scale != 0) {
      bad_count(raw, what, "not a whole number of tokens");
    }
    value = checked_add(value, fraction_part / fraction_scale, "count");
  } catch (const OverflowError&) {
    bad_count(raw, what, "too large for 64 bits");
  }
  if (value == 0) {
    bad_count(raw, what, "must be at least 1");
  }
  return value;
}

u64 parse_bytes(std::string_view raw, std::string_view what) {
  std::string_view text = trim(raw);
  auto fail = [&](std::string_view why) -> u64 {
    throw InputError("invalid " + std::string(what) + " '" + std::string(raw) +
                     "': " + std::string(why) +
                     "; expected bytes such as 4096, 3.81GiB, 80GB, 512MiB (KiB/MiB/GiB/TiB are "
                     "powers of 1024, kB/MB/GB/TB of 1000)");
  };
  std::size_t unit_at = text.find_first_not_of("0123456789.");
  std::string_view number = text.substr(0, unit_at);
  std::string unit = ascii_lower(
      trim(unit_at == std::string_view::npos ? std::string_view{} : text.substr(unit_at)));
  if (!text.empty() && text.front() == '-') {
    return fail("a size cannot be negative");
  }
  if (number.empty() || number == "." || std::count(number.begin(), number.end(), '.') > 1) {
    return fail("not a number");
  }
  struct Unit {
    const char* name;
    u64 scale;
  };
  static constexpr Unit units[] = {
      {"", 1},
      {"b", 1},
      {"kib", 1ULL << 10},
      {"mib", 1ULL << 20},
      {"gib", 1ULL << 30},
      {"tib", 1ULL << 40},
      {"kb", 1000ULL},
      {"mb", 1000000ULL},
      {"gb", 1000000000ULL},
      {"tb", 1000000000000ULL},
  };
  const Unit* found = nullptr;
  for (const auto& u : units) {
    if (unit == u.name) {
      found = &u;
    }
  }
  if (found == nullptr) {
    return fail("unknown unit '" + unit + "'");
  }
  // Exact decimal arithmetic: whole × scale + ⌊fraction × scale / 10^digits⌋.
  auto dot = number.find('.');
  std::string_view whole_digits = number.substr(0, dot);
  std::string_view fraction_digits =
      dot == std::string_view::npos ? std::string_view{} : number.substr(dot + 1);
  if (fraction_digits.size() > 6) {
    return fail("more than 6 decimals");
  }
  try {
    u64 whole = 0;
    for (char c : whole_digits) {
      whole = checked_add(checked_mul(whole, 10), static_cast<u64>(c - '0'));
    }
    u64 fraction = 0;
    u64 denominator = 1;
    for (char c : fraction_digits) {
      fraction = fraction * 10 + static_cast<u64>(c - '0');
      denominator *= 10;
    }
    // fraction < 10^6 and scale ≤ 2^40, so the product fits. A part of a byte, with no unit or
    // B, is a slip ("1.5" meant 1.5 GiB), not a size; with a larger unit it is rounded down.
    if (found->scale == 1 && fraction != 0) {
      return fail("not a whole number of bytes (a unit is missing? 1.5GiB)");
    }
    u64 part = checked_mul(fraction, found->scale) / denominator;
    return checked_add(checked_mul(whole, found->scale), part);
  } catch (const OverflowError&) {
    return fail("too large for 64 bits");
  }
}

double parse_fraction(std::string_view raw, std::string_view what, double low, double high) {
  std::string text(trim(raw));
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(value >= low && value <= high)) {
    throw InputError("invalid " + std::string(what) + " '" + std::string(raw) +
                     "': expected a number from " + fmt_number(low) + " to " + fmt_number(high));
  }
  return value;
}

std::vector<u64> parse_count_list(std::string_view text, std::string_view what) {
  std::vector<u64> out;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = text.find(',', start);
    out.push_back(parse_count(text.substr(start, comma - start), what));
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  return out;
}

std::string group_digits(u64 value) {
  std::string digits = std::to_string(value);
  std::string out;
  std::size_t lead = digits.size() % 3;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (i + 3 - lead) % 3 == 0) {
      out += ',';
    }
    out += digits[i];
  }
  return out;
}

} // namespace kvcalc
