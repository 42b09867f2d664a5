// SPDX-License-Identifier: Apache-2.0
// A byte-level recogniser of a GBNF grammar's sentences (constrain/grammar.hpp), with the
// interface of JsonMatcher so that constrained decoding walks a vocabulary with either: it says
// whether the bytes so far can still begin a sentence and whether they already are one.
//
// The state is llama.cpp's pushdown automaton: a set of stacks of element positions, each with
// a terminal on top (an empty stack: the sentence may end here). A code point that matches a
// stack's top replaces it with what follows, and rule references on top are expanded into one
// stack per alternative. Bytes are decoded as UTF-8 inside the matcher, strictly (no overlongs,
// surrogates or values above U+10FFFF); a code point's first bytes are checked against the
// terminals at once, so a token that starts wrong is refused at its first byte.
//
// The stacks live in one flat vector, sorted and deduplicated, so that equal states compare and
// hash equal (states are cache keys) and a copy is one memcpy into reused capacity. Scratch
// buffers are kept per matcher but never copied. Past kMaxStacks stacks, kMaxDepth elements on a
// stack or kMaxExpansionSteps per byte, advance() refuses instead of growing without bound.
#pragma once

#include "edgellm/constrain/grammar.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::constrain {

class GrammarMatcher {
 public:
  static constexpr std::size_t kMaxStacks = 4096;
  static constexpr std::size_t kMaxDepth = 512;
  static constexpr std::size_t kMaxExpansionSteps = std::size_t{1} << 16;
  static constexpr std::size_t kMaxCompletionBytes = std::size_t{1} << 20;

  /// A matcher at the start of `grammar`'s root rule.
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
    if (!grammar_) return;
    scratch_.work.clear();
    for (const std::uint32_t a : grammar_->alternatives(grammar_->root())) {
      std::uint32_t len = 0;
      if (element(a).kind != Grammar::Kind::end) {
        scratch_.work.push_back(a);
        len = 1;
      }
      scratch_.work.push_back(len);
    }
    scratch_.next.clear();
    if (!expand() || !canonicalize()) stacks_.clear(), n_stacks_ = 0;
  }

  GrammarMatcher(const GrammarMatcher& o)
      : grammar_(o.grammar_), stacks_(o.stacks_), n_stacks_(o.n_stacks_), partial_(o.partial_),
        remain_(o.remain_), lo_(o.lo_), hi_(o.hi_) {}
  GrammarMatcher(GrammarMatcher&&) noexcept = default;
  // Reuses this matcher's capacity; the grammar's reference count is touched only on a change.
  GrammarMatcher& operator=(const GrammarMatcher& o) {
    if (this == &o) return *this;
    if (grammar_ != o.grammar_) grammar_ = o.grammar_;
    stacks_.assign(o.stacks_.begin(), o.stacks_.end());
    n_stacks_ = o.n_stacks_;
    partial_ = o.partial_;
    remain_ = o.remain_;
    lo_ = o.lo_;
    hi_ = o.hi_;
    return *this;
  }
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept = default;

  /// Consumes one byte; false when no sentence continues so (the state is then unusable: try
  /// on a copy, or use feed()).
  bool advance(unsigned char c) {
    if (n_stacks_ == 0) return false;
    if (remain_ > 0) {
      if (c < lo_ || c > hi_) return die();
      partial_ = (partial_ << 6) | (c & 0x3Fu);
      lo_ = 0x80;
      hi_ = 0xBF;
      if (--remain_ == 0) {
        const std::uint32_t cp = partial_;
        partial_ = 0;  // the state must not remember it: equal states compare equal
        return step(cp);
      }
      const auto span = partial_span();
      return keep_stacks(
          [&](std::uint32_t t) { return grammar_->intersects(t, span.first, span.second); });
    }
    if (c < 0x80) return step(c);
    if (!utf8_lead(c)) return die();
    return keep_stacks([&](std::uint32_t t) { return grammar_->allows_lead_byte(t, c); });
  }

  /// Consumes `bytes`; false (state unchanged) when any of them is refused.
  bool feed(std::string_view bytes) {
    GrammarMatcher next = *this;
    for (const char ch : bytes)
      if (!next.advance(static_cast<unsigned char>(ch))) return false;
    *this = std::move(next);
    return true;
  }

  /// The bytes so far are a whole sentence of the grammar.
  bool accepting() const noexcept { return remain_ == 0 && n_stacks_ > 0 && stacks_[0] == 0; }
  /// Some byte may still follow (false: only stopping is possible, or the state is dead).
  bool can_continue() const noexcept {
    return n_stacks_ > (accepting() ? 1u : 0u);
  }
  /// Every plain byte (TokenTrie::is_plain: printable ASCII but '"' and '\\') is accepted here
  /// and leads back to this very state, so any run of them is: a constraint may then allow
  /// every plain token at once (the body of a string without a length bound, free text). Up to
  /// 93 advances; a constraint asks once per mask it walks.
  bool in_string_body() const {
    if (remain_ != 0 || n_stacks_ == 0) return false;
    GrammarMatcher next = *this;
    for (unsigned c = 0x20; c < 0x7F; ++c) {
      if (c == '"' || c == '\\') continue;
      next = *this;
      if (!next.advance(static_cast<unsigned char>(c)) || !(next == *this)) return false;
    }
    return true;
  }
  /// Stacks in the state (for tests and diagnostics).
  std::size_t stack_count() const noexcept { return n_stacks_; }
  const std::shared_ptr<const Grammar>& grammar() const noexcept { return grammar_; }

  /// Equality of the whole state: equal matchers accept the same continuations.
  bool operator==(const GrammarMatcher& o) const noexcept {
    return grammar_ == o.grammar_ && n_stacks_ == o.n_stacks_ && partial_ == o.partial_ &&
           remain_ == o.remain_ && lo_ == o.lo_ && hi_ == o.hi_ && stacks_ == o.stacks_;
  }

  /// A hash of the whole state (for caching what a state allows).
  std::uint64_t hash() const noexcept {
    std::uint64_t h = 0x9E3779B97F4A7C15ULL ^ reinterpret_cast<std::uintptr_t>(grammar_.get());
    const auto mix = [&h](std::uint64_t v) {
      h = (h ^ v) * 0xFF51AFD7ED558CCDULL;
      h ^= h >> 32;
    };
    mix(partial_ | (std::uint64_t{remain_} << 32) | (std::uint64_t{lo_} << 40) |
        (std::uint64_t{hi_} << 48));
    for (const std::uint32_t v : stacks_) mix(v);
    return h;
  }

  /// The matcher interface of constrain/token_constraint.hpp: shortest_completion(), or empty
  /// when there is none (a dead state, a rule that never ends, one past kMaxCompletionBytes).
  std::string completion() const {
    auto c = shortest_completion();
    return c ? std::move(*c) : std::string();
  }

  /// The shortest bytes that make the sentence whole from here (empty when it already is);
  /// feeding them leaves the matcher accepting. Errors: a dead state, no finite completion
  /// (a rule that never ends), or one longer than kMaxCompletionBytes.
  result<std::string> shortest_completion() const {
    constexpr std::string_view where = "GrammarMatcher::shortest_completion";
    if (accepting()) return std::string();
    if (n_stacks_ == 0) return make_error(errc::invalid_argument, where, "the state is dead");
    const Grammar& g = *grammar_;
    std::uint64_t best = Grammar::kUnreachable;
    std::size_t best_at = 0;
    std::uint32_t best_cp = 0;
    for (std::size_t o = 0, k = 0; k < n_stacks_; ++k, o += stacks_[o] + 1) {
      const std::uint32_t len = stacks_[o];
      if (len == 0) continue;
      const std::uint32_t top = stacks_[o + len];
      std::uint64_t cost = 0;
      std::uint32_t cp = 0;
      if (remain_ > 0) {  // finish the code point begun, within the top terminal
        const auto first = first_completion(element(top).value);
        if (!first) continue;
        cp = *first;
        cost = remain_ + g.suffix_cost(top + 1);
      } else {
        cost = g.suffix_cost(top);
      }
      for (std::uint32_t i = 1; i < len && cost != Grammar::kUnreachable; ++i) {
        const std::uint64_t c = g.suffix_cost(stacks_[o + i]);
        cost = c == Grammar::kUnreachable ? c : cost + c;
      }
      if (cost < best) {
        best = cost;
        best_at = o;
        best_cp = cp;
      }
    }
    if (best == Grammar::kUnreachable)
      return make_error(errc::unsupported, where, "no finite sentence completes this state");
    if (best > kMaxCompletionBytes)
      return make_error(errc::capacity_exceeded, where,
                        "the shortest completion is " + std::to_string(best) + " bytes long");
    std::string out;
    out.reserve(static_cast<std::size_t>(best));
    const std::uint32_t len = stacks_[best_at];
    std::uint32_t top = stacks_[best_at + len];
    if (remain_ > 0) {
      std::string whole;
      Grammar::append_utf8(best_cp, whole);
      out.append(whole, whole.size() - remain_, remain_);
      ++top;
    }
    g.append_shortest(top, out);
    for (std::uint32_t i = len - 1; i >= 1; --i) g.append_shortest(stacks_[best_at + i], out);
    return out;
  }

 private:
  // Work buffers, kept between calls for their capacity; a copy of a matcher starts empty.
  struct Scratch {
    std::vector<std::uint32_t> work;   // stacks to expand: elements, then the length
    std::vector<std::uint32_t> next;   // expanded stacks: the length, then elements
    std::vector<std::uint32_t> order;  // offsets into next, sorted
    std::vector<std::uint32_t> sorted;
    Scratch() = default;
    Scratch(const Scratch&) {}
    Scratch(Scratch&&) noexcept = default;
    Scratch& operator=(const Scratch&) { return *this; }
    Scratch& operator=(Scratch&&) noexcept = default;
  };

  Grammar::Element element(std::uint32_t p) const noexcept { return grammar_->elements()[p]; }

  bool die() noexcept {
    n_stacks_ = 0;
    stacks_.clear();
    remain_ = 0;
    return false;
  }

  // The lead byte of a multi-byte UTF-8 character: continuation bytes to come and the range
  // of the first one (RFC 3629).
  bool utf8_lead(unsigned char c) noexcept {
    lo_ = 0x80;
    hi_ = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      remain_ = 1;
      partial_ = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      remain_ = 2;
      partial_ = c & 0x0Fu;
      if (c == 0xE0) lo_ = 0xA0;
      if (c == 0xED) hi_ = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      remain_ = 3;
      partial_ = c & 0x07u;
      if (c == 0xF0) lo_ = 0x90;
      if (c == 0xF4) hi_ = 0x8F;
    } else {
      return false;
    }
    return true;
  }

  // Keeps the stacks whose top terminal passes `ok` (in place: the order stays canonical).
  template <class Pred>
  bool keep_stacks(Pred ok) {
    std::size_t out = 0, kept = 0;
    for (std::size_t o = 0, k = 0; k < n_stacks_; ++k) {
      const std::uint32_t len = stacks_[o];
      if (len > 0 && ok(element(stacks_[o + len]).value)) {
        std::copy(stacks_.begin() + static_cast<std::ptrdiff_t>(o),
                  stacks_.begin() + static_cast<std::ptrdiff_t>(o + len + 1),
                  stacks_.begin() + static_cast<std::ptrdiff_t>(out));
        out += len + 1;
        ++kept;
      }
      o += len + 1;
    }
    stacks_.resize(out);
    n_stacks_ = static_cast<std::uint32_t>(kept);
    return kept > 0 || die();
  }

  // A whole code point: every stack whose top matches it moves on past it.
  bool step(std::uint32_t cp) {
    std::vector<std::uint32_t>& work = scratch_.work;
    work.clear();
    scratch_.next.clear();
    for (std::size_t o = 0, k = 0; k < n_stacks_; ++k, o += stacks_[o] + 1) {
      const std::uint32_t len = stacks_[o];
      if (len == 0) continue;
      const std::uint32_t top = stacks_[o + len];
      if (!grammar_->matches(element(top).value, cp)) continue;
      work.insert(work.end(), stacks_.begin() + static_cast<std::ptrdiff_t>(o + 1),
                  stacks_.begin() + static_cast<std::ptrdiff_t>(o + len));
      std::uint32_t new_len = len - 1;
      if (element(top + 1).kind != Grammar::Kind::end) {
        work.push_back(top + 1);
        ++new_len;
      }
      work.push_back(new_len);
    }
    if (work.empty()) return die();
    if (!expand() || !canonicalize()) return die();
    return n_stacks_ > 0 || die();
  }

  // Expands every stack in scratch_.work until a terminal (or nothing) is on top, appending
  // the results to scratch_.next. False past the limits.
  bool expand() {
    std::vector<std::uint32_t>& work = scratch_.work;
    std::vector<std::uint32_t>& next = scratch_.next;
    const Grammar& g = *grammar_;
    std::size_t steps = 0, emitted = 0;
    while (!work.empty()) {
      const std::uint32_t len = work.back();
      const std::size_t base = work.size() - 1 - len;
      const std::uint32_t top = len > 0 ? work[base + len - 1] : 0;
      if (len == 0 || element(top).kind == Grammar::Kind::terminal) {
        next.push_back(len);
        next.insert(next.end(), work.begin() + static_cast<std::ptrdiff_t>(base),
                    work.end() - 1);
        work.resize(base);
        if (++emitted > kMaxStacks) {  // duplicates may inflate the count: drop them first
          if (!canonicalize_into_next()) return false;
          emitted = n_next_;
        }
        continue;
      }
      if (++steps > kMaxExpansionSteps) return false;
      // A rule reference on top: it is replaced by what follows it, and one stack per
      // alternative of the rule is pushed with that alternative's first element above.
      std::uint32_t below = len - 1;
      work.resize(base + below);
      if (element(top + 1).kind != Grammar::Kind::end) {
        work.push_back(top + 1);
        ++below;
      }
      if (below + 1 > kMaxDepth) return false;
      // The first alternative reuses the stack below in place; the others get copies of it.
      const auto alts = g.alternatives(element(top).value);
      for (std::size_t i = 0; i < alts.size(); ++i) {
        if (i > 0)
          for (std::size_t j = 0; j < below; ++j) {
            const std::uint32_t v = work[base + j];  // by value: push_back may reallocate
            work.push_back(v);
          }
        const bool empty = element(alts[i]).kind == Grammar::Kind::end;
        if (!empty) work.push_back(alts[i]);
        work.push_back(below + (empty ? 0 : 1));
      }
      if (work.size() > kMaxStacks * kMaxDepth) return false;  // 8 MiB of pending stacks
    }
    return true;
  }

  // Sorts and deduplicates scratch_.next in place (limit: kMaxStacks).
  bool canonicalize_into_next() {
    if (!sort_next()) return false;
    scratch_.next.swap(scratch_.sorted);
    return true;
  }

  // scratch_.next, sorted and deduplicated, into sorted; n_next_ stacks.
  bool sort_next() {
    const std::vector<std::uint32_t>& next = scratch_.next;
    std::vector<std::uint32_t>& order = scratch_.order;
    order.clear();
    for (std::size_t o = 0; o < next.size(); o += next[o] + 1)
      order.push_back(static_cast<std::uint32_t>(o));
    const auto less = [&next](std::uint32_t a, std::uint32_t b) {
      if (next[a] != next[b]) return next[a] < next[b];
      return std::lexicographical_compare(next.begin() + a + 1, next.begin() + a + 1 + next[a],
                                          next.begin() + b + 1, next.begin() + b + 1 + next[b]);
    };
    const auto same = [&next](std::uint32_t a, std::uint32_t b) {
      return next[a] == next[b] && std::equal(next.begin() + a + 1,
                                               next.begin() + a + 1 + next[a],
                                               next.begin() + b + 1);
    };
    if (order.size() > 1) {
      std::sort(order.begin(), order.end(), less);
      order.erase(std::unique(order.begin(), order.end(), same), order.end());
    }
    if (order.size() > kMaxStacks) return false;
    std::vector<std::uint32_t>& sorted = scratch_.sorted;
    sorted.clear();
    for (const std::uint32_t o : order)
      sorted.insert(sorted.end(), next.begin() + o, next.begin() + o + next[o] + 1);
    n_next_ = static_cast<std::uint32_t>(order.size());
    return true;
  }

  // scratch_.next becomes the state.
  bool canonicalize() {
    if (!sort_next()) return false;
    stacks_.swap(scratch_.sorted);
    n_stacks_ = n_next_;
    return true;
  }

  // The code points the UTF-8 bytes begun can still become: the next byte in [lo_, hi_] (which
  // rules out overlongs, surrogates and values past U+10FFFF), the others free.
  std::pair<std::uint32_t, std::uint32_t> partial_span() const noexcept {
    const unsigned shift = 6u * remain_;
    const std::uint32_t base = partial_ << shift;
    return {base | ((lo_ & 0x3Fu) << (shift - 6)),
            base | ((hi_ & 0x3Fu) << (shift - 6)) | ((1u << (shift - 6)) - 1)};
  }

  // The smallest code point of terminal `t` that the UTF-8 bytes begun can still become.
  std::optional<std::uint32_t> first_completion(std::uint32_t t) const {
    const auto [lo, hi] = partial_span();
    const Grammar::Terminal& term = grammar_->terminals()[t];
    const auto ranges = grammar_->ranges();
    const auto first = ranges.begin() + term.first_range, last = ranges.begin() + term.end_range;
    const auto it = std::lower_bound(
        first, last, lo, [](const Grammar::Range& r, std::uint32_t v) { return r.hi < v; });
    if (it == last || std::max(it->lo, lo) > hi) return std::nullopt;
    return std::max(it->lo, lo);
  }

  std::shared_ptr<const Grammar> grammar_;
  std::vector<std::uint32_t> stacks_;  // canonical: per stack its length, then bottom to top
  std::uint32_t n_stacks_ = 0;
  std::uint32_t partial_ = 0;  // the bits of a code point begun
  std::uint8_t remain_ = 0;    // its continuation bytes to come
  std::uint8_t lo_ = 0x80, hi_ = 0xBF;  // the range of the next one
  std::uint32_t n_next_ = 0;   // scratch: stacks sort_next() left
  Scratch scratch_;
};

}  // namespace edgellm::constrain
