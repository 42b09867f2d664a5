// SPDX-License-Identifier: Apache-2.0
// Writing JSON: string escaping (also for programs that print JSON rows without building a
// Value, such as the benches), compact serialisation of a Value, and short descriptions of
// values for error messages.
#pragma once

#include "edgellm/io/json_value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

namespace edgellm::io::json {

/// Appends `s` to `out` as a JSON string literal, quotes included: '"' and '\\' escaped, the
/// control characters below 0x20 written as \b \f \n \r \t or \u00xx (lower-case hex, as
/// Python's json.dumps and serde_json write them: chat templates' tojson must match Hugging
/// Face's renderings byte for byte), everything else (UTF-8 included) copied as is. The bytes
/// are not validated: valid UTF-8 in, valid JSON out.
inline void append_escaped(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          static constexpr char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}


/// `s` as a JSON string literal, quotes included (see append_escaped).
inline std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_escaped(out, s);
  return out;
}

namespace detail {

inline void dump_number(std::string& out, const Number& n) {
  char buf[64];
  if (n.is_integer) {
    const auto r = std::to_chars(buf, buf + sizeof buf, n.int_value);
    out.append(buf, r.ptr);
    return;
  }
  if (!std::isfinite(n.value)) {  // only reachable for hand-built values; JSON has no inf/nan
    out += "null";
    return;
  }
  // %.17g round-trips every double; make sure the result still reads as a non-integer literal.
  std::snprintf(buf, sizeof buf, "%.17g", n.value);
  std::string s(buf);
  std::replace(s.begin(), s.end(), ',', '.');  // a locale with a decimal comma
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  out += s;
}

inline void dump_value(std::string& out, const Value& v) {
  switch (v.type()) {
    case Type::null:
      out += "null";
      return;
    case Type::boolean:
      out += v.as_bool() ? "true" : "false";
      return;
    case Type::number:
      dump_number(out, *v.get_number());
      return;
    case Type::string:
      append_escaped(out, v.as_string());
      return;
    case Type::array: {
      out += '[';
      bool first = true;
      for (const Value& e : v.as_array()) {
        if (!first) out += ',';
        first = false;
        dump_value(out, e);
      }
      out += ']';
      return;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (const Member& m : v.as_object()) {
        if (!first) out += ',';
        first = false;
        append_escaped(out, m.key);
        out += ':';
        dump_value(out, m.value);
      }
      out += '}';
      return;
    }
  }
}

}  // namespace detail

/// Compact serialisation (no whitespace; members in stored order; non-ASCII UTF-8 written as is).
/// parse(dump(v)) reproduces v: integers exactly, other numbers to the same double.
/// Recursion depth equals the value's nesting depth.
inline std::string dump(const Value& v) {
  std::string out;
  detail::dump_value(out, v);
  return out;
}

/// A short description of a value for error messages: `"abc"` (strings cut at 60 bytes), `42`,
/// `true`, `null`, "an array of 3 elements", "an object with 2 members".
inline std::string describe(const Value& v) {
  switch (v.type()) {
    case Type::string: {
      const std::string& s = v.as_string();
      std::size_t cut = std::min<std::size_t>(s.size(), 60);
      // Do not split a UTF-8 sequence: back up to the start of the character.
      while (cut > 0 && cut < s.size() && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) {
        --cut;
      }
      std::string out;
      append_escaped(out, std::string_view(s).substr(0, cut));
      if (cut < s.size()) out += "...";
      return out;
    }
    case Type::array:
      return "an array of " + std::to_string(v.size()) + " elements";
    case Type::object:
      return "an object with " + std::to_string(v.size()) + " members";
    default:
      return dump(v);
  }
}

}  // namespace edgellm::io::json
