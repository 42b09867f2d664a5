// SPDX-License-Identifier: Apache-2.0
// The pre-tokenizer stage: Split (a literal or one of the recognised regexes, five behaviors),
// ByteLevel and Metaspace, which cut a normalized stretch of text into the words BPE encodes.
#pragma once

#include "edgellm/model/tokenizer/byte_level.hpp"
#include "edgellm/model/tokenizer/pre_tokenizer_regex.hpp"
#include "edgellm/model/tokenizer/text.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::model::detail::tok {

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

/// A piece of text on its way through the pre-tokenizers.
struct Piece {
  std::string text;
  bool at_origin = false;  ///< starts at byte 0 of the caller's text (Metaspace "first")
};

/// Runs the pre-tokenizer `steps` in order over `pieces` (each step splits every piece), as
/// HF's PreTokenizedString::split does for a Sequence.
inline void pre_tokenize(std::span<const PreTokenizerStep> steps, std::vector<Piece>& pieces) {
  std::vector<Piece> next;
  std::vector<Span> matches, spans;
  const auto emit_spans = [&](const Piece& p, std::string_view text) {
    for (const Span& s : spans) {
      next.push_back(
          Piece{std::string(text.substr(s.begin, s.end - s.begin)), p.at_origin && s.begin == 0});
    }
  };
  for (const PreTokenizerStep& step : steps) {
    next.clear();
    for (Piece& p : pieces) {
      matches.clear();
      spans.clear();
      switch (step.kind) {
        case PreTokenizerStep::Kind::split:
          if (step.regex) {
            regex_find_all(*step.regex, p.text, matches);
          } else {
            find_literal(p.text, step.literal, matches);
          }
          split_by_matches(p.text.size(), matches, step.behavior, step.invert, spans);
          emit_spans(p, p.text);
          break;
        case PreTokenizerStep::Kind::byte_level: {
          if (step.add_prefix_space && !p.text.starts_with(' ')) p.text.insert(0, 1, ' ');
          if (step.use_regex) {
            regex_find_all(SplitRegex::gpt2, p.text, spans);
          } else {
            spans.push_back(Span{0, p.text.size()});
          }
          for (const Span& s : spans) {
            Piece q;
            q.at_origin = p.at_origin && s.begin == 0;
            append_byte_level(q.text, std::string_view(p.text).substr(s.begin, s.end - s.begin));
            next.push_back(std::move(q));
          }
          break;
        }
        case PreTokenizerStep::Kind::metaspace: {
          std::string t = replace_all(p.text, " ", step.replacement);
          const bool prepend = step.prepend == PrependScheme::always ||
                               (step.prepend == PrependScheme::first && p.at_origin);
          if (prepend && !t.starts_with(step.replacement)) t.insert(0, step.replacement);
          if (step.split) {
            find_literal(t, step.replacement, matches);
            split_by_matches(t.size(), matches, SplitBehavior::merged_with_next, false, spans);
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

}  // namespace edgellm::model::detail::tok
