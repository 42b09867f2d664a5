// SPDX-License-Identifier: Apache-2.0
// The decoder stage: token strings back to text through ByteLevel, ByteFallback, Fuse, Strip,
// Replace and Metaspace steps, over a whole token list as HF's decode_chain runs them.
// model/tokenizer/stream_decoder.hpp runs the same chain one token at a time.
#pragma once

#include "edgellm/detail/unicode.hpp"
#include "edgellm/model/tokenizer/byte_level.hpp"
#include "edgellm/model/tokenizer/text.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::model::detail::tok {

/// One decoder of a tokenizer.json `decoder` (a Sequence is flattened into several).
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

/// A tokenizer.json `decoder`, flattened into its steps. `present` is false when the file has
/// none: HF then joins the token strings with spaces.
struct DecoderChain {
  bool present = false;
  std::vector<DecoderStep> steps;

  /// The steps over a whole token list, one after the other as HF's decode_chain.
  std::vector<std::string> apply(std::vector<std::string> tokens) const {
    for (const DecoderStep& d : steps) {
      std::vector<std::string> out;
      out.reserve(tokens.size());
      switch (d.kind) {
        case DecoderStep::Kind::byte_level: {
          std::string bytes;
          for (const std::string& t : tokens) append_byte_level_decoded(bytes, t);
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
            if (const auto b = parse_byte_token(t)) {
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
            out.push_back(strip_token(t, d.content, d.start, d.stop));
          }
          break;
        case DecoderStep::Kind::replace:
          for (const std::string& t : tokens) {
            out.push_back(replace_all(t, d.pattern, d.content));
          }
          break;
        case DecoderStep::Kind::metaspace:
          for (std::size_t i = 0; i < tokens.size(); ++i) {
            out.push_back(metaspace_token(tokens[i], d.pattern, i == 0 && d.drop_first));
          }
          break;
      }
      tokens = std::move(out);
    }
    return tokens;
  }

  /// The raw bytes one token adds in the middle of a text (what a byte-level constraint
  /// matches): ByteLevel maps back to bytes (a UTF-8 character may be split across tokens),
  /// ByteFallback `<0xAB>` is that byte, Replace and Metaspace replace (never as the first
  /// token), a Strip after a Fuse acts only at the start of the whole text and is skipped.
  std::string token_bytes(std::string_view token) const {
    std::string t(token);
    for (const DecoderStep& d : steps) {
      switch (d.kind) {
        case DecoderStep::Kind::byte_level: {
          std::string bytes;
          append_byte_level_decoded(bytes, t);
          t = std::move(bytes);
          break;
        }
        case DecoderStep::Kind::byte_fallback:
          if (const auto b = parse_byte_token(t)) t.assign(1, static_cast<char>(*b));
          break;
        case DecoderStep::Kind::fuse: break;
        case DecoderStep::Kind::strip:
          if (!d.fused_input) t = strip_token(t, d.content, d.start, d.stop);
          break;
        case DecoderStep::Kind::replace: t = replace_all(t, d.pattern, d.content); break;
        case DecoderStep::Kind::metaspace: t = metaspace_token(t, d.pattern, false); break;
      }
    }
    return t;
  }

  /// The text of `tokens`: what apply() gives, concatenated, or the tokens joined by spaces
  /// when there is no decoder.
  std::string decode(std::vector<std::string> tokens) const {
    std::string out;
    if (!present) {
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (i != 0) out += ' ';
        out += tokens[i];
      }
      return out;
    }
    for (const std::string& t : apply(std::move(tokens))) out += t;
    return out;
  }
};

}  // namespace edgellm::model::detail::tok
