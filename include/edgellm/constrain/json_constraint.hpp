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
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace edgellm::constrain {

/// A bitmask over the vocabulary: bit i of word i / 64 set when token i is allowed.
using TokenMask = std::vector<std::uint64_t>;

inline bool mask_allows(const TokenMask& m, std::size_t id) noexcept {
  return id / 64 < m.size() && ((m[id / 64] >> (id % 64)) & 1) != 0;
}

/// How a JsonConstraint matches and how many masks it keeps.
struct JsonConstraintOptions {
  JsonMatcher::Options json{};
  std::size_t max_cached_states = 256;  ///< masks kept; beyond, the cache starts again
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
    return std::unique_ptr<JsonConstraint>(
        new JsonConstraint(std::move(trie), std::move(stop_ids), prompt_tokens, options));
  }

  status apply(std::span<float> logits, std::span<const std::int32_t> history) override {
    auto state = state_after(history);
    if (!state) return state.error();
    const TokenMask& mask = mask_for(*state);
    constexpr float kOff = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (!mask_allows(mask, i)) logits[i] = kOff;
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
    const std::uint64_t h = state.hash();
    if (auto it = cache_.find(h); it != cache_.end() && it->second.first == state) {
      ++stats_.cache_hits;
      return it->second.second;
    }
    if (cache_.size() >= options_.max_cached_states) cache_.clear();
    const auto t0 = std::chrono::steady_clock::now();
    TokenMask mask = walk(state);
    stats_.walk_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++stats_.masks_computed;
    auto& slot = cache_[h];
    slot = {state, std::move(mask)};
    return slot.second;
  }

  /// The specification of mask_for: every token fed alone to a copy of `state`.
  TokenMask mask_scalar(const JsonMatcher& state) const {
    TokenMask mask = empty_mask();
    for (std::size_t k = 0; k < trie_->size(); ++k) {
      JsonMatcher m = state;
      if (m.feed(trie_->bytes(k))) set(mask, trie_->id(k));
    }
    if (state.done())
      for (const std::int32_t id : stop_ids_) set(mask, id);
    return mask;
  }

  /// The generated tokens so far form a whole JSON text.
  bool complete() const noexcept { return states_.back().done(); }
  const Stats& stats() const noexcept { return stats_; }

 private:
  JsonConstraint(std::shared_ptr<const TokenTrie> trie, std::vector<std::int32_t> stop_ids,
                 std::size_t prompt_tokens, const Options& options)
      : trie_(std::move(trie)), stop_ids_(std::move(stop_ids)), prompt_tokens_(prompt_tokens),
        options_(options), states_{JsonMatcher(options.json)} {}

  TokenMask empty_mask() const { return TokenMask((trie_->vocab_size() + 63) / 64, 0); }
  static void set(TokenMask& m, std::int32_t id) {
    m[static_cast<std::size_t>(id) / 64] |= std::uint64_t{1} << (static_cast<std::size_t>(id) % 64);
  }

  // states[d]: the matcher after the first d bytes of the current token, all accepted.
  TokenMask walk(const JsonMatcher& state) {
    TokenMask mask = empty_mask();
    if (state.done()) {
      for (const std::int32_t id : stop_ids_) set(mask, id);
      return mask;
    }
    std::vector<JsonMatcher>& states = walk_states_;
    states.assign(1, state);
    const std::size_t n = trie_->size();
    std::size_t k = 0;
    while (k < n) {
      const std::string_view b = trie_->bytes(k);
      states.resize(std::min(trie_->shared(k), states.size() - 1) + 1);
      std::size_t failed_at = b.size();
      for (std::size_t i = states.size() - 1; i < b.size(); ++i) {
        JsonMatcher next = states.back();
        if (!next.feed(static_cast<unsigned char>(b[i]))) {
          failed_at = i;
          break;
        }
        states.push_back(next);
      }
      ++k;
      if (failed_at == b.size()) {
        set(mask, trie_->id(k - 1));
        continue;
      }
      // Every later token that shares the refused prefix b[0..failed_at] is refused too.
      while (k < n && trie_->shared(k) > failed_at) ++k;
    }
    return mask;
  }

  std::shared_ptr<const TokenTrie> trie_;
  std::vector<std::int32_t> stop_ids_;
  std::size_t prompt_tokens_;
  Options options_;
  std::vector<std::int32_t> tokens_;  // generated tokens seen so far
  std::vector<JsonMatcher> states_;   // [tokens_ + 1] the matcher after each
  std::unordered_map<std::uint64_t, std::pair<JsonMatcher, TokenMask>> cache_;
  std::vector<JsonMatcher> walk_states_;
  Stats stats_;
};

}  // namespace edgellm::constrain
