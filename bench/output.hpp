// SPDX-License-Identifier: Apache-2.0
// How the edgellm-bench-* programs print result rows: tsv, json, jsonl, md and csv, in
// llama-bench's conventions, as pure functions of (format, columns, metadata, cells).
//
//   tsv    `# key=value` metadata lines, a header line, one tab-separated line per row
//   json   ONE JSON array of row objects; every object carries the metadata fields first
//   jsonl  one such object per line
//   md     `# key=value` lines, then a Markdown table
//   csv    RFC 4180: a header line (metadata columns first), one line per row
//
// A cell may be null ("not applicable"): null in json/jsonl, empty in tsv/csv, "-" in md. A
// non-finite number (NaN, as a standard deviation of one sample) is null too.
#pragma once

#include <edgellm/io/json_write.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace edgellm::bench {

enum class output_format { tsv, json, jsonl, md, csv };

/// Marks a cell as not applicable to its row: `out.row({..., bench::null, ...})`.
struct null_t {};
inline constexpr null_t null{};

/// One cell of a row: null, an integer, a floating-point number or a string.
struct value {
  std::variant<std::monostate, long long, double, std::string> v;

  value() = default;          // null
  value(null_t) {}            // NOLINT(implicit)
  template <std::integral T>  // bool is integral too, but the exact value(bool) wins
  value(T x) : v(static_cast<long long>(x)) {}  // NOLINT(implicit)
  template <std::floating_point T>
  value(T x) : v(static_cast<double>(x)) {}                // NOLINT(implicit)
  value(bool x) : v(std::string(x ? "true" : "false")) {}  // NOLINT(implicit)
  value(std::string s) : v(std::move(s)) {}                // NOLINT(implicit)
  value(std::string_view s) : v(std::string(s)) {}         // NOLINT(implicit)
  value(const char* s) : v(std::string(s)) {}              // NOLINT(implicit)
  template <class T>
  value(const std::optional<T>& x) {  // NOLINT(implicit): nullopt is null
    if (x) *this = value(*x);
  }

  /// True for null and for a non-finite number.
  bool is_null() const {
    if (std::holds_alternative<std::monostate>(v)) return true;
    const auto* d = std::get_if<double>(&v);
    return d != nullptr && !std::isfinite(*d);
  }
};

/// A named value: a metadata field (build, CPU), printed on every row of json/jsonl/csv.
using field = std::pair<std::string, value>;

namespace output_detail {
inline std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}
}  // namespace output_detail

/// One cell as text in `format`: numbers with 6 significant digits; strings JSON-escaped
/// (json, jsonl), quoted where needed (csv) or stripped of the characters that would break their
/// line (tabs and newlines; '|' in md).
inline std::string render_cell(const value& x, output_format format) {
  const bool json = format == output_format::json || format == output_format::jsonl;
  if (x.is_null()) {
    if (json) return "null";
    return format == output_format::md ? "-" : "";
  }
  if (const auto* i = std::get_if<long long>(&x.v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&x.v)) return fmt::format("{:.6g}", *d);
  std::string s = std::get<std::string>(x.v);
  if (json) return io::json::escape(s);
  if (format == output_format::csv) return output_detail::csv_quote(s);
  std::replace(s.begin(), s.end(), '\t', ' ');
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  if (format == output_format::md) std::replace(s.begin(), s.end(), '|', '/');
  return s;
}

/// What precedes the first row: tsv and md: the `# key=value` metadata lines and the header;
/// csv: the header (metadata keys, then the columns); json: "[" ; jsonl: nothing.
inline std::string format_begin(output_format format, const std::vector<std::string>& columns,
                                const std::vector<field>& metadata) {
  std::string out;
  switch (format) {
    case output_format::tsv:
    case output_format::md: {
      for (const auto& [k, v] : metadata) {
        out += fmt::format("# {}={}\n", k, render_cell(v, output_format::tsv));
      }
      if (format == output_format::tsv) {
        for (std::size_t i = 0; i < columns.size(); ++i) {
          if (i != 0) out += '\t';
          out += columns[i];
        }
        out += '\n';
      } else {
        std::string header = "|", rule = "|";
        // appended piecewise: `" " + string` trips GCC 12's -Wrestrict at -O3
        for (const auto& c : columns) {
          header += ' ';
          header += c;
          header += " |";
          rule += " --- |";
        }
        out += fmt::format("\n{}\n{}\n", header, rule);
      }
      break;
    }
    case output_format::csv: {
      std::string line;
      for (const auto& [k, v] : metadata) {
        line += output_detail::csv_quote(k);
        line += ',';
      }
      for (std::size_t i = 0; i < columns.size(); ++i) {
        if (i != 0) line += ',';
        line += output_detail::csv_quote(columns[i]);
      }
      out = line + "\n";
      break;
    }
    case output_format::json:
      out = "[";
      break;
    case output_format::jsonl:
      break;
  }
  return out;
}

/// Row `index` (0 for the first) as text, its line end included except in json, where rows
/// are separated by ",\n" and format_end closes the array. `cells` has one entry per column.
inline std::string format_row(output_format format, const std::vector<std::string>& columns,
                              const std::vector<field>& metadata, const std::vector<value>& cells,
                              std::size_t index) {
  std::string line;
  switch (format) {
    case output_format::tsv:
      for (std::size_t i = 0; i < cells.size(); ++i) {
        if (i != 0) line += '\t';
        line += render_cell(cells[i], format);
      }
      line += '\n';
      break;
    case output_format::md:
      line = "|";
      for (const auto& c : cells) {
        line += ' ';
        line += render_cell(c, format);
        line += " |";
      }
      line += '\n';
      break;
    case output_format::csv:
      for (const auto& [k, v] : metadata) {
        line += render_cell(v, format);
        line += ',';
      }
      for (std::size_t i = 0; i < cells.size(); ++i) {
        if (i != 0) line += ',';
        line += render_cell(cells[i], format);
      }
      line += '\n';
      break;
    case output_format::json:
    case output_format::jsonl: {
      std::string obj = "{";
      auto member = [&](const std::string& k, const value& v) {
        if (obj.size() > 1) obj += ", ";
        obj += io::json::escape(k);
        obj += ": ";
        obj += render_cell(v, format);
      };
      for (const auto& [k, v] : metadata) member(k, v);
      for (std::size_t i = 0; i < cells.size() && i < columns.size(); ++i)
        member(columns[i], cells[i]);
      obj += '}';
      if (format == output_format::jsonl) {
        line = obj + "\n";
      } else {
        line = index == 0 ? "\n  " : ",\n  ";
        line += obj;
      }
      break;
    }
  }
  return line;
}

/// What follows the last row: "\n]\n" closing the json array (also when there were no rows:
/// "[\n]\n"); nothing in the other formats.
inline std::string format_end(output_format format) {
  return format == output_format::json ? "\n]\n" : "";
}

}  // namespace edgellm::bench
