// SPDX-License-Identifier: Apache-2.0
// A strict RFC 8259 JSON parser into the small DOM of io/json_value.hpp, for config.json,
// safetensors headers and tokenizer.json; errors give the byte offset, line and column and say
// what was expected. Includes io/json_write.hpp, so this one header reads and writes JSON.
#pragma once

#include "edgellm/config.hpp"
#include "edgellm/detail/utf8.hpp"
#include "edgellm/io/json_value.hpp"
#include "edgellm/io/json_write.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <charconv>
#include <clocale>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

namespace edgellm::io::json {

/// Limits and strictness switches for parse().
struct ParseOptions {
  /// Deepest allowed nesting of arrays and objects; deeper input is an error, never a stack
  /// overflow (the parser recurses once per level).
  std::size_t max_depth = 256;
  /// Longest accepted input, in bytes.
  std::size_t max_bytes = std::size_t{1} << 30;
  /// Duplicate keys within one object are an error (RFC 8259 leaves their meaning undefined).
  bool reject_duplicate_keys = true;
  /// Skip a leading UTF-8 byte order mark instead of rejecting it (RFC 8259 §8.1 permits either;
  /// Python's json.loads, and so transformers, rejects it).
  bool allow_bom = false;
};

namespace detail {

/// Recursive-descent parser over a string_view. Every failure records one message and unwinds.
class Parser {
 public:
  Parser(std::string_view text, std::string_view what, const ParseOptions& opt) noexcept
      : text_(text), what_(what), opt_(opt) {}

  result<Value> run() {
    if (text_.size() > opt_.max_bytes) {
      return make_error(errc::format_error, "json::parse",
                        std::string(what_) + ": input of " + std::to_string(text_.size()) +
                            " bytes exceeds the " + std::to_string(opt_.max_bytes) + "-byte limit");
    }
    if (text_.size() >= 3 && static_cast<unsigned char>(text_[0]) == 0xEF &&
        static_cast<unsigned char>(text_[1]) == 0xBB &&
        static_cast<unsigned char>(text_[2]) == 0xBF) {
      if (!opt_.allow_bom) {
        fail_at(0, "a UTF-8 byte order mark is not allowed at the start of JSON text");
        return std::move(*error_);
      }
      pos_ = 3;
    }
    Value root;
    skip_ws();
    if (!parse_value(root, 0)) return std::move(*error_);
    skip_ws();
    if (pos_ != text_.size()) {
      fail("expected end of input after the top-level value");
      return std::move(*error_);
    }
    return root;
  }

 private:
  static constexpr std::string_view kWhere = "json::parse";

  bool at_end() const noexcept { return pos_ >= text_.size(); }
  unsigned char peek() const noexcept { return static_cast<unsigned char>(text_[pos_]); }

  void skip_ws() noexcept {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  /// "'x'", "byte 0x07" or "end of input": what sits at `at`.
  std::string describe_at(std::size_t at) const {
    if (at >= text_.size()) return "end of input";
    const auto c = static_cast<unsigned char>(text_[at]);
    if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02X", c);
    return buf;
  }

  bool fail_at(std::size_t at, std::string_view msg) {
    if (error_) return false;  // keep the first (innermost) error
    std::size_t line = 1, line_start = 0;
    const std::size_t lim = std::min(at, text_.size());
    for (std::size_t i = 0; i < lim; ++i) {
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    std::string m(what_);
    m += ": at byte ";
    m += std::to_string(at);
    m += " (line ";
    m += std::to_string(line);
    m += ", column ";
    m += std::to_string(at - line_start + 1);
    m += "): ";
    m += msg;
    error_ = make_error(errc::format_error, kWhere, m);
    return false;
  }
  bool fail(std::string_view msg) { return fail_at(pos_, msg); }
  /// "<expected>, found <what is at pos_>"
  bool fail_expected(std::string_view expected) {
    std::string m("expected ");
    m += expected;
    m += ", found ";
    m += describe_at(pos_);
    return fail(m);
  }

  bool parse_value(Value& out, std::size_t depth) {
    if (at_end()) return fail_expected("a value");
    switch (peek()) {
      case '{':
        return parse_object(out, depth + 1);
      case '[':
        return parse_array(out, depth + 1);
      case '"': {
        std::string s;
        if (!parse_string(s)) return false;
        out = Value(std::move(s));
        return true;
      }
      case 't':
        return parse_literal("true", out, Value(true));
      case 'f':
        return parse_literal("false", out, Value(false));
      case 'n':
        return parse_literal("null", out, Value(nullptr));
      default: {
        const unsigned char c = peek();
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
        return fail_expected("a value (object, array, string, number, true, false or null)");
      }
    }
  }

  bool parse_literal(std::string_view word, Value& out, Value v) {
    if (text_.substr(pos_, word.size()) != word) {
      return fail(std::string("invalid literal; expected '") + std::string(word) + "'");
    }
    pos_ += word.size();
    out = std::move(v);
    return true;
  }

  bool enter(std::size_t depth) {
    if (depth > opt_.max_depth) {
      return fail("nesting deeper than the limit of " + std::to_string(opt_.max_depth) +
                  " arrays/objects");
    }
    return true;
  }

  bool parse_array(Value& out, std::size_t depth) {
    if (!enter(depth)) return false;
    ++pos_;  // '['
    Array arr;
    skip_ws();
    if (!at_end() && peek() == ']') {
      ++pos_;
      out = Value(std::move(arr));
      return true;
    }
    for (;;) {
      skip_ws();
      arr.emplace_back();
      if (!parse_value(arr.back(), depth)) return false;
      skip_ws();
      if (at_end()) return fail_expected("',' or ']' after an array element");
      const unsigned char c = peek();
      if (c == ',') {
        ++pos_;
        skip_ws();
        if (!at_end() && peek() == ']') return fail("trailing comma before ']'");
        continue;
      }
      if (c == ']') {
        ++pos_;
        break;
      }
      return fail_expected("',' or ']' after an array element");
    }
    out = Value(std::move(arr));
    return true;
  }

  bool parse_object(Value& out, std::size_t depth) {
    if (!enter(depth)) return false;
    const std::size_t start = pos_;
    ++pos_;  // '{'
    Object obj;
    skip_ws();
    if (!at_end() && peek() == '}') {
      ++pos_;
      out = Value(std::move(obj));
      return true;
    }
    std::string key;
    for (;;) {
      skip_ws();
      if (at_end() || peek() != '"') return fail_expected("'\"' to start an object key");
      key.clear();
      if (!parse_string(key)) return false;
      skip_ws();
      if (at_end() || peek() != ':') return fail_expected("':' after an object key");
      ++pos_;
      skip_ws();
      Value& v = obj.append(std::move(key), Value());
      key = std::string();
      if (!parse_value(v, depth)) return false;
      skip_ws();
      if (at_end()) return fail_expected("',' or '}' after an object member");
      const unsigned char c = peek();
      if (c == ',') {
        ++pos_;
        skip_ws();
        if (!at_end() && peek() == '}') return fail("trailing comma before '}'");
        continue;
      }
      if (c == '}') {
        ++pos_;
        break;
      }
      return fail_expected("',' or '}' after an object member");
    }
    if (opt_.reject_duplicate_keys) {
      if (const std::string* dup = find_duplicate(obj)) {
        return fail_at(start, "duplicate key \"" + *dup + "\" in the object that starts here");
      }
    }
    out = Value(std::move(obj));
    return true;
  }

  /// A key that occurs twice, or nullptr. Pairwise for small objects, O(n log n) otherwise.
  static const std::string* find_duplicate(const Object& obj) {
    const auto& m = obj.members();
    const std::size_t n = m.size();
    if (n <= 16) {
      for (std::size_t i = 1; i < n; ++i) {
        for (std::size_t j = 0; j < i; ++j) {
          if (m[i].key == m[j].key) return &m[i].key;
        }
      }
      return nullptr;
    }
    std::vector<std::size_t> idx(n);
    for (std::size_t i = 0; i < n; ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&m](std::size_t a, std::size_t b) {
      const int c = m[a].key.compare(m[b].key);
      return c != 0 ? c < 0 : a < b;
    });
    const std::string* first_dup = nullptr;
    std::size_t first_dup_pos = n;
    for (std::size_t i = 1; i < n; ++i) {
      if (m[idx[i]].key == m[idx[i - 1]].key && idx[i] < first_dup_pos) {
        first_dup_pos = idx[i];
        first_dup = &m[idx[i]].key;
      }
    }
    return first_dup;
  }

  static int hex_digit(unsigned char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  /// Reads the 4 hex digits of a \u escape at pos_ (just past the 'u').
  bool read_hex4(std::uint32_t& cp) {
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = at_end() ? -1 : hex_digit(peek());
      if (d < 0) return fail_expected("4 hexadecimal digits after '\\u'");
      cp = cp * 16 + static_cast<std::uint32_t>(d);
      ++pos_;
    }
    return true;
  }

  /// Length of the well-formed UTF-8 sequence starting at `at`, or 0 when it is malformed.
  std::size_t utf8_sequence_length(std::size_t at) const noexcept {
    return edgellm::detail::utf8_sequence_length(text_, at);
  }

  /// Parses the string whose opening quote is at pos_, appending its UTF-8 content to `out`.
  bool parse_string(std::string& out) {
    const std::size_t start = pos_;
    ++pos_;                  // opening quote
    std::size_t run = pos_;  // start of the pending run of bytes that are copied unchanged
    for (;;) {
      if (at_end()) {
        return fail_at(start, "unterminated string (no closing '\"' before end of input)");
      }
      const unsigned char c = peek();
      if (c == '"') {
        out.append(text_.data() + run, pos_ - run);
        ++pos_;
        return true;
      }
      if (c == '\\') {
        out.append(text_.data() + run, pos_ - run);
        if (!parse_escape(out)) return false;
        run = pos_;
        continue;
      }
      if (c < 0x20) {
        char buf[80];
        std::snprintf(buf, sizeof buf,
                      "control character 0x%02X in a string must be written as an escape", c);
        return fail(buf);
      }
      if (c < 0x80) {
        ++pos_;
        continue;
      }
      const std::size_t len = utf8_sequence_length(pos_);
      if (len == 0) return fail("invalid UTF-8 byte sequence in a string");
      pos_ += len;
    }
  }

  /// Parses the escape at pos_ (the backslash) and appends what it stands for.
  bool parse_escape(std::string& out) {
    const std::size_t esc_start = pos_;
    ++pos_;  // backslash
    if (at_end()) return fail_expected("an escape character after '\\'");
    const unsigned char e = peek();
    ++pos_;
    switch (e) {
      case '"':
        out += '"';
        return true;
      case '\\':
        out += '\\';
        return true;
      case '/':
        out += '/';
        return true;
      case 'b':
        out += '\b';
        return true;
      case 'f':
        out += '\f';
        return true;
      case 'n':
        out += '\n';
        return true;
      case 'r':
        out += '\r';
        return true;
      case 't':
        out += '\t';
        return true;
      case 'u':
        break;
      default:
        --pos_;
        return fail_expected("one of \" \\ / b f n r t u after '\\'");
    }
    std::uint32_t cp = 0;
    if (!read_hex4(cp)) return false;
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
      return fail_at(esc_start, "lone low surrogate \\u" + hex4(cp) +
                                    " (a low surrogate must follow a high surrogate)");
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (text_.substr(pos_, 2) != "\\u") {
        return fail_at(esc_start, "lone high surrogate \\u" + hex4(cp) +
                                      " (expected a \\uDC00-\\uDFFF low surrogate after it)");
      }
      pos_ += 2;
      std::uint32_t lo = 0;
      if (!read_hex4(lo)) return false;
      if (lo < 0xDC00 || lo > 0xDFFF) {
        return fail_at(esc_start, "high surrogate \\u" + hex4(cp) + " followed by \\u" + hex4(lo) +
                                      ", which is not a low surrogate");
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    edgellm::detail::append_utf8(out, static_cast<char32_t>(cp));
    return true;
  }

  static std::string hex4(std::uint32_t cp) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04X", static_cast<unsigned>(cp & 0xFFFF));
    return buf;
  }

  static bool is_digit(unsigned char c) noexcept { return c >= '0' && c <= '9'; }

  bool parse_number(Value& out) {
    const std::size_t start = pos_;
    const bool negative = peek() == '-';
    if (negative) ++pos_;
    if (at_end() || !is_digit(peek())) return fail_expected("a digit after '-'");
    if (peek() == '0') {
      ++pos_;
      if (!at_end() && is_digit(peek())) {
        return fail_at(start, "leading zeros are not allowed in numbers");
      }
    } else {
      while (!at_end() && is_digit(peek())) ++pos_;
    }
    bool integral = true;
    if (!at_end() && peek() == '.') {
      integral = false;
      ++pos_;
      if (at_end() || !is_digit(peek())) return fail_expected("a digit after the decimal point");
      while (!at_end() && is_digit(peek())) ++pos_;
    }
    if (!at_end() && (peek() == 'e' || peek() == 'E')) {
      integral = false;
      ++pos_;
      if (!at_end() && (peek() == '+' || peek() == '-')) ++pos_;
      if (at_end() || !is_digit(peek())) return fail_expected("a digit in the exponent");
      while (!at_end() && is_digit(peek())) ++pos_;
    }
    const std::string_view lit = text_.substr(start, pos_ - start);
    Number num;
    if (integral) {
      std::int64_t i = 0;
      const auto r = std::from_chars(lit.data(), lit.data() + lit.size(), i);
      if (r.ec == std::errc() && r.ptr == lit.data() + lit.size()) {
        num.is_integer = true;
        num.int_value = i;
        // int64 -> double rounds to nearest like decimal conversion does; keep the sign of -0.
        num.value = (negative && i == 0) ? -0.0 : static_cast<double>(i);
        out = Value(num);
        return true;
      }
      // Too large for int64: fall through to a double.
    }
    if (!to_double(lit, num.value)) {
      return fail_at(start, "number " + std::string(lit.substr(0, 40)) +
                                (lit.size() > 40 ? "..." : "") + " is out of the range of double");
    }
    out = Value(num);
    return true;
  }

  /// Grammar-checked literal -> nearest double. False on overflow; underflow gives 0 or a
  /// subnormal, as in other JSON parsers.
  static bool to_double(std::string_view lit, double& v) {
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
    const auto r = std::from_chars(lit.data(), lit.data() + lit.size(), v);
    if (r.ec == std::errc()) return std::isfinite(v);
#endif
    // Fallback (no floating from_chars, or out of range): strtod on a copy whose '.' is the
    // locale's decimal point, since strtod honours LC_NUMERIC.
    std::string copy(lit);
    const char* dp = std::localeconv()->decimal_point;
    if (dp != nullptr && dp[0] != '\0' && dp[0] != '.' && dp[1] == '\0') {
      std::replace(copy.begin(), copy.end(), '.', dp[0]);
    }
    char* end = nullptr;
    v = std::strtod(copy.c_str(), &end);
    return end == copy.c_str() + copy.size() && std::isfinite(v);
  }

  std::string_view text_;
  std::string_view what_;
  const ParseOptions& opt_;
  std::size_t pos_ = 0;
  std::optional<error> error_;
};

}  // namespace detail

/// Parses a complete JSON text (RFC 8259): exactly one value with optional surrounding
/// whitespace. Strings must be valid UTF-8; escapes, including \uXXXX surrogate pairs, are decoded
/// to UTF-8, and lone surrogates are errors. Numbers follow the RFC grammar (no leading zeros,
/// no '+', no NaN/Infinity); a number too large for a double is an error. `what` names the input
/// (usually a file name) in messages such as
/// "[json::parse] config.json: at byte 17 (line 2, column 5): expected ':' after an object key,
/// found '}'". Runs in time linear in the input (duplicate-key checks are O(n log n) per object).
/// All errors are errc::format_error.
inline result<Value> parse(std::string_view text, std::string_view what,
                           const ParseOptions& options = {}) {
  detail::Parser p(text, what, options);
  return p.run();
}

}  // namespace edgellm::io::json
