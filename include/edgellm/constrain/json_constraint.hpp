// SPDX-License-Identifier: Apache-2.0
// Decoding constrained to JSON: a LogitsProcessor that lets through only the tokens whose bytes
// keep the output a prefix of a JSON text (JsonMatcher), and the stop ids only once the text is
// whole. OpenAI's response_format {"type": "json_object"} is this with object_only.
//
// The allowed set of a state is found by walking the vocabulary in byte order (TokenTrie): a
// prefix refused once refuses every token that starts with it. The set depends on nothing but
// the matcher's state, which is small, so sets are cached by state: a generation revisits a
// handful of states (inside a string, after a value, ...) and pays the walk once for each.
// mask_scalar() feeds every token alone: the specification the walk is tested against.
//
// The state after each generated token is kept, keyed by the tokens, so the sampler may ask for
// any position in any order (speculative decoding's verification and rollback).
#pragma once

#include "edgellm/constrain/json_matcher.hpp"
#include "edgellm/constrain/token_trie.hpp"
#include "edgellm/decode/logits_processor.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace edgellm::constrain {

/// The allowed-token masks of matcher states over one vocabulary, shared by the constraints of
/// many generations (a server's requests) so that a state's mask is walked once. Thread-safe;
/// bounded: past max_states it starts again. The masks of whole texts (the stop ids, which
/// differ between callers) are never kept here.
class JsonMaskCache {
 public:
  JsonMaskCache(std::shared_ptr<const TokenTrie> trie, std::size_t max_states)
      : trie_(std::move(trie)), max_states_(max_states) {}

  const TokenTrie* trie() const noexcept { return trie_.get(); }

  std::shared_ptr<const TokenMask> find(const JsonMatcher& state) const {
    std::lock_guard lock(mu_);
    const auto it = masks_.find(state.hash());
    if (it == masks_.end() || !(it->second.first == state)) return nullptr;
    return it->second.second;
  }

  void insert(const JsonMatcher& state, std::shared_ptr<const TokenMask> mask) {
    if (max_states_ == 0) return;
    std::lock_guard lock(mu_);
    if (masks_.size() >= max_states_) masks_.clear();
    masks_[state.hash()] = {state, std::move(mask)};
  }

 private:
  std::shared_ptr<const TokenTrie> trie_;
  std::size_t max_states_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::pair<JsonMatcher, std::shared_ptr<const TokenMask>>>
      masks_;
};

/// How a JsonConstraint matches and where it keeps masks.
struct JsonConstraintOptions {
  JsonMatcher::Options json{};
  /// Masks shared with other constraints over the same vocabulary; null: a cache of this
  /// constraint's own of max_cached_states masks (0: none, every state walked).
  std::shared_ptr<JsonMaskCache> shared_cache{};
  std::size_t max_cached_states = 256;
};

class JsonConstraint final : public decode::LogitsProcessor {
 public:
  using Options = JsonConstraintOptions;
  struct Stats {
    std::size_t masks_computed = 0;  ///< trie walks
    std::size_t cache_hits = 0;
    double walk_seconds = 0.0;       ///< time in trie walks
  };

  /// A constraint for one generation whose prompt is `prompt_tokens` long: `trie` is the
  /// vocabulary (TokenTrie::build), `stop_ids` end the generation and are allowed only when
  /// the JSON text is whole.
  static result<std::unique_ptr<JsonConstraint>> create(std::shared_ptr<const TokenTrie> trie,
                                                        std::vector<std::int32_t> stop_ids,
                                                        std::size_t prompt_tokens,
                                                        const Options& options = {}) {
    constexpr std::string_view where = "JsonConstraint";
    if (!trie) return make_error(errc::invalid_argument, where, "no vocabulary");
    for (const std::int32_t id : stop_ids)
      if (id < 0 || static_cast<std::size_t>(id) >= trie->vocab_size())
        return make_error(errc::invalid_argument, where,
                          "stop id " + std::to_string(id) + " is outside the vocabulary");
    if (stop_ids.empty())
      return make_error(errc::invalid_argument, where,
                        "no stop ids: a whole JSON text could never end the generation");
    if (options.shared_cache && options.shared_cache->trie() != trie.get())
      return make_error(errc::invalid_argument, where,
                        "shared_cache: made for another vocabulary");
    return std::unique_ptr<JsonConstraint>(
        new JsonConstraint(std::move(trie), std::move(stop_ids), prompt_tokens, options));
  }

  status apply(std::span<float> logits, std::span<const std::int32_t> history) override {
    auto state = state_after(history);
    if (!state) return state.error();
    const TokenMask& mask = mask_for(*state);
    constexpr float kOff = -std::numeric_limits<float>::infinity();
    // A word at a time: whole words allowed (most of them, inside a string) are skipped.
    const std::size_t n = logits.size();
    for (std::size_t w = 0; w * 64 < n; ++w) {
      const std::uint64_t bits = w < mask.size() ? mask[w] : 0;
      if (bits == ~std::uint64_t{0}) continue;
      const std::size_t end = std::min(n, w * 64 + 64);
      for (std::size_t i = w * 64; i < end; ++i)
        if (((bits >> (i - w * 64)) & 1) == 0) logits[i] = kOff;
    }
    return {};
  }

  /// The matcher after `history` (the prompt, then generated tokens). Errors: a history
  /// shorter than the prompt, a generated token the constraint would not have allowed.
  result<JsonMatcher> state_after(std::span<const std::int32_t> history) {
    if (history.size() < prompt_tokens_)
      return make_error(errc::invalid_argument, "JsonConstraint",
                        "history of " + std::to_string(history.size()) +
                            " tokens is shorter than the prompt");
    const auto generated = history.subspan(prompt_tokens_);
    const auto common = static_cast<std::size_t>(
        std::mismatch(tokens_.begin(), tokens_.end(), generated.begin(), generated.end()).first -
        tokens_.begin());
    tokens_.resize(common);
    states_.resize(common + 1);
    for (std::size_t k = common; k < generated.size(); ++k) {
      const std::int32_t id = generated[k];
      const auto bytes = trie_->bytes_of(id);
      JsonMatcher next = states_.back();
      if (!bytes || !next.feed(*bytes))
        return make_error(errc::invalid_argument, "JsonConstraint",
                          "generated token " + std::to_string(id) + " (position " +
                              std::to_string(k) + ") does not continue the JSON text");
      states_.push_back(next);
      tokens_.push_back(id);
    }
    return states_.back();
  }

  /// The tokens allowed after `state`: from the cache, else by walking the vocabulary.
  const TokenMask& mask_for(const JsonMatcher& state) {
    if (state.done()) {  // the stop ids alone
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

  /// The specification of mask_for: every token fed alone to a copy of `state`.
  TokenMask mask_scalar(const JsonMatcher& state) const {
    TokenMask mask = empty_mask();
    for (std::size_t k = 0; k < trie_->size(); ++k) {
      JsonMatcher m = state;
      if (m.feed(trie_->bytes(k))) mask_set(mask, trie_->id(k));
    }
    if (state.done())
      for (const std::int32_t id : stop_ids_) mask_set(mask, id);
    return mask;
  }

  /// The generated tokens so far form a whole JSON text.
  bool complete() const noexcept { return states_.back().done(); }
  const Stats& stats() const noexcept { return stats_; }

 private:
  JsonConstraint(std::shared_ptr<const TokenTrie> trie, std::vector<std::int32_t> stop_ids,
                 std::size_t prompt_tokens, const Options& options)
      : trie_(std::move(trie)), stop_ids_(std::move(stop_ids)), prompt_tokens_(prompt_tokens),
        states_{JsonMatcher(options.json)},
        cache_(options.shared_cache ? options.shared_cache
                                    : std::make_shared<JsonMaskCache>(trie_, options.max_cached_states)) {}

  TokenMask empty_mask() const { return TokenMask((trie_->vocab_size() + 63) / 64, 0); }

  TokenMask walk(const JsonMatcher& state) {
    TokenMask mask = empty_mask();
    // Inside a string body every plain token is allowed: only the others are walked.
    if (state.in_string_body() && trie_->rest() != nullptr) {
      mask = trie_->plain();
      walk(*trie_->rest(), state, mask);
    } else {
      walk(*trie_, state, mask);
    }
    return mask;
  }

  // Sets in `mask` the tokens of `trie` that `state` accepts. states[d]: the matcher after the
  // first d bytes of the current token, all accepted.
  void walk(const TokenTrie& trie, const JsonMatcher& state, TokenMask& mask) {
    std::vector<JsonMatcher>& states = walk_states_;
    states.assign(1, state);
    const std::size_t n = trie.size();
    std::size_t k = 0;
    while (k < n) {
      const std::string_view b = trie.bytes(k);
      states.resize(std::min(trie.shared(k), states.size() - 1) + 1);
      std::size_t failed_at = b.size();
      for (std::size_t i = states.size() - 1; i < b.size(); ++i) {
        states.push_back(states.back());
        if (!states.back().advance(static_cast<unsigned char>(b[i]))) {
          states.pop_back();
          failed_at = i;
          break;
        }
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
  std::vector<std::int32_t> tokens_;  // generated tokens seen so far
  std::vector<JsonMatcher> states_;   // [tokens_ + 1] the matcher after each
  std::shared_ptr<JsonMaskCache> cache_;
  std::shared_ptr<const TokenMask> last_;  // mask_for's latest answer, kept alive
  TokenMask done_mask_;                    // the stop ids (built when first needed)
  std::vector<JsonMatcher> walk_states_;
  Stats stats_;
};

}  // namespace edgellm::constrain
