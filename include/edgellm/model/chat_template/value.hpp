// SPDX-License-Identifier: Apache-2.0
// The values a chat template computes with: Jinja's undefined, none, booleans, integers,
// floats, strings, lists (tuples too), dicts with string keys, namespaces and callables.
// Lists, dicts and namespaces are shared by reference, as in Python (`ns.x = 1` is seen by
// every holder of `ns`). Rendering follows Python's str(): True, None, 1.0, ['a', 1].
#pragma once

#include "edgellm/io/json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::model::detail::jinja {

class Value;
using List = std::vector<Value>;

/// Dict members in insertion order (Python 3.7+ dicts keep it; tojson and items() show it).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const noexcept;
  void set(std::string key, Value v);
};

/// A global function (raise_exception, namespace, range, strftime_now) or a macro.
struct Callable {
  std::string name;
  const void* macro = nullptr;  ///< the Macro node when this is a macro, else null
};

class Value {
 public:
  enum class Kind : std::uint8_t { undefined, none, boolean, integer, floating, string, list, dict, ns, callable };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {}) {
    Value v;
    v.s_ = std::move(hint);
    return v;
  }
  static Value none() { return with_kind(Kind::none); }
  static Value boolean(bool b) {
    Value v = with_kind(Kind::boolean);
    v.i_ = b ? 1 : 0;
    return v;
  }
  static Value integer(std::int64_t i) {
    Value v = with_kind(Kind::integer);
    v.i_ = i;
    return v;
  }
  static Value floating(double d) {
    Value v = with_kind(Kind::floating);
    v.d_ = d;
    return v;
  }
  static Value string(std::string s) {
    Value v = with_kind(Kind::string);
    v.s_ = std::move(s);
    return v;
  }
  static Value list(List items = {}) {
    Value v = with_kind(Kind::list);
    for (const Value& x : items) v.depth_ = std::max(v.depth_, x.depth_ + 1);
    v.list_ = std::make_shared<List>(std::move(items));
    return v;
  }
  /// A tuple: a list that prints as (a, b), as items() and `a, b` make.
  static Value tuple(List items) {
    Value v = list(std::move(items));
    v.tuple_ = true;
    return v;
  }
  static Value dict(Dict d = {}) {
    Value v = with_kind(Kind::dict);
    for (const auto& kv : d.items) v.depth_ = std::max(v.depth_, kv.second.depth_ + 1);
    v.dict_ = std::make_shared<Dict>(std::move(d));
    return v;
  }
  static Value name_space(Dict d = {}) {
    Value v = dict(std::move(d));
    v.kind_ = Kind::ns;
    return v;
  }
  static Value callable(Callable c) {
    Value v = with_kind(Kind::callable);
    v.fn_ = std::make_shared<Callable>(std::move(c));
    return v;
  }

  Kind kind() const noexcept { return kind_; }
  /// Nesting depth at construction: 0 for scalars, 1 + the deepest member for containers. The
  /// evaluator caps it, so printing and comparing recurse a bounded number of times.
  std::uint32_t depth() const noexcept { return depth_; }
  bool is_undefined() const noexcept { return kind_ == Kind::undefined; }
  bool is_none() const noexcept { return kind_ == Kind::none; }
  bool is_bool() const noexcept { return kind_ == Kind::boolean; }
  bool is_int() const noexcept { return kind_ == Kind::integer; }
  bool is_float() const noexcept { return kind_ == Kind::floating; }
  bool is_number() const noexcept { return is_int() || is_float(); }
  bool is_string() const noexcept { return kind_ == Kind::string; }
  bool is_list() const noexcept { return kind_ == Kind::list; }
  bool is_tuple() const noexcept { return tuple_; }
  bool is_dict() const noexcept { return kind_ == Kind::dict; }
  bool is_namespace() const noexcept { return kind_ == Kind::ns; }
  bool is_mapping() const noexcept { return is_dict() || is_namespace(); }
  bool is_callable() const noexcept { return kind_ == Kind::callable; }

  bool as_bool() const noexcept { return i_ != 0; }
  std::int64_t as_int() const noexcept { return i_; }
  /// Integers and booleans widen; floats as they are.
  double as_double() const noexcept { return is_float() ? d_ : static_cast<double>(i_); }
  const std::string& as_string() const noexcept { return s_; }
  /// For undefined: the name that was looked up, for messages.
  const std::string& undefined_hint() const noexcept { return s_; }
  List& as_list() const noexcept { return *list_; }
  Dict& as_dict() const noexcept { return *dict_; }
  const Callable& as_callable() const noexcept { return *fn_; }
  /// Same object (lists, dicts, namespaces): Python's `is`.
  bool same_object(const Value& o) const noexcept {
    return kind_ == o.kind_ && ((list_ && list_ == o.list_) || (dict_ && dict_ == o.dict_));
  }

  /// Python truthiness: empty strings, lists and dicts, 0, none and undefined are false.
  bool truthy() const noexcept {
    switch (kind_) {
      case Kind::undefined:
      case Kind::none:
        return false;
      case Kind::boolean:
      case Kind::integer:
        return i_ != 0;
      case Kind::floating:
        return d_ != 0.0;
      case Kind::string:
        return !s_.empty();
      case Kind::list:
        return !list_->empty();
      case Kind::dict:
        return !dict_->items.empty();
      case Kind::ns:
      case Kind::callable:
        return true;
    }
    return false;
  }

  /// "undefined", "none", "bool", "int", "float", "string", "list", "dict", "namespace" or
  /// "function": for messages.
  const char* type_name() const noexcept {
    switch (kind_) {
      case Kind::undefined: return "undefined";
      case Kind::none: return "none";
      case Kind::boolean: return "bool";
      case Kind::integer: return "int";
      case Kind::floating: return "float";
      case Kind::string: return "string";
      case Kind::list: return "list";
      case Kind::dict: return "dict";
      case Kind::ns: return "namespace";
      case Kind::callable: return "function";
    }
    return "value";
  }

 private:
  static Value with_kind(Kind k) {
    Value v;
    v.kind_ = k;
    return v;
  }

  Kind kind_ = Kind::undefined;
  std::uint32_t depth_ = 0;
  bool tuple_ = false;
  std::int64_t i_ = 0;
  double d_ = 0.0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

inline const Value* Dict::find(std::string_view key) const noexcept {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

inline void Dict::set(std::string key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(v));
}

/// Python's repr() of a float: the shortest digits that round-trip, with ".0" on integral
/// values ("2.0", "0.1", "1e+16", "inf", "nan").
inline std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const double mag = std::fabs(d);
  std::to_chars_result r{};
  // Python switches to exponent notation at 1e16 and below 1e-4.
  if (mag != 0.0 && (mag >= 1e16 || mag < 1e-4)) {
    r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  } else {
    r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
  }
  std::string s(buf, r.ptr);
  const auto e = s.find('e');
  if (e != std::string::npos) {
    // C++ writes "1e+16"; Python writes "1e+16" too but pads the exponent to two digits.
    std::string mant = s.substr(0, e), ex = s.substr(e + 1);
    char sign = '+';
    if (!ex.empty() && (ex[0] == '+' || ex[0] == '-')) {
      sign = ex[0];
      ex.erase(0, 1);
    }
    if (ex.size() < 2) ex.insert(0, "0");
    return mant + "e" + sign + ex;
  }
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

/// Python's repr() of a string: single quotes unless the text has one and no double quote.
inline std::string string_repr(std::string_view s) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == q) out += '\\';
        out += c;
    }
  }
  out += q;
  return out;
}

std::string to_output(const Value& v);

/// Python's repr(): how list and dict members print.
inline std::string repr(const Value& v) {
  if (v.is_string()) return string_repr(v.as_string());
  if (v.is_undefined()) return "Undefined";
  return to_output(v);
}

/// Python's str(): what `{{ v }}` writes. Undefined writes nothing.
inline std::string to_output(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined: return {};
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return v.as_bool() ? "True" : "False";
    case Value::Kind::integer: return std::to_string(v.as_int());
    case Value::Kind::floating: return float_repr(v.as_double());
    case Value::Kind::string: return v.as_string();
    case Value::Kind::list: {
      std::string out = v.is_tuple() ? "(" : "[";
      bool first = true;
      for (const Value& x : v.as_list()) {
        if (!first) out += ", ";
        first = false;
        out += repr(x);
      }
      if (v.is_tuple()) return out + (v.as_list().size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Kind::dict:
    case Value::Kind::ns: {
      std::string out = v.is_namespace() ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += string_repr(k) + ": " + repr(x);
      }
      return out + (v.is_namespace() ? "}>" : "}");
    }
    case Value::Kind::callable: return "<function " + v.as_callable().name + ">";
  }
  return {};
}

/// Python's ==: numbers compare by value across int/float/bool, containers element-wise,
/// different types are unequal; undefined equals only undefined.
inline bool equals(const Value& a, const Value& b) {
  if (a.is_number() || a.is_bool()) {
    if (!(b.is_number() || b.is_bool())) return false;
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return a.as_string() == b.as_string();
    case Value::Kind::list: {
      const List &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::dict: {
      const Dict &x = a.as_dict(), &y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (w == nullptr || !equals(v, *w)) return false;
      }
      return true;
    }
    default:
      return a.same_object(b) || (a.is_callable() && a.as_callable().name == b.as_callable().name &&
                                  a.as_callable().macro == b.as_callable().macro);
  }
}

/// A JSON document as a template value (messages, extra variables). Depth is bounded by the
/// JSON parser that produced it.
inline Value from_json(const io::json::Value& j) {
  switch (j.type()) {
    case io::json::Type::null: return Value::none();
    case io::json::Type::boolean: return Value::boolean(*j.get_bool());
    case io::json::Type::number:
      if (auto i = j.get_int()) return Value::integer(*i);
      return Value::floating(*j.get_double());
    case io::json::Type::string: return Value::string(*j.get_string());
    case io::json::Type::array: {
      List items;
      for (const auto& x : *j.get_array()) items.push_back(from_json(x));
      return Value::list(std::move(items));
    }
    case io::json::Type::object: {
      Dict d;
      for (const auto& m : *j.get_object()) d.set(m.key, from_json(m.value));
      return Value::dict(std::move(d));
    }
  }
  return Value::none();
}

}  // namespace edgellm::model::detail::jinja
