// SPDX-License-Identifier: Apache-2.0
// Prompt lookup decoding: a draft "model" with no weights that guesses the next token by finding
// the latest earlier occurrence of the text's last few tokens and copying what followed. Meets
// decode::Model, so SpeculativeDecoder<Target, LookupDraft> needs no second network.
#pragma once

#include "edgellm/decode/model.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::decode {

/// Options of LookupDraft::create().
struct LookupDraftOptions {
  std::size_t min_ngram = 1;  ///< shortest suffix matched (>= 1)
  std::size_t max_ngram = 3;  ///< longest suffix matched, tried first (>= min_ngram, <= 64)
  /// Search only the latest `window` tokens for matches (bounds the cost per token on long
  /// texts); 0: everything consumed.
  std::size_t window = 0;
};

/// A decode::Model whose "logits" after the consumed tokens t[0..L) are one-hot: 0 for the token
/// predicted by n-gram lookup and the lowest finite float for every other (finite, so logits
/// compare and subtract cleanly; its softmax weight is exactly 0 at any temperature below
/// ~1e35), so any Sampler turns them into q = 1 on that token (the rejection rule of
/// SpeculativeDecoder stays exact: q is what was drawn from).
///
/// Prediction: for n = max_ngram down to min_ngram, the latest j < L - n with
/// t[j, j + n) == t[L - n, L) predicts t[j + n]; the longest n with a match wins. With no match
/// the logits are all 0 (uniform) and has_proposal() is false, which tells SpeculativeDecoder to
/// stop drafting (a decoder that ignores it just gets a useless guess rejected).
///
/// Cost: O(window * max_ngram) integer compares per logits row, no allocation in steady state.
/// Memory: the consumed tokens. Semantics are the Model contract's (forward validates everything
/// before changing anything; truncate() forgets tokens).
class LookupDraft {
 public:
  /// A lookup draft for a target with `vocab_size` tokens and a context of `context_size`.
  static result<LookupDraft> create(std::size_t vocab_size, std::size_t context_size,
                                    const LookupDraftOptions& options = {}) {
    constexpr std::string_view where = "LookupDraft::create";
    if (vocab_size == 0 ||
        vocab_size > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
      return make_error(errc::invalid_argument, where,
                        "vocab_size: " + std::to_string(vocab_size) + " is not in [1, 2^31)");
    if (context_size == 0) return make_error(errc::invalid_argument, where, "context_size: 0");
    if (options.min_ngram == 0 || options.max_ngram < options.min_ngram || options.max_ngram > 64)
      return make_error(errc::invalid_argument, where,
                        "options: min_ngram " + std::to_string(options.min_ngram) +
                            " and max_ngram " + std::to_string(options.max_ngram) +
                            " must satisfy 1 <= min_ngram <= max_ngram <= 64");
    return LookupDraft(vocab_size, context_size, options);
  }

  std::size_t vocab_size() const noexcept { return vocab_; }
  std::size_t position() const noexcept { return tokens_.size(); }
  std::size_t context_size() const noexcept { return context_; }

  status forward(std::span<const std::int32_t> tokens, LogitsMode mode, std::span<float> logits) {
    constexpr std::string_view where = "LookupDraft::forward";
    if (tokens.empty()) return make_error(errc::invalid_argument, where, "tokens: empty");
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab_) {
        return make_error(errc::out_of_range, where,
                          "tokens[" + std::to_string(i) + "]: id " + std::to_string(tokens[i]) +
                              " is outside [0, " + std::to_string(vocab_) + ")");
      }
    }
    if (tokens.size() > context_ - tokens_.size()) {
      return make_error(errc::capacity_exceeded, where,
                        "position " + std::to_string(tokens_.size()) + " + " +
                            std::to_string(tokens.size()) + " tokens exceeds the context size " +
                            std::to_string(context_));
    }
    const std::size_t need = logits_count(mode, tokens.size(), vocab_);
    if (logits.size() < need) {
      return make_error(
          errc::invalid_argument, where,
          "logits: size " + std::to_string(logits.size()) + " < " + std::to_string(need));
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      tokens_.push_back(tokens[i]);
      if (i + 1 == tokens.size()) {
        prediction_ = predict();
        write_row(prediction_, logits.subspan(mode == LogitsMode::all ? i * vocab_ : 0, vocab_));
      } else if (mode == LogitsMode::all) {
        write_row(predict(), logits.subspan(i * vocab_, vocab_));
      }
    }
    return {};
  }

  status truncate(std::size_t n) {
    if (n > tokens_.size()) {
      return make_error(errc::out_of_range, "LookupDraft::truncate",
                        "n: " + std::to_string(n) + " is greater than position " +
                            std::to_string(tokens_.size()));
    }
    if (n != tokens_.size()) {
      tokens_.resize(n);
      prediction_ = predict();
    }
    return {};
  }

  /// True when the consumed tokens' suffix has an earlier match (the logits are one-hot).
  bool has_proposal() const noexcept { return prediction_ >= 0; }
  /// The token predicted after the consumed tokens, -1 when there is none.
  std::int32_t proposal() const noexcept { return prediction_; }
  const LookupDraftOptions& options() const noexcept { return options_; }

 private:
  LookupDraft(std::size_t vocab, std::size_t context, const LookupDraftOptions& o)
      : vocab_(vocab), context_(context), options_(o) {}

  // The n-gram prediction after tokens_ (see the class comment), or -1.
  std::int32_t predict() const noexcept {
    const std::size_t L = tokens_.size();
    const std::size_t start = options_.window > 0 && L > options_.window ? L - options_.window : 0;
    const std::int32_t* t = tokens_.data();
    for (std::size_t n = std::min(options_.max_ngram, L); n >= options_.min_ngram; --n) {
      const std::int32_t* suffix = t + (L - n);
      // Latest j first: the most recent context is the best guess of what comes next.
      for (std::size_t j = L - n; j-- > start;) {
        if (t[j] == suffix[0] && std::equal(suffix, suffix + n, t + j)) return t[j + n];
      }
    }
    return -1;
  }

  void write_row(std::int32_t predicted, std::span<float> row) const noexcept {
    if (predicted < 0) {
      std::fill(row.begin(), row.end(), 0.0f);
      return;
    }
    std::fill(row.begin(), row.end(), std::numeric_limits<float>::lowest());
    row[static_cast<std::size_t>(predicted)] = 0.0f;
  }

  std::size_t vocab_, context_;
  LookupDraftOptions options_;
  std::vector<std::int32_t> tokens_;
  std::int32_t prediction_ = -1;  // predict() after tokens_
};

static_assert(Model<LookupDraft>);

}  // namespace edgellm::decode
