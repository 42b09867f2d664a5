// SPDX-License-Identifier: Apache-2.0
// Text generation: the token-source contract (plain or speculative decoding), the plain decoder,
// and the loop that streams text pieces to a callback with stop ids, stop strings, a token
// budget and statistics.
#pragma once

#include "edgellm/decode/model.hpp"
#include "edgellm/decode/sampler.hpp"
#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::decode {

/// Something that emits tokens for a prompt: plain decoding (PlainDecoder) or speculative
/// decoding (SpeculativeDecoder). Requirements:
///   s.begin(prompt) -> status          the model(s) consume `prompt` (what they already hold of
///                                      it is reused); logits for the next token are ready after
///   s.step(sampler, history, out) -> status
///                                      appends >= 1 newly emitted tokens to `out`; `history` is
///                                      the prompt plus every token emitted so far (for the
///                                      sampler's repetition penalty)
/// step() fails with errc::capacity_exceeded when the context has no room for another token.
/// Optional: s.reused() -> std::size_t, the prompt tokens the latest begin() kept from what the
/// model held instead of forwarding them (GenerateStats::cached_tokens; 0 when absent).
template <class S>
concept TokenSource = requires(S& s, std::span<const std::int32_t> tokens, Sampler& sampler,
                               std::vector<std::int32_t>& out) {
  { s.begin(tokens) } -> std::same_as<status>;
  { s.step(sampler, tokens, out) } -> std::same_as<status>;
};

/// Plain autoregressive decoding: one model forward per emitted token.
///
/// The last emitted token stays "pending" (not yet forwarded) until the next step, so stopping
/// never wastes a forward. The decoder remembers the tokens its model has consumed; begin()
/// with a prompt that extends them (a chat's next turn, a cached system prompt) forwards only
/// the new tokens, and one that diverges truncates the model to the common prefix first.
template <Model M>
class PlainDecoder {
 public:
  /// A decoder over `model`. `held`: the tokens the model already holds (position() of them,
  /// e.g. a prefix loaded from a prompt cache); empty for a fresh model.
  static result<PlainDecoder> create(M& model, std::span<const std::int32_t> held = {}) {
    if (held.size() != model.position()) {
      return make_error(errc::invalid_argument, "PlainDecoder::create",
                        "held: " + std::to_string(held.size()) + " tokens but the model holds " +
                            std::to_string(model.position()));
    }
    return PlainDecoder(model, held);
  }

  status begin(std::span<const std::int32_t> prompt) {
    constexpr std::string_view where = "PlainDecoder::begin";
    if (prompt.empty()) return make_error(errc::invalid_argument, where, "prompt: empty");
    if (prompt.size() > model_->context_size()) {
      return make_error(errc::capacity_exceeded, where,
                        "prompt: " + std::to_string(prompt.size()) +
                            " tokens do not fit the context of " +
                            std::to_string(model_->context_size()));
    }
    pending_.reset();
    // Reuse the longest common prefix, but always forward at least the last prompt token so
    // that its logits exist.
    std::size_t keep = 0;
    while (keep < consumed_.size() && keep + 1 < prompt.size() && consumed_[keep] == prompt[keep])
      ++keep;
    if (auto st = model_->truncate(keep); !st) return st;
    consumed_.resize(keep);
    reused_ = keep;
    if (auto st = edgellm::detail::try_resize(logits_, model_->vocab_size(), where, "logits"); !st)
      return st;
    if (auto st = model_->forward(prompt.subspan(keep), LogitsMode::last, logits_); !st) return st;
    consumed_.assign(prompt.begin(), prompt.end());
    return {};
  }

  status step(Sampler& sampler, std::span<const std::int32_t> history, std::vector<std::int32_t>& out) {
    if (logits_.empty())
      return make_error(errc::invalid_argument, "PlainDecoder::step", "begin() was not called");
    if (pending_) {
      if (model_->position() >= model_->context_size()) {
        return make_error(errc::capacity_exceeded, "PlainDecoder::step",
                          "the context of " + std::to_string(model_->context_size()) +
                              " tokens is full");
      }
      if (auto st = model_->forward({&*pending_, 1}, LogitsMode::last, logits_); !st) return st;
      consumed_.push_back(*pending_);
      pending_.reset();
    }
    auto tok = sampler.sample(logits_, history);
    if (!tok) return tok.error();
    out.push_back(*tok);
    pending_ = *tok;
    return {};
  }

  /// Tokens the model has consumed (its position() of them).
  std::span<const std::int32_t> consumed() const noexcept { return consumed_; }
  /// Prompt tokens the latest begin() kept from the cache (the common prefix) instead of
  /// forwarding them.
  std::size_t reused() const noexcept { return reused_; }
  M& model() noexcept { return *model_; }

 private:
  PlainDecoder(M& model, std::span<const std::int32_t> held)
      : model_(&model), consumed_(held.begin(), held.end()) {}

  M* model_;
  std::vector<std::int32_t> consumed_;   // tokens in the model, in order
  std::vector<float> logits_;            // [vocab] next-token scores after consumed_
  std::optional<std::int32_t> pending_;  // emitted, not yet forwarded
  std::size_t reused_ = 0;               // prompt tokens the latest begin() did not forward
};

/// Why generation ended.
enum class StopReason { eos, stop_string, max_tokens, context_full, callback };

inline const char* to_string(StopReason r) noexcept {
  switch (r) {
    case StopReason::eos: return "eos";
    case StopReason::stop_string: return "stop string";
    case StopReason::max_tokens: return "token budget";
    case StopReason::context_full: return "context full";
    case StopReason::callback: return "stopped by caller";
  }
  return "?";
}

struct GenerateOptions {
  std::size_t max_new_tokens = 256;       ///< budget of emitted tokens (> 0)
  std::vector<std::int32_t> stop_ids;     ///< e.g. the model's eos ids; not emitted as text
  std::vector<std::string> stop_strings;  ///< generation ends before the first occurrence
  bool skip_special = true;               ///< special tokens produce no text
};

struct GenerateStats {
  std::size_t prompt_tokens = 0;
  /// Of prompt_tokens, the common prefix the cache already held (a chat's earlier turns, a
  /// prompt cache): kept, not forwarded. prompt_tokens - cached_tokens were prefilled.
  std::size_t cached_tokens = 0;
  std::size_t new_tokens = 0;          ///< tokens emitted (the stop id and tokens cut by a stop
                                       ///< string not counted)
  double time_to_first_token_s = 0.0;  ///< begin() plus the first step
  double prefill_s = 0.0;              ///< begin()
  double decode_s = 0.0;               ///< every step after the first
  StopReason stop = StopReason::max_tokens;

  std::size_t prefilled_tokens() const noexcept { return prompt_tokens - cached_tokens; }
  /// Tokens forwarded per second of prefill (the cached ones cost nothing, so they do not count).
  double prefill_tok_s() const noexcept {
    return prefill_s > 0 ? static_cast<double>(prefilled_tokens()) / prefill_s : 0.0;
  }
  /// Tokens per second after the first token.
  double decode_tok_s() const noexcept {
    return decode_s > 0 && new_tokens > 1 ? static_cast<double>(new_tokens - 1) / decode_s : 0.0;
  }
};

namespace detail {

/// Length of the longest suffix of `text` that is a proper prefix of some stop string: that much
/// text must be held back, since the next piece may complete a stop string.
inline std::size_t stop_holdback(std::string_view text, const std::vector<std::string>& stops) {
  std::size_t hold = 0;
  for (const std::string& s : stops) {
    for (std::size_t n = std::min(s.size() - (s.empty() ? 0 : 1), text.size()); n > hold; --n) {
      if (text.substr(text.size() - n) == std::string_view(s).substr(0, n)) {
        hold = n;
        break;
      }
    }
  }
  return hold;
}

}  // namespace detail

/// Generates from `prompt` with `source`, streaming text to `on_text(std::string_view piece)`,
/// which returns false to stop. Text is streamed in whole UTF-8 characters; text that might be
/// the start of a stop string is held back until it is known not to be. `emitted`, if given,
/// receives the emitted token ids. Errors: an empty prompt, max_new_tokens == 0, a prompt that
/// does not fit the context, and errors of the model or the sampler. A full context during
/// generation is not an error: generation stops with StopReason::context_full.
template <TokenSource Source, class OnText>
result<GenerateStats> generate(Source& source, Sampler& sampler, const model::Tokenizer& tokenizer,
                               std::span<const std::int32_t> prompt, const GenerateOptions& options,
                               OnText&& on_text, std::vector<std::int32_t>* emitted = nullptr) {
  constexpr std::string_view where = "generate";
  if (prompt.empty()) return make_error(errc::invalid_argument, where, "prompt: no tokens");
  if (options.max_new_tokens == 0)
    return make_error(errc::invalid_argument, where, "max_new_tokens: must be positive");
  for (const std::string& s : options.stop_strings)
    if (s.empty()) return make_error(errc::invalid_argument, where, "stop_strings: an empty string");
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  GenerateStats stats;
  stats.prompt_tokens = prompt.size();
  const auto t0 = clock::now();
  if (auto st = source.begin(prompt); !st) return st.error();
  const auto t1 = clock::now();
  stats.prefill_s = seconds(t0, t1);
  if constexpr (requires { { source.reused() } -> std::convertible_to<std::size_t>; })
    stats.cached_tokens = std::min<std::size_t>(source.reused(), prompt.size());

  std::vector<std::int32_t> history(prompt.begin(), prompt.end()), fresh;
  model::StreamDecoder text_decoder = tokenizer.stream_decoder(options.skip_special);
  std::string held;  // decoded text not yet passed to on_text
  bool first = true;
  auto t_first = t1;
  const auto stop_ids = std::span<const std::int32_t>(options.stop_ids);
  const auto finish = [&](StopReason why) {
    stats.stop = why;
    if (why != StopReason::stop_string && why != StopReason::callback) {
      held += text_decoder.flush();
      if (!held.empty()) on_text(std::string_view(held));
    }
    stats.decode_s = first ? 0.0 : seconds(t_first, clock::now());
    return stats;
  };
  for (;;) {
    fresh.clear();
    if (auto st = source.step(sampler, history, fresh); !st) {
      if (st.error().code == errc::capacity_exceeded) return finish(StopReason::context_full);
      return st.error();
    }
    if (first) {
      t_first = clock::now();
      stats.time_to_first_token_s = seconds(t0, t_first);
      first = false;
    }
    for (const std::int32_t id : fresh) {
      if (std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end())
        return finish(StopReason::eos);
      history.push_back(id);
      if (emitted) emitted->push_back(id);
      ++stats.new_tokens;
      held += text_decoder.push(id);
      // A stop string anywhere in the held text ends generation before it.
      std::size_t cut = std::string::npos;
      for (const std::string& s : options.stop_strings) cut = std::min(cut, held.find(s));
      if (cut != std::string::npos) {
        if (cut > 0) on_text(std::string_view(held).substr(0, cut));
        return finish(StopReason::stop_string);
      }
      const std::size_t hold = detail::stop_holdback(held, options.stop_strings);
      if (held.size() > hold) {
        const bool go_on = on_text(std::string_view(held).substr(0, held.size() - hold));
        held.erase(0, held.size() - hold);
        if (!go_on) return finish(StopReason::callback);
      }
      if (stats.new_tokens >= options.max_new_tokens) return finish(StopReason::max_tokens);
    }
  }
}

}  // namespace edgellm::decode
