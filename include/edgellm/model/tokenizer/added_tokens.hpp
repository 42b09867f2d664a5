// SPDX-License-Identifier: Apache-2.0
// Added tokens (tokenizer.json `added_tokens`): strings cut out of the text before the
// normalizer / pre-tokenizer / BPE pipeline sees it, each encoded as one fixed id. A byte trie
// finds them leftmost-longest, as HF's Aho-Corasick matcher does.
#pragma once

#include "edgellm/detail/unicode.hpp"
#include "edgellm/model/tokenizer/text.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace edgellm::model {

/// An entry of tokenizer.json `added_tokens`: a string matched in the text before
/// tokenization and encoded as one fixed id.
struct AddedToken {
  std::int32_t id = 0;
  std::string content;
  bool single_word = false;  ///< match only when not preceded or followed by a \w character
  bool lstrip = false;       ///< also swallow the whitespace before the match
  bool rstrip = false;       ///< also swallow the whitespace after the match
  bool normalized = false;   ///< match in normalized text (content normalized too), not raw text
  bool special = false;      ///< skipped by decode(skip_special); see EncodeOptions::parse_special
};

namespace detail::tok {

/// Byte trie over the added-token contents, for leftmost-longest matching (what HF's
/// Aho-Corasick automaton with MatchKind::LeftmostLongest finds). The first pattern inserted
/// wins over an identical later one.
class TokenTrie {
 public:
  static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

  struct Match {
    std::size_t begin = 0;
    std::size_t end = 0;
    std::uint32_t value = kNone;
  };

  void insert(std::string_view pattern, std::uint32_t value) {
    if (pattern.empty()) return;
    std::uint32_t node = 0;
    for (const char ch : pattern) {
      const auto c = static_cast<unsigned char>(ch);
      std::uint32_t child = kNone;
      for (const auto& [label, next] : nodes_[node].children) {
        if (label == c) {
          child = next;
          break;
        }
      }
      if (child == kNone) {
        child = static_cast<std::uint32_t>(nodes_.size());
        nodes_[node].children.emplace_back(c, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    if (nodes_[node].value == kNone) nodes_[node].value = value;
    first_byte_[static_cast<unsigned char>(pattern[0])] = true;
    empty_ = false;
  }

  bool empty() const noexcept { return empty_; }

  /// The leftmost match starting at or after `pos`, longest among those starting there.
  std::optional<Match> find(std::string_view text, std::size_t pos) const {
    if (empty_) return std::nullopt;
    for (std::size_t i = pos; i < text.size(); ++i) {
      if (!first_byte_[static_cast<unsigned char>(text[i])]) continue;
      std::uint32_t node = 0;
      Match best;
      for (std::size_t k = i; k < text.size(); ++k) {
        const auto c = static_cast<unsigned char>(text[k]);
        std::uint32_t child = kNone;
        for (const auto& [label, next] : nodes_[node].children) {
          if (label == c) {
            child = next;
            break;
          }
        }
        if (child == kNone) break;
        node = child;
        if (nodes_[node].value != kNone) best = Match{i, k + 1, nodes_[node].value};
      }
      if (best.value != kNone) return best;
    }
    return std::nullopt;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, std::uint32_t>> children;
    std::uint32_t value = kNone;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
  std::array<bool, 256> first_byte_{};
  bool empty_ = true;
};

/// The added tokens of a tokenizer and their lookups: by id, by content, and the two tries the
/// encoder cuts them out with (one over raw text, one over normalized text).
struct AddedVocabulary {
  std::vector<AddedToken> tokens;                       ///< file order
  std::unordered_map<std::int32_t, std::size_t> by_id;  ///< id -> index in `tokens`
  StringIdMap by_content;                               ///< content -> id
  TokenTrie raw_trie;         ///< tokens with normalized == false; values index `tokens`
  TokenTrie normalized_trie;  ///< normalized == true, on their normalized contents

  /// Builds the lookups over `list`; `normalize(content)` spells a `normalized` token as it
  /// appears in normalized text.
  template <class Normalize>
  static AddedVocabulary build(std::vector<AddedToken> list, Normalize&& normalize) {
    AddedVocabulary v;
    v.tokens = std::move(list);
    // HF builds its matchers from the special tokens first, then the others, each in file order.
    for (const bool special_pass : {true, false}) {
      for (std::size_t k = 0; k < v.tokens.size(); ++k) {
        const auto& t = v.tokens[k];
        if (t.special != special_pass) continue;
        if (t.normalized) {
          v.normalized_trie.insert(normalize(t.content), static_cast<std::uint32_t>(k));
        } else {
          v.raw_trie.insert(t.content, static_cast<std::uint32_t>(k));
        }
      }
    }
    for (std::size_t k = 0; k < v.tokens.size(); ++k) {
      v.by_id.emplace(v.tokens[k].id, k);
      v.by_content.emplace(v.tokens[k].content, v.tokens[k].id);
    }
    return v;
  }

  /// The content of the added token `id`, if there is one.
  std::optional<std::string_view> content_of(std::int32_t id) const {
    if (const auto it = by_id.find(id); it != by_id.end()) {
      return std::string_view(tokens[it->second].content);
    }
    return std::nullopt;
  }

  /// Cuts `text` at the added tokens of `trie` (HF AddedVocabulary::find_matches); calls
  /// on_text(Span) for the stretches between them and on_token(id) for the tokens, in order.
  /// Special tokens are matched only when `parse_special`; a skipped match still consumes its
  /// bytes, as HF's scan resumes after it.
  template <class OnText, class OnToken>
  void split(std::string_view text, const TokenTrie& trie, bool parse_special, OnText&& on_text,
             OnToken&& on_token) const {
    std::size_t start_offset = 0;  // end of the last emitted token
    std::size_t pos = 0;           // where the automaton resumes: just after its last match
    while (const auto m = trie.find(text, pos)) {
      pos = m->end;
      const AddedToken& t = tokens[m->value];
      if (t.special && !parse_special) continue;
      if (t.single_word) {
        const bool word_before = m->begin > 0 && uni::is_word(code_point_before(text, m->begin));
        const bool word_after = m->end < text.size() && uni::is_word(code_point_at(text, m->end));
        if (word_before || word_after) continue;
      }
      std::size_t begin = m->begin, end = m->end;
      if (t.lstrip) begin = std::max(whitespace_run_before(text, begin), start_offset);
      if (t.rstrip) end = whitespace_run_after(text, end);
      if (start_offset < begin) on_text(Span{start_offset, begin});
      on_token(t.id);
      start_offset = end;
    }
    if (start_offset < text.size()) on_text(Span{start_offset, text.size()});
  }
};

}  // namespace detail::tok

}  // namespace edgellm::model
