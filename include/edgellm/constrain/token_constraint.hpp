// SPDX-License-Identifier: Apache-2.0
// Decoding constrained by a byte-level matcher: a LogitsProcessor that lets through only the
// tokens whose bytes the matcher accepts from its current state, and the stop ids only where
// the bytes so far are a whole document. JsonConstraint (JsonMatcher) and GrammarConstraint
// (GrammarMatcher: GBNF, JSON Schema, regular expressions, choices) are this template.
//
// A Matcher is a small value type with
//   bool advance(unsigned char)      consume a byte; false: refused (the copy is then unusable)
//   bool feed(std::string_view)      all or nothing, unchanged on false
//   bool accepting() const           the bytes so far are a whole document (a stop may follow)
//   bool can_continue() const        some byte may still follow
//   bool in_string_body() const      every TokenTrie::is_plain token is accepted from here
//   std::string completion() const   a short byte string that makes it accepting
//   std::uint64_t hash() const, operator==   over the whole state
//
// The allowed set of a state is found by walking the vocabulary in byte order (TokenTrie): a
// prefix refused once refuses every token that starts with it. The set depends on nothing but
// the matcher's state, so sets are cached by state (MaskCache, shareable between the
// generations of a server): a generation revisits a handful of states and pays each walk once.
// mask_scalar() feeds every token alone: the specification the walk is tested against.
//
// The state after each generated token is kept, keyed by the tokens, so the sampler may ask for
// any position in any order (speculative decoding's verification and rollback).
//
// A token budget (Options::max_new_tokens) makes the document end within it. Near the end (the
// tokens left cover the matcher's completion() and the stop with less than
// Options::closing_window to spare) a token is allowed only when the completion after it still
// fits what is left: the tokens that spell the start of the completion, and of the model's
// closing_candidates best-scored allowed tokens those that fit. forced() says the budget
// overrode the model's first choice. A document is always closed in time unless one token before that zone
// lengthens the completion by more than the window.
#pragma once

#include "edgellm/constrain/token_trie.hpp"
#include "edgellm/decode/logits_processor.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace edgellm::constrain {

/// Writes -infinity into the scores of the tokens `mask` refuses (and of any past its end), but
/// not into those of `keep` (the stop ids, where the document is whole). The specification of
/// apply_token_mask: a token at a time.
inline void apply_token_mask_scalar(std::span<float> logits, const TokenMask& mask,
                                    std::span<const std::int32_t> keep = {}) {
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const bool kept = std::any_of(keep.begin(), keep.end(), [i](std::int32_t id) {
      return id >= 0 && static_cast<std::size_t>(id) == i;
    });
    if (!kept && !mask_allows(mask, i)) logits[i] = -std::numeric_limits<float>::infinity();
  }
}

namespace detail {

// Bit j of a 32-bit half word, as a table: `half & kLaneBit[j]` vectorizes with SSE2 (which has
// no per-lane variable shift, so `half >> j` would stay scalar there).
inline constexpr std::array<std::uint32_t, 32> kLaneBit = [] {
  std::array<std::uint32_t, 32> bit{};
  for (std::uint32_t j = 0; j < 32; ++j) bit[j] = std::uint32_t{1} << j;
  return bit;
}();

}  // namespace detail

/// apply_token_mask_scalar's result, 64 scores at a time: 64 that the mask allows are skipped
/// (inside a string most of them), 64 that it refuses filled (elsewhere most), others blended.
/// The loops have constant trip counts and no branch inside, so GCC vectorizes them at -O2 for
/// any target (std::fill's loop it leaves scalar there).
inline void apply_token_mask(std::span<float> logits, const TokenMask& mask,
                             std::span<const std::int32_t> keep = {}) {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  const std::size_t n = logits.size();
  float* const p = logits.data();
  // The kept ids' scores, saved across the masking (a few stop ids: on the stack).
  constexpr std::size_t kInline = 8;
  float inline_saved[kInline] = {};
  std::vector<float> heap_saved;
  float* saved = inline_saved;
  if (keep.size() > kInline) {
    heap_saved.resize(keep.size());
    saved = heap_saved.data();
  }
  for (std::size_t j = 0; j < keep.size(); ++j)
    if (const auto id = static_cast<std::size_t>(keep[j]); id < n) saved[j] = p[id];
  // The blocks of 64 scores start at an aligned address, the mask's words shifted to match;
  // the scores before and after, fewer than 64 each, a token at a time. With AVX the stores
  // are 32 or 64 bytes wide, and one that straddles a cache line costs (a row from malloc
  // starts 16 bytes past a line): aligned to a line, 2-3 us less on a 151k row. With 16-byte
  // stores a malloc'd row is aligned already, and shifted words would only blend more blocks.
#if defined(__AVX__)
  constexpr std::uintptr_t kAlign = 64;
#else
  constexpr std::uintptr_t kAlign = 16;
#endif
  const std::size_t head =
      std::min(n, (kAlign - reinterpret_cast<std::uintptr_t>(p) % kAlign) % kAlign / sizeof(float));
  const auto word = [&mask](std::size_t w) { return w < mask.size() ? mask[w] : 0; };
  std::size_t t = head;
  for (; t + 64 <= n; t += 64) {
    const std::size_t w = t / 64;
    const std::uint64_t bits =
        head == 0 ? word(w) : (word(w) >> head) | (word(w + 1) << (64 - head));
    float* const q = p + t;
    if (bits == ~std::uint64_t{0}) continue;
    if (bits == 0) {
      for (std::size_t j = 0; j < 64; ++j) q[j] = kOff;
      continue;
    }
    // A select per score, not a branch (which mispredicts on a mixed word's bits).
    for (std::size_t h = 0; h < 2; ++h) {
      const auto half = static_cast<std::uint32_t>(bits >> (32 * h));
      float* const r = q + 32 * h;
      for (std::size_t j = 0; j < 32; ++j) r[j] = (half & detail::kLaneBit[j]) != 0 ? r[j] : kOff;
    }
  }
  for (std::size_t i = 0; i < head; ++i)
    if (!mask_allows(mask, i)) p[i] = kOff;
  for (std::size_t i = t; i < n; ++i)
    if (!mask_allows(mask, i)) p[i] = kOff;
  for (std::size_t j = 0; j < keep.size(); ++j)
    if (const auto id = static_cast<std::size_t>(keep[j]); id < n) p[id] = saved[j];
}

/// The allowed-token masks of matcher states over one vocabulary, shared by the constraints of
/// many generations (a server's requests) so that a state's mask is walked once. Thread-safe;
/// bounded: past max_states it starts again. The stop ids (which differ between callers) are
/// never part of a kept mask.
template <class Matcher>
class MaskCache {
 public:
  MaskCache(std::shared_ptr<const TokenTrie> trie, std::size_t max_states)
      : trie_(std::move(trie)), max_states_(max_states) {}

  const TokenTrie* trie() const noexcept { return trie_.get(); }

  std::shared_ptr<const TokenMask> find(const Matcher& state) const {
    std::lock_guard lock(mu_);
    const auto it = masks_.find(state.hash());
    if (it == masks_.end() || !(it->second.first == state)) return nullptr;
    return it->second.second;
  }

  void insert(const Matcher& state, std::shared_ptr<const TokenMask> mask) {
    if (max_states_ == 0) return;
    std::lock_guard lock(mu_);
    if (masks_.size() >= max_states_) masks_.clear();
    masks_.insert_or_assign(state.hash(), std::pair{state, std::move(mask)});
  }

 private:
  std::shared_ptr<const TokenTrie> trie_;
  std::size_t max_states_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::pair<Matcher, std::shared_ptr<const TokenMask>>> masks_;
};

/// Where a TokenConstraint keeps masks, and its token budget.
template <class Matcher>
struct TokenConstraintOptions {
  /// Masks shared with other constraints over the same vocabulary; null: a cache of this
  /// constraint's own of max_cached_states masks (0: none, every state walked).
  std::shared_ptr<MaskCache<Matcher>> shared_cache{};
  std::size_t max_cached_states = 256;
  /// The generation's max_new_tokens (0: no budget): the document is closed within it.
  std::size_t max_new_tokens = 0;
  /// Tokens of slack before the budget narrows the choice (see the top of this file).
  std::size_t closing_window = 64;
  /// Near the end, the best-scored allowed tokens checked for fitting the budget.
  std::size_t closing_candidates = 64;
};

/// A LogitsProcessor that keeps the output a document of some language, and says how it went.
class DocumentConstraint : public decode::LogitsProcessor {
 public:
  /// The generated tokens so far form a whole document.
  virtual bool complete() const noexcept = 0;
  /// The token budget overrode the model's first choice at least once (to close the document
  /// in time).
  virtual bool forced() const noexcept = 0;
};

template <class Matcher>
class TokenConstraint final : public DocumentConstraint {
 public:
  using Options = TokenConstraintOptions<Matcher>;
  struct Stats {
    std::size_t masks_computed = 0;  ///< trie walks
    std::size_t cache_hits = 0;
    double walk_seconds = 0.0;       ///< time in trie walks
  };

  /// A constraint for one generation whose prompt is `prompt_tokens` long, starting in
  /// `start`: `trie` is the vocabulary (TokenTrie::build), `stop_ids` end the generation and
  /// are allowed only where the document is whole.
  static result<std::unique_ptr<TokenConstraint>> create(std::shared_ptr<const TokenTrie> trie,
                                                         std::vector<std::int32_t> stop_ids,
                                                         std::size_t prompt_tokens, Matcher start,
                                                         const Options& options = {}) {
    constexpr std::string_view where = "constraint";
    if (!trie) return make_error(errc::invalid_argument, where, "no vocabulary");
    for (const std::int32_t id : stop_ids)
      if (id < 0 || static_cast<std::size_t>(id) >= trie->vocab_size())
        return make_error(errc::invalid_argument, where,
                          "stop id " + std::to_string(id) + " is outside the vocabulary");
    if (stop_ids.empty())
      return make_error(errc::invalid_argument, where,
                        "no stop ids: a whole document could never end the generation");
    if (options.shared_cache && options.shared_cache->trie() != trie.get())
      return make_error(errc::invalid_argument, where,
                        "shared_cache: made for another vocabulary");
    return std::unique_ptr<TokenConstraint>(new TokenConstraint(
        std::move(trie), std::move(stop_ids), prompt_tokens, std::move(start), options));
  }

  /// The same, starting from a default-constructed matcher.
  static result<std::unique_ptr<TokenConstraint>> create(std::shared_ptr<const TokenTrie> trie,
                                                         std::vector<std::int32_t> stop_ids,
                                                         std::size_t prompt_tokens,
                                                         const Options& options = {})
    requires std::is_default_constructible_v<Matcher>
  {
    return create(std::move(trie), std::move(stop_ids), prompt_tokens, Matcher{}, options);
  }

  status apply(std::span<float> logits, std::span<const std::int32_t> history) override {
    // Past a stop id the generation is over; a speculative sampler may still score positions
    // after a drafted stop before it cuts there: they are left as they are.
    if (history.size() > prompt_tokens_) {
      const auto generated = history.subspan(prompt_tokens_);
      const auto stop = std::find_first_of(generated.begin(), generated.end(), stop_ids_.begin(),
                                           stop_ids_.end());
      if (stop != generated.end()) {
        const auto before =
            history.first(prompt_tokens_ + static_cast<std::size_t>(stop - generated.begin()));
        auto ended = state_after(before);
        if (!ended) return ended.error();
        if (!ended->accepting())
          return make_error(errc::invalid_argument, "constraint",
                            "stop id " + std::to_string(*stop) + " (position " +
                                std::to_string(before.size() - prompt_tokens_) +
                                ") before the document is whole");
        return {};
      }
    }
    auto state = state_after(history);
    if (!state) return state.error();
    const Matcher& s = *state;
    const std::size_t generated = history.size() - prompt_tokens_;
    const TokenMask* mask = &mask_for(s);
    if (options_.max_new_tokens > 0 && mask != &done_mask_) {
      const std::size_t left =
          options_.max_new_tokens > generated ? options_.max_new_tokens - generated : 0;
      const std::string closing = s.completion();
      if (left <= closing.size() + 1 + options_.closing_window) {
        narrowed_mask_ = closing_mask(closing);
        add_fitting(s, *mask, logits, left, narrowed_mask_);
        mask = &narrowed_mask_;
      }
    }
    // The stop ids pass where the document is whole; a kept mask never holds them.
    const bool stop_ok = s.accepting() && mask != &done_mask_;
    apply_token_mask(logits, *mask, stop_ok ? std::span<const std::int32_t>(stop_ids_)
                                            : std::span<const std::int32_t>());
    return {};
  }

  /// The matcher after `history` (the prompt, then generated tokens). Errors: a history
  /// shorter than the prompt, a generated token the constraint would not have allowed.
  result<Matcher> state_after(std::span<const std::int32_t> history) {
    if (history.size() < prompt_tokens_)
      return make_error(errc::invalid_argument, "constraint",
                        "history of " + std::to_string(history.size()) +
                            " tokens is shorter than the prompt");
    const auto generated = history.subspan(prompt_tokens_);
    const auto common = static_cast<std::size_t>(
        std::mismatch(tokens_.begin(), tokens_.end(), generated.begin(), generated.end()).first -
        tokens_.begin());
    tokens_.resize(common);
    states_.resize(common + 1, states_.front());
    for (std::size_t k = common; k < generated.size(); ++k) {
      const std::int32_t id = generated[k];
      const auto bytes = trie_->bytes_of(id);
      Matcher next = states_.back();
      if (!bytes || !next.feed(*bytes))
        return make_error(errc::invalid_argument, "constraint",
                          "generated token " + std::to_string(id) + " (position " +
                              std::to_string(k) + ") does not continue the document");
      states_.push_back(std::move(next));
      tokens_.push_back(id);
    }
    return states_.back();
  }

  /// The tokens allowed after `state` (stop ids aside when it can continue): from the cache,
  /// else by walking the vocabulary.
  const TokenMask& mask_for(const Matcher& state) {
    if (state.accepting() && !state.can_continue()) {  // the stop ids alone
      if (done_mask_.empty()) {
        done_mask_ = empty_mask();
        for (const std::int32_t id : stop_ids_) mask_set(done_mask_, id);
      }
      return done_mask_;
    }
    if (auto m = cache_->find(state)) {
      ++stats_.cache_hits;
      last_ = std::move(m);
      return *last_;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto mask = std::make_shared<const TokenMask>(walk(state));
    stats_.walk_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++stats_.masks_computed;
    cache_->insert(state, mask);
    last_ = std::move(mask);
    return *last_;
  }

  /// The specification of mask_for: every token fed alone to a copy of `state`; the stop ids
  /// alone where the document is whole and nothing may follow (where it is whole and may go
  /// on, apply() lets the stop ids through beside the mask).
  TokenMask mask_scalar(const Matcher& state) const {
    TokenMask mask = empty_mask();
    for (std::size_t k = 0; k < trie_->size(); ++k) {
      Matcher m = state;
      if (m.feed(trie_->bytes(k))) mask_set(mask, trie_->id(k));
    }
    if (state.accepting() && !state.can_continue())
      for (const std::int32_t id : stop_ids_) mask_set(mask, id);
    return mask;
  }

  bool complete() const noexcept override { return states_.back().accepting(); }
  bool forced() const noexcept override { return forced_; }
  const Stats& stats() const noexcept { return stats_; }

 private:
  TokenConstraint(std::shared_ptr<const TokenTrie> trie, std::vector<std::int32_t> stop_ids,
                  std::size_t prompt_tokens, Matcher start, const Options& options)
      : trie_(std::move(trie)), stop_ids_(std::move(stop_ids)), prompt_tokens_(prompt_tokens),
        options_{nullptr, 0, options.max_new_tokens, options.closing_window},
        cache_(options.shared_cache
                   ? options.shared_cache
                   : std::make_shared<MaskCache<Matcher>>(trie_, options.max_cached_states)) {
    states_.push_back(std::move(start));
  }

  TokenMask empty_mask() const { return TokenMask((trie_->vocab_size() + 63) / 64, 0); }

  // The tokens that spell a non-empty prefix of `closing` (the trie is sorted by bytes); the
  // stop ids alone when it is empty.
  TokenMask closing_mask(std::string_view closing) const {
    TokenMask mask = empty_mask();
    if (closing.empty()) {
      for (const std::int32_t id : stop_ids_) mask_set(mask, id);
      return mask;
    }
    std::size_t lo = 0;
    for (std::size_t len = 1; len <= closing.size(); ++len) {
      const std::string_view want = closing.substr(0, len);
      std::size_t a = lo, b = trie_->size();
      while (a < b) {  // the first token not below `want`
        const std::size_t mid = a + (b - a) / 2;
        if (trie_->bytes(mid) < want) a = mid + 1; else b = mid;
      }
      lo = a;
      for (std::size_t k = a; k < trie_->size() && trie_->bytes(k) == want; ++k)
        mask_set(mask, trie_->id(k));
      if (a == trie_->size() || trie_->bytes(a).substr(0, len) != want) break;  // none longer
    }
    return mask;
  }

  // Adds to `out` those of the best-scored tokens `allowed` lets through after which the
  // completion and a stop still fit in `left` - 1 tokens (one byte per token at worst).
  void add_fitting(const Matcher& state, const TokenMask& allowed, std::span<const float> logits,
                   std::size_t left, TokenMask& out) {
    // The closing_candidates best (score, id) pairs: a min-heap, so most tokens cost one
    // comparison with its least.
    candidates_.clear();
    const std::size_t cap = options_.closing_candidates;
    const auto worse = [](const auto& a, const auto& b) { return a.first > b.first; };
    const std::size_t n = std::min(logits.size(), allowed.size() * 64);
    for (std::size_t w = 0; w * 64 < n && cap > 0; ++w) {
      std::uint64_t bits = allowed[w];
      while (bits != 0) {
        const std::size_t i = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        bits &= bits - 1;
        if (i >= n) break;
        if (candidates_.size() == cap) {
          if (!(logits[i] > candidates_.front().first)) continue;
          std::pop_heap(candidates_.begin(), candidates_.end(), worse);
          candidates_.back() = {logits[i], static_cast<std::int32_t>(i)};
        } else {
          candidates_.emplace_back(logits[i], static_cast<std::int32_t>(i));
        }
        std::push_heap(candidates_.begin(), candidates_.end(), worse);
      }
    }
    std::sort_heap(candidates_.begin(), candidates_.end(), worse);  // best first
    const std::size_t keep = candidates_.size();
    for (std::size_t j = 0; j < keep; ++j) {
      const std::int32_t id = candidates_[j].second;
      const auto bytes = trie_->bytes_of(id);
      if (!bytes || left < 2) continue;  // a stop id (never in `allowed`'s kept masks), no room
      Matcher next = state;
      if (next.feed(*bytes) && next.completion().size() + 1 <= left - 1) mask_set(out, id);
    }
    // The model's first choice (a stop included) no longer allowed: the budget chose.
    float best_stop = -std::numeric_limits<float>::infinity();
    if (state.accepting())
      for (const std::int32_t id : stop_ids_)
        if (static_cast<std::size_t>(id) < logits.size())
          best_stop = std::max(best_stop, logits[static_cast<std::size_t>(id)]);
    if (keep > 0 && candidates_[0].first > best_stop &&
        !mask_allows(out, static_cast<std::size_t>(candidates_[0].second)))
      forced_ = true;
  }

  TokenMask walk(const Matcher& state) {
    TokenMask mask = empty_mask();
    // Where every plain token is allowed, only the others are walked.
    if (state.in_string_body() && trie_->rest() != nullptr) {
      mask = trie_->plain();
      walk(*trie_->rest(), state, mask);
    } else {
      walk(*trie_, state, mask);
    }
    return mask;
  }

  // Sets in `mask` the tokens of `trie` that `state` accepts. pool_[d]: the matcher after the
  // first d bytes of the current token, all accepted; assigned in place so that a matcher
  // with heap state reuses its storage.
  void walk(const TokenTrie& trie, const Matcher& state, TokenMask& mask) {
    std::vector<Matcher>& pool = walk_states_;
    if (pool.empty()) pool.push_back(state); else pool[0] = state;
    std::size_t depth = 0;  // pool_[0..depth] valid
    const std::size_t n = trie.size();
    std::size_t k = 0;
    while (k < n) {
      const std::string_view b = trie.bytes(k);
      depth = std::min(trie.shared(k), depth);
      std::size_t failed_at = b.size();
      for (std::size_t i = depth; i < b.size(); ++i) {
        if (pool.size() <= i + 1) pool.push_back(pool[i]); else pool[i + 1] = pool[i];
        if (!pool[i + 1].advance(static_cast<unsigned char>(b[i]))) {
          failed_at = i;
          break;
        }
        depth = i + 1;
      }
      ++k;
      if (failed_at == b.size()) {
        mask_set(mask, trie.id(k - 1));
        continue;
      }
      // Every later token that shares the refused prefix b[0..failed_at] is refused too.
      while (k < n && trie.shared(k) > failed_at) ++k;
    }
  }

  std::shared_ptr<const TokenTrie> trie_;
  std::vector<std::int32_t> stop_ids_;
  std::size_t prompt_tokens_;
  Options options_;                   // the budget (the cache is held below)
  std::vector<std::int32_t> tokens_;  // generated tokens seen so far
  std::vector<Matcher> states_;       // [tokens_ + 1] the matcher after each
  std::shared_ptr<MaskCache<Matcher>> cache_;
  std::shared_ptr<const TokenMask> last_;  // mask_for's latest answer, kept alive
  TokenMask done_mask_;                    // the stop ids (built when first needed)
  TokenMask narrowed_mask_;                // the budget's choice at the latest narrowed step
  std::vector<std::pair<float, std::int32_t>> candidates_;  // (score, id) near the end
  std::vector<Matcher> walk_states_;
  bool forced_ = false;
  Stats stats_;
};

}  // namespace edgellm::constrain
