// SPDX-License-Identifier: Apache-2.0
// Recursive-descent parser from lexer tokens to the syntax tree, with Jinja2's operator
// precedence (loosest first): `a if c else b`, or, and, not, comparisons and `in`, + -, ~,
// * / // %, **, unary - +, then primaries with .attr, [index], [a:b:c], (call), | filter and
// `is` test. Statements: if/elif/else, for (tuple targets, `if` filter, else), set (names,
// tuples, ns.attr, block form), macro, break/continue, generation. Anything else is
// errc::unsupported naming the construct; malformed input is errc::format_error; both carry
// line:column. Nesting deeper than kMaxDepth is an error, never a stack overflow.
#pragma once

#include "edgellm/model/chat_template/ast.hpp"
#include "edgellm/model/chat_template/filters.hpp"
#include "edgellm/model/chat_template/lexer.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::model::detail::jinja {

class Parser {
 public:
  static constexpr std::size_t kMaxDepth = 128;

  Parser(std::vector<Token> tokens, std::string_view src, std::string_view name)
      : toks_(std::move(tokens)), src_(src), name_(name) {}

  result<Body> run() {
    Body body = parse_body({});
    if (error_) return std::move(*error_);
    if (cur().type != Token::Type::eof) {
      // parse_body stops at an end tag nothing opened.
      fail_unsupported_or_format(peek_keyword_pos(), "unexpected '{% " + peek_keyword() + " %}'");
      return std::move(*error_);
    }
    return body;
  }

 private:
  using T = Token::Type;

  const Token& cur() const { return toks_[i_]; }
  const Token& at(std::size_t k) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(std::string_view op, std::size_t k = 0) const {
    return at(k).type == T::op && at(k).text == op;
  }
  bool is_name(std::string_view n, std::size_t k = 0) const {
    return at(k).type == T::name && at(k).text == n;
  }

  void fail_at(errc code, std::size_t pos, std::string_view msg) {
    if (!error_) error_ = template_error(code, name_, src_, pos, msg);
  }
  void fail(std::string_view msg) { fail_at(errc::format_error, cur().pos, msg); }
  void fail_unsupported_or_format(std::size_t pos, const std::string& msg) {
    fail_at(errc::format_error, pos, msg);
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case T::eof: return "end of template";
      case T::block_end: return "'%}'";
      case T::var_end: return "'}}'";
      case T::string: return "a string";
      case T::integer:
      case T::floating: return "a number";
      default: return "'" + t.text + "'";
    }
  }
  bool expect_op(std::string_view op) {
    if (is_op(op)) {
      next();
      return true;
    }
    fail("expected '" + std::string(op) + "', found " + describe(cur()));
    return false;
  }
  bool expect_block_end() {
    if (cur().type == T::block_end) {
      next();
      return true;
    }
    fail("expected '%}', found " + describe(cur()));
    return false;
  }
  std::string peek_keyword() const { return at(1).type == T::name ? at(1).text : describe(at(1)); }
  std::size_t peek_keyword_pos() const { return at(1).pos; }

  ExprPtr node(Expr::Kind k, std::size_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = pos;
    return e;
  }

  // ---------------------------------------------------------------- statements

  /// Parses statements until a block tag whose keyword is in `ends` (left unconsumed, the
  /// cursor on its '{%') or the end of input.
  Body parse_body(std::initializer_list<std::string_view> ends) {
    Body body;
    if (++depth_ > kMaxDepth) {
      fail("blocks nested deeper than " + std::to_string(kMaxDepth));
      return body;
    }
    while (!error_ && cur().type != T::eof) {
      if (cur().type == T::text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::text;
        s->pos = cur().pos;
        s->text = cur().text;
        body.push_back(std::move(s));
        next();
      } else if (cur().type == T::var_begin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::output;
        s->pos = cur().pos;
        next();
        s->expr = parse_expression();
        if (error_) break;
        if (cur().type != T::var_end) {
          fail("expected '}}', found " + describe(cur()));
          break;
        }
        next();
        body.push_back(std::move(s));
      } else if (cur().type == T::block_begin) {
        const Token& kw = at(1);
        if (kw.type != T::name) {
          fail_at(errc::format_error, kw.pos, "expected a statement keyword, found " + describe(kw));
          break;
        }
        bool is_end = false;
        for (std::string_view e : ends) is_end = is_end || kw.text == e;
        if (is_end) break;
        if (kw.text.starts_with("end") || kw.text == "else" || kw.text == "elif") break;  // caller reports
        auto s = parse_statement();
        if (s) body.push_back(std::move(s));
      } else {
        fail("unexpected " + describe(cur()));
      }
    }
    --depth_;
    return body;
  }

  /// At '{%' of a closing tag named `kw`: consumes "{% kw %}".
  bool close(std::string_view kw, std::string_view opener, std::size_t opener_pos) {
    if (cur().type != T::block_begin || !is_name(kw, 1)) {
      if (cur().type == T::eof) {
        fail_at(errc::format_error, opener_pos,
                "'{% " + std::string(opener) + " %}' is never closed by '{% " + std::string(kw) + " %}'");
      } else {
        fail_at(errc::format_error, at(1).pos,
                "expected '{% " + std::string(kw) + " %}', found '{% " + peek_keyword() + " %}'");
      }
      return false;
    }
    next();
    next();
    return expect_block_end();
  }

  StmtPtr parse_statement() {
    const std::size_t pos = cur().pos;
    next();  // {%
    const std::string kw = cur().text;
    const std::size_t kw_pos = cur().pos;
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    if (kw == "if") {
      s->kind = Stmt::Kind::if_;
      next();
      s->conds.push_back(parse_expression());
      if (error_ || !expect_block_end()) return nullptr;
      s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      while (!error_ && cur().type == T::block_begin && is_name("elif", 1)) {
        next();
        next();
        s->conds.push_back(parse_expression());
        if (error_ || !expect_block_end()) return nullptr;
        s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      }
      if (!error_ && cur().type == T::block_begin && is_name("else", 1)) {
        next();
        next();
        if (!expect_block_end()) return nullptr;
        s->bodies.push_back(parse_body({"endif"}));
      }
      if (error_ || !close("endif", "if", pos)) return nullptr;
      return s;
    }
    if (kw == "for") {
      s->kind = Stmt::Kind::for_;
      next();
      if (!parse_targets(s->targets)) return nullptr;
      if (!is_name("in")) {
        fail("expected 'in' after the loop variable, found " + describe(cur()));
        return nullptr;
      }
      next();
      s->expr = parse_expression(/*allow_cond=*/false);
      if (error_) return nullptr;
      if (is_name("if")) {
        next();
        s->filter = parse_expression();
        if (error_) return nullptr;
      }
      if (is_name("recursive")) {
        fail_at(errc::unsupported, cur().pos, "recursive loops are not supported");
        return nullptr;
      }
      if (!expect_block_end()) return nullptr;
      ++loop_depth_;
      s->bodies.push_back(parse_body({"else", "endfor"}));
      --loop_depth_;
      if (!error_ && cur().type == T::block_begin && is_name("else", 1)) {
        next();
        next();
        if (!expect_block_end()) return nullptr;
        s->bodies.push_back(parse_body({"endfor"}));
      }
      if (error_ || !close("endfor", "for", pos)) return nullptr;
      return s;
    }
    if (kw == "set") {
      s->kind = Stmt::Kind::set;
      next();
      if (cur().type == T::name && is_op(".", 1) && at(2).type == T::name) {
        s->targets.push_back(cur().text);
        s->attr = at(2).text;
        next();
        next();
        next();
      } else if (!parse_targets(s->targets)) {
        return nullptr;
      }
      if (is_op("=")) {
        next();
        s->expr = parse_tuple_or_expression();
        if (error_ || !expect_block_end()) return nullptr;
        return s;
      }
      if (cur().type == T::block_end && s->attr.empty() && s->targets.size() == 1) {
        next();
        s->bodies.push_back(parse_body({"endset"}));
        if (error_ || !close("endset", "set", pos)) return nullptr;
        return s;
      }
      fail("expected '=' in '{% set %}', found " + describe(cur()));
      return nullptr;
    }
    if (kw == "macro") {
      s->kind = Stmt::Kind::macro;
      next();
      if (cur().type != T::name) {
        fail("expected a macro name, found " + describe(cur()));
        return nullptr;
      }
      s->text = cur().text;
      next();
      if (!expect_op("(")) return nullptr;
      while (!error_ && !is_op(")")) {
        if (cur().type != T::name) {
          fail("expected a parameter name, found " + describe(cur()));
          return nullptr;
        }
        s->targets.push_back(cur().text);
        next();
        if (is_op("=")) {
          next();
          s->conds.push_back(parse_expression());
        } else {
          s->conds.push_back(nullptr);
        }
        if (!is_op(")") && !expect_op(",")) return nullptr;
      }
      if (error_ || !expect_op(")") || !expect_block_end()) return nullptr;
      s->bodies.push_back(parse_body({"endmacro"}));
      if (error_ || !close("endmacro", "macro", pos)) return nullptr;
      return s;
    }
    if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) {
        fail_at(errc::format_error, kw_pos, "'" + kw + "' outside a loop");
        return nullptr;
      }
      s->kind = kw == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_;
      next();
      if (!expect_block_end()) return nullptr;
      return s;
    }
    if (kw == "generation") {
      s->kind = Stmt::Kind::generation;
      next();
      if (!expect_block_end()) return nullptr;
      s->bodies.push_back(parse_body({"endgeneration"}));
      if (error_ || !close("endgeneration", "generation", pos)) return nullptr;
      return s;
    }
    static constexpr std::string_view kKnown[] = {"raw", "call", "filter", "include", "import", "from",
                                                  "extends", "block", "with", "autoescape", "do", "trans"};
    for (std::string_view k : kKnown) {
      if (kw == k) {
        fail_at(errc::unsupported, kw_pos, "the '{% " + kw + " %}' statement is not supported");
        return nullptr;
      }
    }
    fail_at(errc::format_error, kw_pos, "unknown statement '{% " + kw + " %}'");
    return nullptr;
  }

  /// name or name, name, ... (optionally in parentheses).
  bool parse_targets(std::vector<std::string>& out) {
    const bool paren = is_op("(");
    if (paren) next();
    for (;;) {
      if (cur().type != T::name) {
        fail("expected a variable name, found " + describe(cur()));
        return false;
      }
      out.push_back(cur().text);
      next();
      if (!is_op(",")) break;
      next();
    }
    if (paren && !expect_op(")")) return false;
    return true;
  }

  // ---------------------------------------------------------------- expressions

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) { ++p.depth_; }
    ~DepthGuard() { --p.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };
  bool too_deep() {
    if (depth_ <= kMaxDepth) return false;
    fail("expression nested deeper than " + std::to_string(kMaxDepth));
    return true;
  }

  /// `a, b` without parentheses is a tuple (set x = a, b).
  ExprPtr parse_tuple_or_expression() {
    const std::size_t pos = cur().pos;
    ExprPtr first = parse_expression();
    if (error_ || !is_op(",")) return first;
    ExprPtr t = node(Expr::Kind::tuple, pos);
    t->args.push_back(std::move(first));
    while (!error_ && is_op(",")) {
      next();
      t->args.push_back(parse_expression());
    }
    return t;
  }

  ExprPtr parse_expression(bool allow_cond = true) {
    DepthGuard g(*this);
    if (too_deep()) return nullptr;
    const std::size_t pos = cur().pos;
    ExprPtr e = parse_or();
    if (error_) return nullptr;
    if (allow_cond && is_name("if")) {
      next();
      ExprPtr c = node(Expr::Kind::cond, pos);
      c->args.push_back(std::move(e));
      c->args.push_back(parse_or());
      if (is_name("else")) {
        next();
        c->args.push_back(parse_expression());
      } else {
        c->args.push_back(nullptr);
      }
      return error_ ? nullptr : std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, std::size_t pos) {
    ExprPtr e = node(Expr::Kind::binary, pos);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    const std::size_t pos = cur().pos;
    ExprPtr e = parse_and();
    while (!error_ && is_name("or")) {
      next();
      e = binary("or", std::move(e), parse_and(), pos);
    }
    return e;
  }
  ExprPtr parse_and() {
    const std::size_t pos = cur().pos;
    ExprPtr e = parse_not();
    while (!error_ && is_name("and")) {
      next();
      e = binary("and", std::move(e), parse_not(), pos);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      if (too_deep()) return nullptr;
      ExprPtr e = node(Expr::Kind::unary, cur().pos);
      e->name = "not";
      next();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const std::size_t pos = cur().pos;
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    for (;;) {
      if (error_) return nullptr;
      std::string op;
      if (cur().type == T::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                  cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::Kind::compare, pos);
        cmp->args.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }
  ExprPtr parse_math1() {
    const std::size_t pos = cur().pos;
    ExprPtr e = parse_concat();
    while (!error_ && (is_op("+") || is_op("-"))) {
      std::string op = cur().text;
      next();
      e = binary(op, std::move(e), parse_concat(), pos);
    }
    return e;
  }
  ExprPtr parse_concat() {
    const std::size_t pos = cur().pos;
    ExprPtr e = parse_math2();
    while (!error_ && is_op("~")) {
      next();
      e = binary("~", std::move(e), parse_math2(), pos);
    }
    return e;
  }
  ExprPtr parse_math2() {
    const std::size_t pos = cur().pos;
    ExprPtr e = parse_pow();
    while (!error_ && (is_op("*") || is_op("/") || is_op("//") || is_op("%"))) {
      std::string op = cur().text;
      next();
      e = binary(op, std::move(e), parse_pow(), pos);
    }
    return e;
  }
  ExprPtr parse_pow() {
    const std::size_t pos = cur().pos;
    ExprPtr e = parse_unary();
    while (!error_ && is_op("**")) {
      next();
      e = binary("**", std::move(e), parse_unary(), pos);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter = true) {
    DepthGuard g(*this);
    if (too_deep()) return nullptr;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Kind::unary, cur().pos);
      e->name = cur().text;
      next();
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    if (error_) return nullptr;
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filters(std::move(e));
    return error_ ? nullptr : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const std::size_t pos = t.pos;
    ExprPtr e;
    switch (t.type) {
      case T::name: {
        e = node(Expr::Kind::literal, pos);
        if (t.text == "true" || t.text == "True") e->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::name;
          e->name = t.text;
        }
        next();
        return e;
      }
      case T::string: {
        std::string s;
        while (cur().type == T::string) {  // adjacent literals concatenate
          s += cur().text;
          next();
        }
        e = node(Expr::Kind::literal, pos);
        e->value = Value::string(std::move(s));
        return e;
      }
      case T::integer:
        e = node(Expr::Kind::literal, pos);
        e->value = Value::integer(t.ival);
        next();
        return e;
      case T::floating:
        e = node(Expr::Kind::literal, pos);
        e->value = Value::floating(t.fval);
        next();
        return e;
      case T::op:
        if (t.text == "(") {
          next();
          if (is_op(")")) {
            next();
            return node(Expr::Kind::tuple, pos);
          }
          ExprPtr first = parse_expression();
          if (error_) return nullptr;
          if (is_op(")")) {
            next();
            return first;
          }
          e = node(Expr::Kind::tuple, pos);
          e->args.push_back(std::move(first));
          while (!error_ && is_op(",")) {
            next();
            if (is_op(")")) break;
            e->args.push_back(parse_expression());
          }
          if (error_ || !expect_op(")")) return nullptr;
          return e;
        }
        if (t.text == "[") {
          next();
          e = node(Expr::Kind::list, pos);
          while (!error_ && !is_op("]")) {
            e->args.push_back(parse_expression());
            if (!is_op("]") && !expect_op(",")) return nullptr;
          }
          if (error_ || !expect_op("]")) return nullptr;
          return e;
        }
        if (t.text == "{") {
          next();
          e = node(Expr::Kind::dict, pos);
          while (!error_ && !is_op("}")) {
            e->args.push_back(parse_expression());
            if (!expect_op(":")) return nullptr;
            e->args.push_back(parse_expression());
            if (!is_op("}") && !expect_op(",")) return nullptr;
          }
          if (error_ || !expect_op("}")) return nullptr;
          return e;
        }
        break;
      default:
        break;
    }
    fail("expected an expression, found " + describe(t));
    return nullptr;
  }

  bool parse_call_args(Expr& e) {
    if (!expect_op("(")) return false;
    while (!error_ && !is_op(")")) {
      if (cur().type == T::name && is_op("=", 1)) {
        std::string key = cur().text;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) {
          fail("a positional argument follows a keyword argument");
          return false;
        }
        e.args.push_back(parse_expression());
      }
      if (!is_op(")") && !expect_op(",")) return false;
    }
    return !error_ && expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (error_) return nullptr;
      const std::size_t pos = cur().pos;
      if (is_op(".")) {
        next();
        if (cur().type != T::name && cur().type != T::integer) {
          fail("expected an attribute name after '.', found " + describe(cur()));
          return nullptr;
        }
        ExprPtr g;
        if (cur().type == T::integer) {  // x.0 is x[0] in Jinja
          g = node(Expr::Kind::getitem, pos);
          g->args.push_back(std::move(e));
          auto idx = node(Expr::Kind::literal, cur().pos);
          idx->value = Value::integer(cur().ival);
          g->args.push_back(std::move(idx));
        } else {
          g = node(Expr::Kind::getattr, pos);
          g->name = cur().text;
          g->args.push_back(std::move(e));
        }
        next();
        e = std::move(g);
      } else if (is_op("[")) {
        next();
        ExprPtr parts[3];
        int n = 0;
        bool is_slice = false;
        for (;;) {
          if (!is_op(":") && !is_op("]")) parts[n] = parse_expression();
          if (error_) return nullptr;
          if (is_op(":") && n < 2) {
            is_slice = true;
            ++n;
            next();
            continue;
          }
          break;
        }
        if (!expect_op("]")) return nullptr;
        ExprPtr g = node(is_slice ? Expr::Kind::slice : Expr::Kind::getitem, pos);
        g->args.push_back(std::move(e));
        if (!is_slice && !parts[0]) {
          fail_at(errc::format_error, pos, "empty subscript '[]'");
          return nullptr;
        }
        for (int k = 0; k < (is_slice ? 3 : 1); ++k) g->args.push_back(std::move(parts[k]));
        e = std::move(g);
      } else if (is_op("(")) {
        ExprPtr c = node(Expr::Kind::call, e->pos);
        c->args.push_back(std::move(e));
        if (!parse_call_args(*c)) return nullptr;
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  /// Test arguments without parentheses: `x is divisibleby 3`, `x is equalto y`.
  bool starts_bare_test_arg() const {
    const Token& t = cur();
    if (t.type == T::string || t.type == T::integer || t.type == T::floating) return true;
    if (t.type != T::name) return false;
    static constexpr std::string_view kStop[] = {"and", "or", "else", "if", "in", "not", "is"};
    for (std::string_view s : kStop)
      if (t.text == s) return false;
    return true;
  }

  ExprPtr parse_filters(ExprPtr e) {
    for (;;) {
      if (error_) return nullptr;
      const std::size_t pos = cur().pos;
      if (is_op("|")) {
        next();
        if (cur().type != T::name) {
          fail("expected a filter name after '|', found " + describe(cur()));
          return nullptr;
        }
        ExprPtr f = node(Expr::Kind::filter, cur().pos);
        f->name = cur().text;
        if (!is_known_filter(f->name)) {
          fail_at(errc::unsupported, cur().pos, "the filter '" + f->name + "' is not supported");
          return nullptr;
        }
        next();
        f->args.push_back(std::move(e));
        if (is_op("(") && !parse_call_args(*f)) return nullptr;
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        ExprPtr t = node(Expr::Kind::test, pos);
        if (is_name("not")) {
          t->negated = true;
          next();
        }
        if (cur().type != T::name) {
          fail("expected a test name after 'is', found " + describe(cur()));
          return nullptr;
        }
        t->name = cur().text;
        if (t->name == "none" || t->name == "None") t->name = "none";
        if (t->name == "True") t->name = "true";
        if (t->name == "False") t->name = "false";
        if (!is_known_test(t->name)) {
          fail_at(errc::unsupported, cur().pos, "the test '" + t->name + "' is not supported");
          return nullptr;
        }
        next();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          if (!parse_call_args(*t)) return nullptr;
        } else if (starts_bare_test_arg()) {
          ExprPtr a = parse_primary();
          if (error_) return nullptr;
          t->args.push_back(parse_postfix(std::move(a)));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  std::string_view src_;
  std::string_view name_;
  std::size_t i_ = 0;
  std::size_t depth_ = 0;
  std::size_t loop_depth_ = 0;
  std::optional<error> error_;
};

}  // namespace edgellm::model::detail::jinja
