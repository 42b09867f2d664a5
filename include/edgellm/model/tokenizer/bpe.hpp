// SPDX-License-Identifier: Apache-2.0
// The BPE model of a tokenizer.json: vocabulary, ranked merges, unknown-character handling and
// byte fallback; encodes one pre-tokenized word as HF's BPE::tokenize does.
#pragma once

#include "edgellm/detail/unicode.hpp"
#include "edgellm/model/tokenizer/text.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace edgellm::model::detail::tok {

struct MergeValue {
  std::uint32_t rank = 0;
  std::int32_t new_id = 0;
};

inline std::uint64_t pair_key(std::int32_t a, std::int32_t b) noexcept {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

struct BpeModel {
  StringIdMap vocab;
  /// Indexed by id; views of vocab's keys (map nodes do not move, not even when the map does).
  /// Empty where has_id is 0.
  std::vector<std::string_view> id_to_token;
  std::vector<std::uint8_t> has_id;
  std::unordered_map<std::uint64_t, MergeValue> merges;  ///< (left id, right id) -> rank, merged
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::array<std::int32_t, 256> byte_token_ids{};  ///< id of `<0xXX>`, or -1

  std::optional<std::int32_t> lookup(std::string_view s) const {
    const auto it = vocab.find(s);
    return it == vocab.end() ? std::nullopt : std::optional<std::int32_t>(it->second);
  }

  /// Tokenizes one pre-token as HF's BPE::tokenize does and appends the ids. Fails only when
  /// an unknown character needs `unk_token` and that token is not in the vocabulary.
  status encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
    if (word.empty()) return {};
    if (ignore_merges) {
      if (const auto id = lookup(word)) {
        out.push_back(*id);
        return {};
      }
    }
    struct Symbol {
      std::int32_t id;
      std::int32_t prev;
      std::int32_t next;
      std::uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
    };
    std::vector<Symbol> sym;
    sym.reserve(word.size());
    const auto add = [&sym](std::int32_t id, std::size_t len) {
      const auto k = static_cast<std::int32_t>(sym.size());
      sym.push_back(Symbol{id, k - 1, k + 1, static_cast<std::uint32_t>(len)});
    };

    // A pending <unk>: fused with the following unknown characters when fuse_unk.
    bool unk_pending = false;
    std::int32_t unk_id = -1;
    std::size_t unk_len = 0;
    std::string scratch;
    std::size_t i = 0;
    while (i < word.size()) {
      std::size_t len = uni::utf8_sequence_length(word, i);
      if (len == 0) len = 1;
      const bool first = i == 0, last = i + len == word.size();
      std::string_view s = word.substr(i, len);
      if ((!first && !continuing_subword_prefix.empty()) || (last && !end_of_word_suffix.empty())) {
        scratch.clear();
        if (!first) scratch += continuing_subword_prefix;
        scratch += s;
        if (last) scratch += end_of_word_suffix;
        s = scratch;
      }
      i += len;
      if (const auto id = lookup(s)) {
        if (unk_pending) {
          add(unk_id, unk_len);
          unk_pending = false;
        }
        add(*id, len);
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (const char ch : s) all = all && byte_token_ids[static_cast<unsigned char>(ch)] >= 0;
        if (all) {
          // As in HF, a pending <unk> is not flushed here; it lands after these bytes.
          for (const char ch : s) add(byte_token_ids[static_cast<unsigned char>(ch)], 1);
          continue;
        }
      }
      if (unk_token) {
        const auto id = lookup(*unk_token);
        if (!id) {
          return make_error(
              errc::format_error, "Tokenizer::encode",
              "model.unk_token '" + *unk_token +
                  "' is needed for an unknown character but is not in the vocabulary");
        }
        if (unk_pending && fuse_unk) {
          unk_len += len;
        } else {
          if (unk_pending) add(unk_id, unk_len);
          unk_pending = true;
          unk_id = *id;
          unk_len = len;
        }
      }
      // Without unk_token an unknown character is dropped, as in HF.
    }
    if (unk_pending) add(unk_id, unk_len);
    if (sym.empty()) return {};
    sym.back().next = -1;

    // Repeatedly merge the pair of lowest rank, leftmost among equals (HF Word::merge_all).
    struct Candidate {
      std::uint32_t rank;
      std::uint32_t pos;
      std::int32_t new_id;
    };
    const auto later = [](const Candidate& a, const Candidate& b) {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    std::vector<Candidate> heap;
    heap.reserve(sym.size());
    const auto push_pair = [&](std::size_t pos) {
      const Symbol& a = sym[pos];
      if (a.next < 0) return;
      const auto it = merges.find(pair_key(a.id, sym[static_cast<std::size_t>(a.next)].id));
      if (it == merges.end()) return;
      heap.push_back(
          Candidate{it->second.rank, static_cast<std::uint32_t>(pos), it->second.new_id});
      std::push_heap(heap.begin(), heap.end(), later);
    };
    for (std::size_t p = 0; p + 1 < sym.size(); ++p) push_pair(p);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const Candidate top = heap.back();
      heap.pop_back();
      Symbol& left = sym[top.pos];
      if (left.len == 0 || left.next < 0) continue;  // merged away, or now the last symbol
      const auto right_pos = static_cast<std::size_t>(left.next);
      const Symbol right = sym[right_pos];
      // Stale entry: the pair at this position changed since it was queued.
      const auto it = merges.find(pair_key(left.id, right.id));
      if (it == merges.end() || it->second.new_id != top.new_id) continue;
      left.id = top.new_id;
      left.len += right.len;
      left.next = right.next;
      sym[right_pos].len = 0;
      if (right.next >= 0) {
        sym[static_cast<std::size_t>(right.next)].prev = static_cast<std::int32_t>(top.pos);
      }
      if (left.prev >= 0) push_pair(static_cast<std::size_t>(left.prev));
      push_pair(top.pos);
    }
    for (const Symbol& s : sym) {
      if (s.len != 0) out.push_back(s.id);
    }
    return {};
  }
};

}  // namespace edgellm::model::detail::tok
