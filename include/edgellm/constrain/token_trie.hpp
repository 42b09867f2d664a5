// SPDX-License-Identifier: Apache-2.0
// A vocabulary's tokens as the bytes they add to the output, sorted so that tokens sharing a
// prefix sit together: walking the list with the length of the prefix each token shares with
// the one before (`shared`) visits every distinct prefix once, as a walk down a trie would,
// without the trie's pointers. Built once per tokenizer and shared read-only by constraints.
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

class TokenTrie {
 public:
  /// The tokens of `tokenizer` with ids below `vocab_size` (the model's logits width) that
  /// add at least one byte of text: special tokens and empty ones are left out (a constraint
  /// never allows them, except the stop ids it is given).
  static result<std::shared_ptr<const TokenTrie>> build(const model::Tokenizer& tokenizer,
                                                        std::size_t vocab_size) {
    if (vocab_size == 0)
      return make_error(errc::invalid_argument, "TokenTrie::build", "vocab_size: 0");
    auto t = std::shared_ptr<TokenTrie>(new TokenTrie());
    t->vocab_size_ = vocab_size;
    std::vector<std::string> bytes(vocab_size);
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i < vocab_size; ++i) {
      const auto id = static_cast<std::int32_t>(i);
      if (tokenizer.is_special(id)) continue;
      bytes[i] = tokenizer.token_bytes(id);
      if (!bytes[i].empty()) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end(), [&](std::int32_t a, std::int32_t b) {
      const auto& x = bytes[static_cast<std::size_t>(a)];
      const auto& y = bytes[static_cast<std::size_t>(b)];
      return x != y ? x < y : a < b;
    });
    t->ids_ = ids;
    t->index_of_.assign(vocab_size, -1);
    for (std::size_t k = 0; k < ids.size(); ++k)
      t->index_of_[static_cast<std::size_t>(ids[k])] = static_cast<std::int32_t>(k);
    t->offsets_.reserve(ids.size() + 1);
    t->shared_.reserve(ids.size());
    std::string_view prev;
    for (const std::int32_t id : ids) {
      const std::string& b = bytes[static_cast<std::size_t>(id)];
      t->offsets_.push_back(static_cast<std::uint32_t>(t->data_.size()));
      const auto [p, q] = std::mismatch(prev.begin(), prev.end(), b.begin(), b.end());
      t->shared_.push_back(static_cast<std::uint32_t>(p - prev.begin()));
      t->data_ += b;
      prev = std::string_view(t->data_).substr(t->offsets_.back());
    }
    t->offsets_.push_back(static_cast<std::uint32_t>(t->data_.size()));
    return std::shared_ptr<const TokenTrie>(std::move(t));
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

 private:
  TokenTrie() = default;

  std::size_t vocab_size_ = 0;
  std::vector<std::int32_t> ids_;       // [tokens] in byte order
  std::vector<std::uint32_t> offsets_;  // [tokens + 1] into data_
  std::vector<std::uint32_t> shared_;   // [tokens] common prefix with the previous token
  std::vector<std::int32_t> index_of_;  // [vocab_size] position in ids_, -1: no text
  std::string data_;                    // every token's bytes, concatenated
};

}  // namespace edgellm::constrain
