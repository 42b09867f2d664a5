// SPDX-License-Identifier: Apache-2.0
// A byte-level recogniser of JSON text (RFC 8259), fed one byte at a time: it says whether the
// bytes so far can still be the beginning of a JSON text and whether they already are a whole
// one. Constrained decoding (constrain/json_constraint.hpp) copies it to try each token's bytes.
//
// The state is a few bytes and a 64-bit stack of the open containers, so a copy is cheap and
// the whole state (all of it decides what may follow) is a key for caching token masks.
// Accepted: what io::json::parse accepts with duplicate keys allowed (strings valid UTF-8 and
// free of control characters, \u escapes with surrogates in pairs, no leading zeros, nesting at
// most kMaxDepth), with at most `max_whitespace` whitespace bytes in a row (a model must not
// loop on blank space). Option `object_only`: the text must be an object, as OpenAI's
// response_format json_object asks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace edgellm::constrain {

class JsonMatcher {
 public:
  static constexpr std::uint8_t kMaxDepth = 64;

  struct Options {
    bool object_only = true;           ///< the top-level value must be an object
    std::uint8_t max_whitespace = 10;  ///< most whitespace bytes in a row
  };

  JsonMatcher() = default;
  explicit JsonMatcher(Options o) : object_only_(o.object_only), max_ws_(o.max_whitespace) {}

  /// Consumes one byte; false (and the state unchanged) when no JSON text continues so.
  bool feed(unsigned char c) {
    JsonMatcher next = *this;
    if (!next.step(c)) return false;
    *this = next;
    return true;
  }

  /// Consumes `bytes`; false (state unchanged) when any of them is refused.
  bool feed(std::string_view bytes) {
    JsonMatcher next = *this;
    for (const char ch : bytes)
      if (!next.step(static_cast<unsigned char>(ch))) return false;
    *this = next;
    return true;
  }

  /// Consumes one byte; false when no JSON text continues so, and the state is then unusable
  /// (for callers that tried on a copy: feed() without the copy back).
  bool advance(unsigned char c) { return step(c); }

  /// Inside a string's body (no escape or UTF-8 character half read): every printable ASCII
  /// byte but '"' and '\\' continues the text from here, whatever came before.
  bool in_string_body() const noexcept { return mode_ == Mode::string; }

  /// The bytes so far are a whole JSON text (and nothing may follow).
  bool done() const noexcept { return mode_ == Mode::done; }
  /// The matcher interface of constrain/token_constraint.hpp: a whole text may end here, and
  /// nothing follows a whole one.
  bool accepting() const noexcept { return done(); }
  bool can_continue() const noexcept { return !done(); }

  /// A short byte string that makes the text whole: the open string, key or number ended, a
  /// member's missing value, the open containers closed. Empty when already whole. Built byte
  /// by byte, trying the closing bytes first, so that it always continues the text.
  std::string completion() const {
    // Tried in this order at each byte: closers, then what a value, key, escape or literal
    // needs ('u' and the hex digits 'D', 'C' finish a surrogate pair; letters a literal).
    static constexpr std::string_view kTry = "}]\":{0\\uDCabcdefghijklmnopqrstvwxyz ";
    std::string out;
    JsonMatcher m = *this;
    for (std::size_t guard = 0; !m.done() && guard < 8 * (kMaxDepth + 16); ++guard) {
      // An open string ends at '"' (its body takes the closers too); a top-level number ends
      // at white space (a digit would go on forever).
      const bool number = m.mode_ == Mode::zero || m.mode_ == Mode::integer ||
                          m.mode_ == Mode::fraction || m.mode_ == Mode::exponent_digits;
      const char first = m.mode_ == Mode::string ? '"' : number && m.depth_ == 0 ? ' ' : '\0';
      bool moved = first != '\0' && m.feed(static_cast<unsigned char>(first));
      if (moved) out.push_back(first);
      if (!moved)
        for (const char ch : kTry)
          if (m.feed(static_cast<unsigned char>(ch))) {
            out.push_back(ch);
            moved = true;
            break;
          }
      const unsigned char continuation = m.lo_;  // inside a UTF-8 character: its lowest
      if (!moved && m.mode_ == Mode::utf8 && m.feed(continuation)) {
        out.push_back(static_cast<char>(continuation));
        moved = true;
      }
      if (!moved) break;
    }
    return out;
  }

  /// Equality of the whole state: equal matchers accept the same continuations.
  bool operator==(const JsonMatcher&) const = default;

  /// A hash of the whole state (for caching what a state allows).
  std::uint64_t hash() const noexcept {
    std::uint64_t h = stack_;
    const auto mix = [&h](std::uint64_t v) {
      h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    };
    mix(static_cast<std::uint64_t>(mode_) | (std::uint64_t{depth_} << 8) |
        (std::uint64_t{aux_} << 16) | (std::uint64_t{aux2_} << 24) | (std::uint64_t{ws_} << 32) |
        (std::uint64_t{in_key_} << 40) | (std::uint64_t{object_only_} << 41) |
        (std::uint64_t{max_ws_} << 48));
    mix(static_cast<std::uint64_t>(after_string_) | (std::uint64_t{lo_} << 8) |
        (std::uint64_t{hi_} << 16) | (std::uint64_t{cont_} << 24));
    return h;
  }

 private:
  enum class Mode : std::uint8_t {
    value,         // a value may start (after ws)
    first_member,  // after '{': a key or '}'
    key,           // after ',' in an object: a key
    colon,         // after a key: ':'
    first_element, // after '[': a value or ']'
    after_value,   // after a value: ',' or the container's close (or the end at depth 0)
    string,        // inside a string
    escape,        // after '\'
    unicode,       // in \uXXXX: aux_ hex digits read, aux2_ what they say so far (see below)
    low_backslash, // after a high surrogate escape: '\' of the low one
    low_u,         // after that '\': 'u'
    utf8,          // inside a multi-byte UTF-8 character: cont_ bytes to come, next in [lo_, hi_]
    minus,         // after '-': a digit
    zero,          // after a leading 0: '.', 'e', or the end of the number
    integer,       // integer digits
    dot,           // after '.': a digit
    fraction,      // fraction digits
    exponent,      // after 'e': sign or digit
    exponent_sign, // after the sign: a digit
    exponent_digits,
    literal,       // inside true/false/null: aux_ = which, aux2_ = bytes matched
    done,
  };

  static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  static int hex(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static constexpr std::string_view kLiterals[3] = {"true", "false", "null"};

  bool top_is_object() const { return depth_ > 0 && ((stack_ >> (depth_ - 1)) & 1) != 0; }

  bool whitespace(unsigned char c) {
    if (!is_ws(c)) return false;
    if (ws_ >= max_ws_) return false;
    ++ws_;
    return true;
  }

  bool open(bool object) {
    if (depth_ >= kMaxDepth) return false;
    if (object)
      stack_ |= std::uint64_t{1} << depth_;
    else
      stack_ &= ~(std::uint64_t{1} << depth_);
    ++depth_;
    mode_ = object ? Mode::first_member : Mode::first_element;
    return true;
  }

  void value_ended() { mode_ = depth_ == 0 ? Mode::done : Mode::after_value; }

  // A value starts with c (mode value, or first_element's non-']' byte).
  bool start_value(unsigned char c) {
    const bool top = depth_ == 0;
    if (top && object_only_ && c != '{') return false;
    switch (c) {
      case '{': return open(true);
      case '[': return open(false);
      case '"': mode_ = Mode::string; in_key_ = false; return true;
      case '-': mode_ = Mode::minus; return true;
      case '0': mode_ = Mode::zero; return true;
      case 't': case 'f': case 'n':
        mode_ = Mode::literal;
        aux_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
        aux2_ = 1;
        return true;
      default:
        if (c >= '1' && c <= '9') {
          mode_ = Mode::integer;
          return true;
        }
        return false;
    }
  }

  // A number ends at a byte that cannot continue it: that byte then follows the value. With
  // object_only a number sits inside the object; a top-level number (object_only off) is done
  // at the first white space after it, never at the end of the input alone.
  bool end_number(unsigned char c) {
    value_ended();
    if (mode_ == Mode::done) return is_ws(c);  // a top-level number ends at white space
    return step(c);
  }

  bool step(unsigned char c) {
    if (!is_ws(c)) ws_ = 0;
    switch (mode_) {
      case Mode::value:
        if (whitespace(c)) return true;
        return start_value(c);
      case Mode::first_element:
        if (whitespace(c)) return true;
        if (c == ']') return close(false);
        return start_value(c);
      case Mode::first_member:
        if (whitespace(c)) return true;
        if (c == '}') return close(true);
        [[fallthrough]];
      case Mode::key:
        if (mode_ == Mode::key && whitespace(c)) return true;
        if (c != '"') return false;
        mode_ = Mode::string;
        in_key_ = true;
        return true;
      case Mode::colon:
        if (whitespace(c)) return true;
        if (c != ':') return false;
        mode_ = Mode::value;
        return true;
      case Mode::after_value:
        if (whitespace(c)) return true;
        if (c == ',') {
          mode_ = top_is_object() ? Mode::key : Mode::value;
          return true;
        }
        if (c == '}' || c == ']') return close(c == '}');
        return false;
      case Mode::string:
        if (c == '"') {
          if (in_key_) {
            mode_ = Mode::colon;
          } else {
            value_ended();
          }
          return true;
        }
        if (c == '\\') {
          mode_ = Mode::escape;
          return true;
        }
        if (c < 0x20) return false;
        if (c < 0x80) return true;
        return utf8_lead(c);
      case Mode::utf8:
        if (c < lo_ || c > hi_) return false;
        lo_ = 0x80;
        hi_ = 0xBF;
        if (--cont_ == 0) mode_ = Mode::string;
        return true;
      case Mode::escape:
        if (c == 'u') {
          mode_ = Mode::unicode;
          aux_ = 0;
          aux2_ = 0;
          after_string_ = 0;
          return true;
        }
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
            c == 't') {
          mode_ = Mode::string;
          return true;
        }
        return false;
      case Mode::low_backslash:
        if (c != '\\') return false;
        mode_ = Mode::low_u;
        return true;
      case Mode::low_u:
        if (c != 'u') return false;
        mode_ = Mode::unicode;
        aux_ = 0;
        aux2_ = 0;
        after_string_ = 1;  // this escape must be a low surrogate
        return true;
      case Mode::unicode: return unicode_digit(c);
      case Mode::minus:
        if (c == '0') {
          mode_ = Mode::zero;
          return true;
        }
        if (c >= '1' && c <= '9') {
          mode_ = Mode::integer;
          return true;
        }
        return false;
      case Mode::integer:
        if (c >= '0' && c <= '9') return true;
        [[fallthrough]];
      case Mode::zero:  // no digit may follow a leading 0
      case Mode::fraction:
        if (mode_ == Mode::fraction && c >= '0' && c <= '9') return true;
        if (c == '.' && mode_ != Mode::fraction) {
          mode_ = Mode::dot;
          return true;
        }
        if (c == 'e' || c == 'E') {
          mode_ = Mode::exponent;
          return true;
        }
        return end_number(c);
      case Mode::dot:
        if (c < '0' || c > '9') return false;
        mode_ = Mode::fraction;
        return true;
      case Mode::exponent:
        if (c == '+' || c == '-') {
          mode_ = Mode::exponent_sign;
          return true;
        }
        [[fallthrough]];
      case Mode::exponent_sign:
        if (c < '0' || c > '9') return false;
        mode_ = Mode::exponent_digits;
        return true;
      case Mode::exponent_digits:
        if (c >= '0' && c <= '9') return true;
        return end_number(c);
      case Mode::literal: {
        const std::string_view word = kLiterals[aux_];
        if (c != static_cast<unsigned char>(word[aux2_])) return false;
        if (++aux2_ == word.size()) value_ended();
        return true;
      }
      case Mode::done: return false;
    }
    return false;
  }

  bool close(bool object) {
    if (depth_ == 0 || top_is_object() != object) return false;
    --depth_;
    value_ended();
    return true;
  }

  // The lead byte of a multi-byte UTF-8 character (RFC 3629: no overlongs, no surrogates,
  // nothing above U+10FFFF): how many continuation bytes follow and the range of the first.
  bool utf8_lead(unsigned char c) {
    lo_ = 0x80;
    hi_ = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      cont_ = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      cont_ = 2;
      if (c == 0xE0) lo_ = 0xA0;
      if (c == 0xED) hi_ = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      cont_ = 3;
      if (c == 0xF0) lo_ = 0x90;
      if (c == 0xF4) hi_ = 0x8F;
    } else {
      return false;
    }
    mode_ = Mode::utf8;
    return true;
  }

  // \uXXXX: the first two hex digits decide the surrogate class. aux2_ keeps the top byte.
  // after_string_ = 1: this escape must be a low surrogate (DC00-DFFF).
  bool unicode_digit(unsigned char c) {
    const int h = hex(c);
    if (h < 0) return false;
    if (aux_ == 0) {
      if (after_string_ == 1 && h != 0xD) return false;
      aux2_ = static_cast<std::uint8_t>(h << 4);
    } else if (aux_ == 1) {
      aux2_ = static_cast<std::uint8_t>(aux2_ | h);
      const bool is_d = (aux2_ >> 4) == 0xD;
      const bool low = is_d && h >= 0xC;
      const bool high = is_d && h >= 0x8 && h <= 0xB;
      if (after_string_ == 1 && !low) return false;  // a high surrogate needs a low one
      if (after_string_ == 0 && low) return false;   // a low surrogate alone
      aux2_ = high ? 1 : 0;                           // now: "this was a high surrogate"
    }
    if (++aux_ < 4) return true;
    if (after_string_ == 0 && aux2_ == 1) {
      mode_ = Mode::low_backslash;
    } else {
      mode_ = Mode::string;
    }
    after_string_ = 0;
    aux_ = 0;
    aux2_ = 0;
    return true;
  }

  std::uint64_t stack_ = 0;  // bit d: the container at depth d is an object
  Mode mode_ = Mode::value;
  std::uint8_t depth_ = 0;
  std::uint8_t aux_ = 0, aux2_ = 0;   // literal / \u escape progress
  std::uint8_t after_string_ = 0;     // \u escape: 1 when it must be a low surrogate
  std::uint8_t lo_ = 0, hi_ = 0, cont_ = 0;  // UTF-8 continuation bytes
  std::uint8_t ws_ = 0;               // whitespace bytes in a row
  bool in_key_ = false;
  bool object_only_ = true;
  std::uint8_t max_ws_ = 10;
};

}  // namespace edgellm::constrain
