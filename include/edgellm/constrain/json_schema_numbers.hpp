// SPDX-License-Identifier: Apache-2.0
// JSON Schema's number bounds as GBNF, for constrain/json_schema.hpp (a base of its
// SchemaCompiler): minimum, maximum, exclusiveMinimum and exclusiveMaximum of an integer become
// a digit-range grammar (exact); of a number, exact when the bounds are whole and >= 0 (see
// json_schema.hpp's comment for the approximations), else only "no minus sign" or none.
#pragma once

#include "edgellm/io/json_value.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::constrain::detail {

// The rules for "integer" and "number" schemas. Compiler (SchemaCompiler) derives from it and
// makes it a friend: the rules are added through its prim(), errors through fail() and
// unsupported().
template <class Compiler>
class SchemaNumbers {
 protected:
  using Value = io::json::Value;

  std::string number(const Value& s, const std::string& ptr, bool integer) {
    if (s.find("multipleOf")) return compiler().unsupported("multipleOf", ptr);
    // Bounds as integers: lo = smallest allowed integer, hi = largest (integer schemas); for
    // numbers only whether negatives are excluded.
    std::optional<double> lo_d, hi_d;
    bool lo_strict = false, hi_strict = false;
    for (const char* kw : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      const Value* v = s.find(kw);
      if (!v) continue;
      if (!v->is_number())
        return compiler().unsupported(kw, ptr,
                                      "not a number (draft-04 booleans are not supported)");
      double d = v->as_double();
      std::string_view k = kw;
      bool strict = k.rfind("exclusive", 0) == 0;
      if (k.find("inimum") != std::string_view::npos) {
        if (!lo_d || d > *lo_d || (d == *lo_d && strict)) lo_d = d, lo_strict = strict;
      } else {
        if (!hi_d || d < *hi_d || (d == *hi_d && strict)) hi_d = d, hi_strict = strict;
      }
    }
    if (!integer) {
      // Bounds >= 0: exact when whole; a fractional one is rounded inwards (to the whole
      // numbers inside it: a subset, so what is generated is valid) unless nothing is left.
      const auto fits = [](std::optional<double> d) { return d && *d >= 0 && *d < 1e15; };
      if (fits(lo_d) && (!hi_d || fits(hi_d))) {
        const double lo_w = std::ceil(*lo_d);
        const bool lo_ws = lo_strict && lo_w == *lo_d;
        std::optional<double> hi_w;
        bool hi_ws = false;
        if (hi_d) {
          hi_w = std::floor(*hi_d);
          hi_ws = hi_strict && *hi_w == *hi_d;
        }
        if (!hi_w || lo_w < *hi_w || (lo_w == *hi_w && !lo_ws && !hi_ws))
          return bounded_number(lo_w, lo_ws, hi_w, hi_ws, ptr);
      }
      if (lo_d && *lo_d >= 0) {
        compiler().prim("ws");
        return "( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws";
      }
      return compiler().prim("number");
    }
    constexpr double lim = 9.2e18;
    std::optional<std::int64_t> lo, hi;
    if (lo_d && std::fabs(*lo_d) < lim) {
      double c = std::ceil(*lo_d);
      lo = static_cast<std::int64_t>(c) + (lo_strict && c == *lo_d ? 1 : 0);
    }
    if (hi_d && std::fabs(*hi_d) < lim) {
      double f = std::floor(*hi_d);
      hi = static_cast<std::int64_t>(f) - (hi_strict && f == *hi_d ? 1 : 0);
    }
    if (!lo && !hi) return compiler().prim("integer");
    if (lo && hi && *lo > *hi)
      return compiler().fail(errc::invalid_argument,
                             "empty integer range at " + compiler().at(ptr));
    std::vector<std::string> alts;
    if (!hi || *hi >= 0) {
      std::uint64_t a = lo && *lo > 0 ? static_cast<std::uint64_t>(*lo) : 0;
      std::optional<std::uint64_t> b;
      if (hi) b = static_cast<std::uint64_t>(*hi);
      alts.push_back(uint_range(a, b));
    }
    if (!lo || *lo < 0) {
      auto mag = [](std::int64_t v) { return static_cast<std::uint64_t>(-(v + 1)) + 1; };
      std::uint64_t a = hi && *hi < 0 ? mag(*hi) : 1;
      std::optional<std::uint64_t> b;
      if (lo) b = mag(*lo);
      alts.push_back("\"-\" " + wrap(uint_range(a, b)));
    }
    std::string out;
    for (const auto& a : alts) out += (out.empty() ? "" : " | ") + a;
    compiler().prim("ws");
    return "( " + out + " ) ws";
  }

 private:
  // Numbers in [lo, hi] (either end exclusive when strict; hi absent: unbounded), lo and hi
  // whole and >= 0: exact, written without exponent (a spelling with one is refused).
  std::string bounded_number(double lo_d, bool lo_strict, std::optional<double> hi_d,
                             bool hi_strict, const std::string& ptr) {
    const auto lo = static_cast<std::uint64_t>(lo_d);
    std::optional<std::uint64_t> hi;
    if (hi_d) hi = static_cast<std::uint64_t>(*hi_d);
    const std::uint64_t from = lo_strict ? lo + 1 : lo;  // integer parts with any fraction
    std::vector<std::string> alts;
    if (!hi)
      alts.push_back(wrap(uint_range(from, std::nullopt)) + " ( \".\" [0-9]+ )?");
    else if (*hi >= 1 && from <= *hi - 1)
      alts.push_back(wrap(uint_range(from, *hi - 1)) + " ( \".\" [0-9]+ )?");
    if (lo_strict && (!hi || lo < *hi))  // lo itself with a fraction that is not all zeros
      alts.push_back("\"" + std::to_string(lo) + ".\" \"0\"* [1-9] [0-9]*");
    if (hi && !hi_strict && (*hi > lo || !lo_strict))  // hi itself, any zero fraction
      alts.push_back("\"" + std::to_string(*hi) + "\" ( \".\" \"0\"+ )?");
    if (alts.empty())
      return compiler().fail(errc::invalid_argument, "empty number range at " + compiler().at(ptr));
    std::string out;
    for (const auto& a : alts) out += (out.empty() ? "" : " | ") + a;
    compiler().prim("ws");
    return "( " + out + " ) ws";
  }

  static std::string wrap(const std::string& s) {
    return s.find(' ') == std::string::npos ? s : "( " + s + " )";
  }
  static std::string digits(std::size_t n) {
    return n == 0 ? "" : n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}";
  }

  // Decimal numbers from lo to hi, both with the same number of digits.
  static std::string same_length(const std::string& lo, const std::string& hi) {
    if (lo == hi) return "\"" + lo + "\"";
    std::size_t i = 0;
    while (lo[i] == hi[i]) ++i;
    std::string prefix = i ? "\"" + lo.substr(0, i) + "\" " : "";
    std::string lr = lo.substr(i + 1), hr = hi.substr(i + 1);
    const std::size_t n = lr.size();
    const bool lo_zeros = lr.find_first_not_of('0') == std::string::npos;
    const bool hi_nines = hr.find_first_not_of('9') == std::string::npos;
    char a = lo[i], b = hi[i];
    std::vector<std::string> alts;
    if (!lo_zeros)
      alts.push_back("\"" + std::string(1, a) + "\" " + wrap(same_length(lr, std::string(n, '9'))));
    char from = lo_zeros ? a : static_cast<char>(a + 1),
         to = hi_nines ? b : static_cast<char>(b - 1);
    if (from <= to) {
      std::string cls = from == to ? "\"" + std::string(1, from) + "\""
                                   : std::string("[") + from + "-" + to + "]";
      alts.push_back(cls + (n ? " " + digits(n) : ""));
    }
    if (!hi_nines)
      alts.push_back("\"" + std::string(1, b) + "\" " + wrap(same_length(std::string(n, '0'), hr)));
    std::string out;
    for (const auto& x : alts) out += (out.empty() ? "" : " | ") + x;
    return prefix + (alts.size() > 1 ? "( " + out + " )" : out);
  }

  // Decimal spellings (no leading zeros) of the integers in [a, b], or [a, 16 digits] unbounded.
  static std::string uint_range(std::uint64_t a, std::optional<std::uint64_t> b) {
    std::string as = std::to_string(a);
    std::string bs =
        b ? std::to_string(*b) : std::string(std::max<std::size_t>(as.size(), 16), '9');
    std::vector<std::string> alts;
    for (std::size_t len = as.size(); len <= bs.size(); ++len) {
      std::string lo = as;
      if (len != as.size()) {  // 10...0 (built in place: GCC 12 warns on "1" + string)
        lo.assign(len, '0');
        lo[0] = '1';
      }
      std::string hi = len == bs.size() ? bs : std::string(len, '9');
      if (!b && len > as.size()) {  // all longer lengths at once
        alts.push_back("[1-9] [0-9]{" + std::to_string(len - 1) + "," +
                       std::to_string(bs.size() - 1) + "}");
        break;
      }
      alts.push_back(same_length(lo, hi));
    }
    std::string out;
    for (const auto& x : alts) out += (out.empty() ? "" : " | ") + x;
    return out;
  }

  Compiler& compiler() { return static_cast<Compiler&>(*this); }
};

}  // namespace edgellm::constrain::detail
