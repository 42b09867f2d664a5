// SPDX-License-Identifier: Apache-2.0
// The JSON document model: Value (null, boolean, number, string, array, object), Number and
// Object. io/json.hpp parses text into it; io/json_write.hpp writes it (and single strings) back.
#pragma once

#include "edgellm/config.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
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

}  // namespace edgellm::io::json
