// SPDX-License-Identifier: Apache-2.0
// ModelArchetype: exactly the members decode::Model requires, with working semantics, so code
// written against the concept (a speculative decoder) can be instantiated and run on it to prove
// it needs nothing more.
#pragma once

#include "edgellm/decode/model.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace edgellm::test {

/// A toy causal model: the logits after a prefix are a pseudo-random function of the whole
/// prefix (an FNV-style hash of the token ids, mixed with the vocabulary index), so they change
/// whenever any earlier token changes, and truncate() really has to forget tokens. Deterministic
/// across platforms (integer arithmetic only, then one exact conversion to float).
/// `salt` gives different "models" over the same vocabulary (e.g. a draft and a target).
class ModelArchetype {
 public:
  ModelArchetype(std::size_t vocab_size, std::size_t context_size, std::uint64_t salt = 0)
      : vocab_(vocab_size), context_(context_size), salt_(salt) {}

  std::size_t vocab_size() const { return vocab_; }
  std::size_t position() const { return history_.size(); }
  std::size_t context_size() const { return context_; }

  status forward(std::span<const std::int32_t> tokens, decode::LogitsMode mode,
                 std::span<float> logits) {
    constexpr std::string_view where = "ModelArchetype::forward";
    if (tokens.empty()) return make_error(errc::invalid_argument, where, "tokens: empty");
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab_) {
        return make_error(errc::out_of_range, where,
                          "tokens[" + std::to_string(i) + "]: id " + std::to_string(tokens[i]) +
                              " is outside [0, " + std::to_string(vocab_) + ")");
      }
    }
    if (history_.size() + tokens.size() > context_) {
      return make_error(errc::capacity_exceeded, where, "context full");
    }
    const std::size_t need = decode::logits_count(mode, tokens.size(), vocab_);
    if (logits.size() < need) return make_error(errc::invalid_argument, where, "logits: too short");
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::uint64_t h = (hashes_.empty() ? salt_ ^ 0xcbf29ce484222325ull : hashes_.back());
      hashes_.push_back((h ^ static_cast<std::uint64_t>(tokens[i])) * 0x100000001b3ull);
      history_.push_back(tokens[i]);
      if (mode == decode::LogitsMode::all || i + 1 == tokens.size()) {
        float* row = logits.data() + (mode == decode::LogitsMode::all ? i * vocab_ : 0);
        for (std::size_t v = 0; v < vocab_; ++v) row[v] = score(hashes_.back(), v);
      }
    }
    return {};
  }

  status truncate(std::size_t n) {
    if (n > history_.size()) {
      return make_error(
          errc::out_of_range, "ModelArchetype::truncate",
          "n: " + std::to_string(n) + " > position " + std::to_string(history_.size()));
    }
    history_.resize(n);
    hashes_.resize(n);
    return {};
  }

 private:
  static float score(std::uint64_t h, std::size_t v) {
    std::uint64_t x = h ^ (static_cast<std::uint64_t>(v) * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return static_cast<float>(x >> 40) / 16777216.0f;  // 24 bits: exact in fp32, in [0, 1)
  }

  std::size_t vocab_, context_;
  std::uint64_t salt_;
  std::vector<std::int32_t> history_;
  std::vector<std::uint64_t> hashes_;  // hashes_[i]: hash of history_[0..i]
};

static_assert(decode::Model<ModelArchetype>);

}  // namespace edgellm::test
