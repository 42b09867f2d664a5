// SPDX-License-Identifier: Apache-2.0
// Renders a parsed chat template: walks the statements, evaluates expressions with Python's
// semantics and writes the output. Scoping follows Jinja2: a for loop (and a macro call) opens a
// scope whose assignments do not leak; `namespace()` objects carry state out of loops. Globals:
// raise_exception (an error carrying the template's message), namespace, range, dict,
// strftime_now. Undefined behaves as Jinja2's default Undefined: falsy, prints nothing, iterates
// as empty; looking an attribute up on it, calling it or doing arithmetic with it is an error.
// Bounds: output bytes, loop iterations, value nesting and macro recursion; the first failure
// is kept and everything unwinds.
#pragma once

#include "edgellm/model/chat_template/ast.hpp"
#include "edgellm/model/chat_template/filters.hpp"
#include "edgellm/model/chat_template/integer.hpp"
#include "edgellm/model/chat_template/lexer.hpp"
#include "edgellm/model/chat_template/methods.hpp"
#include "edgellm/model/chat_template/value.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::model::detail::jinja {

struct EvalLimits {
  std::size_t max_output_bytes = std::size_t{16} << 20;
  std::size_t max_iterations = std::size_t{1} << 20;  ///< loop bodies run, all loops together
  std::uint32_t max_value_depth = 64;
  std::size_t max_macro_depth = 32;
};

class Evaluator {
 public:
  Evaluator(std::string_view src, std::string_view name, EvalLimits limits, std::optional<std::time_t> now)
      : src_(src), name_(name), limits_(limits), now_(now) {}

  result<std::string> render(const Body& body, Dict globals) {
    for (const char* fn : {"raise_exception", "namespace", "range", "dict", "strftime_now"})
      if (globals.find(fn) == nullptr) globals.set(fn, Value::callable(Callable{fn, nullptr}));
    scopes_.clear();
    scopes_.push_back(std::move(globals));
    std::string out;
    exec(body, out);
    if (err_) return std::move(*err_);
    return out;
  }

 private:
  enum class Flow { normal, brk, cont, stop };

  void fail(errc code, std::size_t pos, std::string_view msg) {
    if (!err_) err_ = template_error(code, name_, src_, pos, msg);
  }
  void fail(std::size_t pos, const error& e) { fail(e.code, pos, e.message); }
  static std::string undefined_name(const Value& v) {
    return v.undefined_hint().empty() ? "a value" : "'" + v.undefined_hint() + "'";
  }

  bool append(std::string& out, std::string_view s, std::size_t pos) {
    if (out.size() + s.size() > limits_.max_output_bytes) {
      fail(errc::capacity_exceeded, pos,
           "the output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
      return false;
    }
    out += s;
    return true;
  }

  // ---------------------------------------------------------------- statements

  Flow exec(const Body& body, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow f = exec(*s, out);
      if (err_) return Flow::stop;
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::text:
        append(out, s.text, s.pos);
        return Flow::normal;
      case Stmt::Kind::output: {
        const Value v = eval(*s.expr);
        if (!err_) append(out, to_output(v), s.pos);
        return Flow::normal;
      }
      case Stmt::Kind::if_:
        for (std::size_t i = 0; i < s.conds.size(); ++i) {
          const Value c = eval(*s.conds[i]);
          if (err_) return Flow::stop;
          if (c.truthy()) return exec(s.bodies[i], out);
        }
        if (s.bodies.size() > s.conds.size()) return exec(s.bodies.back(), out);
        return Flow::normal;
      case Stmt::Kind::for_:
        return exec_for(s, out);
      case Stmt::Kind::set:
        exec_set(s);
        return Flow::normal;
      case Stmt::Kind::macro:
        scopes_.back().set(s.text, Value::callable(Callable{s.text, &s}));
        return Flow::normal;
      case Stmt::Kind::break_:
        return Flow::brk;
      case Stmt::Kind::continue_:
        return Flow::cont;
      case Stmt::Kind::generation:
        return exec(s.bodies[0], out);
    }
    return Flow::normal;
  }

  bool assign(const std::vector<std::string>& targets, const Value& v, std::size_t pos) {
    if (targets.size() == 1) {
      scopes_.back().set(targets[0], v);
      return true;
    }
    if (!v.is_list() || v.as_list().size() != targets.size()) {
      fail(errc::invalid_argument, pos,
           "cannot unpack a " + std::string(v.type_name()) + " into " + std::to_string(targets.size()) + " names");
      return false;
    }
    for (std::size_t i = 0; i < targets.size(); ++i) scopes_.back().set(targets[i], v.as_list()[i]);
    return true;
  }

  static bool holds_namespace(const Value& v) {
    if (v.is_namespace()) return true;
    if (v.is_list())
      for (const Value& x : v.as_list())
        if (holds_namespace(x)) return true;
    if (v.is_dict())
      for (const auto& kv : v.as_dict().items)
        if (holds_namespace(kv.second)) return true;
    return false;
  }

  void exec_set(const Stmt& s) {
    Value v;
    if (s.expr) {
      v = eval(*s.expr);
    } else {
      std::string body;
      exec(s.bodies[0], body);
      v = Value::string(std::move(body));
    }
    if (err_) return;
    if (s.attr.empty()) {
      assign(s.targets, v, s.pos);
      return;
    }
    const Value ns = lookup(s.targets[0]);
    if (!ns.is_namespace()) {
      fail(errc::invalid_argument, s.pos,
           "'" + s.targets[0] + "' is a " + ns.type_name() + ", not a namespace: cannot set '" + s.attr + "' on it");
      return;
    }
    if (holds_namespace(v)) {
      fail(errc::unsupported, s.pos, "storing a namespace inside a namespace is not supported");
      return;
    }
    ns.as_dict().set(s.attr, std::move(v));
  }

  Flow exec_for(const Stmt& s, std::string& out) {
    const Value iterable = eval(*s.expr);
    if (err_) return Flow::stop;
    auto items = fn::iterate(iterable);
    if (!items) {
      fail(s.expr->pos, items.error());
      return Flow::stop;
    }
    List xs = std::move(*items);
    scopes_.emplace_back();
    if (s.filter) {  // `for x in xs if cond`: filtered before the loop variables count
      List kept;
      for (Value& x : xs) {
        if (!assign(s.targets, x, s.pos)) break;
        const Value c = eval(*s.filter);
        if (err_) break;
        if (c.truthy()) kept.push_back(std::move(x));
      }
      xs = std::move(kept);
    }
    const auto n = static_cast<std::int64_t>(xs.size());
    for (std::int64_t i = 0; i < n && !err_; ++i) {
      if (++iterations_ > limits_.max_iterations) {
        fail(errc::capacity_exceeded, s.pos,
             "loops ran more than " + std::to_string(limits_.max_iterations) + " iterations");
        break;
      }
      Dict loop;
      loop.set("index0", Value::integer(i));
      loop.set("index", Value::integer(i + 1));
      loop.set("revindex0", Value::integer(n - 1 - i));
      loop.set("revindex", Value::integer(n - i));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("previtem", i > 0 ? xs[static_cast<std::size_t>(i - 1)] : Value::undefined("previtem"));
      loop.set("nextitem", i + 1 < n ? xs[static_cast<std::size_t>(i + 1)] : Value::undefined("nextitem"));
      scopes_.back().set("loop", Value::dict(std::move(loop)));
      if (!assign(s.targets, xs[static_cast<std::size_t>(i)], s.pos)) break;
      const Flow f = exec(s.bodies[0], out);
      if (f == Flow::brk || f == Flow::stop) break;
    }
    scopes_.pop_back();
    if (err_) return Flow::stop;
    if (n == 0 && s.bodies.size() > 1) return exec(s.bodies[1], out);
    return Flow::normal;
  }

  // ---------------------------------------------------------------- expressions

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const Value* v = it->find(name)) return *v;
    return Value::undefined(name);
  }

  Value eval(const Expr& e) {
    Value v = eval_inner(e);
    if (err_) return {};
    if (v.depth() > limits_.max_value_depth) {
      fail(errc::capacity_exceeded, e.pos,
           "a value nested deeper than " + std::to_string(limits_.max_value_depth) + " levels");
      return {};
    }
    return v;
  }

  bool eval_args(const Expr& e, std::size_t first, List& args, Kwargs& kw) {
    for (std::size_t i = first; i < e.args.size(); ++i) {
      args.push_back(eval(*e.args[i]));
      if (err_) return false;
    }
    for (const auto& [k, x] : e.kwargs) {
      kw.emplace_back(k, eval(*x));
      if (err_) return false;
    }
    return true;
  }

  Value subscript(const Value& obj, const Value& key, std::size_t pos) {
    if (obj.is_undefined()) {
      fail(errc::invalid_argument, pos, undefined_name(obj) + " is undefined");
      return {};
    }
    if (obj.is_mapping()) {
      if (key.is_string())
        if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      return Value::undefined(key.is_string() ? key.as_string() : to_output(key));
    }
    if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
      const std::int64_t len = fn::length_of(obj);
      std::int64_t i = key.as_int();
      if (i < 0) i += len;
      if (i < 0 || i >= len) return Value::undefined("[" + std::to_string(key.as_int()) + "]");
      if (obj.is_list()) return obj.as_list()[static_cast<std::size_t>(i)];
      const auto off = fn::code_point_offsets(obj.as_string());
      const auto k = static_cast<std::size_t>(i);
      return Value::string(obj.as_string().substr(off[k], off[k + 1] - off[k]));
    }
    return Value::undefined(to_output(key));
  }

  Value slice(const Value& obj, const Expr& e) {
    std::optional<std::int64_t> part[3];
    for (int k = 0; k < 3; ++k) {
      if (!e.args[static_cast<std::size_t>(k) + 1]) continue;
      const Value p = eval(*e.args[static_cast<std::size_t>(k) + 1]);
      if (err_) return {};
      if (p.is_none()) continue;
      if (!p.is_int()) {
        fail(errc::invalid_argument, e.pos, std::string("slice indices must be integers, not a ") + p.type_name());
        return {};
      }
      part[k] = p.as_int();
    }
    if (!obj.is_list() && !obj.is_string()) {
      if (obj.is_undefined()) fail(errc::invalid_argument, e.pos, undefined_name(obj) + " is undefined");
      else fail(errc::invalid_argument, e.pos, std::string("cannot slice a ") + obj.type_name());
      return {};
    }
    const std::int64_t step = part[2].value_or(1);
    if (step == 0) {
      fail(errc::invalid_argument, e.pos, "slice step cannot be zero");
      return {};
    }
    const std::int64_t len = fn::length_of(obj);
    // Python's slice.indices().
    const auto clampi = [&](std::optional<std::int64_t> x, std::int64_t dflt) {
      if (!x) return dflt;
      std::int64_t v = *x;
      if (v < 0) v += len;
      if (step > 0) return std::clamp<std::int64_t>(v, 0, len);
      return std::clamp<std::int64_t>(v, -1, len - 1);
    };
    const std::int64_t start = clampi(part[0], step > 0 ? 0 : len - 1);
    const std::int64_t stop = clampi(part[1], step > 0 ? len : -1);
    // Counted first: `i += step` past the end with a step near INT64_MAX would overflow.
    std::vector<std::size_t> idx;
    const std::uint64_t n = integer::range_length(start, stop, step);
    for (std::uint64_t k = 0; k < n; ++k)
      idx.push_back(static_cast<std::size_t>(integer::range_at(start, step, k)));
    if (obj.is_list()) {
      List out;
      for (std::size_t i : idx) out.push_back(obj.as_list()[i]);
      return Value::list(std::move(out));
    }
    const auto off = fn::code_point_offsets(obj.as_string());
    std::string out;
    for (std::size_t i : idx) out += obj.as_string().substr(off[i], off[i + 1] - off[i]);
    return Value::string(std::move(out));
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::literal:
        return e.value;
      case Expr::Kind::name:
        return lookup(e.name);
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        List xs;
        for (const ExprPtr& a : e.args) {
          xs.push_back(eval(*a));
          if (err_) return {};
        }
        return e.kind == Expr::Kind::tuple ? Value::tuple(std::move(xs)) : Value::list(std::move(xs));
      }
      case Expr::Kind::dict: {
        Dict d;
        for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          Value v = eval(*e.args[i + 1]);
          if (err_) return {};
          if (!k.is_string()) {
            fail(errc::unsupported, e.args[i]->pos, std::string("dict keys must be strings, not a ") + k.type_name());
            return {};
          }
          d.set(k.as_string(), std::move(v));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::getattr: {
        const Value obj = eval(*e.args[0]);
        if (err_) return {};
        if (obj.is_undefined()) {
          fail(errc::invalid_argument, e.pos, undefined_name(obj) + " is undefined (reading its '" + e.name + "')");
          return {};
        }
        if (obj.is_mapping())
          if (const Value* v = obj.as_dict().find(e.name)) return *v;
        return Value::undefined(e.name);
      }
      case Expr::Kind::getitem: {
        const Value obj = eval(*e.args[0]);
        const Value key = eval(*e.args[1]);
        if (err_) return {};
        return subscript(obj, key, e.pos);
      }
      case Expr::Kind::slice: {
        const Value obj = eval(*e.args[0]);
        if (err_) return {};
        return slice(obj, e);
      }
      case Expr::Kind::call:
        return call(e);
      case Expr::Kind::filter: {
        const Value target = eval(*e.args[0]);
        List args;
        Kwargs kw;
        if (err_ || !eval_args(e, 1, args, kw)) return {};
        auto r = fn::apply_filter(e.name, target, args, kw);
        if (!r) {
          fail(e.pos, r.error());
          return {};
        }
        return std::move(*r);
      }
      case Expr::Kind::test: {
        const Value target = eval(*e.args[0]);
        List args;
        Kwargs kw;
        if (err_ || !eval_args(e, 1, args, kw)) return {};
        auto r = fn::apply_test(e.name, target, args);
        if (!r) {
          fail(e.pos, r.error());
          return {};
        }
        return Value::boolean(*r != e.negated);
      }
      case Expr::Kind::unary: {
        const Value v = eval(*e.args[0]);
        if (err_) return {};
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.is_int() || v.is_bool()) {
          if (e.name != "-") return Value::integer(v.as_int());
          auto r = integer::neg(v.as_int());
          if (!r) {
            fail(e.pos, r.error());
            return {};
          }
          return Value::integer(*r);
        }
        if (v.is_float()) return Value::floating(e.name == "-" ? -v.as_double() : v.as_double());
        fail(errc::invalid_argument, e.pos, "unary '" + e.name + "' on a " + v.type_name());
        return {};
      }
      case Expr::Kind::binary:
        return binary(e);
      case Expr::Kind::compare: {
        Value left = eval(*e.args[0]);
        for (std::size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          if (err_) return {};
          const std::string& op = e.ops[i];
          result<bool> r = false;
          if (op == "==") r = equals(left, right);
          else if (op == "!=") r = !equals(left, right);
          else if (op == "in" || op == "not in") {
            r = fn::contains(right, left);
            if (r && op == "not in") r = !*r;
          } else {
            r = fn::apply_test(op, left, std::span<const Value>(&right, 1));
          }
          if (!r) {
            fail(e.args[i + 1]->pos, r.error());
            return {};
          }
          if (!*r) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::cond: {
        const Value c = eval(*e.args[1]);
        if (err_) return {};
        if (c.truthy()) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined();
      }
    }
    return {};
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    const Value a = eval(*e.args[0]);
    if (err_) return {};
    if (op == "and") return a.truthy() ? eval(*e.args[1]) : a;
    if (op == "or") return a.truthy() ? a : eval(*e.args[1]);
    const Value b = eval(*e.args[1]);
    if (err_) return {};
    if (op == "~") {
      std::string s = to_output(a);
      if (!append(s, to_output(b), e.pos)) return {};
      return Value::string(std::move(s));
    }
    const auto type_error = [&]() {
      if (a.is_undefined() || b.is_undefined()) {
        fail(errc::invalid_argument, e.pos, undefined_name(a.is_undefined() ? a : b) + " is undefined (in '" + op + "')");
      } else {
        fail(errc::invalid_argument, e.pos,
             "'" + op + "' is not supported between a " + a.type_name() + " and a " + b.type_name());
      }
      return Value{};
    };
    const bool nums = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        std::string s = a.as_string();
        if (!append(s, b.as_string(), e.pos)) return {};
        return Value::string(std::move(s));
      }
      if (a.is_list() && b.is_list()) {
        if (a.as_list().size() + b.as_list().size() > limits_.max_iterations) {
          fail(errc::capacity_exceeded, e.pos, "a list longer than the iteration limit");
          return {};
        }
        List xs = a.as_list();
        xs.insert(xs.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(xs));
      }
    }
    if (op == "*" && ((a.is_string() || a.is_list()) != (b.is_string() || b.is_list())) && (a.is_int() || b.is_int())) {
      const Value& seq = a.is_int() ? b : a;
      const std::int64_t n = std::max<std::int64_t>(0, (a.is_int() ? a : b).as_int());
      const std::size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
      const std::size_t cap = seq.is_string() ? limits_.max_output_bytes : limits_.max_iterations;
      if (unit != 0 && static_cast<std::size_t>(n) > cap / unit) {
        fail(errc::capacity_exceeded, e.pos, "a repetition longer than the output limit");
        return {};
      }
      if (seq.is_string()) {
        std::string s;
        for (std::int64_t i = 0; i < n; ++i) s += seq.as_string();
        return Value::string(std::move(s));
      }
      List xs;
      for (std::int64_t i = 0; i < n; ++i) xs.insert(xs.end(), seq.as_list().begin(), seq.as_list().end());
      return Value::list(std::move(xs));
    }
    if (!nums) return type_error();
    const bool flt = a.is_float() || b.is_float() || op == "/";
    const double x = a.as_double(), y = b.as_double();
    const std::int64_t i = a.as_int(), j = b.as_int();
    if ((op == "/" || op == "//" || op == "%") && (flt ? y == 0.0 : j == 0)) {
      fail(errc::invalid_argument, e.pos, "division by zero");
      return {};
    }
    // Integer results outside int64_t are errors (integer.hpp), as Python's unbounded ints
    // would give a number a template could not print or compare correctly.
    const auto checked = [&](result<std::int64_t> r) {
      if (!r) {
        fail(e.pos, r.error());
        return Value{};
      }
      return Value::integer(*r);
    };
    if (op == "+") return flt ? Value::floating(x + y) : checked(integer::add(i, j));
    if (op == "-") return flt ? Value::floating(x - y) : checked(integer::sub(i, j));
    if (op == "*") return flt ? Value::floating(x * y) : checked(integer::mul(i, j));
    if (op == "/") return Value::floating(x / y);
    if (op == "//")
      return flt ? Value::floating(std::floor(x / y)) : checked(integer::floor_div(i, j));
    if (op == "%") {
      if (flt) {
        double r = std::fmod(x, y);
        if (r != 0.0 && ((r < 0) != (y < 0))) r += y;
        return Value::floating(r);
      }
      return Value::integer(integer::mod(i, j));
    }
    if (op == "**") {
      if (!flt && j >= 0) return checked(integer::pow(i, j));
      return Value::floating(std::pow(x, y));
    }
    return type_error();
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    List args;
    Kwargs kw;
    if (callee.kind == Expr::Kind::getattr) {
      const Value obj = eval(*callee.args[0]);
      if (err_) return {};
      if (fn::is_method_receiver(obj)) {
        if (!eval_args(e, 1, args, kw)) return {};
        auto r = fn::call_method(obj, callee.name, args, kw);
        if (!r) {
          fail(callee.pos, r.error());
          return {};
        }
        return std::move(*r);
      }
    }
    const Value f = eval(callee);
    if (err_) return {};
    if (!f.is_callable()) {
      if (f.is_undefined()) fail(errc::invalid_argument, callee.pos, undefined_name(f) + " is undefined (called as a function)");
      else fail(errc::invalid_argument, callee.pos, std::string("a ") + f.type_name() + " is not callable");
      return {};
    }
    if (!eval_args(e, 1, args, kw)) return {};
    const Callable& c = f.as_callable();
    if (c.macro != nullptr) return call_macro(*static_cast<const Stmt*>(c.macro), args, kw, e.pos);
    if (c.name == "raise_exception") {
      const std::string msg = args.empty() ? std::string() : to_output(args[0]);
      fail(errc::invalid_argument, e.pos, "the template raised an exception: " + msg);
      return {};
    }
    if (c.name == "namespace" || c.name == "dict") {
      Dict d;
      for (const Value& a : args) {
        if (!a.is_dict()) {
          fail(errc::invalid_argument, e.pos, c.name + "() takes a dict or keyword arguments");
          return {};
        }
        for (const auto& kv : a.as_dict().items) d.set(kv.first, kv.second);
      }
      for (auto& [k, v] : kw) d.set(k, std::move(v));
      if (c.name == "dict") return Value::dict(std::move(d));
      Value ns = Value::name_space(std::move(d));
      for (const auto& kv : ns.as_dict().items) {
        if (holds_namespace(kv.second)) {
          fail(errc::unsupported, e.pos, "storing a namespace inside a namespace is not supported");
          return {};
        }
      }
      return ns;
    }
    if (c.name == "range") {
      std::int64_t r[3] = {0, 0, 1};
      if (args.empty() || args.size() > 3) {
        fail(errc::invalid_argument, e.pos, "range() takes 1 to 3 integers");
        return {};
      }
      for (const Value& a : args) {
        if (!a.is_int()) {
          fail(errc::invalid_argument, e.pos, "range() takes integers");
          return {};
        }
      }
      if (args.size() == 1) r[1] = args[0].as_int();
      else for (std::size_t k = 0; k < args.size(); ++k) r[k] = args[k].as_int();
      if (r[2] == 0) {
        fail(errc::invalid_argument, e.pos, "range() step cannot be zero");
        return {};
      }
      // Counted first: stepping a value past a bound near INT64_MAX would overflow.
      const std::uint64_t n = integer::range_length(r[0], r[1], r[2]);
      if (n > limits_.max_iterations) {
        fail(errc::capacity_exceeded, e.pos, "range() longer than the iteration limit");
        return {};
      }
      List xs;
      xs.reserve(static_cast<std::size_t>(n));
      for (std::uint64_t k = 0; k < n; ++k)
        xs.push_back(Value::integer(integer::range_at(r[0], r[2], k)));
      return Value::list(std::move(xs));
    }
    if (c.name == "strftime_now") {
      if (args.size() != 1 || !args[0].is_string()) {
        fail(errc::invalid_argument, e.pos, "strftime_now() takes one format string");
        return {};
      }
      const std::time_t t = now_ ? *now_ : std::time(nullptr);
      std::tm tm{};
#if defined(_WIN32)
      localtime_s(&tm, &t);
#else
      localtime_r(&t, &tm);
#endif
      char buf[256];
      const std::size_t n = std::strftime(buf, sizeof buf, args[0].as_string().c_str(), &tm);
      return Value::string(std::string(buf, n));
    }
    fail(errc::unsupported, callee.pos, "the function '" + c.name + "' is not supported");
    return {};
  }

  Value call_macro(const Stmt& m, const List& args, const Kwargs& kw, std::size_t pos) {
    if (macro_depth_ >= limits_.max_macro_depth) {
      fail(errc::capacity_exceeded, pos, "macros nested deeper than " + std::to_string(limits_.max_macro_depth));
      return {};
    }
    if (args.size() > m.targets.size()) {
      fail(errc::invalid_argument, pos, "macro '" + m.text + "' takes " + std::to_string(m.targets.size()) + " arguments");
      return {};
    }
    Dict frame;
    for (std::size_t i = 0; i < m.targets.size(); ++i) {
      Value v = Value::undefined(m.targets[i]);
      if (i < args.size()) v = args[i];
      else if (const auto k = fn::kwarg(kw, m.targets[i])) v = *k;
      else if (m.conds[i]) v = eval(*m.conds[i]);
      if (err_) return {};
      frame.set(m.targets[i], std::move(v));
    }
    for (const auto& kv : kw) {
      if (std::find(m.targets.begin(), m.targets.end(), kv.first) == m.targets.end()) {
        fail(errc::invalid_argument, pos, "macro '" + m.text + "' has no parameter '" + kv.first + "'");
        return {};
      }
    }
    scopes_.push_back(std::move(frame));
    ++macro_depth_;
    std::string out;
    exec(m.bodies[0], out);
    --macro_depth_;
    scopes_.pop_back();
    if (err_) return {};
    return Value::string(std::move(out));
  }

  std::string_view src_;
  std::string_view name_;
  EvalLimits limits_;
  std::optional<std::time_t> now_;
  std::vector<Dict> scopes_;  ///< innermost last; scopes_[0] holds the globals
  std::size_t iterations_ = 0;
  std::size_t macro_depth_ = 0;
  std::optional<error> err_;
};

}  // namespace edgellm::model::detail::jinja
