// SPDX-License-Identifier: Apache-2.0
// A strict RFC 8259 JSON parser into a small DOM, for config.json, safetensors headers and
// tokenizer.json; errors give the byte offset, line and column and say what was expected.
#pragma once

#include "edgellm/config.hpp"
#include "edgellm/detail/utf8.hpp"
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

/// The six JSON types, in the order of Value's alternatives.
enum class Type : std::uint8_t { null, boolean, number, string, array, object };

/// "null", "boolean", "number", "string", "array" or "object".
inline const char* to_string(Type t) noexcept {
  switch (t) {
    case Type::null:
      return "null";
    case Type::boolean:
      return "boolean";
    case Type::number:
      return "number";
    case Type::string:
      return "string";
    case Type::array:
      return "array";
    case Type::object:
      return "object";
  }
  return "value";
}

/// A JSON number. `value` always holds the nearest double. When the literal had no fraction and
/// no exponent and fits in int64, `is_integer` is true and `int_value` holds it exactly (so
/// 9007199254740993 survives, while `1.0` and `1e2` are not integers).
struct Number {
  double value = 0.0;
  std::int64_t int_value = 0;
  bool is_integer = false;
};

class Value;
struct Member;

namespace detail {
/// Unsigned integer types other than bool (which gets its own Value constructor).
template <class T>
concept UnsignedNotBool = std::unsigned_integral<T> && !std::same_as<T, bool>;
}  // namespace detail

/// A JSON array.
using Array = std::vector<Value>;

/// A JSON object: members in document order. Lookup is a linear scan, which is fastest for the
/// small objects of config files; iterate the members to build an index for large ones (a
/// tokenizer vocabulary). If duplicate keys were admitted (ParseOptions::reject_duplicate_keys =
/// false), every member is kept and find() returns the last one, as Python's json module does.
class Object {
 public:
  using const_iterator = std::vector<Member>::const_iterator;

  // Defined after Member, which must be complete for std::vector<Member>'s members.
  std::size_t size() const noexcept;
  bool empty() const noexcept;
  const_iterator begin() const noexcept;
  const_iterator end() const noexcept;
  const Member& operator[](std::size_t i) const;
  const std::vector<Member>& members() const noexcept { return members_; }

  /// The value of the last member named `key`, or nullptr.
  const Value* find(std::string_view key) const noexcept;
  bool contains(std::string_view key) const noexcept { return find(key) != nullptr; }

  /// Appends a member (no duplicate check); returns the new value.
  Value& append(std::string key, Value value);
  void reserve(std::size_t n);

 private:
  std::vector<Member> members_;
};

/// A JSON value: null, boolean, number, string, array or object. Default-constructed as null.
/// Copyable (deep copy) and cheaply movable.
class Value {
 public:
  // Implicit conversions from the natural C++ types. Integers become integer numbers; doubles
  // become non-integer numbers (like the literal 2.0); `const char*` is a string, never a bool.
  // (Defined after Member: std::vector<Member> needs a complete Member in the variant's code.)
  Value() noexcept;
  Value(std::nullptr_t) noexcept;  // NOLINT(implicit)
  template <std::same_as<bool> B>
  Value(B b) noexcept;  // NOLINT(implicit)
  template <std::signed_integral I>
  Value(I i) noexcept;  // NOLINT(implicit)
  template <detail::UnsignedNotBool U>
  Value(U u) noexcept;            // NOLINT(implicit)
  Value(double d) noexcept;       // NOLINT(implicit)
  Value(Number n) noexcept;       // NOLINT(implicit)
  Value(const char* s);           // NOLINT(implicit); s must not be null
  Value(std::string_view s);      // NOLINT(implicit)
  Value(std::string s) noexcept;  // NOLINT(implicit)
  Value(Array a) noexcept;        // NOLINT(implicit)
  Value(Object o) noexcept;       // NOLINT(implicit)

  Type type() const noexcept { return static_cast<Type>(v_.index()); }
  bool is_null() const noexcept { return type() == Type::null; }
  bool is_bool() const noexcept { return type() == Type::boolean; }
  bool is_number() const noexcept { return type() == Type::number; }
  /// A number written without fraction or exponent whose value fits in int64.
  bool is_integer() const noexcept {
    const Number* n = std::get_if<Number>(&v_);
    return n != nullptr && n->is_integer;
  }
  bool is_string() const noexcept { return type() == Type::string; }
  bool is_array() const noexcept { return type() == Type::array; }
  bool is_object() const noexcept { return type() == Type::object; }

  // Checked accessors: empty optional / nullptr when the type differs.
  std::optional<bool> get_bool() const noexcept {
    const bool* b = std::get_if<bool>(&v_);
    return b ? std::optional<bool>(*b) : std::nullopt;
  }
  /// Any number, as a double.
  std::optional<double> get_double() const noexcept {
    const Number* n = std::get_if<Number>(&v_);
    return n ? std::optional<double>(n->value) : std::nullopt;
  }
  /// Only exact integers (is_integer()).
  std::optional<std::int64_t> get_int() const noexcept {
    const Number* n = std::get_if<Number>(&v_);
    return n && n->is_integer ? std::optional<std::int64_t>(n->int_value) : std::nullopt;
  }
  const Number* get_number() const noexcept { return std::get_if<Number>(&v_); }
  const std::string* get_string() const noexcept { return std::get_if<std::string>(&v_); }
  const Array* get_array() const noexcept { return std::get_if<Array>(&v_); }
  const Object* get_object() const noexcept { return std::get_if<Object>(&v_); }
  Array* get_array() noexcept { return std::get_if<Array>(&v_); }
  Object* get_object() noexcept { return std::get_if<Object>(&v_); }

  // Unchecked accessors. Precondition: the value has that type (EDGELLM_ASSERT in debug builds).
  // With assertions off a mismatch yields false / 0 / an empty string, array or object, never UB.
  bool as_bool() const noexcept;
  double as_double() const noexcept;
  std::int64_t as_int() const noexcept;
  const std::string& as_string() const noexcept;
  const Array& as_array() const noexcept;
  const Object& as_object() const noexcept;

  /// Object member lookup; nullptr when this is not an object or has no such key.
  const Value* find(std::string_view key) const noexcept {
    const Object* o = get_object();
    return o ? o->find(key) : nullptr;
  }
  /// Number of elements of an array or members of an object; 0 otherwise.
  std::size_t size() const noexcept;

 private:
  std::variant<std::nullptr_t, bool, Number, std::string, Array, Object> v_;
};

/// An object member.
struct Member {
  std::string key;
  Value value;
};

inline Value::Value() noexcept : v_(nullptr) {}
inline Value::Value(std::nullptr_t) noexcept : v_(nullptr) {}
template <std::same_as<bool> B>
Value::Value(B b) noexcept : v_(b) {}
template <std::signed_integral I>
Value::Value(I i) noexcept : v_(Number{static_cast<double>(i), i, true}) {}
template <detail::UnsignedNotBool U>
Value::Value(U u) noexcept
    : v_(u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
             ? Number{static_cast<double>(u), static_cast<std::int64_t>(u), true}
             : Number{static_cast<double>(u), 0, false}) {}
inline Value::Value(double d) noexcept : v_(Number{d, 0, false}) {}
inline Value::Value(Number n) noexcept : v_(n) {}
inline Value::Value(const char* s) : v_(std::string(s)) {}
inline Value::Value(std::string_view s) : v_(std::string(s)) {}
inline Value::Value(std::string s) noexcept : v_(std::move(s)) {}
inline Value::Value(Array a) noexcept : v_(std::move(a)) {}
inline Value::Value(Object o) noexcept : v_(std::move(o)) {}

inline std::size_t Object::size() const noexcept { return members_.size(); }
inline bool Object::empty() const noexcept { return members_.empty(); }
inline Object::const_iterator Object::begin() const noexcept { return members_.begin(); }
inline Object::const_iterator Object::end() const noexcept { return members_.end(); }
inline const Member& Object::operator[](std::size_t i) const { return members_[i]; }
inline void Object::reserve(std::size_t n) { members_.reserve(n); }

inline const Value* Object::find(std::string_view key) const noexcept {
  for (auto it = members_.rbegin(); it != members_.rend(); ++it) {
    if (it->key == key) return &it->value;
  }
  return nullptr;
}

inline Value& Object::append(std::string key, Value value) {
  members_.push_back(Member{std::move(key), std::move(value)});
  return members_.back().value;
}

inline bool Value::as_bool() const noexcept {
  EDGELLM_ASSERT(is_bool(), "json::Value::as_bool on a non-boolean");
  const bool* b = std::get_if<bool>(&v_);
  return b ? *b : false;
}
inline double Value::as_double() const noexcept {
  EDGELLM_ASSERT(is_number(), "json::Value::as_double on a non-number");
  const Number* n = std::get_if<Number>(&v_);
  return n ? n->value : 0.0;
}
inline std::int64_t Value::as_int() const noexcept {
  EDGELLM_ASSERT(is_integer(), "json::Value::as_int on a non-integer");
  const Number* n = std::get_if<Number>(&v_);
  return n && n->is_integer ? n->int_value : 0;
}
inline const std::string& Value::as_string() const noexcept {
  EDGELLM_ASSERT(is_string(), "json::Value::as_string on a non-string");
  static const std::string empty;
  const std::string* s = get_string();
  return s ? *s : empty;
}
inline const Array& Value::as_array() const noexcept {
  EDGELLM_ASSERT(is_array(), "json::Value::as_array on a non-array");
  static const Array empty;
  const Array* a = get_array();
  return a ? *a : empty;
}
inline const Object& Value::as_object() const noexcept {
  EDGELLM_ASSERT(is_object(), "json::Value::as_object on a non-object");
  static const Object empty;
  const Object* o = get_object();
  return o ? *o : empty;
}
inline std::size_t Value::size() const noexcept {
  if (const Array* a = get_array()) return a->size();
  if (const Object* o = get_object()) return o->size();
  return 0;
}

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

namespace detail {

inline void dump_string(std::string& out, const std::string& s) {
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
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04X", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

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
      dump_string(out, v.as_string());
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
        dump_string(out, m.key);
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
      detail::dump_string(out, s.substr(0, cut));
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
