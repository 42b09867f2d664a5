// SPDX-License-Identifier: Apache-2.0
// The GBNF parser: parse_gbnf reads llama.cpp's grammar format (grammars/README.md there) into
// a compiled Grammar (constrain/compiled_grammar.hpp). Users include constrain/grammar.hpp.
//
// The syntax is llama.cpp's, quirks included: rule names are [a-zA-Z0-9-]+; a rule ends at a
// newline unless the newline follows '::=' or '|' or sits inside parentheses; literals "..." and
// classes [...] take the escapes \x.. \u.... \U........ \t \r \n \\ \" \[ \]; a repetition
// (* + ? {m} {m,} {m,n}) applies to the symbol before it (a whole literal, class, name or group);
// a rule defined twice keeps its last definition. Stricter than llama.cpp: invalid UTF-8, code
// points above U+10FFFF and {m,n} with n < m are errors, and left recursion is found through
// every nullable prefix (llama.cpp sees only directly empty alternatives).
//
// As in llama.cpp, groups and repetitions become helper rules ("name_7").
#pragma once

#include "edgellm/constrain/compiled_grammar.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::constrain {

namespace detail {

// Recursive descent over the GBNF text, following llama.cpp's grammar parser. Errors stop at
// the first one, kept in err_ with its line and column.
class GbnfParser {
 public:
  GbnfParser(std::string_view text, std::string_view where) : text_(text), where_(where) {}

  result<std::shared_ptr<const Grammar>> run() {
    pos_ = skip_space(0, true);
    while (ok() && pos_ < text_.size()) parse_rule();
    if (!ok()) return *err_;
    const auto root = ids_.find("root");
    if (root == ids_.end() || !rules_[root->second].defined)
      return fail_at(0, "expected a rule named 'root' (the start of the grammar)");
    for (const Rule& r : rules_)
      if (!r.defined) return fail_at(r.first_use, "rule '" + r.name + "' is used but never defined");
    if (!check_left_recursion()) return *err_;
    return compile(root->second);
  }

 private:
  // While parsing, a rule is llama.cpp's flat list: symbols, alt between alternatives, end.
  enum class Op : std::uint8_t { terminal, ref, alt, end };
  struct Sym {
    Op op;
    std::uint32_t value;
  };
  struct Rule {
    std::string name;
    std::string origin;  // the user rule a helper rule was made for
    std::vector<Sym> syms;
    std::size_t first_use = 0, defined_at = 0;
    bool defined = false;
  };
  static constexpr int kMaxNesting = 256;
  static constexpr std::uint32_t kMaxRepeat = 1u << 16;

  bool ok() const noexcept { return !err_.has_value(); }
  bool at_end(std::size_t p) const noexcept { return p >= text_.size(); }
  char at(std::size_t p) const noexcept { return p < text_.size() ? text_[p] : '\0'; }

  // "line:column" of byte p, columns counting code points.
  std::string line_col(std::size_t p) const {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < p && i < text_.size(); ++i) {
      const auto c = static_cast<unsigned char>(text_[i]);
      if (c == '\n') line += 1, col = 1;
      else if ((c & 0xC0) != 0x80) ++col;
    }
    return std::to_string(line) + ":" + std::to_string(col);
  }

  edgellm::error fail_at(std::size_t p, std::string_view what) {
    if (!err_) err_ = make_error(errc::format_error, where_, line_col(p) + ": " + std::string(what));
    return *err_;
  }

  static bool is_word_char(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
  }
  static bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

  std::size_t skip_space(std::size_t p, bool newline_ok) const noexcept {
    while (p < text_.size()) {
      const char c = text_[p];
      if (c == '#') {
        while (p < text_.size() && text_[p] != '\r' && text_[p] != '\n') ++p;
      } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
        ++p;
      } else {
        break;
      }
    }
    return p;
  }

  std::uint32_t symbol(std::string_view name, std::size_t used_at) {
    const auto [it, inserted] = ids_.emplace(std::string(name), static_cast<std::uint32_t>(rules_.size()));
    if (inserted) {
      rules_.push_back(Rule{std::string(name), std::string(name), {}, used_at, used_at, false});
    }
    return it->second;
  }

  std::uint32_t helper_rule(const std::string& base, std::size_t at) {
    const auto id = static_cast<std::uint32_t>(rules_.size());
    std::string name = base + "_" + std::to_string(id);  // '_' is no name character: no clash
    ids_.emplace(name, id);
    rules_.push_back(Rule{std::move(name), rules_[ids_.at(base)].origin, {}, at, at, false});
    return id;
  }

  void define(std::uint32_t id, std::vector<Sym> syms, std::size_t at) {
    rules_[id].syms = std::move(syms);
    rules_[id].defined = true;
    rules_[id].defined_at = at;
  }

  bool grow(std::size_t n, std::size_t at) {
    elements_ += n;
    if (elements_ > Grammar::kMaxElements) {
      fail_at(at, "the grammar expands to more than " + std::to_string(Grammar::kMaxElements) +
                      " elements (repetition counts too large?)");
      return false;
    }
    return true;
  }

  void parse_rule() {
    const std::size_t start = pos_;
    std::size_t p = pos_;
    while (is_word_char(at(p))) ++p;
    if (p == start) {
      fail_at(start, "expected a rule name ([a-zA-Z0-9-]+)");
      return;
    }
    const std::string name(text_.substr(start, p - start));
    const std::uint32_t id = symbol(name, start);
    p = skip_space(p, false);
    if (text_.substr(p, 3) != "::=") {
      fail_at(p, "expected '::=' after the rule name '" + name + "'");
      return;
    }
    pos_ = skip_space(p + 3, true);
    parse_alternates(name, id, false, start, 0);
    if (!ok()) return;
    if (at(pos_) == '\r') {
      pos_ += at(pos_ + 1) == '\n' ? 2 : 1;
    } else if (at(pos_) == '\n') {
      ++pos_;
    } else if (!at_end(pos_)) {
      fail_at(pos_, std::string("expected a newline or the end after rule '") + name +
                        "', found '" + text_[pos_] + "'");
      return;
    }
    pos_ = skip_space(pos_, true);
  }

  void parse_alternates(const std::string& rule_name, std::uint32_t id, bool nested,
                        std::size_t at_pos, int depth) {
    std::vector<Sym> syms;
    parse_sequence(rule_name, syms, nested, depth);
    while (ok() && at(pos_) == '|') {
      syms.push_back({Op::alt, 0});
      pos_ = skip_space(pos_ + 1, true);
      parse_sequence(rule_name, syms, nested, depth);
    }
    syms.push_back({Op::end, 0});
    if (ok() && grow(syms.size(), at_pos)) define(id, std::move(syms), at_pos);
  }

  // One code point of a literal or class: an escape or a UTF-8 character.
  std::optional<std::uint32_t> parse_char() {
    const std::size_t start = pos_;
    if (at(pos_) == '\\') {
      const char e = at(pos_ + 1);
      int digits = 0;
      switch (e) {
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 't': pos_ += 2; return '\t';
        case 'r': pos_ += 2; return '\r';
        case 'n': pos_ += 2; return '\n';
        case '\\': case '"': case '[': case ']': pos_ += 2; return static_cast<std::uint32_t>(e);
        default:
          fail_at(start, at_end(pos_ + 1) ? std::string("expected an escape after '\\'")
                                          : std::string("unknown escape '\\") + e +
                                                "' (expected one of x u U t r n \\ \" [ ])");
          return std::nullopt;
      }
      std::uint64_t v = 0;
      for (int i = 0; i < digits; ++i) {
        const char c = at(pos_ + 2 + static_cast<std::size_t>(i));
        int h = -1;
        if (c >= '0' && c <= '9') h = c - '0';
        if (c >= 'a' && c <= 'f') h = c - 'a' + 10;
        if (c >= 'A' && c <= 'F') h = c - 'A' + 10;
        if (h < 0) {
          fail_at(start, "expected " + std::to_string(digits) + " hex digits after '\\" + e + "'");
          return std::nullopt;
        }
        v = v * 16 + static_cast<std::uint64_t>(h);
      }
      if (v > Grammar::kMaxCodePoint) {
        fail_at(start, "code point above U+10FFFF");
        return std::nullopt;
      }
      pos_ += 2 + static_cast<std::size_t>(digits);
      return static_cast<std::uint32_t>(v);
    }
    // UTF-8, strictly: no overlongs, surrogates or values above U+10FFFF.
    const auto b0 = static_cast<unsigned char>(at(pos_));
    std::uint32_t cp = b0;
    int more = 0;
    std::uint32_t min = 0;
    if (b0 >= 0xC0 && b0 < 0xE0) { cp = b0 & 0x1F; more = 1; min = 0x80; }
    else if (b0 >= 0xE0 && b0 < 0xF0) { cp = b0 & 0x0F; more = 2; min = 0x800; }
    else if (b0 >= 0xF0 && b0 < 0xF8) { cp = b0 & 0x07; more = 3; min = 0x10000; }
    else if (b0 >= 0x80) { more = -1; }
    for (int i = 1; i <= more; ++i) {
      const auto b = static_cast<unsigned char>(at(pos_ + static_cast<std::size_t>(i)));
      if ((b & 0xC0) != 0x80) { more = -1; break; }
      cp = (cp << 6) | (b & 0x3F);
    }
    if (more < 0 || cp < min || cp > Grammar::kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
      fail_at(start, "invalid UTF-8 in the grammar text");
      return std::nullopt;
    }
    pos_ += 1 + static_cast<std::size_t>(more);
    return cp;
  }

  // A terminal for a set of code points (ranges in any order; negated: the complement).
  std::uint32_t terminal(std::vector<Grammar::Range> r, bool negated) {
    std::sort(r.begin(), r.end(), [](auto a, auto b) { return a.lo < b.lo; });
    std::vector<Grammar::Range> merged;
    for (const auto x : r) {
      if (x.lo > x.hi) continue;  // [z-a] matches nothing, as in llama.cpp
      if (!merged.empty() && x.lo <= merged.back().hi + 1)
        merged.back().hi = std::max(merged.back().hi, x.hi);
      else
        merged.push_back(x);
    }
    if (negated) {
      std::vector<Grammar::Range> comp;
      std::uint32_t next = 0;
      for (const auto x : merged) {
        if (x.lo > next) comp.push_back({next, x.lo - 1});
        next = x.hi + 1;
      }
      if (next <= Grammar::kMaxCodePoint) comp.push_back({next, Grammar::kMaxCodePoint});
      merged = std::move(comp);
    }
    std::string key;
    for (const auto x : merged) key.append(reinterpret_cast<const char*>(&x), sizeof x);
    const auto [it, inserted] =
        terminal_ids_.emplace(std::move(key), static_cast<std::uint32_t>(terminal_ranges_.size()));
    if (inserted) terminal_ranges_.push_back(std::move(merged));
    return it->second;
  }

  void parse_sequence(const std::string& rule_name, std::vector<Sym>& rule, bool nested,
                      int depth) {
    std::size_t last_sym_start = rule.size();
    while (ok() && !at_end(pos_)) {
      const std::size_t start = pos_;
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        last_sym_start = rule.size();
        while (at(pos_) != '"') {
          if (at_end(pos_)) {
            fail_at(start, "unterminated literal: expected a closing '\"'");
            return;
          }
          const auto cp = parse_char();
          if (!cp) return;
          rule.push_back({Op::terminal, terminal({{*cp, *cp}}, false)});
        }
        pos_ = skip_space(pos_ + 1, nested);
      } else if (c == '[') {
        ++pos_;
        bool negated = false;
        if (at(pos_) == '^') {
          negated = true;
          ++pos_;
        }
        std::vector<Grammar::Range> ranges;
        while (at(pos_) != ']') {
          if (at_end(pos_)) {
            fail_at(start, "unterminated character class: expected a closing ']'");
            return;
          }
          const auto lo = parse_char();
          if (!lo) return;
          std::uint32_t hi = *lo;
          if (at(pos_) == '-' && at(pos_ + 1) != ']' && !at_end(pos_ + 1)) {
            ++pos_;
            const auto h = parse_char();
            if (!h) return;
            hi = *h;
          }
          ranges.push_back({*lo, hi});
        }
        last_sym_start = rule.size();
        rule.push_back({Op::terminal, terminal(std::move(ranges), negated)});
        pos_ = skip_space(pos_ + 1, nested);
      } else if (is_word_char(c)) {
        std::size_t p = pos_;
        while (is_word_char(at(p))) ++p;
        const std::uint32_t id = symbol(text_.substr(pos_, p - pos_), pos_);
        pos_ = skip_space(p, nested);
        last_sym_start = rule.size();
        rule.push_back({Op::ref, id});
      } else if (c == '(') {
        if (depth >= kMaxNesting) {
          fail_at(start, "parentheses nested deeper than " + std::to_string(kMaxNesting));
          return;
        }
        pos_ = skip_space(pos_ + 1, true);
        const std::uint32_t sub = helper_rule(rule_name, start);
        parse_alternates(rule_name, sub, true, start, depth + 1);
        if (!ok()) return;
        if (at(pos_) != ')') {
          fail_at(pos_, "expected ')' to close the group opened at " + line_col(start));
          return;
        }
        last_sym_start = rule.size();
        rule.push_back({Op::ref, sub});
        pos_ = skip_space(pos_ + 1, nested);
      } else if (c == '.') {
        last_sym_start = rule.size();
        rule.push_back({Op::terminal, terminal({{0, Grammar::kMaxCodePoint}}, false)});
        pos_ = skip_space(pos_ + 1, nested);
      } else if (c == '*' || c == '+' || c == '?') {
        pos_ = skip_space(pos_ + 1, nested);
        repeat(rule_name, rule, last_sym_start, c == '+' ? 1 : 0, c == '?' ? 1 : -1, start);
      } else if (c == '{') {
        pos_ = skip_space(pos_ + 1, nested);
        const auto min = parse_count();
        if (!min) return;
        pos_ = skip_space(pos_, nested);
        std::int64_t max = -1;
        if (at(pos_) == '}') {
          max = *min;
        } else if (at(pos_) == ',') {
          pos_ = skip_space(pos_ + 1, nested);
          if (is_digit(at(pos_))) {
            const auto m = parse_count();
            if (!m) return;
            max = *m;
            pos_ = skip_space(pos_, nested);
          }
          if (at(pos_) != '}') {
            fail_at(pos_, "expected '}' to end the repetition");
            return;
          }
          if (max >= 0 && max < *min) {
            fail_at(start, "repetition {m,n} with n < m");
            return;
          }
        } else {
          fail_at(pos_, "expected ',' or '}' in the repetition");
          return;
        }
        pos_ = skip_space(pos_ + 1, nested);
        repeat(rule_name, rule, last_sym_start, *min, max, start);
      } else {
        break;
      }
    }
  }

  std::optional<std::int64_t> parse_count() {
    if (!is_digit(at(pos_))) {
      fail_at(pos_, "expected a repetition count (an integer)");
      return std::nullopt;
    }
    const std::size_t start = pos_;
    std::int64_t v = 0;
    while (is_digit(at(pos_))) {
      v = v * 10 + (at(pos_) - '0');
      if (v > kMaxRepeat) {
        fail_at(start, "repetition count above " + std::to_string(kMaxRepeat));
        return std::nullopt;
      }
      ++pos_;
    }
    return v;
  }

  // llama.cpp's rewrite of S{m,n}: S copied m times, then n - m nested optional helper rules
  // S'(k) ::= S S'(k-1) | ; for n unbounded one helper S' ::= S S' | .
  void repeat(const std::string& rule_name, std::vector<Sym>& rule, std::size_t last_sym_start,
              std::int64_t min, std::int64_t max, std::size_t at_pos) {
    if (last_sym_start == rule.size()) {
      fail_at(at_pos, "expected a symbol before the repetition operator");
      return;
    }
    const std::vector<Sym> prev(rule.begin() + static_cast<std::ptrdiff_t>(last_sym_start),
                                rule.end());
    const std::int64_t n_opt = max < 0 ? 1 : max - min;
    const auto copies = static_cast<std::size_t>(min > 0 ? min - 1 : 0);
    if (!grow(prev.size() * copies + static_cast<std::size_t>(n_opt) * (prev.size() + 3), at_pos))
      return;
    if (min == 0) {
      rule.resize(last_sym_start);
    } else {
      for (std::size_t i = 0; i < copies; ++i) rule.insert(rule.end(), prev.begin(), prev.end());
    }
    std::uint32_t last_rec = 0;
    for (std::int64_t i = 0; i < n_opt; ++i) {
      std::vector<Sym> rec = prev;
      const std::uint32_t id = helper_rule(rule_name, at_pos);
      if (i > 0 || max < 0) rec.push_back({Op::ref, max < 0 ? id : last_rec});
      rec.push_back({Op::alt, 0});
      rec.push_back({Op::end, 0});
      define(id, std::move(rec), at_pos);
      last_rec = id;
    }
    if (n_opt > 0) rule.push_back({Op::ref, last_rec});
  }

  // Left recursion: a rule reachable from itself through leftmost symbols, where "leftmost"
  // looks past every nullable symbol. The matcher would expand such a rule forever.
  bool check_left_recursion() {
    const std::size_t n = rules_.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        bool all = true;
        for (const Sym s : rules_[r].syms) {
          if (s.op == Op::alt || s.op == Op::end) {
            if (all) {
              nullable[r] = 1;
              changed = true;
              break;
            }
            all = true;
          } else if (s.op == Op::terminal || !nullable[s.value]) {
            all = false;
          }
        }
      }
    }
    std::vector<std::vector<std::uint32_t>> left(n);
    for (std::size_t r = 0; r < n; ++r) {
      bool leading = true;
      for (const Sym s : rules_[r].syms) {
        if (s.op == Op::alt || s.op == Op::end) {
          leading = true;
        } else if (leading) {
          if (s.op == Op::ref) left[r].push_back(s.value);
          leading = s.op == Op::ref && nullable[s.value];
        }
      }
    }
    // Iterative depth-first search (helper chains may be long): 0 new, 1 on the path, 2 done.
    std::vector<char> color(n, 0);
    std::vector<std::pair<std::uint32_t, std::size_t>> path;
    for (std::uint32_t s = 0; s < n; ++s) {
      if (color[s]) continue;
      path.push_back({s, 0});
      color[s] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == left[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const std::uint32_t t = left[r][next++];
        if (color[t] == 1) {
          fail_at(rules_[t].defined_at,
                  "left recursion in rule '" + rules_[t].origin +
                      "': it can reach itself without consuming input (directly, or through symbols "
                      "that may match nothing, as in (x?)*)");
          return false;
        }
        if (color[t] == 0) {
          color[t] = 1;
          path.push_back({t, 0});
        }
      }
    }
    return true;
  }

  std::shared_ptr<const Grammar> compile(std::uint32_t root) {
    auto g = std::make_shared<Grammar>();
    g->root_ = root;
    for (const auto& ranges : terminal_ranges_) {
      Grammar::Terminal t{};
      t.first_range = static_cast<std::uint32_t>(g->ranges_.size());
      g->ranges_.insert(g->ranges_.end(), ranges.begin(), ranges.end());
      t.end_range = static_cast<std::uint32_t>(g->ranges_.size());
      g->terminals_.push_back(t);
    }
    g->alt_begin_.push_back(0);
    for (const Rule& r : rules_) {
      g->names_.push_back(r.name);
      bool starting = true;
      for (const Sym s : r.syms) {
        if (starting) g->alts_.push_back(static_cast<std::uint32_t>(g->elements_.size()));
        starting = s.op == Op::alt;
        if (s.op == Op::alt || s.op == Op::end)
          g->elements_.push_back({Grammar::Kind::end, 0});
        else
          g->elements_.push_back(
              {s.op == Op::terminal ? Grammar::Kind::terminal : Grammar::Kind::rule_ref, s.value});
      }
      g->alt_begin_.push_back(static_cast<std::uint32_t>(g->alts_.size()));
    }
    g->finish();
    return g;
  }

  std::string_view text_;
  std::string_view where_;
  std::size_t pos_ = 0;
  std::optional<edgellm::error> err_;
  std::map<std::string, std::uint32_t, std::less<>> ids_;
  std::vector<Rule> rules_;
  std::map<std::string, std::uint32_t> terminal_ids_;
  std::vector<std::vector<Grammar::Range>> terminal_ranges_;
  std::size_t elements_ = 0;
};

}  // namespace detail

/// Parses GBNF text (llama.cpp's grammar format); errors name `where`, the line and column
/// and what was expected there.
inline result<std::shared_ptr<const Grammar>> parse_gbnf(std::string_view text,
                                                         std::string_view where = "grammar") {
  try {
    return detail::GbnfParser(text, where).run();
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, where, "no memory for the grammar");
  } catch (const std::exception& e) {
    return make_error(errc::internal, where, e.what());
  }
}

}  // namespace edgellm::constrain
