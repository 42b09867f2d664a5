// SPDX-License-Identifier: Apache-2.0
// The Python methods chat templates call on values: str.strip/lstrip/rstrip/split/startswith/
// endswith/upper/lower/title/capitalize/replace/find/count/join, dict.get/items/keys/values.
// Mutating methods (list.append, dict.update) are refused, as in transformers' immutable
// sandbox.
#pragma once

#include "edgellm/model/chat_template/filters.hpp"
#include "edgellm/model/chat_template/value.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::model::detail::jinja::fn {

/// Whether `obj.name(...)` is a method call this file handles (else the evaluator looks the
/// attribute up and calls what it finds).
inline bool is_method_receiver(const Value& obj) noexcept { return obj.is_string() || obj.is_dict() || obj.is_list(); }

inline result<Value> call_method(const Value& obj, std::string_view name, std::span<const Value> args,
                                 const Kwargs& kw) {
  const auto arg = [&](std::size_t i, std::string_view key) -> std::optional<Value> {
    if (i < args.size()) return args[i];
    return kwarg(kw, key);
  };
  const auto at_most = [&](std::size_t n) -> result<void> {
    if (args.size() + kw.size() > n)
      return fail("the method '" + std::string(name) + "' takes at most " + std::to_string(n) + " argument(s)");
    return {};
  };
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      if (auto r = at_most(1); !r) return r.error();
      const auto chars = arg(0, "chars");
      return Value::string(strip(s, opt_string(chars ? &*chars : nullptr), name != "rstrip", name != "lstrip"));
    }
    if (name == "split") {
      if (auto r = at_most(2); !r) return r.error();
      const auto sep = arg(0, "sep"), maxsplit = arg(1, "maxsplit");
      return split(s, opt_string(sep ? &*sep : nullptr), maxsplit && maxsplit->is_int() ? maxsplit->as_int() : -1);
    }
    if (name == "startswith" || name == "endswith") {
      if (args.empty()) return fail(std::string(name) + "() takes one argument");
      List options;
      if (args[0].is_list()) options = args[0].as_list();
      else options.push_back(args[0]);
      for (const Value& o : options) {
        if (!o.is_string()) return fail(std::string(name) + "() needs a string or a tuple of strings");
        const std::string& p = o.as_string();
        if (name == "startswith" ? s.starts_with(p) : s.ends_with(p)) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      if (auto r = at_most(0); !r) return r.error();
      if (name == "title") return Value::string(title_case(s));
      return apply_filter(name, obj, {}, {});
    }
    if (name == "replace") {
      if (auto r = at_most(3); !r) return r.error();
      return apply_filter("replace", obj, args, kw);
    }
    if (name == "find" || name == "count") {
      if (args.empty() || !args[0].is_string()) return fail(std::string(name) + "() needs a string");
      const std::string& sub = args[0].as_string();
      if (name == "find") {
        const std::size_t at = s.find(sub);
        if (at == std::string::npos) return Value::integer(-1);
        return Value::integer(static_cast<std::int64_t>(code_point_offsets(s.substr(0, at)).size() - 1));
      }
      if (sub.empty()) return Value::integer(length_of(obj) + 1);
      std::int64_t n = 0;
      for (std::size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    }
    if (name == "join") {
      if (args.size() != 1) return fail("join() takes one argument");
      auto xs = iterate(args[0]);
      if (!xs) return xs.error();
      std::string out;
      for (std::size_t i = 0; i < xs->size(); ++i) {
        if (!(*xs)[i].is_string()) return fail("join(): sequence item " + std::to_string(i) + " is not a string");
        if (i) out += s;
        out += (*xs)[i].as_string();
      }
      return Value::string(std::move(out));
    }
  } else if (obj.is_dict()) {
    const Dict& d = obj.as_dict();
    if (name == "get") {
      if (args.empty() || args.size() > 2) return fail("get() takes one or two arguments");
      if (args[0].is_string())
        if (const Value* v = d.find(args[0].as_string())) return *v;
      return args.size() > 1 ? args[1] : Value::none();
    }
    if (name == "items" || name == "keys" || name == "values") {
      if (auto r = at_most(0); !r) return r.error();
      List out;
      for (const auto& [k, v] : d.items) {
        if (name == "items") out.push_back(Value::tuple({Value::string(k), v}));
        else if (name == "keys") out.push_back(Value::string(k));
        else out.push_back(v);
      }
      return Value::list(std::move(out));
    }
  }
  return error{errc::unsupported,
               "the method '" + std::string(name) + "' of a " + obj.type_name() + " is not supported"};
}

}  // namespace edgellm::model::detail::jinja::fn
