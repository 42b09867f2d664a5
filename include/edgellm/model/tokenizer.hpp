// SPDX-License-Identifier: Apache-2.0
// Hugging Face tokenizer.json BPE tokenizers (byte-level GPT-2 / Qwen2 / Llama-3, and
// SentencePiece-style Llama-2 / Mistral): text to token ids, ids to text, streaming decode.
#pragma once

#include "edgellm/detail/unicode.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace edgellm::model {

/// Options of Tokenizer::encode.
struct EncodeOptions {
  /// Apply the post_processor template, e.g. Llama's BOS `<s>` / `<|begin_of_text|>`. Qwen2's
  /// template adds nothing. HF calls this add_special_tokens.
  bool add_special = true;
  /// Match added tokens with `special: true` (e.g. `<|im_start|>`) in the text, as HF does by
  /// default. When false they are encoded as ordinary text (HF's encode_special_tokens = true,
  /// llama.cpp's parse_special = false); non-special added tokens are still matched.
  bool parse_special = true;
};

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

class Tokenizer;
class StreamDecoder;

namespace detail::tok {

namespace uni = ::edgellm::detail::unicode;

// --- byte-level alphabet (GPT-2's bytes_to_unicode) --------------------------------------------

struct ByteLevelTables {
  char32_t byte_to_cp[256];
  std::int16_t cp_to_byte[0x144];  ///< -1 for code points outside the alphabet
};

/// Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF map to the code point of the same value; the other
/// 68 bytes, in increasing order, map to U+0100..U+0143 (formats.md §4.1).
constexpr ByteLevelTables make_byte_level_tables() {
  ByteLevelTables t{};
  for (auto& c : t.cp_to_byte) c = -1;
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool same = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t cp = same ? static_cast<char32_t>(b) : next++;
    t.byte_to_cp[b] = cp;
    t.cp_to_byte[cp] = static_cast<std::int16_t>(b);
  }
  return t;
}
inline constexpr ByteLevelTables kByteLevel = make_byte_level_tables();

/// Appends the byte-level spelling of `bytes` (one alphabet character per byte).
inline void append_byte_level(std::string& out, std::string_view bytes) {
  for (const char ch : bytes) {
    uni::append_utf8(out, kByteLevel.byte_to_cp[static_cast<unsigned char>(ch)]);
  }
}

/// Appends the bytes a byte-level token stands for: each character mapped back through the
/// alphabet, or the token's own UTF-8 when any character is outside it (HF's ByteLevel decoder).
inline void append_byte_level_decoded(std::string& out, std::string_view token) {
  const std::size_t mark = out.size();
  std::size_t i = 0;
  while (i < token.size()) {
    const std::size_t n = uni::utf8_sequence_length(token, i);
    const char32_t cp = n == 0 ? 0x110000 : uni::decode_at(token, i, n);
    if (cp >= 0x144 || kByteLevel.cp_to_byte[cp] < 0) {
      out.resize(mark);
      out.append(token);
      return;
    }
    out += static_cast<char>(static_cast<unsigned char>(kByteLevel.cp_to_byte[cp]));
    i += n;
  }
}

// --- the pre-tokenizer regexes -----------------------------------------------------------------

/// The Split regexes edgellm recognises (compared as exact strings, after JSON unescaping).
enum class SplitRegex : std::uint8_t { gpt2, qwen2, llama3 };

inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

inline std::optional<SplitRegex> recognize_split_regex(std::string_view pattern) noexcept {
  if (pattern == kQwen2Pattern) return SplitRegex::qwen2;
  if (pattern == kLlama3Pattern) return SplitRegex::llama3;
  if (pattern == kGpt2Pattern) return SplitRegex::gpt2;
  return std::nullopt;
}

/// A byte range [begin, end).
struct Span {
  std::size_t begin = 0;
  std::size_t end = 0;
};

/// All non-overlapping matches of `kind` in valid UTF-8 `text`, left to right, as the
/// backtracking engines (Oniguruma, PCRE, Python's regex) find them: alternatives are tried in
/// order and the first that matches wins. Each regex matches every character, so the matches
/// tile the text. Appends byte spans to `out`.
inline void regex_find_all(SplitRegex kind, std::string_view text, std::vector<Span>& out) {
  // Code points, their byte offsets (n + 1 entries) and class bits.
  std::vector<char32_t> cp;
  std::vector<std::size_t> at;
  std::vector<std::uint8_t> cls;
  cp.reserve(text.size());
  at.reserve(text.size() + 1);
  cls.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = uni::utf8_sequence_length(text, i);
    if (len == 0) len = 1;  // callers pass valid UTF-8; stay in bounds regardless
    const char32_t c = uni::decode_at(text, i, len);
    cp.push_back(c);
    at.push_back(i);
    cls.push_back(uni::char_class(c));
    i += len;
  }
  at.push_back(text.size());
  const std::size_t n = cp.size();

  const auto has = [&](std::size_t k, std::uint8_t bits) { return k < n && (cls[k] & bits) != 0; };
  const auto letter = [&](std::size_t k) { return has(k, uni::kLetter); };
  const auto number = [&](std::size_t k) { return has(k, uni::kNumber); };
  const auto space = [&](std::size_t k) { return has(k, uni::kSpace); };
  // [^\s\p{L}\p{N}]
  const auto other = [&](std::size_t k) {
    return k < n && (cls[k] & (uni::kLetter | uni::kNumber | uni::kSpace)) == 0;
  };
  const auto crlf = [&](std::size_t k) { return k < n && (cp[k] == U'\r' || cp[k] == U'\n'); };
  const auto is = [&](std::size_t k, char32_t c) { return k < n && cp[k] == c; };
  const auto run = [&](std::size_t k, auto&& pred) {
    while (pred(k)) ++k;
    return k;
  };
  const bool gpt2 = kind == SplitRegex::gpt2;
  // Case-insensitive letters of the contractions: (?i) folds ſ (U+017F) to s as well.
  const auto fold = [&](std::size_t k) -> char32_t {
    if (k >= n) return 0;
    const char32_t c = cp[k];
    if (gpt2) return c;
    if (c >= U'A' && c <= U'Z') return c + 32;
    if (c == 0x17F) return U's';
    return c;
  };

  // End of the match that starts at i (always > i).
  const auto match_at = [&](std::size_t i) -> std::size_t {
    // '(?i:)'s|'t|'re|'ve|'m|'ll|'d
    if (cp[i] == U'\'') {
      const char32_t a = fold(i + 1);
      if (a == U's' || a == U't' || a == U'm' || a == U'd') return i + 2;
      const char32_t b = fold(i + 2);
      if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) {
        return i + 3;
      }
    }
    if (gpt2) {
      // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
      const std::size_t k = is(i, U' ') ? i + 1 : i;
      if (letter(k)) return run(k, letter);
      if (number(k)) return run(k, number);
      if (other(k)) return run(k, other);
    } else {
      // [^\r\n\p{L}\p{N}]?\p{L}+
      if (letter(i)) return run(i, letter);
      if (!crlf(i) && !number(i) && letter(i + 1)) return run(i + 1, letter);
      // \p{N} or \p{N}{1,3}
      if (number(i)) {
        if (kind == SplitRegex::qwen2) return i + 1;
        std::size_t k = i + 1;
        while (k < i + 3 && number(k)) ++k;
        return k;
      }
      // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
      const std::size_t k = is(i, U' ') && other(i + 1) ? i + 1 : i;
      if (other(k)) return run(run(k, other), crlf);
      // \s*[\r\n]+ : up to the last CR/LF of the whitespace run (backtracking of \s*)
      const std::size_t ws_end = run(i, space);
      for (std::size_t k2 = ws_end; k2 > i; --k2) {
        if (crlf(k2 - 1)) return k2;
      }
    }
    // \s+(?!\S) : the whitespace run, minus its last character unless it ends the text
    if (space(i)) {
      const std::size_t ws_end = run(i, space);
      if (ws_end == n) return ws_end;
      if (ws_end - 1 > i) return ws_end - 1;
      return ws_end;  // \s+
    }
    return i + 1;  // not reached: every character is L, N, \s or [^\s\p{L}\p{N}]
  };

  std::size_t i = 0;
  while (i < n) {
    const std::size_t j = match_at(i);
    out.push_back(Span{at[i], at[j]});
    i = j;
  }
}

/// The pieces `kind` splits valid UTF-8 `text` into (Split with behavior Isolated).
inline std::vector<std::string_view> regex_split(SplitRegex kind, std::string_view text) {
  std::vector<Span> spans;
  regex_find_all(kind, text, spans);
  std::vector<std::string_view> out;
  out.reserve(spans.size());
  for (const Span& s : spans) out.push_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

/// HF's SplitDelimiterBehavior.
enum class SplitBehavior : std::uint8_t {
  removed,
  isolated,
  merged_with_previous,
  merged_with_next,
  contiguous
};

/// Cuts [0, size) at `matches` (sorted, disjoint, non-empty) and applies `behavior` as
/// NormalizedString::split does (with `invert`, matches and gaps swap roles). Appends the
/// non-empty pieces to `out`.
inline void split_by_matches(std::size_t size, const std::vector<Span>& matches,
                             SplitBehavior behavior, bool invert, std::vector<Span>& out) {
  struct Part {
    Span span;
    bool match;
  };
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  std::size_t prev = 0;
  for (const Span& m : matches) {
    if (prev < m.begin) parts.push_back({{prev, m.begin}, invert});
    parts.push_back({m, !invert});
    prev = m.end;
  }
  if (prev < size) parts.push_back({{prev, size}, invert});

  std::vector<Span> pieces;
  pieces.reserve(parts.size());
  switch (behavior) {
    case SplitBehavior::removed:
      for (const Part& p : parts) {
        if (!p.match) pieces.push_back(p.span);
      }
      break;
    case SplitBehavior::isolated:
      for (const Part& p : parts) pieces.push_back(p.span);
      break;
    case SplitBehavior::merged_with_previous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.match && !previous_match && !pieces.empty()) {
          pieces.back().end = p.span.end;
        } else {
          pieces.push_back(p.span);
        }
        previous_match = p.match;
      }
      break;
    }
    case SplitBehavior::merged_with_next: {
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !pieces.empty()) {
          pieces.back().begin = it->span.begin;
        } else {
          pieces.push_back(it->span);
        }
        previous_match = it->match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case SplitBehavior::contiguous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.match == previous_match && !pieces.empty()) {
          pieces.back().end = p.span.end;
        } else {
          pieces.push_back(p.span);
        }
        previous_match = p.match;
      }
      break;
    }
  }
  for (const Span& s : pieces) {
    if (s.end > s.begin) out.push_back(s);
  }
}

/// Non-overlapping occurrences of a non-empty literal, left to right.
inline void find_literal(std::string_view text, std::string_view literal, std::vector<Span>& out) {
  if (literal.empty()) return;
  std::size_t pos = 0;
  while ((pos = text.find(literal, pos)) != std::string_view::npos) {
    out.push_back(Span{pos, pos + literal.size()});
    pos += literal.size();
  }
}

/// `text` with every non-overlapping occurrence of `pattern` (leftmost first) replaced.
inline std::string replace_all(std::string_view text, std::string_view pattern,
                               std::string_view content) {
  if (pattern.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (;;) {
    const std::size_t hit = text.find(pattern, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(content);
    pos = hit + pattern.size();
  }
  out.append(text.substr(pos));
  return out;
}

/// Code point of the character that ends at `end` (valid UTF-8, end > 0).
inline char32_t code_point_before(std::string_view s, std::size_t end) noexcept {
  std::size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  std::size_t n = uni::utf8_sequence_length(s, b);
  if (n == 0) n = 1;
  return uni::decode_at(s, b, n);
}

/// Code point of the character that starts at `begin` (valid UTF-8, begin < size).
inline char32_t code_point_at(std::string_view s, std::size_t begin) noexcept {
  std::size_t n = uni::utf8_sequence_length(s, begin);
  if (n == 0) n = 1;
  return uni::decode_at(s, begin, n);
}

/// Start of the run of White_Space characters that ends at `end`.
inline std::size_t whitespace_run_before(std::string_view s, std::size_t end) noexcept {
  while (end > 0) {
    std::size_t b = end - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    if (!uni::is_space(code_point_at(s, b))) break;
    end = b;
  }
  return end;
}

/// End of the run of White_Space characters that starts at `begin`.
inline std::size_t whitespace_run_after(std::string_view s, std::size_t begin) noexcept {
  while (begin < s.size()) {
    std::size_t n = uni::utf8_sequence_length(s, begin);
    if (n == 0) n = 1;
    if (!uni::is_space(uni::decode_at(s, begin, n))) break;
    begin += n;
  }
  return begin;
}

// --- added tokens --------------------------------------------------------------------------------

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

// --- pipeline components -------------------------------------------------------------------------

struct NormalizerStep {
  enum class Kind : std::uint8_t { nfc, nfd, prepend, replace, strip };
  Kind kind = Kind::nfc;
  std::string pattern;  ///< replace: the literal; prepend: the prefix
  std::string content;  ///< replace: the replacement
  bool left = false;    ///< strip
  bool right = false;   ///< strip
};

enum class PrependScheme : std::uint8_t { always, first, never };

struct PreTokenizerStep {
  enum class Kind : std::uint8_t { split, byte_level, metaspace };
  Kind kind = Kind::split;
  // split
  std::optional<SplitRegex> regex;  ///< unset: split on `literal`
  std::string literal;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  // byte_level
  bool add_prefix_space = false;
  bool use_regex = true;
  // metaspace
  std::string replacement;  ///< one character, UTF-8
  PrependScheme prepend = PrependScheme::always;
  bool split = true;
};

struct DecoderStep {
  enum class Kind : std::uint8_t { byte_level, byte_fallback, fuse, strip, replace, metaspace };
  Kind kind = Kind::fuse;
  std::string pattern;     ///< replace: the literal; metaspace: the replacement character
  std::string content;     ///< replace: the replacement; strip: the character to strip
  std::size_t start = 0;   ///< strip: at most this many leading `content` characters
  std::size_t stop = 0;    ///< strip: at most this many trailing `content` characters
  bool drop_first = true;  ///< metaspace: in the first token the replacement is dropped
  /// This step sees one token that grows as the stream goes on (an earlier Fuse or ByteLevel
  /// concatenated everything); set at load time.
  bool fused_input = false;
};

/// `<0xAB>` -> 0xAB, as HF's ByteFallback decoder reads it (6 bytes, hex digits of either case).
inline std::optional<unsigned char> parse_byte_token(std::string_view t) noexcept {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') {
    return std::nullopt;
  }
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

/// HF's Strip decoder on one token: remove up to `start` leading and `stop` trailing copies of
/// the character `ch` (the trailing ones never reach into the stripped leading part).
inline std::string strip_token(std::string_view token, std::string_view ch, std::size_t start,
                               std::size_t stop) {
  if (ch.empty()) return std::string(token);
  std::size_t b = 0;
  for (std::size_t k = 0; k < start && token.substr(b).starts_with(ch); ++k) b += ch.size();
  std::size_t e = token.size();
  for (std::size_t k = 0; k < stop && e - b >= ch.size() && token.substr(0, e).ends_with(ch); ++k) {
    e -= ch.size();
  }
  return std::string(token.substr(b, e - b));
}

/// HF's Metaspace decoder on one token.
inline std::string metaspace_token(std::string_view token, std::string_view replacement,
                                   bool drop) {
  return replace_all(token, replacement, drop ? std::string_view() : std::string_view(" "));
}

// --- the BPE model -------------------------------------------------------------------------------

/// Hash for heterogeneous lookup of std::string keys by std::string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
using StringIdMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

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

/// A piece of text on its way through the pre-tokenizers.
struct Piece {
  std::string text;
  bool at_origin = false;  ///< starts at byte 0 of the caller's text (Metaspace "first")
};

}  // namespace detail::tok

/// Incremental decoding for generation loops: feed one token id at a time and get back the text
/// it completes. Bytes of a character split across tokens are held back until the character is
/// complete, so every returned string is valid UTF-8 and can be printed at once.
///
/// The concatenation of all push() results and the final flush() equals
/// Tokenizer::decode(all ids, skip_special) byte for byte. What is held back: an incomplete UTF-8
/// sequence (byte-level tokenizers); a run of `<0xXX>` byte-fallback tokens until a non-byte
/// token or flush() ends it (HF decodes the run as a whole: U+FFFD per byte if it is not valid
/// UTF-8); trailing characters a Strip decoder might remove; a partial match of a Replace
/// pattern after Fuse.
///
/// Holds a pointer to its Tokenizer, which must stay alive and in place while it is used.
/// Not thread-safe; use one per stream.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  /// Text completed by `id` (often empty while a multi-byte character or a byte-fallback run is
  /// incomplete). Unknown ids, and special tokens when skip_special, produce nothing.
  std::string push(std::int32_t id);

  /// Ends the stream: returns whatever was held back (an incomplete UTF-8 sequence becomes
  /// U+FFFD, as in decode()), and resets the decoder for a new stream.
  std::string flush();

  /// Drops any held-back text and starts a new stream.
  void reset();

 private:
  struct StageState {
    std::size_t index = 0;     // tokens seen so far (token-mode stages)
    std::string held;          // bytes or text held back
    std::size_t stripped = 0;  // Strip on a fused stream: leading characters removed so far
    bool leading_done = false;
  };

  void feed(std::size_t stage, std::string_view piece, std::string& out);
  void finish(std::size_t stage, std::string& out);
  void emit_held_run(std::size_t stage, std::string& out);

  const Tokenizer* tok_;
  bool skip_special_;
  std::size_t tokens_ = 0;  // tokens emitted so far when there is no decoder (space-joined)
  std::vector<StageState> state_;
};

/// A Hugging Face tokenizer.json BPE tokenizer (docs/formats.md §4 describes the format).
/// Immutable after loading: encode/decode are const and may be called from several threads at
/// once. Movable; not copyable (the tables can be large).
///
///
/// Pipeline, as Hugging Face `tokenizers` runs it for one text:
///  1. added tokens with `normalized: false` are cut out of the raw text (leftmost match,
///     longest on ties; `single_word`, `lstrip`, `rstrip` honoured; special ones only when
///     EncodeOptions::parse_special);
///  2. every other stretch is normalized, then added tokens with `normalized: true` are cut out
///     of it (their contents normalized the same way);
///  3. the pre-tokenizers split the remaining stretches into words;
///  4. each word goes through the BPE model;
///  5. the post-processor adds BOS/EOS when EncodeOptions::add_special.
///
/// Supported components (anything else is rejected by Tokenizer::from_json with
/// errc::unsupported and a message naming it):
///  * model: `BPE` with `vocab`, `merges` (["a b", ...] or [["a","b"], ...]), `unk_token`,
///    `fuse_unk`, `byte_fallback`, `continuing_subword_prefix`, `end_of_word_suffix`,
///    `ignore_merges`; `dropout` must be null or 0 (BPE-dropout is random).
///  * normalizer: null, `Sequence`, `NFC`, `NFD` (full canonical algorithms over Unicode 14.0
///    tables; text that is already NFC is returned untouched), `Prepend`, `Replace` with a
///    `String` pattern, `Strip`. Not: NFKC/NFKD, Lowercase, BertNormalizer, Precompiled,
///    regex Replace.
///  * pre_tokenizer: null, `Sequence`, `ByteLevel` (add_prefix_space, use_regex = the GPT-2
///    regex), `Metaspace` (replacement, prepend_scheme always/first/never or the older
///    add_prefix_space, split), `Split` with a `String` pattern or with one of exactly three
///    `Regex` patterns, matched by a hand-written matcher: Qwen2's, Llama-3's (the same with
///    \p{N}{1,3}) and GPT-2's (detail::tok::kQwen2Pattern etc.); all five behaviors and invert.
///    Any other regex is "unsupported pre-tokenizer pattern".
///  * post_processor: null, `ByteLevel` (no effect on ids), `TemplateProcessing` (the `single`
///    template), `Sequence` of those.
///  * decoder: null (tokens joined by spaces, as HF does), `Sequence`, `ByteLevel`,
///    `ByteFallback`, `Fuse`, `Strip`, `Replace` with a `String` pattern, `Metaspace`;
///    ByteLevel and ByteFallback may not follow a Fuse or ByteLevel (no file does that, and
///    it would make streaming impossible).
///  * `truncation` and `padding` are ignored: edgellm encodes one text and the caller owns the
///    context length.
///
/// Known differences from the Rust implementation, all outside what real files exercise:
/// character classes and normalization follow Unicode 14.0 (Rust's crates follow newer
/// versions, so a code point first assigned after 14.0 may classify differently); Metaspace's
/// prepend_scheme "first" prepends to the first word of a stretch that starts the text, where
/// Rust asks whether the word's first character maps to original offset 0 (these differ only
/// when a normalizer inserted characters and a later pre-tokenizer split right after them).
/// Stricter than the Rust loader: a vocabulary that gives one id to two tokens, or lists a
/// token twice, is an error. Added tokens keep the ids the file gives them.
class Tokenizer {
 public:
  /// Loads `path`, a tokenizer.json file or a directory that contains one. Errors: errc::io_error
  /// (unreadable file), errc::format_error (malformed JSON or inconsistent content, e.g. a merge
  /// of tokens missing from the vocabulary), errc::unsupported (a model type or component this
  /// header does not implement, named in the message).
  static result<Tokenizer> load(const std::string& path);

  /// Parses the text of a tokenizer.json; `name` labels error messages.
  static result<Tokenizer> from_json(std::string_view json_text,
                                     std::string_view name = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept = default;
  Tokenizer& operator=(Tokenizer&&) noexcept = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Token ids of `text`, which must be valid UTF-8 (errc::invalid_argument naming the byte
  /// offset otherwise). Equals what HF tokenizers' `encode(text, add_special_tokens).ids` gives
  /// for the supported components. Empty text gives only the template's special tokens.
  /// Cost: linear in the text apart from BPE, which is O(w log w) per pre-token of w characters
  /// (a SentencePiece-style file without pre-tokenizer makes each stretch one pre-token).
  result<std::vector<std::int32_t>> encode(std::string_view text,
                                           const EncodeOptions& options = {}) const;

  /// The text of `ids`, as HF's `decode(ids, skip_special_tokens)`: ids unknown to the tokenizer
  /// are skipped, invalid UTF-8 from byte tokens becomes U+FFFD.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special = false) const;

  /// A streaming decoder for this tokenizer (see StreamDecoder).
  StreamDecoder stream_decoder(bool skip_special = false) const {
    return StreamDecoder(*this, skip_special);
  }

  /// Largest id of the model vocabulary and the added tokens, plus one. (A model's embedding
  /// table may be larger: Qwen2's config.json vocab_size is padded.)
  std::size_t vocab_size() const noexcept { return vocab_size_; }

  /// The id of a token string: an added token's content, else a model vocabulary entry.
  std::optional<std::int32_t> token_to_id(std::string_view token) const;

  /// The string of a token id (an added token's content, else the vocabulary entry, in the
  /// model's spelling, e.g. "Ġthe" or "▁the"); nullopt for an unknown id. The view stays valid
  /// as long as the Tokenizer.
  std::optional<std::string_view> id_to_token(std::int32_t id) const;

  /// BOS / EOS ids: the special tokens the post_processor template puts before / after the text
  /// (Llama-2 `<s>`, Llama-3 `<|begin_of_text|>`), otherwise the first special added token
  /// among well-known spellings (BOS: `<s>`, `<|begin_of_text|>`, `<bos>`, `<|startoftext|>`;
  /// EOS: `</s>`, `<|endoftext|>`, `<|end_of_text|>`, `<eos>`). A hint for callers: the
  /// model's stop ids come from config.json / generation_config.json (model/config.hpp).
  std::optional<std::int32_t> bos_id() const noexcept { return bos_; }
  std::optional<std::int32_t> eos_id() const noexcept { return eos_; }

  /// True for ids that decode(skip_special = true) drops: special added tokens, and vocabulary
  /// entries spelled like one.
  bool is_special(std::int32_t id) const noexcept {
    return id >= 0 && static_cast<std::size_t>(id) < special_.size() &&
           special_[static_cast<std::size_t>(id)] != 0;
  }

  /// The added tokens, in file order.
  std::span<const AddedToken> added_tokens() const noexcept { return added_; }

  /// True when the pre-tokenizer is ByteLevel (GPT-2 / Qwen2 / Llama-3 style).
  bool is_byte_level() const noexcept { return byte_level_; }

  /// The name given to from_json, or the loaded file's path.
  const std::string& name() const noexcept { return name_; }

 private:
  friend class StreamDecoder;
  Tokenizer() = default;

  status parse(const io::json::Value& root);
  status parse_model(const io::json::Value& model);
  status parse_added_tokens(const io::json::Value* v);
  status parse_normalizer(const io::json::Value& v, const std::string& path);
  status parse_pre_tokenizer(const io::json::Value& v, const std::string& path);
  status parse_post_processor(const io::json::Value& v, const std::string& path);
  status parse_decoder(const io::json::Value& v, const std::string& path);
  void finalize();

  error fail(std::string_view path, std::string_view what, errc code = errc::format_error) const {
    std::string m(name_);
    m += ": ";
    m += path;
    m += ": ";
    m += what;
    return make_error(code, "Tokenizer", m);
  }

  std::string normalize(std::string_view text) const;
  /// Cuts `text` at the added tokens of `trie` (HF AddedVocabulary::find_matches); calls
  /// on_text(span) for the stretches between them and on_token(id) for the tokens, in order.
  template <class OnText, class OnToken>
  void split_added(std::string_view text, const detail::tok::TokenTrie& trie, bool parse_special,
                   OnText&& on_text, OnToken&& on_token) const;
  void pre_tokenize(std::vector<detail::tok::Piece>& pieces) const;
  std::optional<std::string_view> token_text(std::int32_t id) const;
  std::vector<std::string> apply_decoders(std::vector<std::string> tokens) const;

  std::string name_;
  detail::tok::BpeModel model_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::int32_t, std::size_t> added_by_id_;
  detail::tok::StringIdMap added_by_content_;
  detail::tok::TokenTrie raw_trie_;         // normalized == false; values index added_
  detail::tok::TokenTrie normalized_trie_;  // normalized == true, on normalized contents
  std::vector<detail::tok::NormalizerStep> normalizers_;
  std::vector<detail::tok::PreTokenizerStep> pre_tokenizers_;
  std::vector<detail::tok::DecoderStep> decoders_;
  bool has_decoder_ = false;
  bool byte_level_ = false;
  std::vector<std::int32_t> template_before_;
  std::vector<std::int32_t> template_after_;
  std::vector<std::uint8_t> special_;
  std::optional<std::int32_t> bos_;
  std::optional<std::int32_t> eos_;
  std::size_t vocab_size_ = 0;
};

// ================================================================================================
// Loading
// ================================================================================================

#define EDGELLM_TOK_TRY(expr)                              \
  do {                                                     \
    if (auto edgellm_tok_st_ = (expr); !edgellm_tok_st_) { \
      return edgellm_tok_st_.error();                      \
    }                                                      \
  } while (0)

namespace detail::tok {

/// "[key]" or ".key" appended to a JSON path.
inline std::string path_key(const std::string& path, std::string_view key) {
  std::string p = path;
  if (!p.empty()) p += '.';
  p += key;
  return p;
}
inline std::string path_index(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

/// Member `key` of an object when present and not null.
inline const io::json::Value* member(const io::json::Value& obj, std::string_view key) {
  const io::json::Value* v = obj.find(key);
  return v != nullptr && !v->is_null() ? v : nullptr;
}

}  // namespace detail::tok

inline result<Tokenizer> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "tokenizer.json").string();
  auto text = io::read_text_file(file);
  if (!text) return text.error();
  return from_json(*text, file);
}

inline result<Tokenizer> Tokenizer::from_json(std::string_view json_text, std::string_view name) {
  // Duplicate vocabulary entries are caught while building the map; skipping the parser's own
  // check halves the parse time of a 150k-entry vocabulary.
  io::json::ParseOptions options;
  options.reject_duplicate_keys = false;
  auto root = io::json::parse(json_text, name, options);
  if (!root) return root.error();
  Tokenizer t;
  t.name_ = std::string(name);
  EDGELLM_TOK_TRY(t.parse(*root));
  t.finalize();
  return t;
}

inline status Tokenizer::parse(const io::json::Value& root) {
  using detail::tok::member;
  if (!root.is_object()) {
    return fail("(top level)", "expected an object, got " + io::json::describe(root));
  }
  const io::json::Value* model = member(root, "model");
  if (model == nullptr) return fail("model", "missing");
  EDGELLM_TOK_TRY(parse_model(*model));
  // Normalizer first: normalized added tokens are matched by their normalized content.
  if (const io::json::Value* v = member(root, "normalizer")) {
    EDGELLM_TOK_TRY(parse_normalizer(*v, "normalizer"));
  }
  EDGELLM_TOK_TRY(parse_added_tokens(member(root, "added_tokens")));
  if (const io::json::Value* v = member(root, "pre_tokenizer")) {
    EDGELLM_TOK_TRY(parse_pre_tokenizer(*v, "pre_tokenizer"));
  }
  if (const io::json::Value* v = member(root, "post_processor")) {
    EDGELLM_TOK_TRY(parse_post_processor(*v, "post_processor"));
  }
  if (const io::json::Value* v = member(root, "decoder")) {
    has_decoder_ = true;
    EDGELLM_TOK_TRY(parse_decoder(*v, "decoder"));
    // ByteLevel and ByteFallback look at whole tokens; after a Fuse or ByteLevel the rest of
    // the chain sees one growing token, which a streaming decoder cannot hand them.
    bool fused = false;
    for (std::size_t i = 0; i < decoders_.size(); ++i) {
      auto& d = decoders_[i];
      using K = detail::tok::DecoderStep::Kind;
      if (fused && (d.kind == K::byte_level || d.kind == K::byte_fallback)) {
        return fail("decoder",
                    std::string(d.kind == K::byte_level ? "ByteLevel" : "ByteFallback") +
                        " after Fuse or ByteLevel is not supported",
                    errc::unsupported);
      }
      d.fused_input = fused;
      if (d.kind == K::fuse || d.kind == K::byte_level) fused = true;
    }
  }
  return {};
}

inline status Tokenizer::parse_model(const io::json::Value& model) {
  using detail::tok::member;
  if (!model.is_object()) {
    return fail("model", "expected an object, got " + io::json::describe(model));
  }
  const io::json::Value* type = member(model, "type");
  if (type != nullptr && !type->is_string()) {
    return fail("model.type", "expected a string, got " + io::json::describe(*type));
  }
  // Files from tokenizers < 0.9 have no "type"; a model with merges is a BPE model.
  const std::string type_name = type ? type->as_string() : (model.find("merges") ? "BPE" : "");
  if (type_name != "BPE") {
    if (type_name.empty()) return fail("model.type", "missing");
    return fail("model.type", "unknown model type '" + type_name + "' (edgellm supports BPE)",
                errc::unsupported);
  }

  // vocab: {token: id}
  const io::json::Value* vocab = member(model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return fail("model.vocab", vocab ? "expected an object, got " + io::json::describe(*vocab)
                                     : std::string("missing"));
  }
  auto& m = model_;
  m.vocab.reserve(vocab->size());
  std::int32_t max_id = -1;
  for (const io::json::Member& e : vocab->as_object()) {
    const auto id = e.value.get_int();
    if (!id || *id < 0 || *id > std::numeric_limits<std::int32_t>::max()) {
      return fail("model.vocab[\"" + e.key + "\"]",
                  "expected an id in [0, 2^31), got " + io::json::describe(e.value));
    }
    const auto id32 = static_cast<std::int32_t>(*id);
    if (!m.vocab.emplace(e.key, id32).second) {
      return fail("model.vocab", "token \"" + e.key + "\" appears twice");
    }
    max_id = std::max(max_id, id32);
  }
  m.id_to_token.assign(static_cast<std::size_t>(max_id + 1), std::string_view());
  m.has_id.assign(static_cast<std::size_t>(max_id + 1), 0);
  for (const auto& [token, id32] : m.vocab) {
    const auto id = static_cast<std::size_t>(id32);
    if (m.has_id[id]) {
      // Report the pair in file order, whatever order the hash map visits them in.
      std::string_view first = m.id_to_token[id], second = token;
      for (const io::json::Member& e : vocab->as_object()) {
        if (e.key == first || e.key == second) {
          if (e.key == second) std::swap(first, second);
          break;
        }
      }
      return fail("model.vocab", "id " + std::to_string(id) + " is used by both \"" +
                                     std::string(first) + "\" and \"" + std::string(second) + "\"");
    }
    m.has_id[id] = 1;
    m.id_to_token[id] = token;
  }

  // Options.
  const auto opt_string = [&](std::string_view key, std::optional<std::string>& out) -> status {
    if (const io::json::Value* v = member(model, key)) {
      if (!v->is_string()) {
        return fail(detail::tok::path_key("model", key),
                    "expected a string or null, got " + io::json::describe(*v));
      }
      out = v->as_string();
    }
    return {};
  };
  const auto opt_bool = [&](std::string_view key, bool& out) -> status {
    if (const io::json::Value* v = member(model, key)) {
      if (!v->is_bool()) {
        return fail(detail::tok::path_key("model", key),
                    "expected a boolean, got " + io::json::describe(*v));
      }
      out = v->as_bool();
    }
    return {};
  };
  std::optional<std::string> prefix, suffix;
  EDGELLM_TOK_TRY(opt_string("unk_token", m.unk_token));
  EDGELLM_TOK_TRY(opt_string("continuing_subword_prefix", prefix));
  EDGELLM_TOK_TRY(opt_string("end_of_word_suffix", suffix));
  EDGELLM_TOK_TRY(opt_bool("fuse_unk", m.fuse_unk));
  EDGELLM_TOK_TRY(opt_bool("byte_fallback", m.byte_fallback));
  EDGELLM_TOK_TRY(opt_bool("ignore_merges", m.ignore_merges));
  m.continuing_subword_prefix = prefix.value_or("");
  m.end_of_word_suffix = suffix.value_or("");
  if (const io::json::Value* d = member(model, "dropout")) {
    const auto p = d->get_double();
    if (!p || !(*p >= 0.0 && *p <= 1.0)) {
      return fail("model.dropout",
                  "expected null or a number in [0, 1], got " + io::json::describe(*d));
    }
    if (*p > 0.0) {
      return fail("model.dropout",
                  "BPE-dropout (" + io::json::describe(*d) +
                      ") is random; edgellm encodes deterministically",
                  errc::unsupported);
    }
  }
  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', '\0'};
    m.byte_token_ids[static_cast<std::size_t>(b)] =
        m.lookup(std::string_view(name, 6)).value_or(-1);
  }

  // merges: ["a b", ...] (tokenizers < 0.20) or [["a", "b"], ...].
  const io::json::Value* merges = model.find("merges");
  if (merges == nullptr || merges->is_null()) {
    return fail("model.merges", "missing (a BPE model needs its merge list)");
  }
  if (!merges->is_array()) {
    return fail("model.merges", "expected an array, got " + io::json::describe(*merges));
  }
  const std::size_t prefix_len = m.continuing_subword_prefix.size();
  m.merges.reserve(merges->size());
  std::string merged;
  std::uint32_t rank = 0;
  for (const io::json::Value& e : merges->as_array()) {
    const std::string path = detail::tok::path_index("model.merges", rank);
    std::string_view a, b;
    if (const std::string* s = e.get_string()) {
      if (s->starts_with("#version")) {
        ++rank;
        continue;
      }
      const std::size_t sp = s->find(' ');
      if (sp == std::string::npos || s->find(' ', sp + 1) != std::string::npos) {
        return fail(path, "expected \"left right\" (two tokens separated by one space), got " +
                              io::json::describe(e));
      }
      a = std::string_view(*s).substr(0, sp);
      b = std::string_view(*s).substr(sp + 1);
    } else if (const io::json::Array* pair = e.get_array(); pair != nullptr && pair->size() == 2 &&
                                                            (*pair)[0].is_string() &&
                                                            (*pair)[1].is_string()) {
      a = (*pair)[0].as_string();
      b = (*pair)[1].as_string();
    } else {
      return fail(path, "expected a string \"left right\" or a pair [\"left\", \"right\"], got " +
                            io::json::describe(e));
    }
    const auto ida = m.lookup(a), idb = m.lookup(b);
    if (!ida || !idb) {
      return fail(path, "token \"" + std::string(!ida ? a : b) + "\" is not in the vocabulary");
    }
    merged.assign(a);
    merged += b.size() >= prefix_len && b.starts_with(m.continuing_subword_prefix)
                  ? b.substr(prefix_len)
                  : b;
    const auto idm = m.lookup(merged);
    if (!idm) return fail(path, "merged token \"" + merged + "\" is not in the vocabulary");
    // A repeated pair keeps its last rank, as HF's map construction does.
    m.merges[detail::tok::pair_key(*ida, *idb)] = detail::tok::MergeValue{rank, *idm};
    ++rank;
  }
  return {};
}

inline status Tokenizer::parse_added_tokens(const io::json::Value* v) {
  if (v == nullptr) return {};
  if (!v->is_array()) {
    return fail("added_tokens", "expected an array, got " + io::json::describe(*v));
  }
  std::size_t i = 0;
  for (const io::json::Value& e : v->as_array()) {
    const std::string path = detail::tok::path_index("added_tokens", i++);
    if (!e.is_object()) return fail(path, "expected an object, got " + io::json::describe(e));
    AddedToken t;
    const io::json::Value* id = e.find("id");
    const auto idv = id ? id->get_int() : std::nullopt;
    if (!idv || *idv < 0 || *idv > std::numeric_limits<std::int32_t>::max()) {
      return fail(path + ".id", id ? "expected an id in [0, 2^31), got " + io::json::describe(*id)
                                   : std::string("missing"));
    }
    t.id = static_cast<std::int32_t>(*idv);
    const io::json::Value* content = e.find("content");
    if (content == nullptr || !content->is_string()) {
      return fail(path + ".content", content
                                         ? "expected a string, got " + io::json::describe(*content)
                                         : std::string("missing"));
    }
    t.content = content->as_string();
    bool have_normalized = false;
    const std::pair<std::string_view, bool*> flags[] = {{"single_word", &t.single_word},
                                                        {"lstrip", &t.lstrip},
                                                        {"rstrip", &t.rstrip},
                                                        {"normalized", &t.normalized},
                                                        {"special", &t.special}};
    for (const auto& [key, field] : flags) {
      const io::json::Value* f = detail::tok::member(e, key);
      if (f == nullptr) continue;
      if (!f->is_bool()) {
        return fail(detail::tok::path_key(path, key),
                    "expected a boolean, got " + io::json::describe(*f));
      }
      *field = f->as_bool();
      if (key == "normalized") have_normalized = true;
    }
    if (!have_normalized) t.normalized = !t.special;  // AddedToken::from's default
    if (t.content.empty()) continue;                  // HF ignores empty added tokens
    added_.push_back(std::move(t));
  }
  // HF builds its matchers from the special tokens first, then the others, each in file order.
  for (const bool special_pass : {true, false}) {
    for (std::size_t k = 0; k < added_.size(); ++k) {
      const auto& t = added_[k];
      if (t.special != special_pass) continue;
      if (t.normalized) {
        normalized_trie_.insert(normalize(t.content), static_cast<std::uint32_t>(k));
      } else {
        raw_trie_.insert(t.content, static_cast<std::uint32_t>(k));
      }
    }
  }
  for (std::size_t k = 0; k < added_.size(); ++k) {
    added_by_id_.emplace(added_[k].id, k);
    added_by_content_.emplace(added_[k].content, added_[k].id);
  }
  return {};
}

inline status Tokenizer::parse_normalizer(const io::json::Value& v, const std::string& path) {
  using detail::tok::member;
  using detail::tok::NormalizerStep;
  if (!v.is_object()) return fail(path, "expected an object, got " + io::json::describe(v));
  const io::json::Value* type = member(v, "type");
  if (type == nullptr || !type->is_string()) return fail(path + ".type", "missing or not a string");
  const std::string& t = type->as_string();
  if (t == "Sequence") {
    const io::json::Value* list = member(v, "normalizers");
    if (list == nullptr || !list->is_array()) {
      return fail(path + ".normalizers", "expected an array");
    }
    std::size_t i = 0;
    for (const io::json::Value& e : list->as_array()) {
      EDGELLM_TOK_TRY(parse_normalizer(e, detail::tok::path_index(path + ".normalizers", i++)));
    }
    return {};
  }
  NormalizerStep step;
  if (t == "NFC") {
    step.kind = NormalizerStep::Kind::nfc;
  } else if (t == "NFD") {
    step.kind = NormalizerStep::Kind::nfd;
  } else if (t == "Prepend") {
    const io::json::Value* p = member(v, "prepend");
    if (p == nullptr || !p->is_string()) return fail(path + ".prepend", "expected a string");
    step.kind = NormalizerStep::Kind::prepend;
    step.pattern = p->as_string();
  } else if (t == "Replace") {
    const io::json::Value* pattern = member(v, "pattern");
    const io::json::Value* content = member(v, "content");
    const io::json::Value* literal = pattern ? member(*pattern, "String") : nullptr;
    if (pattern != nullptr && member(*pattern, "Regex") != nullptr) {
      return fail(path + ".pattern", "a Regex pattern in the Replace normalizer is not supported",
                  errc::unsupported);
    }
    if (literal == nullptr || !literal->is_string()) {
      return fail(path + ".pattern", "expected {\"String\": ...}");
    }
    if (content == nullptr || !content->is_string()) {
      return fail(path + ".content", "expected a string");
    }
    step.kind = NormalizerStep::Kind::replace;
    step.pattern = literal->as_string();
    step.content = content->as_string();
  } else if (t == "Strip") {
    step.kind = NormalizerStep::Kind::strip;
    const std::pair<std::string_view, bool*> sides[] = {{"strip_left", &step.left},
                                                        {"strip_right", &step.right}};
    for (const auto& [key, field] : sides) {
      const io::json::Value* f = member(v, key);
      if (f == nullptr || !f->is_bool()) {
        return fail(detail::tok::path_key(path, key), "expected a boolean");
      }
      *field = f->as_bool();
    }
  } else {
    return fail(path + ".type", "normalizer type '" + t + "' is not supported", errc::unsupported);
  }
  normalizers_.push_back(std::move(step));
  return {};
}

namespace detail::tok {

/// prepend_scheme ("always" / "first" / "never"), or the older add_prefix_space flag.
inline std::optional<PrependScheme> read_prepend_scheme(const io::json::Value& v) {
  if (const io::json::Value* s = member(v, "prepend_scheme")) {
    if (!s->is_string()) return std::nullopt;
    if (s->as_string() == "always") return PrependScheme::always;
    if (s->as_string() == "first") return PrependScheme::first;
    if (s->as_string() == "never") return PrependScheme::never;
    return std::nullopt;
  }
  if (const io::json::Value* a = member(v, "add_prefix_space")) {
    if (!a->is_bool()) return std::nullopt;
    return a->as_bool() ? PrependScheme::always : PrependScheme::never;
  }
  return PrependScheme::always;
}

/// The replacement of a Metaspace component: exactly one character.
inline std::optional<std::string> read_replacement(const io::json::Value& v) {
  const io::json::Value* r = member(v, "replacement");
  if (r == nullptr) return std::string("\xE2\x96\x81");  // U+2581 ▁
  if (!r->is_string()) return std::nullopt;
  const std::string& s = r->as_string();
  if (s.empty() || uni::utf8_sequence_length(s, 0) != s.size()) return std::nullopt;
  return s;
}

}  // namespace detail::tok

inline status Tokenizer::parse_pre_tokenizer(const io::json::Value& v, const std::string& path) {
  using detail::tok::member;
  using detail::tok::PreTokenizerStep;
  if (!v.is_object()) return fail(path, "expected an object, got " + io::json::describe(v));
  const io::json::Value* type = member(v, "type");
  if (type == nullptr || !type->is_string()) return fail(path + ".type", "missing or not a string");
  const std::string& t = type->as_string();
  const auto flag = [&](std::string_view key, bool def, bool& out) -> status {
    out = def;
    if (const io::json::Value* f = member(v, key)) {
      if (!f->is_bool()) {
        return fail(detail::tok::path_key(path, key),
                    "expected a boolean, got " + io::json::describe(*f));
      }
      out = f->as_bool();
    }
    return {};
  };
  if (t == "Sequence") {
    const io::json::Value* list = member(v, "pretokenizers");
    if (list == nullptr || !list->is_array()) {
      return fail(path + ".pretokenizers", "expected an array");
    }
    std::size_t i = 0;
    for (const io::json::Value& e : list->as_array()) {
      EDGELLM_TOK_TRY(
          parse_pre_tokenizer(e, detail::tok::path_index(path + ".pretokenizers", i++)));
    }
    return {};
  }
  PreTokenizerStep step;
  if (t == "Split") {
    step.kind = PreTokenizerStep::Kind::split;
    const io::json::Value* pattern = member(v, "pattern");
    if (pattern == nullptr || !pattern->is_object()) {
      return fail(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    if (const io::json::Value* re = member(*pattern, "Regex"); re != nullptr && re->is_string()) {
      step.regex = detail::tok::recognize_split_regex(re->as_string());
      if (!step.regex) {
        return fail(path + ".pattern",
                    "unsupported pre-tokenizer pattern " + io::json::describe(*re) +
                        " (edgellm matches the Qwen2, Llama-3 and GPT-2 regexes only)",
                    errc::unsupported);
      }
    } else if (const io::json::Value* s = member(*pattern, "String");
               s != nullptr && s->is_string()) {
      step.literal = s->as_string();
    } else {
      return fail(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    const io::json::Value* behavior = member(v, "behavior");
    if (behavior == nullptr || !behavior->is_string()) {
      return fail(path + ".behavior", "expected a string");
    }
    const std::string& b = behavior->as_string();
    using B = detail::tok::SplitBehavior;
    if (b == "Removed") {
      step.behavior = B::removed;
    } else if (b == "Isolated") {
      step.behavior = B::isolated;
    } else if (b == "MergedWithPrevious") {
      step.behavior = B::merged_with_previous;
    } else if (b == "MergedWithNext") {
      step.behavior = B::merged_with_next;
    } else if (b == "Contiguous") {
      step.behavior = B::contiguous;
    } else {
      return fail(path + ".behavior", "unknown split behavior '" + b + "'");
    }
    EDGELLM_TOK_TRY(flag("invert", false, step.invert));
  } else if (t == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::byte_level;
    EDGELLM_TOK_TRY(flag("add_prefix_space", true, step.add_prefix_space));
    EDGELLM_TOK_TRY(flag("use_regex", true, step.use_regex));
    byte_level_ = true;
  } else if (t == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::metaspace;
    const auto r = detail::tok::read_replacement(v);
    if (!r) return fail(path + ".replacement", "expected a one-character string");
    step.replacement = *r;
    const auto scheme = detail::tok::read_prepend_scheme(v);
    if (!scheme) {
      return fail(path + ".prepend_scheme", "expected \"always\", \"first\" or \"never\"");
    }
    step.prepend = *scheme;
    EDGELLM_TOK_TRY(flag("split", true, step.split));
  } else {
    return fail(path + ".type", "pre-tokenizer type '" + t + "' is not supported",
                errc::unsupported);
  }
  pre_tokenizers_.push_back(std::move(step));
  return {};
}

inline status Tokenizer::parse_post_processor(const io::json::Value& v, const std::string& path) {
  using detail::tok::member;
  if (!v.is_object()) return fail(path, "expected an object, got " + io::json::describe(v));
  const io::json::Value* type = member(v, "type");
  if (type == nullptr || !type->is_string()) return fail(path + ".type", "missing or not a string");
  const std::string& t = type->as_string();
  if (t == "ByteLevel") return {};  // only trims offsets
  if (t == "Sequence") {
    const io::json::Value* list = member(v, "processors");
    if (list == nullptr || !list->is_array()) {
      return fail(path + ".processors", "expected an array");
    }
    std::size_t i = 0;
    for (const io::json::Value& e : list->as_array()) {
      EDGELLM_TOK_TRY(parse_post_processor(e, detail::tok::path_index(path + ".processors", i++)));
    }
    return {};
  }
  if (t != "TemplateProcessing") {
    return fail(path + ".type", "post-processor type '" + t + "' is not supported",
                errc::unsupported);
  }
  const io::json::Value* single = member(v, "single");
  if (single == nullptr || !single->is_array()) return fail(path + ".single", "expected an array");
  const io::json::Value* specials = member(v, "special_tokens");
  std::vector<std::int32_t> before, after;
  bool seen_sequence = false;
  std::size_t i = 0;
  for (const io::json::Value& piece : single->as_array()) {
    const std::string ppath = detail::tok::path_index(path + ".single", i++);
    if (const io::json::Value* seq = member(piece, "Sequence")) {
      const io::json::Value* id = member(*seq, "id");
      if (id == nullptr || !id->is_string() || id->as_string() != "A") {
        return fail(ppath, "the single-sequence template may only refer to sequence \"A\"");
      }
      if (seen_sequence) return fail(ppath, "sequence \"A\" appears twice");
      seen_sequence = true;
      continue;
    }
    const io::json::Value* sp = member(piece, "SpecialToken");
    const io::json::Value* name = sp ? member(*sp, "id") : nullptr;
    if (name == nullptr || !name->is_string()) {
      return fail(ppath,
                  "expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": {\"id\": \"A\"}}");
    }
    const io::json::Value* entry = specials ? member(*specials, name->as_string()) : nullptr;
    const io::json::Value* ids = entry ? member(*entry, "ids") : nullptr;
    if (ids == nullptr || !ids->is_array()) {
      return fail(path + ".special_tokens",
                  "no ids for special token \"" + name->as_string() + "\"");
    }
    for (const io::json::Value& idv : ids->as_array()) {
      const auto id = idv.get_int();
      if (!id || *id < 0 || *id > std::numeric_limits<std::int32_t>::max()) {
        return fail(path + ".special_tokens",
                    "bad id " + io::json::describe(idv) + " for \"" + name->as_string() + "\"");
      }
      (seen_sequence ? after : before).push_back(static_cast<std::int32_t>(*id));
    }
  }
  if (!seen_sequence) {
    return fail(path + ".single", "the template has no {\"Sequence\": {\"id\": \"A\"}}");
  }
  // Processors of a Sequence apply in order, each wrapping the result of the previous one.
  template_before_.insert(template_before_.begin(), before.begin(), before.end());
  template_after_.insert(template_after_.end(), after.begin(), after.end());
  return {};
}

inline status Tokenizer::parse_decoder(const io::json::Value& v, const std::string& path) {
  using detail::tok::DecoderStep;
  using detail::tok::member;
  if (!v.is_object()) return fail(path, "expected an object, got " + io::json::describe(v));
  const io::json::Value* type = member(v, "type");
  if (type == nullptr || !type->is_string()) return fail(path + ".type", "missing or not a string");
  const std::string& t = type->as_string();
  if (t == "Sequence") {
    const io::json::Value* list = member(v, "decoders");
    if (list == nullptr || !list->is_array()) return fail(path + ".decoders", "expected an array");
    std::size_t i = 0;
    for (const io::json::Value& e : list->as_array()) {
      EDGELLM_TOK_TRY(parse_decoder(e, detail::tok::path_index(path + ".decoders", i++)));
    }
    return {};
  }
  DecoderStep step;
  if (t == "ByteLevel") {
    step.kind = DecoderStep::Kind::byte_level;
  } else if (t == "ByteFallback") {
    step.kind = DecoderStep::Kind::byte_fallback;
  } else if (t == "Fuse") {
    step.kind = DecoderStep::Kind::fuse;
  } else if (t == "Strip") {
    step.kind = DecoderStep::Kind::strip;
    const io::json::Value* c = member(v, "content");
    if (c == nullptr || !c->is_string() || c->as_string().empty() ||
        detail::tok::uni::utf8_sequence_length(c->as_string(), 0) != c->as_string().size()) {
      return fail(path + ".content", "expected a one-character string");
    }
    step.content = c->as_string();
    const std::pair<std::string_view, std::size_t*> counts[] = {{"start", &step.start},
                                                                {"stop", &step.stop}};
    for (const auto& [key, field] : counts) {
      const io::json::Value* f = member(v, key);
      const auto n = f ? f->get_int() : std::nullopt;
      if (!n || *n < 0) {
        return fail(detail::tok::path_key(path, key), "expected a non-negative integer");
      }
      *field = static_cast<std::size_t>(*n);
    }
  } else if (t == "Replace") {
    step.kind = DecoderStep::Kind::replace;
    const io::json::Value* pattern = member(v, "pattern");
    const io::json::Value* content = member(v, "content");
    const io::json::Value* literal = pattern ? member(*pattern, "String") : nullptr;
    if (pattern != nullptr && member(*pattern, "Regex") != nullptr) {
      return fail(path + ".pattern", "a Regex pattern in the Replace decoder is not supported",
                  errc::unsupported);
    }
    if (literal == nullptr || !literal->is_string()) {
      return fail(path + ".pattern", "expected {\"String\": ...}");
    }
    if (content == nullptr || !content->is_string()) {
      return fail(path + ".content", "expected a string");
    }
    step.pattern = literal->as_string();
    step.content = content->as_string();
  } else if (t == "Metaspace") {
    step.kind = DecoderStep::Kind::metaspace;
    const auto r = detail::tok::read_replacement(v);
    if (!r) return fail(path + ".replacement", "expected a one-character string");
    step.pattern = *r;
    const auto scheme = detail::tok::read_prepend_scheme(v);
    if (!scheme) {
      return fail(path + ".prepend_scheme", "expected \"always\", \"first\" or \"never\"");
    }
    step.drop_first = *scheme != detail::tok::PrependScheme::never;
  } else {
    return fail(path + ".type", "decoder type '" + t + "' is not supported", errc::unsupported);
  }
  decoders_.push_back(std::move(step));
  return {};
}

inline void Tokenizer::finalize() {
  std::size_t size = model_.id_to_token.size();
  for (const auto& t : added_) size = std::max(size, static_cast<std::size_t>(t.id) + 1);
  vocab_size_ = size;

  // Special flags by id. HF's decode skips a token whose *string* is a special token's content,
  // so a vocabulary entry spelled like one counts as well.
  special_.assign(size, 0);
  for (const auto& t : added_) {
    if (!t.special) continue;
    special_[static_cast<std::size_t>(t.id)] = 1;
    if (const auto id = model_.lookup(t.content)) special_[static_cast<std::size_t>(*id)] = 1;
  }

  const auto special_named =
      [&](std::initializer_list<std::string_view> names) -> std::optional<std::int32_t> {
    for (const std::string_view n : names) {
      const auto it = added_by_content_.find(n);
      if (it != added_by_content_.end() && is_special(it->second)) return it->second;
    }
    return std::nullopt;
  };
  bos_ = !template_before_.empty()
             ? std::optional<std::int32_t>(template_before_.front())
             : special_named({"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"});
  eos_ = !template_after_.empty()
             ? std::optional<std::int32_t>(template_after_.back())
             : special_named({"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"});
}

// ================================================================================================
// Encoding
// ================================================================================================

inline std::string Tokenizer::normalize(std::string_view text) const {
  using detail::tok::NormalizerStep;
  namespace uni = detail::tok::uni;
  std::string s(text);
  for (const NormalizerStep& n : normalizers_) {
    switch (n.kind) {
      case NormalizerStep::Kind::nfc:
        s = uni::nfc(s);
        break;
      case NormalizerStep::Kind::nfd:
        s = uni::nfd(s);
        break;
      case NormalizerStep::Kind::prepend:
        if (!s.empty()) s.insert(0, n.pattern);
        break;
      case NormalizerStep::Kind::replace:
        s = detail::tok::replace_all(s, n.pattern, n.content);
        break;
      case NormalizerStep::Kind::strip: {
        const std::size_t b = n.left ? detail::tok::whitespace_run_after(s, 0) : 0;
        const std::size_t e =
            n.right ? std::max(b, detail::tok::whitespace_run_before(s, s.size())) : s.size();
        s = s.substr(b, e - b);
        break;
      }
    }
  }
  return s;
}

template <class OnText, class OnToken>
void Tokenizer::split_added(std::string_view text, const detail::tok::TokenTrie& trie,
                            bool parse_special, OnText&& on_text, OnToken&& on_token) const {
  namespace uni = detail::tok::uni;
  std::size_t start_offset = 0;  // end of the last emitted token
  std::size_t pos = 0;           // where the automaton resumes: just after its last match
  while (const auto m = trie.find(text, pos)) {
    pos = m->end;
    const AddedToken& t = added_[m->value];
    if (t.special && !parse_special) continue;
    if (t.single_word) {
      const bool word_before =
          m->begin > 0 && uni::is_word(detail::tok::code_point_before(text, m->begin));
      const bool word_after =
          m->end < text.size() && uni::is_word(detail::tok::code_point_at(text, m->end));
      if (word_before || word_after) continue;
    }
    std::size_t begin = m->begin, end = m->end;
    if (t.lstrip) begin = std::max(detail::tok::whitespace_run_before(text, begin), start_offset);
    if (t.rstrip) end = detail::tok::whitespace_run_after(text, end);
    if (start_offset < begin) on_text(detail::tok::Span{start_offset, begin});
    on_token(t.id);
    start_offset = end;
  }
  if (start_offset < text.size()) on_text(detail::tok::Span{start_offset, text.size()});
}

inline void Tokenizer::pre_tokenize(std::vector<detail::tok::Piece>& pieces) const {
  using detail::tok::Piece;
  using detail::tok::PreTokenizerStep;
  using detail::tok::Span;
  std::vector<Piece> next;
  std::vector<Span> matches, spans;
  const auto emit_spans = [&](const Piece& p, std::string_view text) {
    for (const Span& s : spans) {
      next.push_back(
          Piece{std::string(text.substr(s.begin, s.end - s.begin)), p.at_origin && s.begin == 0});
    }
  };
  for (const PreTokenizerStep& step : pre_tokenizers_) {
    next.clear();
    for (Piece& p : pieces) {
      matches.clear();
      spans.clear();
      switch (step.kind) {
        case PreTokenizerStep::Kind::split:
          if (step.regex) {
            detail::tok::regex_find_all(*step.regex, p.text, matches);
          } else {
            detail::tok::find_literal(p.text, step.literal, matches);
          }
          detail::tok::split_by_matches(p.text.size(), matches, step.behavior, step.invert, spans);
          emit_spans(p, p.text);
          break;
        case PreTokenizerStep::Kind::byte_level: {
          if (step.add_prefix_space && !p.text.starts_with(' ')) p.text.insert(0, 1, ' ');
          if (step.use_regex) {
            detail::tok::regex_find_all(detail::tok::SplitRegex::gpt2, p.text, spans);
          } else {
            spans.push_back(Span{0, p.text.size()});
          }
          for (const Span& s : spans) {
            Piece q;
            q.at_origin = p.at_origin && s.begin == 0;
            detail::tok::append_byte_level(
                q.text, std::string_view(p.text).substr(s.begin, s.end - s.begin));
            next.push_back(std::move(q));
          }
          break;
        }
        case PreTokenizerStep::Kind::metaspace: {
          std::string t = detail::tok::replace_all(p.text, " ", step.replacement);
          const bool prepend = step.prepend == detail::tok::PrependScheme::always ||
                               (step.prepend == detail::tok::PrependScheme::first && p.at_origin);
          if (prepend && !t.starts_with(step.replacement)) t.insert(0, step.replacement);
          if (step.split) {
            detail::tok::find_literal(t, step.replacement, matches);
            detail::tok::split_by_matches(
                t.size(), matches, detail::tok::SplitBehavior::merged_with_next, false, spans);
          } else {
            spans.push_back(Span{0, t.size()});
          }
          emit_spans(p, t);
          break;
        }
      }
    }
    pieces.swap(next);
  }
}

inline result<std::vector<std::int32_t>> Tokenizer::encode(std::string_view text,
                                                           const EncodeOptions& options) const {
  namespace uni = detail::tok::uni;
  if (text.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    return make_error(errc::invalid_argument, "Tokenizer::encode",
                      "text of " + std::to_string(text.size()) + " bytes is longer than 2^31 - 1");
  }
  if (const std::size_t bad = uni::find_invalid_utf8(text); bad != std::string_view::npos) {
    char buf[96];
    std::snprintf(buf, sizeof buf,
                  "text is not valid UTF-8: byte 0x%02X at offset %zu starts no valid sequence",
                  static_cast<unsigned>(static_cast<unsigned char>(text[bad])), bad);
    return make_error(errc::invalid_argument, "Tokenizer::encode", buf);
  }
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + template_before_.size() + template_after_.size() + 4);
  if (options.add_special) ids.assign(template_before_.begin(), template_before_.end());

  // Per-call cache of word -> ids: natural text repeats its words (long ones rarely).
  constexpr std::size_t kMaxCachedWord = 128;
  std::unordered_map<std::string, std::vector<std::int32_t>, detail::tok::StringHash,
                     std::equal_to<>>
      cache;
  std::vector<detail::tok::Piece> pieces;
  std::vector<std::int32_t> word_ids;
  std::optional<error> failure;

  const auto encode_stretch = [&](std::string_view stretch, bool at_origin) {
    if (failure) return;
    pieces.clear();
    pieces.push_back(detail::tok::Piece{std::string(stretch), at_origin});
    pre_tokenize(pieces);
    for (const detail::tok::Piece& p : pieces) {
      if (p.text.empty()) continue;
      if (const auto it = cache.find(std::string_view(p.text)); it != cache.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        continue;
      }
      word_ids.clear();
      if (auto st = model_.encode_word(p.text, word_ids); !st) {
        if (!failure) failure = st.error();
        return;
      }
      ids.insert(ids.end(), word_ids.begin(), word_ids.end());
      if (p.text.size() <= kMaxCachedWord) cache.emplace(p.text, word_ids);
    }
  };

  const auto push_id = [&](std::int32_t id) { ids.push_back(id); };
  split_added(
      text, raw_trie_, options.parse_special,
      [&](detail::tok::Span raw) {
        const std::string normalized = normalize(text.substr(raw.begin, raw.end - raw.begin));
        if (normalized.empty()) return;
        split_added(
            normalized, normalized_trie_, options.parse_special,
            [&](detail::tok::Span s) {
              encode_stretch(std::string_view(normalized).substr(s.begin, s.end - s.begin),
                             raw.begin == 0 && s.begin == 0);
            },
            push_id);
      },
      push_id);
  if (failure) return *failure;
  if (options.add_special) ids.insert(ids.end(), template_after_.begin(), template_after_.end());
  return ids;
}

// ================================================================================================
// Decoding
// ================================================================================================

inline std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = added_by_content_.find(token); it != added_by_content_.end()) {
    return it->second;
  }
  return model_.lookup(token);
}

inline std::optional<std::string_view> Tokenizer::id_to_token(std::int32_t id) const {
  return token_text(id);
}

inline std::optional<std::string_view> Tokenizer::token_text(std::int32_t id) const {
  if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) {
    return std::string_view(added_[it->second].content);
  }
  if (id >= 0 && static_cast<std::size_t>(id) < model_.has_id.size() &&
      model_.has_id[static_cast<std::size_t>(id)] != 0) {
    return model_.id_to_token[static_cast<std::size_t>(id)];
  }
  return std::nullopt;
}

/// The decoder chain over whole token lists, step by step as HF's decode_chain.
inline std::vector<std::string> Tokenizer::apply_decoders(std::vector<std::string> tokens) const {
  using detail::tok::DecoderStep;
  namespace uni = detail::tok::uni;
  for (const DecoderStep& d : decoders_) {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    switch (d.kind) {
      case DecoderStep::Kind::byte_level: {
        std::string bytes;
        for (const std::string& t : tokens) detail::tok::append_byte_level_decoded(bytes, t);
        out.push_back(uni::utf8_lossy(bytes));
        break;
      }
      case DecoderStep::Kind::byte_fallback: {
        std::string run;
        const auto flush_run = [&] {
          if (run.empty()) return;
          if (uni::find_invalid_utf8(run) == std::string_view::npos) {
            out.push_back(run);
          } else {
            for (std::size_t k = 0; k < run.size(); ++k) out.emplace_back(uni::kReplacementUtf8);
          }
          run.clear();
        };
        for (std::string& t : tokens) {
          if (const auto b = detail::tok::parse_byte_token(t)) {
            run += static_cast<char>(*b);
          } else {
            flush_run();
            out.push_back(std::move(t));
          }
        }
        flush_run();
        break;
      }
      case DecoderStep::Kind::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        out.push_back(std::move(all));
        break;
      }
      case DecoderStep::Kind::strip:
        for (const std::string& t : tokens) {
          out.push_back(detail::tok::strip_token(t, d.content, d.start, d.stop));
        }
        break;
      case DecoderStep::Kind::replace:
        for (const std::string& t : tokens) {
          out.push_back(detail::tok::replace_all(t, d.pattern, d.content));
        }
        break;
      case DecoderStep::Kind::metaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          out.push_back(detail::tok::metaspace_token(tokens[i], d.pattern, i == 0 && d.drop_first));
        }
        break;
    }
    tokens = std::move(out);
  }
  return tokens;
}

inline std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const std::int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    if (const auto t = token_text(id)) tokens.emplace_back(*t);
  }
  std::string out;
  if (!has_decoder_) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i != 0) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  for (const std::string& t : apply_decoders(std::move(tokens))) out += t;
  return out;
}

// --- StreamDecoder -------------------------------------------------------------------------------

inline StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tok_(&tokenizer), skip_special_(skip_special), state_(tokenizer.decoders_.size()) {}

inline void StreamDecoder::reset() {
  tokens_ = 0;
  for (StageState& s : state_) s = StageState{};
}

inline std::string StreamDecoder::push(std::int32_t id) {
  std::string out;
  if (skip_special_ && tok_->is_special(id)) return out;
  const auto text = tok_->token_text(id);
  if (!text) return out;
  if (!tok_->has_decoder_) {
    if (tokens_++ != 0) out += ' ';
    out += *text;
    return out;
  }
  feed(0, *text, out);
  return out;
}

inline std::string StreamDecoder::flush() {
  std::string out;
  if (tok_->has_decoder_) finish(0, out);
  reset();
  return out;
}

/// Resolves a pending run of byte-fallback bytes (stage `stage` is a ByteFallback step).
inline void StreamDecoder::emit_held_run(std::size_t stage, std::string& out) {
  namespace uni = detail::tok::uni;
  std::string run = std::move(state_[stage].held);
  state_[stage].held.clear();
  if (run.empty()) return;
  if (uni::find_invalid_utf8(run) == std::string_view::npos) {
    feed(stage + 1, run, out);
  } else {
    for (std::size_t k = 0; k < run.size(); ++k) feed(stage + 1, uni::kReplacementUtf8, out);
  }
}

inline void StreamDecoder::feed(std::size_t stage, std::string_view piece, std::string& out) {
  using detail::tok::DecoderStep;
  namespace uni = detail::tok::uni;
  const auto& steps = tok_->decoders_;
  if (stage == steps.size()) {
    out.append(piece);
    return;
  }
  const DecoderStep& d = steps[stage];
  StageState& st = state_[stage];
  switch (d.kind) {
    case DecoderStep::Kind::byte_level: {  // token mode only (checked at load)
      detail::tok::append_byte_level_decoded(st.held, piece);
      // Hold back a trailing incomplete sequence: the last lead byte within 3 bytes of the end.
      std::size_t keep = 0;
      const std::size_t n = st.held.size();
      for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
        const auto c = static_cast<unsigned char>(st.held[n - back]);
        if (c >= 0xC0) {
          keep = uni::utf8_incomplete_prefix_length(st.held, n - back);
          break;
        }
        if (c < 0x80) break;
      }
      if (keep < n) {
        const std::string text = uni::utf8_lossy(std::string_view(st.held).substr(0, n - keep));
        st.held.erase(0, n - keep);
        feed(stage + 1, text, out);
      }
      return;
    }
    case DecoderStep::Kind::byte_fallback: {  // token mode only
      if (const auto b = detail::tok::parse_byte_token(piece)) {
        st.held += static_cast<char>(*b);
        return;
      }
      emit_held_run(stage, out);
      feed(stage + 1, piece, out);
      return;
    }
    case DecoderStep::Kind::fuse:
      feed(stage + 1, piece, out);
      return;
    case DecoderStep::Kind::replace: {
      if (!d.fused_input) {
        feed(stage + 1, detail::tok::replace_all(piece, d.pattern, d.content), out);
        return;
      }
      // One growing token: replace what is complete, hold back a possible start of a match.
      st.held.append(piece);
      std::string done;
      std::size_t pos = 0;
      const std::string_view h = st.held;
      for (;;) {
        const std::size_t hit = d.pattern.empty() ? std::string_view::npos : h.find(d.pattern, pos);
        if (hit == std::string_view::npos) break;
        done.append(h.substr(pos, hit - pos));
        done.append(d.content);
        pos = hit + d.pattern.size();
      }
      // The longest proper prefix of the pattern that ends the unprocessed text.
      std::size_t keep = 0;
      if (!d.pattern.empty()) {
        for (std::size_t l = std::min(d.pattern.size() - 1, h.size() - pos); l > 0; --l) {
          if (h.substr(h.size() - l) == std::string_view(d.pattern).substr(0, l)) {
            keep = l;
            break;
          }
        }
      }
      done.append(h.substr(pos, h.size() - pos - keep));
      st.held.erase(0, h.size() - keep);
      feed(stage + 1, done, out);
      return;
    }
    case DecoderStep::Kind::metaspace: {
      const bool first = d.fused_input || st.index == 0;
      ++st.index;
      feed(stage + 1, detail::tok::metaspace_token(piece, d.pattern, first && d.drop_first), out);
      return;
    }
    case DecoderStep::Kind::strip: {
      if (!d.fused_input) {
        feed(stage + 1, detail::tok::strip_token(piece, d.content, d.start, d.stop), out);
        return;
      }
      std::string_view p = piece;
      while (!st.leading_done) {
        if (st.stripped == d.start) {
          st.leading_done = true;
        } else if (p.starts_with(d.content)) {
          p.remove_prefix(d.content.size());
          ++st.stripped;
        } else if (!p.empty()) {
          st.leading_done = true;
        } else {
          return;  // nothing left to look at yet
        }
      }
      if (d.stop == 0) {
        feed(stage + 1, p, out);
        return;
      }
      // Hold the trailing run of `content` characters, at most `stop` of them.
      st.held.append(p);
      std::size_t run_begin = st.held.size();
      while (run_begin >= d.content.size() &&
             std::string_view(st.held).substr(run_begin - d.content.size(), d.content.size()) ==
                 d.content) {
        run_begin -= d.content.size();
      }
      const std::size_t run_chars = (st.held.size() - run_begin) / d.content.size();
      const std::size_t keep = std::min(run_chars, d.stop) * d.content.size();
      const std::string ready = st.held.substr(0, st.held.size() - keep);
      st.held.erase(0, st.held.size() - keep);
      feed(stage + 1, ready, out);
      return;
    }
  }
}

inline void StreamDecoder::finish(std::size_t stage, std::string& out) {
  using detail::tok::DecoderStep;
  namespace uni = detail::tok::uni;
  const auto& steps = tok_->decoders_;
  if (stage == steps.size()) return;
  const DecoderStep& d = steps[stage];
  StageState& st = state_[stage];
  switch (d.kind) {
    case DecoderStep::Kind::byte_level:
      if (!st.held.empty()) {
        const std::string text = uni::utf8_lossy(st.held);
        st.held.clear();
        feed(stage + 1, text, out);
      }
      break;
    case DecoderStep::Kind::byte_fallback:
      emit_held_run(stage, out);
      break;
    case DecoderStep::Kind::replace:
      if (d.fused_input && !st.held.empty()) {
        const std::string rest = std::move(st.held);
        st.held.clear();
        feed(stage + 1, rest, out);
      }
      break;
    case DecoderStep::Kind::strip:
      // The held characters are the trailing ones Strip removes (at most `stop`).
      st.held.clear();
      break;
    case DecoderStep::Kind::fuse:
    case DecoderStep::Kind::metaspace:
      break;
  }
  finish(stage + 1, out);
}

#undef EDGELLM_TOK_TRY

}  // namespace edgellm::model
