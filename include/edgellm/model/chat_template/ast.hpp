// SPDX-License-Identifier: Apache-2.0
// The syntax tree of a parsed chat template: expressions (Expr) and statements (Stmt). One
// node type each, told apart by `kind`, so the parser and evaluator stay short; every node keeps
// the byte offset it starts at for line:column messages.
#pragma once

#include "edgellm/model/chat_template/value.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace edgellm::model::detail::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind : std::uint8_t {
    literal,   ///< `value`
    name,      ///< variable `name`
    list,      ///< [args...]
    tuple,     ///< (a, b) or a, b
    dict,      ///< {args[0]: args[1], ...}: keys and values alternate
    getattr,   ///< args[0].name
    getitem,   ///< args[0][args[1]]
    slice,     ///< args[0][args[1]:args[2]:args[3]]: absent parts are null
    call,      ///< args[0](args[1..], kwargs)
    filter,    ///< args[0] | name(args[1..], kwargs)
    test,      ///< args[0] is [not] name(args[1..]); `negated`
    unary,     ///< `op` args[0]: "-", "+" or "not"
    binary,    ///< args[0] op args[1]: + - * / // % ** ~ and or
    compare,   ///< args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in "not in"
    cond,      ///< args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind = Kind::literal;
  std::size_t pos = 0;
  std::string name;  ///< name, attribute, filter, test, or operator
  Value value;       ///< literal
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::string> ops;                        ///< compare operators
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  ///< keyword arguments of calls, filters
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind : std::uint8_t {
    text,        ///< literal `text`
    output,      ///< {{ expr }}
    if_,         ///< conds[i] -> bodies[i]; bodies[conds.size()] if present is the else
    for_,        ///< for targets in expr [if cond]: bodies[0], else bodies[1]
    set,         ///< set targets = expr; or set targets %}bodies[0]{% endset; attr: ns.attr
    macro,       ///< macro `name`(params, defaults in conds by position): bodies[0]
    break_,
    continue_,
    generation,  ///< transformers' {% generation %}: renders bodies[0] as is
  };
  Kind kind = Kind::text;
  std::size_t pos = 0;
  std::string text;
  std::vector<std::string> targets;  ///< loop or set targets; macro parameters
  std::string attr;                  ///< set ns.attr: targets[0] is the namespace
  ExprPtr expr;                      ///< output, loop iterable, set value
  ExprPtr filter;                    ///< for ... if filter
  std::vector<ExprPtr> conds;        ///< if/elif conditions; macro defaults (null: none)
  std::vector<Body> bodies;
};

}  // namespace edgellm::model::detail::jinja
