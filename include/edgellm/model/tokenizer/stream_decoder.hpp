// SPDX-License-Identifier: Apache-2.0
// The decoder chain run one token at a time, for streaming generation: each step holds back
// what a later token could still change, so the concatenated output equals what the whole-list
// DecoderChain::decode gives for the same tokens, byte for byte.
#pragma once

#include "edgellm/detail/unicode.hpp"
#include "edgellm/model/tokenizer/byte_level.hpp"
#include "edgellm/model/tokenizer/decoder.hpp"
#include "edgellm/model/tokenizer/text.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::model::detail::tok {

/// Streams token strings through a DecoderChain. What is held back: an incomplete UTF-8
/// sequence (ByteLevel); a run of `<0xXX>` tokens until a non-byte token or flush() ends it
/// (ByteFallback decodes the run as a whole: U+FFFD per byte if it is not valid UTF-8); trailing
/// characters a Strip after Fuse might remove; a partial match of a Replace pattern after Fuse.
/// Every string push() returns is therefore valid UTF-8.
///
/// Holds a pointer to the chain, which must outlive it. Not thread-safe; one per stream.
class DecoderStream {
 public:
  explicit DecoderStream(const DecoderChain& chain) : chain_(&chain), state_(chain.steps.size()) {}

  /// Text completed by the token string `token` (often empty while a character is incomplete).
  std::string push(std::string_view token) {
    std::string out;
    if (!chain_->present) {
      if (tokens_++ != 0) out += ' ';
      out += token;
      return out;
    }
    feed(0, token, out);
    return out;
  }

  /// Ends the stream: returns whatever was held back (an incomplete UTF-8 sequence becomes
  /// U+FFFD) and resets for a new stream.
  std::string flush() {
    std::string out;
    if (chain_->present) finish(0, out);
    reset();
    return out;
  }

  /// Drops any held-back text and starts a new stream.
  void reset() {
    tokens_ = 0;
    for (StageState& s : state_) s = StageState{};
  }

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

  const DecoderChain* chain_;
  std::size_t tokens_ = 0;  // tokens emitted so far when there is no decoder (space-joined)
  std::vector<StageState> state_;
};

/// Resolves a pending run of byte-fallback bytes (stage `stage` is a ByteFallback step).
inline void DecoderStream::emit_held_run(std::size_t stage, std::string& out) {
  std::string run = std::move(state_[stage].held);
  state_[stage].held.clear();
  if (run.empty()) return;
  if (uni::find_invalid_utf8(run) == std::string_view::npos) {
    feed(stage + 1, run, out);
  } else {
    for (std::size_t k = 0; k < run.size(); ++k) feed(stage + 1, uni::kReplacementUtf8, out);
  }
}

inline void DecoderStream::feed(std::size_t stage, std::string_view piece, std::string& out) {
  const auto& steps = chain_->steps;
  if (stage == steps.size()) {
    out.append(piece);
    return;
  }
  const DecoderStep& d = steps[stage];
  StageState& st = state_[stage];
  switch (d.kind) {
    case DecoderStep::Kind::byte_level: {  // token mode only (checked at load)
      append_byte_level_decoded(st.held, piece);
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
      if (const auto b = parse_byte_token(piece)) {
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
        feed(stage + 1, replace_all(piece, d.pattern, d.content), out);
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
      feed(stage + 1, metaspace_token(piece, d.pattern, first && d.drop_first), out);
      return;
    }
    case DecoderStep::Kind::strip: {
      if (!d.fused_input) {
        feed(stage + 1, strip_token(piece, d.content, d.start, d.stop), out);
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

inline void DecoderStream::finish(std::size_t stage, std::string& out) {
  const auto& steps = chain_->steps;
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

}  // namespace edgellm::model::detail::tok
