// SPDX-License-Identifier: Apache-2.0
// A vocabulary's tokens as the bytes they add to the output, sorted so that tokens sharing a
// prefix sit together: walking the list with the length of the prefix each token shares with
// the one before (`shared`) visits every distinct prefix once, as a walk down a trie would,
// without the trie's pointers. Built once per tokenizer and shared read-only by constraints.
// The "plain" tokens (printable ASCII without '"' and '\\', most of a vocabulary) are also kept
// as a mask, and the others as a trie of their own, so that inside a string a constraint walks
// only the few tokens that can end or escape it.
#pragma once

#include "edgellm/model/tokenizer.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::constrain {

/// A bitmask over the vocabulary: bit i of word i / 64 set when token i is allowed.
using TokenMask = std::vector<std::uint64_t>;

inline bool mask_allows(const TokenMask& m, std::size_t id) noexcept {
  return id / 64 < m.size() && ((m[id / 64] >> (id % 64)) & 1) != 0;
}

inline void mask_set(TokenMask& m, std::int32_t id) noexcept {
  m[static_cast<std::size_t>(id) / 64] |= std::uint64_t{1} << (static_cast<std::size_t>(id) % 64);
}

class TokenTrie {
 public:
  /// The tokens of `tokenizer` with ids below `vocab_size` (the model's logits width) that
  /// add at least one byte of text: special tokens and empty ones are left out (a constraint
  /// never allows them, except the stop ids it is given).
  static result<std::shared_ptr<const TokenTrie>> build(const model::Tokenizer& tokenizer,
                                                        std::size_t vocab_size) {
    if (vocab_size == 0)
      return make_error(errc::invalid_argument, "TokenTrie::build", "vocab_size: 0");
    std::vector<std::pair<std::int32_t, std::string>> tokens;
    for (std::size_t i = 0; i < vocab_size; ++i) {
      const auto id = static_cast<std::int32_t>(i);
      if (tokenizer.is_special(id)) continue;
      std::string b = tokenizer.token_bytes(id);
      if (!b.empty()) tokens.emplace_back(id, std::move(b));
    }
    return from_tokens(vocab_size, std::move(tokens));
  }

  /// A trie of the given (id, bytes) pairs, ids below `vocab_size`, bytes non-empty.
  static std::shared_ptr<const TokenTrie> from_tokens(
      std::size_t vocab_size, std::vector<std::pair<std::int32_t, std::string>> tokens,
      bool split_plain = true) {
    auto t = std::shared_ptr<TokenTrie>(new TokenTrie());
    t->vocab_size_ = vocab_size;
    std::sort(tokens.begin(), tokens.end(),
              [](const auto& a, const auto& b) { return a.second != b.second ? a.second < b.second : a.first < b.first; });
    t->index_of_.assign(vocab_size, -1);
    t->offsets_.reserve(tokens.size() + 1);
    t->shared_.reserve(tokens.size());
    t->plain_.assign((vocab_size + 63) / 64, 0);
    std::vector<std::pair<std::int32_t, std::string>> rest;
    std::string_view prev;
    for (const auto& [id, b] : tokens) {
      t->index_of_[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(t->ids_.size());
      t->ids_.push_back(id);
      t->offsets_.push_back(static_cast<std::uint32_t>(t->data_.size()));
      const auto p = std::mismatch(prev.begin(), prev.end(), b.begin(), b.end()).first;
      t->shared_.push_back(static_cast<std::uint32_t>(p - prev.begin()));
      t->data_ += b;
      prev = std::string_view(t->data_).substr(t->offsets_.back());
      if (!split_plain) continue;
      if (is_plain(b))
        mask_set(t->plain_, id);
      else
        rest.emplace_back(id, b);
    }
    t->offsets_.push_back(static_cast<std::uint32_t>(t->data_.size()));
    if (split_plain) t->rest_ = from_tokens(vocab_size, std::move(rest), false);
    return t;
  }

  /// Printable ASCII other than '"' and '\\': bytes any JSON string body (and most character
  /// classes) takes whatever came before, so a constraint may allow such tokens in bulk.
  static bool is_plain(std::string_view bytes) noexcept {
    for (const char ch : bytes) {
      const auto c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c > 0x7E || c == '"' || c == '\\') return false;
    }
    return true;
  }

  /// Width of the logits this was built for.
  std::size_t vocab_size() const noexcept { return vocab_size_; }
  /// Tokens with text, in byte order.
  std::size_t size() const noexcept { return ids_.size(); }
  std::int32_t id(std::size_t k) const noexcept { return ids_[k]; }
  std::string_view bytes(std::size_t k) const noexcept {
    return std::string_view(data_).substr(offsets_[k], offsets_[k + 1] - offsets_[k]);
  }
  /// The bytes of token `id`, or nothing for an id without text (special, empty, out of range).
  std::optional<std::string_view> bytes_of(std::int32_t id) const noexcept {
    if (id < 0 || static_cast<std::size_t>(id) >= index_of_.size()) return std::nullopt;
    const std::int32_t k = index_of_[static_cast<std::size_t>(id)];
    if (k < 0) return std::nullopt;
    return bytes(static_cast<std::size_t>(k));
  }
  /// Bytes token k shares with token k - 1 (0 for the first).
  std::size_t shared(std::size_t k) const noexcept { return shared_[k]; }
  /// The plain tokens (is_plain) as a mask, and the others as a trie of their own; for a trie
  /// built by build() (from_tokens' split_plain), else an empty mask and null.
  const TokenMask& plain() const noexcept { return plain_; }
  const TokenTrie* rest() const noexcept { return rest_.get(); }

 private:
  TokenTrie() = default;

  std::size_t vocab_size_ = 0;
  std::vector<std::int32_t> ids_;       // [tokens] in byte order
  std::vector<std::uint32_t> offsets_;  // [tokens + 1] into data_
  std::vector<std::uint32_t> shared_;   // [tokens] common prefix with the previous token
  std::vector<std::int32_t> index_of_;  // [vocab_size] position in ids_, -1: no text
  std::string data_;                    // every token's bytes, concatenated
  TokenMask plain_;                     // [vocab_size / 64] the plain tokens
  std::shared_ptr<const TokenTrie> rest_;  // the tokens that are not plain
};

}  // namespace edgellm::constrain
