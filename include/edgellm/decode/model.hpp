// SPDX-License-Identifier: Apache-2.0
// The Model concept: the contract between a language model and whoever decodes with it (a
// sampler loop, a speculative decoder).
#pragma once

#include "edgellm/model/logits_mode.hpp"
#include "edgellm/result.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace edgellm::decode {

/// Which logits a forward() call writes (defined beside the Transformer, model/logits_mode.hpp).
using model::LogitsMode;
using model::logits_count;

/// A causal language model that consumes tokens one batch at a time and keeps the state of the
/// tokens consumed so far (a KV cache). The requirements are exactly what a decoder needs:
///
///   m.vocab_size()    -> std::size_t   rows of the output distribution (token ids are in
///                                      [0, vocab_size()))
///   m.position()      -> std::size_t   tokens consumed so far (0 for a fresh model)
///   m.context_size()  -> std::size_t   most tokens the model can hold; position() never exceeds it
///   m.forward(tokens, mode, logits) -> status
///   m.truncate(n)     -> status
///
/// Semantics the compiler cannot check:
/// - forward(tokens, mode, logits) runs `tokens` at positions position() ..
///   position() + tokens.size() - 1, advances position() by tokens.size(), and writes
///   logits_count(mode, tokens.size(), vocab_size()) floats to the front of `logits`: for mode
///   `last` the unnormalised next-token scores after the last new token, for mode `all` the
///   scores after each new token (with p = position() before the call, row i is the
///   distribution of the token at position p + i + 1).
///   The result depends only on the token sequence consumed so far, not on how it was split into
///   forward() calls, up to floating-point rounding.
/// - forward() fails (and changes nothing: position() and the state are as before the call) when
///   tokens is empty, a token id is outside [0, vocab_size()), position() + tokens.size() >
///   context_size(), or logits is shorter than logits_count(...).
/// - truncate(n) with n <= position() restores the state as if only the first n tokens had been
///   consumed (position() == n afterwards); forwarding the same tokens again then yields the same
///   logits, bit for bit, as the first time when the calls are split the same way. n >
///   position() is an error and changes nothing. truncate(position()) is a no-op.
/// - A model object is used from one thread at a time.
template <class M>
concept Model = requires(M& m, const M& cm, std::span<const std::int32_t> tokens, LogitsMode mode,
                         std::span<float> logits, std::size_t n) {
  { cm.vocab_size() } -> std::same_as<std::size_t>;
  { cm.position() } -> std::same_as<std::size_t>;
  { cm.context_size() } -> std::same_as<std::size_t>;
  { m.forward(tokens, mode, logits) } -> std::same_as<status>;
  { m.truncate(n) } -> std::same_as<status>;
};

}  // namespace edgellm::decode
