// SPDX-License-Identifier: Apache-2.0
// A compiled grammar (Grammar): the flat, read-only form that constrain/gbnf_parser.hpp parses
// GBNF text into and GrammarMatcher (constrain/grammar_matcher.hpp) walks. Users include
// constrain/grammar.hpp.
//
// As in llama.cpp, groups and repetitions become helper rules ("name_7"), so the compiled form
// has only sequences, alternatives, terminals and rule references. A terminal is a set of code
// points kept as sorted ranges (a negated class is stored complemented), with the UTF-8 lead
// bytes its code points can start with, so that a matcher refuses a byte at once.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
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

}  // namespace edgellm::constrain
