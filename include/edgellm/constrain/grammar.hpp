// SPDX-License-Identifier: Apache-2.0
// GBNF grammars (llama.cpp's format, grammars/README.md there) parsed into a flat, read-only form
// that GrammarMatcher (constrain/grammar_matcher.hpp) walks to constrain decoding to a grammar.
//
// The syntax is llama.cpp's, quirks included: rule names are [a-zA-Z0-9-]+; a rule ends at a
// newline unless the newline follows '::=' or '|' or sits inside parentheses; literals "..." and
// classes [...] take the escapes \x.. \u.... \U........ \t \r \n \\ \" \[ \]; a repetition
// (* + ? {m} {m,} {m,n}) applies to the symbol before it (a whole literal, class, name or group);
// a rule defined twice keeps its last definition. Stricter than llama.cpp: invalid UTF-8, code
// points above U+10FFFF and {m,n} with n < m are errors, and left recursion is found through
// every nullable prefix (llama.cpp sees only directly empty alternatives).
//
// As in llama.cpp, groups and repetitions become helper rules ("name_7"), so the compiled form
// has only sequences, alternatives, terminals and rule references. A terminal is a set of code
// points kept as sorted ranges (a negated class is stored complemented), with the UTF-8 lead
// bytes its code points can start with, so that a matcher refuses a byte at once.
#pragma once

#include "edgellm/result.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::constrain {

namespace detail {
class GbnfParser;
}

class Grammar {
 public:
  /// Most elements a grammar may expand to (repetitions copy their operand).
  static constexpr std::size_t kMaxElements = std::size_t{1} << 20;
  static constexpr std::uint32_t kMaxCodePoint = 0x10FFFF;
  static constexpr std::uint64_t kUnreachable = std::numeric_limits<std::uint64_t>::max();

  enum class Kind : std::uint8_t {
    end,       ///< end of an alternative
    terminal,  ///< value: index of a Terminal
    rule_ref,  ///< value: a rule id
  };
  struct Element {
    Kind kind;
    std::uint32_t value;
  };
  struct Range {
    std::uint32_t lo, hi;  // inclusive
  };
  struct Terminal {
    std::uint32_t first_range, end_range;  ///< [first, end) in ranges()
    std::array<std::uint64_t, 4> lead_bytes;  ///< bit b: some code point's UTF-8 starts with b
    std::uint32_t cheapest;  ///< a code point of the fewest UTF-8 bytes (printable if it can)
    std::uint8_t cheapest_bytes;  ///< its UTF-8 length; 0 when the set has no valid code point
  };

  std::span<const Element> elements() const noexcept { return elements_; }
  std::span<const Terminal> terminals() const noexcept { return terminals_; }
  std::span<const Range> ranges() const noexcept { return ranges_; }
  std::size_t rule_count() const noexcept { return names_.size(); }
  std::string_view rule_name(std::uint32_t rule) const noexcept { return names_[rule]; }
  std::uint32_t root() const noexcept { return root_; }
  /// The element positions where the alternatives of `rule` start (each runs to a Kind::end).
  std::span<const std::uint32_t> alternatives(std::uint32_t rule) const noexcept {
    return std::span<const std::uint32_t>(alts_).subspan(
        alt_begin_[rule], alt_begin_[rule + 1] - alt_begin_[rule]);
  }
  /// The id of the rule named `name`, if any.
  std::optional<std::uint32_t> find_rule(std::string_view name) const {
    for (std::uint32_t r = 0; r < names_.size(); ++r)
      if (names_[r] == name) return r;
    return std::nullopt;
  }

  bool allows_lead_byte(std::uint32_t terminal, unsigned char b) const noexcept {
    return ((terminals_[terminal].lead_bytes[b >> 6] >> (b & 63)) & 1) != 0;
  }
  bool matches(std::uint32_t terminal, std::uint32_t cp) const noexcept {
    const Terminal& t = terminals_[terminal];
    if (cp < 0x80) return allows_lead_byte(terminal, static_cast<unsigned char>(cp));
    return intersects(t, cp, cp);
  }
  /// Some code point in [lo, hi] is in the terminal's set.
  bool intersects(std::uint32_t terminal, std::uint32_t lo, std::uint32_t hi) const noexcept {
    return intersects(terminals_[terminal], lo, hi);
  }

  /// Fewest UTF-8 bytes the elements from `position` to the end of its alternative derive
  /// (kUnreachable: no finite string). For shortest completions.
  std::uint64_t suffix_cost(std::uint32_t position) const noexcept { return suffix_cost_[position]; }
  /// Appends the shortest string the elements from `position` to the end of its alternative
  /// derive (suffix_cost must be finite).
  void append_shortest(std::uint32_t position, std::string& out) const {
    // An explicit stack of positions still to expand: the derivation may be deep.
    std::vector<std::uint32_t> todo{position};
    while (!todo.empty()) {
      const std::uint32_t p = todo.back();
      todo.pop_back();
      const Element e = elements_[p];
      if (e.kind == Kind::end) continue;
      todo.push_back(p + 1);
      if (e.kind == Kind::terminal) {
        append_utf8(terminals_[e.value].cheapest, out);
      } else {
        todo.push_back(cheapest_alt_[e.value]);
      }
    }
  }

  static void append_utf8(std::uint32_t cp, std::string& out) {
    const unsigned n = utf8_length(cp);
    out += static_cast<char>(lead_byte(cp));
    for (unsigned k = n - 1; k-- > 0;) out += static_cast<char>(0x80 | ((cp >> (6 * k)) & 0x3F));
  }
  static unsigned utf8_length(std::uint32_t cp) noexcept {
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }

 private:
  friend class detail::GbnfParser;

  bool intersects(const Terminal& t, std::uint32_t lo, std::uint32_t hi) const noexcept {
    // Ranges are sorted and disjoint: the first range ending at or after lo decides.
    const auto first = ranges_.begin() + t.first_range, last = ranges_.begin() + t.end_range;
    const auto it = std::lower_bound(first, last, lo,
                                     [](const Range& r, std::uint32_t v) { return r.hi < v; });
    return it != last && it->lo <= hi;
  }

  // Lead bytes, cheapest code point, and the costs of every rule and suffix (a fixpoint: a
  // rule costs its cheapest alternative; a rule that derives no finite string stays unreachable).
  void finish() {
    for (Terminal& t : terminals_) {
      t.lead_bytes = {};
      t.cheapest_bytes = 0;
      for (std::uint32_t k = t.first_range; k < t.end_range; ++k) {
        const Range r = ranges_[k];
        // Per UTF-8 length class, leaving out the surrogates no valid text holds.
        static constexpr Range kClasses[] = {
            {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
        for (const Range c : kClasses) {
          const std::uint32_t lo = std::max(r.lo, c.lo), hi = std::min(r.hi, c.hi);
          if (lo > hi) continue;
          for (unsigned b = lead_byte(lo); b <= lead_byte(hi); ++b)
            t.lead_bytes[b >> 6] |= std::uint64_t{1} << (b & 63);
          // Prefer the fewest bytes, then a printable code point (a readable completion).
          const std::uint32_t printable = lo <= 0x20 && hi >= 0x20 ? 0x20 : lo;
          const std::uint32_t pick = printable >= 0x20 && printable <= hi ? printable : lo;
          const unsigned len = utf8_length(pick);
          const bool better = t.cheapest_bytes == 0 || len < t.cheapest_bytes ||
                              (len == t.cheapest_bytes && t.cheapest < 0x20 && pick >= 0x20);
          if (better) {
            t.cheapest = pick;
            t.cheapest_bytes = static_cast<std::uint8_t>(len);
          }
        }
      }
    }
    // Knuth's generalisation of Dijkstra: a rule's cost is final when it is the cheapest
    // pending; an alternative is priced once every rule it names is final.
    const std::size_t n_rules = names_.size();
    const auto add = [](std::uint64_t a, std::uint64_t b) {  // saturating: costs may explode
      constexpr std::uint64_t kHuge = std::uint64_t{1} << 62;
      return a == kUnreachable || b == kUnreachable ? kUnreachable : std::min(a + b, kHuge);
    };
    std::vector<std::uint64_t> rule_cost(n_rules, kUnreachable);
    std::vector<char> final_cost(n_rules, 0);
    cheapest_alt_.assign(n_rules, 0);
    // [alternatives] each one's rule, and how many of the rules it names are not yet final
    std::vector<std::uint32_t> alt_rule(alts_.size());
    std::vector<std::uint32_t> waiting(alts_.size());
    std::vector<std::uint64_t> alt_sum(alts_.size(), 0);
    std::vector<std::vector<std::uint32_t>> users(n_rules);  // alternatives naming each rule
    using Entry = std::pair<std::uint64_t, std::uint32_t>;   // (cost, alternative)
    std::vector<Entry> heap;
    const auto later = [](const Entry& a, const Entry& b) { return a > b; };  // ties: first alt
    for (std::uint32_t r = 0; r < n_rules; ++r)
      for (std::uint32_t a = alt_begin_[r]; a < alt_begin_[r + 1]; ++a) {
        alt_rule[a] = r;
        for (std::uint32_t p = alts_[a]; elements_[p].kind != Kind::end; ++p) {
          const Element e = elements_[p];
          if (e.kind == Kind::rule_ref) {
            users[e.value].push_back(a);
            ++waiting[a];
          } else if (const unsigned b = terminals_[e.value].cheapest_bytes; b == 0) {
            alt_sum[a] = kUnreachable;
          } else {
            alt_sum[a] = add(alt_sum[a], b);
          }
        }
        if (waiting[a] == 0 && alt_sum[a] != kUnreachable) heap.push_back({alt_sum[a], a});
      }
    std::make_heap(heap.begin(), heap.end(), later);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const auto [cost, a] = heap.back();
      heap.pop_back();
      const std::uint32_t r = alt_rule[a];
      if (final_cost[r]) continue;
      final_cost[r] = 1;
      rule_cost[r] = cost;
      cheapest_alt_[r] = alts_[a];
      for (const std::uint32_t u : users[r]) {
        alt_sum[u] = add(alt_sum[u], cost);
        if (--waiting[u] == 0 && alt_sum[u] != kUnreachable && !final_cost[alt_rule[u]]) {
          heap.push_back({alt_sum[u], u});
          std::push_heap(heap.begin(), heap.end(), later);
        }
      }
    }
    suffix_cost_.assign(elements_.size(), 0);
    for (std::size_t p = elements_.size(); p-- > 0;) {
      const Element e = elements_[p];
      if (e.kind == Kind::end) continue;
      const std::uint64_t own =
          e.kind == Kind::rule_ref ? rule_cost[e.value]
          : terminals_[e.value].cheapest_bytes == 0 ? kUnreachable
                                                    : terminals_[e.value].cheapest_bytes;
      suffix_cost_[p] = add(own, suffix_cost_[p + 1]);
    }
  }

  static unsigned lead_byte(std::uint32_t cp) noexcept {
    return cp < 0x80 ? cp : cp < 0x800 ? 0xC0 | (cp >> 6) : cp < 0x10000 ? 0xE0 | (cp >> 12)
                                                                          : 0xF0 | (cp >> 18);
  }

  std::vector<Element> elements_;
  std::vector<Terminal> terminals_;
  std::vector<Range> ranges_;
  std::vector<std::uint32_t> alts_;       // alternative start positions, rule by rule
  std::vector<std::uint32_t> alt_begin_;  // [rules + 1] into alts_
  std::vector<std::string> names_;        // [rules]
  std::vector<std::uint64_t> suffix_cost_;   // [elements]
  std::vector<std::uint32_t> cheapest_alt_;  // [rules] the start of a cheapest alternative
  std::uint32_t root_ = 0;
};

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

/// A grammar whose sentences are exactly `choices` (each valid UTF-8; an empty string allowed).
/// The choices are merged into a trie of code points with a rule per branching node, so that a
/// matcher holds one stack per branch, however long the list.
inline result<std::shared_ptr<const Grammar>> choices_grammar(
    std::span<const std::string> choices) {
  constexpr std::string_view where = "choices_grammar";
  if (choices.empty()) return make_error(errc::invalid_argument, where, "no choices");
  struct Node {
    std::map<std::string, std::uint32_t> next;  // one code point's UTF-8 -> child
    bool end = false;
  };
  std::vector<Node> trie(1);
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const std::string& c = choices[i];
    std::uint32_t node = 0;
    for (std::size_t p = 0; p < c.size();) {
      const auto b = static_cast<unsigned char>(c[p]);
      const std::size_t len = b < 0x80 ? 1 : b >= 0xC2 && b < 0xE0 ? 2 : b >= 0xE0 && b < 0xF0 ? 3
                              : b >= 0xF0 && b < 0xF5 ? 4 : 0;
      // Check the sequence by parsing it as a one-character literal below; here its length.
      if (len == 0 || p + len > c.size())
        return make_error(errc::invalid_argument, where,
                          "choice " + std::to_string(i) + " is not valid UTF-8");
      const std::string cp = c.substr(p, len);
      p += len;
      const auto it = trie[node].next.find(cp);
      if (it != trie[node].next.end()) {
        node = it->second;
      } else {
        const auto child = static_cast<std::uint32_t>(trie.size());
        trie[node].next.emplace(cp, child);
        trie.emplace_back();
        node = child;
      }
    }
    trie[node].end = true;
  }
  static constexpr char kHex[] = "0123456789ABCDEF";
  const auto escape = [](const std::string& cp, std::string& out) {
    const auto c = static_cast<unsigned char>(cp[0]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += cp;
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += cp;  // the parser checks the UTF-8
    }
  };
  const auto rule_name = [](std::uint32_t node) {
    return node == 0 ? std::string("root") : "choice-" + std::to_string(node);
  };
  // A rule per node reached by a branch; chains of single children become one literal.
  std::string text;
  std::vector<std::uint32_t> todo{0};
  while (!todo.empty()) {
    const std::uint32_t node = todo.back();
    todo.pop_back();
    text += rule_name(node) + " ::=";
    bool first = true;
    if (trie[node].end) {  // the empty alternative first: "| " at a line's end would continue
      text += " ";
      first = false;
    }
    for (const auto& [cp, child] : trie[node].next) {
      text += first ? " \"" : "| \"";
      first = false;
      escape(cp, text);
      std::uint32_t at = child;
      while (!trie[at].end && trie[at].next.size() == 1) {
        escape(trie[at].next.begin()->first, text);
        at = trie[at].next.begin()->second;
      }
      text += "\" ";
      if (!trie[at].next.empty()) {
        text += rule_name(at) + " ";
        todo.push_back(at);
      }
    }
    text += "\n";
  }
  auto g = parse_gbnf(text, where);
  if (!g)
    return make_error(errc::invalid_argument, where,
                      "a choice is not valid UTF-8 (" + g.error().message + ")");
  return g;
}

}  // namespace edgellm::constrain
