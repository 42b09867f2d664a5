// SPDX-License-Identifier: Apache-2.0
// What a template can do to a value: Jinja filters (`x | trim`), tests (`x is string`) and the
// Python methods chat templates call on strings, dicts and lists (`s.strip()`, `d.get(k)`).
// Semantics follow Python and Jinja2 as Hugging Face transformers configures them (tojson is
// json.dumps(ensure_ascii=False)). Strings index and slice by code point. Case mapping
// (upper, lower, title, capitalize) is ASCII only. Errors carry no position; the evaluator adds it.
#pragma once

#include "edgellm/detail/unicode.hpp"
#include "edgellm/detail/utf8.hpp"
#include "edgellm/io/json_write.hpp"
#include "edgellm/model/chat_template/integer.hpp"
#include "edgellm/model/chat_template/value.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace edgellm::model::detail::jinja {

using Kwargs = std::vector<std::pair<std::string, Value>>;

inline constexpr std::string_view kFilters[] = {
    "abs",  "capitalize", "count",   "d",      "default", "dictsort", "first", "float",  "indent",
    "int",  "items",      "join",    "last",   "length",  "list",     "lower", "map",    "max",
    "min",  "reject",     "rejectattr", "replace", "reverse", "safe", "select", "selectattr", "sort",
    "string", "sum",      "title",   "tojson", "trim",    "unique",   "upper", "wordcount"};
inline constexpr std::string_view kTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even", "false", "float",
    "ge",      "gt",       "in",      "integer",     "iterable", "le", "lower", "lt", "mapping",
    "ne",      "none",     "number",  "odd",         "sameas", "sequence", "string", "true",
    "undefined", "upper", "==", "!=", "<", "<=", ">", ">="};

inline bool is_known_filter(std::string_view name) noexcept {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}
inline bool is_known_test(std::string_view name) noexcept {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

namespace fn {

inline error fail(std::string msg) { return error{errc::invalid_argument, std::move(msg)}; }

// ------------------------------------------------------------------ strings

/// Byte offsets of each code point of `s` plus s.size(); an ill-formed byte counts as one.
inline std::vector<std::size_t> code_point_offsets(std::string_view s) {
  std::vector<std::size_t> off;
  for (std::size_t i = 0; i < s.size();) {
    off.push_back(i);
    const std::size_t n = edgellm::detail::utf8_sequence_length(s, i);
    i += n == 0 ? 1 : n;
  }
  off.push_back(s.size());
  return off;
}

/// Python's str.isspace() for one code point.
inline bool py_space(char32_t cp) noexcept {
  return (cp >= 0x1C && cp <= 0x1F) || edgellm::detail::unicode::is_space(cp);
}

/// Code point starting at byte i (a lone ill-formed byte decodes as itself).
inline char32_t cp_at(std::string_view s, std::size_t i, std::size_t& len) noexcept {
  len = edgellm::detail::utf8_sequence_length(s, i);
  if (len == 0) {
    len = 1;
    return static_cast<unsigned char>(s[i]);
  }
  return edgellm::detail::unicode::decode_at(s, i, len);
}

/// str.strip / lstrip / rstrip: without `chars`, Unicode whitespace.
inline std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars) {
    for (std::size_t i = 0, n = 0; i < chars->size(); i += n) set.push_back(cp_at(*chars, i, n));
  }
  const auto drop = [&](char32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : py_space(cp);
  };
  const auto off = code_point_offsets(s);
  std::size_t b = 0, e = off.size() - 1;  // code point indices [b, e)
  std::size_t n = 0;
  if (left)
    while (b < e && drop(cp_at(s, off[b], n))) ++b;
  if (right)
    while (e > b && drop(cp_at(s, off[e - 1], n))) --e;
  return std::string(s.substr(off[b], off[e] - off[b]));
}

inline std::string ascii_upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}
inline std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}
inline bool ascii_alpha(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/// Python's str.title(): a letter after a non-letter starts a word (so "o'neil" -> "O'Neil").
inline std::string title_case(std::string s) {
  bool prev_alpha = false;
  for (char& c : s) {
    if (ascii_alpha(c)) {
      if (prev_alpha && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (!prev_alpha && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    }
    prev_alpha = ascii_alpha(c);
  }
  return s;
}

/// str.split(sep, maxsplit): without `sep`, runs of whitespace and no empty pieces.
inline result<Value> split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit) {
  List out;
  if (sep) {
    if (sep->empty()) return fail("split(): empty separator");
    std::size_t start = 0;
    for (;;) {
      const std::size_t at = maxsplit == 0 ? std::string_view::npos : s.find(*sep, start);
      if (at == std::string_view::npos) break;
      out.push_back(Value::string(std::string(s.substr(start, at - start))));
      start = at + sep->size();
      if (maxsplit > 0) --maxsplit;
    }
    out.push_back(Value::string(std::string(s.substr(start))));
    return Value::list(std::move(out));
  }
  const auto off = code_point_offsets(s);
  std::size_t i = 0, n = 0;
  const std::size_t count = off.size() - 1;
  while (i < count) {
    while (i < count && py_space(cp_at(s, off[i], n))) ++i;
    if (i >= count) break;
    if (maxsplit == 0) {
      // The rest, with trailing whitespace removed.
      out.push_back(Value::string(strip(s.substr(off[i]), std::nullopt, false, true)));
      break;
    }
    std::size_t j = i;
    while (j < count && !py_space(cp_at(s, off[j], n))) ++j;
    out.push_back(Value::string(std::string(s.substr(off[i], off[j] - off[i]))));
    if (maxsplit > 0) --maxsplit;
    i = j;
  }
  return Value::list(std::move(out));
}

inline std::string replace(std::string_view s, std::string_view from, std::string_view to, std::int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between code points and at both ends
    const auto off = code_point_offsets(s);
    for (std::size_t k = 0; k + 1 < off.size(); ++k) {
      if (count < 0 || static_cast<std::int64_t>(k) < count) out += to;
      out += s.substr(off[k], off[k + 1] - off[k]);
    }
    if (count < 0 || static_cast<std::int64_t>(off.size() - 1) < count) out += to;
    return out;
  }
  std::size_t start = 0;
  while (count != 0) {
    const std::size_t at = s.find(from, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += to;
    start = at + from.size();
    if (count > 0) --count;
  }
  out += s.substr(start);
  return out;
}

// ------------------------------------------------------------------ JSON

/// json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys); indent < 0: none.
inline result<void> to_json(std::string& out, const Value& v, int indent, bool sort_keys, int level) {
  const auto newline = [&](int lv) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(lv), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::none: out += "null"; return {};
    case Value::Kind::boolean: out += v.as_bool() ? "true" : "false"; return {};
    case Value::Kind::integer: out += std::to_string(v.as_int()); return {};
    case Value::Kind::floating: {
      const std::string r = float_repr(v.as_double());
      out += r == "nan" ? "NaN" : r == "inf" ? "Infinity" : r == "-inf" ? "-Infinity" : r;
      return {};
    }
    case Value::Kind::string: io::json::append_escaped(out, v.as_string()); return {};
    case Value::Kind::list: {
      const List& xs = v.as_list();
      if (xs.empty()) {
        out += "[]";
        return {};
      }
      out += '[';
      for (std::size_t i = 0; i < xs.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        if (auto r = to_json(out, xs[i], indent, sort_keys, level + 1); !r) return r;
      }
      if (indent >= 0) newline(level);
      out += ']';
      return {};
    }
    case Value::Kind::dict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_dict().items) items.push_back(&kv);
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      if (items.empty()) {
        out += "{}";
        return {};
      }
      out += '{';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        io::json::append_escaped(out, items[i]->first);
        out += ": ";
        if (auto r = to_json(out, items[i]->second, indent, sort_keys, level + 1); !r) return r;
      }
      if (indent >= 0) newline(level);
      out += '}';
      return {};
    }
    default:
      return fail(std::string("tojson: a ") + v.type_name() + " is not JSON serializable");
  }
}

// ------------------------------------------------------------------ tests

inline std::optional<Value> kwarg(const Kwargs& kw, std::string_view name) {
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  return std::nullopt;
}

/// Python's < on numbers or strings; other pairs are an error.
inline result<bool> less(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return fail(std::string("'<' is not supported between a ") + a.type_name() + " and a " + b.type_name());
}

/// `needle in haystack`.
inline result<bool> contains(const Value& haystack, const Value& needle) {
  if (haystack.is_string()) {
    if (!needle.is_string())
      return fail(std::string("'in <string>' needs a string on the left, not a ") + needle.type_name());
    return haystack.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (haystack.is_list()) {
    for (const Value& x : haystack.as_list())
      if (equals(x, needle)) return true;
    return false;
  }
  if (haystack.is_mapping()) return needle.is_string() && haystack.as_dict().find(needle.as_string()) != nullptr;
  if (haystack.is_undefined()) return false;  // Jinja2's Undefined iterates as empty
  return fail(std::string("'in' is not supported on a ") + haystack.type_name());
}

inline result<bool> apply_test(std::string_view name, const Value& v, std::span<const Value> args) {
  const auto need = [&](std::size_t n) -> result<void> {
    if (args.size() != n)
      return fail("the test '" + std::string(name) + "' takes " + std::to_string(n) + " argument(s), got " +
                  std::to_string(args.size()));
    return {};
  };
  if (auto r = need(name == "defined" || name == "undefined" || name == "none" || name == "string" ||
                            name == "mapping" || name == "iterable" || name == "sequence" ||
                            name == "number" || name == "integer" || name == "float" || name == "boolean" ||
                            name == "true" || name == "false" || name == "odd" || name == "even" ||
                            name == "callable" || name == "lower" || name == "upper"
                        ? 0
                        : 1);
      !r)
    return r.error();
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_mapping();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && ascii_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && ascii_upper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) return fail("the test '" + std::string(name) + "' needs an integer");
    const bool odd = (v.as_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  const Value& a = args[0];
  if (name == "divisibleby") {
    if (!v.is_int() || !a.is_int() || a.as_int() == 0) return fail("divisibleby needs nonzero integers");
    return v.as_int() % a.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, a);
  if (name == "ne" || name == "!=") return !equals(v, a);
  if (name == "sameas") return v.same_object(a) || (v.kind() == a.kind() && !v.is_list() && !v.is_mapping() && equals(v, a));
  if (name == "in") return contains(a, v);
  if (name == "lt" || name == "<") return less(v, a);
  if (name == "gt" || name == ">") return less(a, v);
  if (name == "le" || name == "<=") {
    auto r = less(a, v);
    if (!r) return r;
    return !*r;
  }
  if (name == "ge" || name == ">=") {
    auto r = less(v, a);
    if (!r) return r;
    return !*r;
  }
  return error{errc::unsupported, "the test '" + std::string(name) + "' is not supported"};
}


// ------------------------------------------------------------------ filters

/// Jinja's attribute-or-item lookup on a mapping (selectattr, map, join, sort by attribute).
inline Value lookup_attr(const Value& v, std::string_view attr) {
  if (v.is_mapping())
    if (const Value* x = v.as_dict().find(attr)) return *x;
  return Value::undefined(std::string(attr));
}

/// Python's len().
inline std::int64_t length_of(const Value& v) {
  if (v.is_string()) return static_cast<std::int64_t>(code_point_offsets(v.as_string()).size() - 1);
  if (v.is_list()) return static_cast<std::int64_t>(v.as_list().size());
  if (v.is_mapping()) return static_cast<std::int64_t>(v.as_dict().items.size());
  return -1;
}

/// The items a `for` loop or a list filter walks: list members, dict keys, string characters.
inline result<List> iterate(const Value& v) {
  if (v.is_list()) return v.as_list();
  if (v.is_undefined()) return List{};
  List out;
  if (v.is_mapping()) {
    for (const auto& kv : v.as_dict().items) out.push_back(Value::string(kv.first));
    return out;
  }
  if (v.is_string()) {
    const std::string& s = v.as_string();
    const auto off = code_point_offsets(s);
    for (std::size_t k = 0; k + 1 < off.size(); ++k)
      out.push_back(Value::string(s.substr(off[k], off[k + 1] - off[k])));
    return out;
  }
  return fail(std::string("a ") + v.type_name() + " is not iterable");
}

inline std::optional<std::string> opt_string(const Value* v) {
  if (v == nullptr || v->is_none() || v->is_undefined()) return std::nullopt;
  return v->is_string() ? v->as_string() : to_output(*v);
}

inline result<Value> apply_filter(std::string_view name, const Value& v0, std::span<const Value> args,
                                  const Kwargs& kw) {
  // The string filters take str(value), as Jinja2's soft_str does (undefined -> "").
  const bool string_filter = name == "trim" || name == "upper" || name == "lower" || name == "capitalize" ||
                             name == "title" || name == "replace" || name == "indent" || name == "wordcount";
  const Value v = string_filter && !v0.is_string() ? Value::string(to_output(v0)) : v0;
  const auto arg = [&](std::size_t i, std::string_view key) -> std::optional<Value> {
    if (i < args.size()) return args[i];
    return kwarg(kw, key);
  };
  const auto need_string = [&]() -> result<void> {
    if (!v.is_string()) return fail("the filter '" + std::string(name) + "' needs a string, got a " + v.type_name());
    return {};
  };
  if (name == "safe") return v;
  if (name == "default" || name == "d") {
    const Value dflt = arg(0, "default_value").value_or(Value::string(""));
    const bool boolean = arg(1, "boolean").value_or(Value::boolean(false)).truthy();
    return (v.is_undefined() || (boolean && !v.truthy())) ? dflt : v;
  }
  if (name == "length" || name == "count") {
    const std::int64_t n = length_of(v);
    if (n < 0) {
      if (v.is_undefined()) return Value::integer(0);
      return fail(std::string("length of a ") + v.type_name());
    }
    return Value::integer(n);
  }
  if (name == "string") return Value::string(to_output(v));
  if (name == "tojson") {
    const auto ind = arg(0, "indent");
    const int indent = ind && ind->is_int() ? static_cast<int>(std::clamp<std::int64_t>(ind->as_int(), 0, 64)) : -1;
    const bool sort_keys = arg(1, "sort_keys").value_or(Value::boolean(false)).truthy();
    std::string out;
    if (auto r = to_json(out, v, indent, sort_keys, 0); !r) return r.error();
    return Value::string(std::move(out));
  }
  if (name == "int") {
    if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
    if (v.is_float()) {
      // Truncated toward zero, as Python's int(). NaN takes the default (Jinja2's ValueError);
      // a float beyond int64_t has no value here (converting it would be undefined behaviour).
      const double d = std::trunc(v.as_double());
      if (std::isnan(d)) return arg(0, "default").value_or(Value::integer(0));
      if (!(d >= -0x1p63 && d < 0x1p63)) return integer::overflow("int(" + to_output(v) + ")");
      return Value::integer(static_cast<std::int64_t>(d));
    }
    if (v.is_string()) {
      const std::string t = strip(v.as_string(), std::nullopt, true, true);
      std::int64_t x = 0;
      const auto r = std::from_chars(t.data(), t.data() + t.size(), x);
      if (r.ec == std::errc() && r.ptr == t.data() + t.size() && !t.empty()) return Value::integer(x);
      if (r.ec == std::errc::result_out_of_range && r.ptr == t.data() + t.size())
        return integer::overflow("int('" + t + "')");
    }
    return arg(0, "default").value_or(Value::integer(0));
  }
  if (name == "float") {
    if (v.is_number() || v.is_bool()) return Value::floating(v.as_double());
    if (v.is_string()) {
      const std::string t = strip(v.as_string(), std::nullopt, true, true);
      double x = 0;
      const auto r = std::from_chars(t.data(), t.data() + t.size(), x);
      if (r.ec == std::errc() && r.ptr == t.data() + t.size() && !t.empty()) return Value::floating(x);
    }
    return arg(0, "default").value_or(Value::floating(0.0));
  }
  if (name == "abs") {
    if (v.is_int()) {
      auto r = integer::abs(v.as_int());
      if (!r) return r.error();
      return Value::integer(*r);
    }
    if (v.is_float()) return Value::floating(v.as_double() < 0 ? -v.as_double() : v.as_double());
    return fail(std::string("abs of a ") + v.type_name());
  }
  if (name == "trim") {
    if (auto r = need_string(); !r) return r.error();
    const auto chars = arg(0, "chars");
    return Value::string(strip(v.as_string(), opt_string(chars ? &*chars : nullptr), true, true));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    if (auto r = need_string(); !r) return r.error();
    if (name == "upper") return Value::string(ascii_upper(v.as_string()));
    if (name == "lower") return Value::string(ascii_lower(v.as_string()));
    std::string s = ascii_lower(v.as_string());
    if (name == "capitalize") {
      if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
      return Value::string(std::move(s));
    }
    // Jinja's title: a word starts after whitespace, '-', '(', '{', '[' or '<' (Python's
    // str.title(), the method, starts one after any non-letter: title_case()).
    bool boundary = true;
    for (char& c : s) {
      const bool sep = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '-' ||
                       c == '(' || c == '{' || c == '[' || c == '<';
      if (boundary && !sep && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      boundary = sep;
    }
    return Value::string(std::move(s));
  }
  if (name == "replace") {
    if (auto r = need_string(); !r) return r.error();
    const auto from = arg(0, "old"), to = arg(1, "new"), cnt = arg(2, "count");
    if (!from || !to || !from->is_string() || !to->is_string()) return fail("replace needs two strings");
    return Value::string(replace(v.as_string(), from->as_string(), to->as_string(),
                                 cnt && cnt->is_int() ? cnt->as_int() : -1));
  }
  if (name == "wordcount") {
    if (auto r = need_string(); !r) return r.error();
    auto parts = split(v.as_string(), std::nullopt, -1);
    if (!parts) return parts;
    return Value::integer(static_cast<std::int64_t>(parts->as_list().size()));
  }
  if (name == "indent") {
    if (auto r = need_string(); !r) return r.error();
    const auto w = arg(0, "width");
    std::string pad = w && w->is_string() ? w->as_string()
                                          : std::string(w && w->is_int() ? static_cast<std::size_t>(std::clamp<std::int64_t>(w->as_int(), 0, 256)) : 4, ' ');
    const bool first = arg(1, "first").value_or(Value::boolean(false)).truthy();
    const bool blank = arg(2, "blank").value_or(Value::boolean(false)).truthy();
    const std::string& s = v.as_string();
    std::string out;
    std::size_t start = 0;
    bool first_line = true;
    for (;;) {
      const std::size_t nl = s.find('\n', start);
      const std::string_view line = std::string_view(s).substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      if ((first_line ? first : true) && (blank || !line.empty())) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      first_line = false;
    }
    return Value::string(std::move(out));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_mapping()) return fail(std::string("items of a ") + v.type_name());
    List out;
    for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::tuple({Value::string(k), x}));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_mapping()) return fail(std::string("dictsort of a ") + v.type_name());
    auto items = v.as_dict().items;
    std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    List out;
    for (auto& [k, x] : items) out.push_back(Value::tuple({Value::string(k), x}));
    return Value::list(std::move(out));
  }
  // The rest walk a sequence.
  auto seq = iterate(v);
  if (!seq) return seq.error();
  List& xs = *seq;
  if (name == "list") return Value::list(std::move(xs));
  if (name == "first") return xs.empty() ? Value::undefined("first") : xs.front();
  if (name == "last") return xs.empty() ? Value::undefined("last") : xs.back();
  if (name == "reverse") {
    if (v.is_string()) return Value::string(std::string(v.as_string().rbegin(), v.as_string().rend()));
    std::reverse(xs.begin(), xs.end());
    return Value::list(std::move(xs));
  }
  if (name == "join") {
    const auto sep = arg(0, "d");
    const auto attr = arg(1, "attribute");
    std::string out;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      if (i && sep) out += to_output(*sep);
      out += to_output(attr && attr->is_string() ? lookup_attr(xs[i], attr->as_string()) : xs[i]);
    }
    return Value::string(std::move(out));
  }
  if (name == "unique") {
    List out;
    for (Value& x : xs)
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equals(x, y); })) out.push_back(std::move(x));
    return Value::list(std::move(out));
  }
  if (name == "sum") {
    Value total = arg(1, "start").value_or(Value::integer(0));
    const auto attr = arg(0, "attribute");
    for (const Value& x0 : xs) {
      const Value x = attr && attr->is_string() ? lookup_attr(x0, attr->as_string()) : x0;
      if (!(x.is_number() || x.is_bool()) || !(total.is_number() || total.is_bool())) return fail("sum of non-numbers");
      if (x.is_float() || total.is_float()) {
        total = Value::floating(total.as_double() + x.as_double());
        continue;
      }
      auto r = integer::add(total.as_int(), x.as_int());
      if (!r) return r.error();
      total = Value::integer(*r);
    }
    return total;
  }
  if (name == "min" || name == "max" || name == "sort") {
    const auto attr = kwarg(kw, "attribute");
    const bool rev = kwarg(kw, "reverse").value_or(args.empty() ? Value::boolean(false) : args[0]).truthy();
    const auto key = [&](const Value& x) { return attr && attr->is_string() ? lookup_attr(x, attr->as_string()) : x; };
    std::optional<error> err;
    const auto lt = [&](const Value& a, const Value& b) {
      auto r = less(key(a), key(b));
      if (!r) {
        if (!err) err = r.error();
        return false;
      }
      return *r;
    };
    if (name == "sort") {
      std::stable_sort(xs.begin(), xs.end(), [&](const Value& a, const Value& b) { return rev ? lt(b, a) : lt(a, b); });
      if (err) return *err;
      return Value::list(std::move(xs));
    }
    if (xs.empty()) return Value::undefined(std::string(name));
    const auto it = name == "min" ? std::min_element(xs.begin(), xs.end(), lt) : std::max_element(xs.begin(), xs.end(), lt);
    if (err) return *err;
    return *it;
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name.ends_with("attr");
    const bool keep_if = name.starts_with("select");
    std::size_t k = 0;
    std::string attr;
    if (by_attr) {
      if (args.empty() || !args[0].is_string()) return fail(std::string(name) + " needs an attribute name");
      attr = args[0].as_string();
      k = 1;
    }
    std::string test = "truthy";
    if (k < args.size()) {
      if (!args[k].is_string()) return fail(std::string(name) + ": the test name must be a string");
      test = args[k].as_string();
      ++k;
      if (!is_known_test(test)) return error{errc::unsupported, "the test '" + test + "' is not supported"};
    }
    List out;
    for (Value& x : xs) {
      const Value subject = by_attr ? lookup_attr(x, attr) : x;
      bool ok = subject.truthy();
      if (test != "truthy") {
        auto r = apply_test(test, subject, args.subspan(k));
        if (!r) return r.error();
        ok = *r;
      }
      if (ok == keep_if) out.push_back(std::move(x));
    }
    return Value::list(std::move(out));
  }
  if (name == "map") {
    List out;
    if (const auto attr = kwarg(kw, "attribute")) {
      const Value dflt = kwarg(kw, "default").value_or(Value::undefined());
      for (const Value& x : xs) {
        Value y = attr->is_string() ? lookup_attr(x, attr->as_string()) : Value::undefined();
        out.push_back(y.is_undefined() && !dflt.is_undefined() ? dflt : y);
      }
      return Value::list(std::move(out));
    }
    if (args.empty() || !args[0].is_string()) return fail("map needs a filter name or attribute=");
    const std::string f = args[0].as_string();
    if (!is_known_filter(f) || f == "map") return error{errc::unsupported, "the filter '" + f + "' is not supported in map"};
    for (const Value& x : xs) {
      auto y = apply_filter(f, x, args.subspan(1), {});
      if (!y) return y;
      out.push_back(std::move(*y));
    }
    return Value::list(std::move(out));
  }
  return error{errc::unsupported, "the filter '" + std::string(name) + "' is not supported"};
}

}  // namespace fn
}  // namespace edgellm::model::detail::jinja
