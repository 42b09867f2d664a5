// SPDX-License-Identifier: Apache-2.0
// Regular expressions to GBNF (llama.cpp's grammar format), so that a model can be held to a
// regex, and so that JSON Schema's `pattern` keyword (constrain/json_schema.hpp) can be compiled.
//
// Supported subset (ECMAScript syntax, no flags):
//   - literals (UTF-8), escapes \d \w \s \D \W \S (ECMAScript meanings: \s includes the Unicode
//     spaces), \n \t \r \f \v \0, \xHH, \uXXXX, and any escaped punctuation (\. \* \\ \/ ...);
//   - classes [...] with ranges, negation [^...] and the escapes above (\b in a class is U+0008);
//   - `.` (any code point but \n, \r, U+2028, U+2029);
//   - groups (...) and (?:...) (both non-capturing here), alternation |;
//   - quantifiers * + ? {m} {m,} {m,n} (counts up to 1000); lazy variants (*? ...) are accepted
//     and treated as greedy, since a grammar has no match preference;
//   - anchors: ^ only at the start and $ only at the end of a top-level alternative.
// Anything else is an errc::unsupported error naming the construct and its byte offset:
// backreferences, lookaround, named groups, \b \B word boundaries, \p{...} properties, \cX, and
// anchors elsewhere. Malformed patterns (unbalanced parentheses, bad ranges) are
// errc::invalid_argument.
//
// Match semantics (RegexOptions::search):
//   - false (regex_grammar): the whole text must match; anchors are accepted and change nothing.
//   - true (JSON Schema `pattern`, which is an unanchored ECMAScript search): an alternative not
//     anchored with ^ gets "any text" in front, one not anchored with $ gets it behind, so the
//     grammar is exactly "a string containing a match". Anchor patterns to keep grammars tight.
//
// RegexOptions::json_string emits the expression for the *inside* of a JSON string literal: a
// character that JSON must escape (", \, U+0000..U+001F) is matched as its escape (\" \\ \n \t
// \r \b \f, else \u00XX in either hex case), every other character only unescaped. So the grammar
// accepts a subset of the JSON spellings of the matching strings (not "\u0041" for "A", nor "\/").
#pragma once

#include "edgellm/detail/utf8.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::constrain {

struct RegexOptions {
  /// Emit for the inside of a JSON string literal (see the file comment).
  bool json_string = false;
  /// ECMAScript search semantics: unanchored sides match any text (see the file comment).
  bool search = false;
};

namespace gbnf {

/// Inclusive code point ranges, sorted and disjoint once normalized.
using CharSet = std::vector<std::pair<char32_t, char32_t>>;

inline constexpr char32_t max_code_point = 0x10FFFF;

inline void normalize(CharSet& s) {
  std::sort(s.begin(), s.end());
  CharSet out;
  for (const auto& r : s) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  s = std::move(out);
}

inline CharSet complement(const CharSet& s) {  // s normalized
  CharSet out;
  char32_t next = 0;
  for (const auto& r : s) {
    if (r.first > next) out.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= max_code_point) out.emplace_back(next, max_code_point);
  return out;
}

inline bool contains(const CharSet& s, char32_t c) {
  for (const auto& r : s) {
    if (c >= r.first && c <= r.second) return true;
  }
  return false;
}

using edgellm::detail::append_utf8;  // (out, code point)

/// A code point as GBNF writes it inside "..." or [...]: letters and digits raw, other ASCII as
/// \xHH, the rest as \uXXXX or \UXXXXXXXX (no quoting rules to get wrong).
inline void append_escaped(std::string& out, char32_t c) {
  static constexpr char hex[] = "0123456789ABCDEF";
  const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (alnum || (c < 0x80 && c >= 0x20 && c != '"' && c != '\\' && c != ']' && c != '-' &&
                c != '^' && c != '[' && c != 0x7F)) {
    out += static_cast<char>(c);
    return;
  }
  int digits = c < 0x80 ? 2 : c < 0x10000 ? 4 : 8;
  out += '\\';
  out += digits == 2 ? 'x' : digits == 4 ? 'u' : 'U';
  for (int i = digits - 1; i >= 0; --i) out += hex[(c >> (4 * i)) & 0xF];
}

/// A GBNF string literal for UTF-8 text.
inline std::string literal(std::string_view utf8) {
  std::string out = "\"";
  for (std::size_t i = 0; i < utf8.size(); ++i) {
    auto b = static_cast<unsigned char>(utf8[i]);
    if (b == '"' || b == '\\') {
      out += '\\';
      out += static_cast<char>(b);
    } else if (b < 0x80) {
      append_escaped(out, b);
    } else {
      out += static_cast<char>(b);  // multi-byte UTF-8 passes through raw
    }
  }
  out += '"';
  return out;
}

/// A GBNF character class for a normalized, non-empty set; negated when that is shorter.
inline std::string char_class(const CharSet& s) {
  CharSet neg = complement(s);
  const bool negate = !neg.empty() && neg.size() < s.size();
  const CharSet& use = negate ? neg : s;
  std::string out = negate ? "[^" : "[";
  for (const auto& r : use) {
    append_escaped(out, r.first);
    if (r.second != r.first) {
      if (r.second != r.first + 1) out += '-';
      append_escaped(out, r.second);
    }
  }
  out += ']';
  return out;
}

/// The JSON spelling of one code point (escaped when JSON requires it), as raw text.
inline std::string json_escape_char(char32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      break;
  }
  std::string out;
  append_utf8(out, c);
  return out;
}

/// GBNF alternatives matching, inside a JSON string, any one code point of `s` (normalized):
/// a class for those JSON leaves unescaped, plus the escape of each one it must escape.
inline std::string json_char_set(const CharSet& s) {
  CharSet plain = s;
  CharSet special{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  normalize(special);
  // plain = s minus special
  CharSet keep = complement(special), inter;
  for (const auto& a : plain) {
    for (const auto& b : keep) {
      char32_t lo = std::max(a.first, b.first), hi = std::min(a.second, b.second);
      if (lo <= hi) inter.emplace_back(lo, hi);
    }
  }
  std::vector<std::string> alts;
  if (!inter.empty()) alts.push_back(char_class(inter));
  for (char32_t c : {U'"', U'\\', U'\n', U'\r', U'\t', U'\b', U'\f'}) {
    if (contains(s, c)) alts.push_back(literal(json_escape_char(c)));
  }
  std::string u;  // other control characters: \u00XX, hex digits in either case
  for (char32_t c = 0; c < 0x20; ++c) {
    if (!contains(s, c) || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f') continue;
    static constexpr char hex[] = "0123456789abcdef";
    char lo = hex[c & 0xF];
    std::string low = (lo >= 'a') ? std::string("[") + lo + static_cast<char>(lo - 32) + "]"
                                  : std::string("\"") + lo + "\"";
    if (!u.empty()) u += " | ";
    u += std::string("\"") + hex[c >> 4] + "\" " + low;
  }
  if (!u.empty()) alts.push_back("\"\\\\u00\" (" + u + ")");
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (std::size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

}  // namespace gbnf

namespace detail {

/// Recursive-descent regex parser that writes GBNF as it goes.
class RegexCompiler {
 public:
  RegexCompiler(std::string_view pattern, const RegexOptions& o) : src_(pattern), opt_(o) {}

  result<std::string> run() {
    std::string out;
    if (!decode()) return fail(errc::invalid_argument, "is not valid UTF-8", 0);
    std::string e = alternation(0);
    if (err_) return *err_;
    if (pos_ < cps_.size()) return fail(errc::invalid_argument, "unbalanced ')'", offset());
    return e;
  }

 private:
  using CharSet = gbnf::CharSet;

  bool decode() {
    for (std::size_t i = 0; i < src_.size();) {
      auto b = static_cast<unsigned char>(src_[i]);
      int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
      if (n == 0 || i + n > src_.size()) return false;
      char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
      for (int k = 1; k < n; ++k) {
        auto cb = static_cast<unsigned char>(src_[i + k]);
        if ((cb & 0xC0) != 0x80) return false;
        c = (c << 6) | (cb & 0x3F);
      }
      cps_.push_back(c);
      offs_.push_back(i);
      i += n;
    }
    offs_.push_back(src_.size());
    return true;
  }

  std::size_t offset() const { return offs_[std::min(pos_, cps_.size())]; }
  bool at_end() const { return pos_ >= cps_.size(); }
  char32_t peek(std::size_t k = 0) const { return pos_ + k < cps_.size() ? cps_[pos_ + k] : 0; }

  error fail(errc code, std::string_view what, std::size_t at) {
    return make_error(
        code, "regex",
        std::string(what) + " at offset " + std::to_string(at) + " in /" + std::string(src_) + "/");
  }
  std::string set_error(errc code, std::string_view what, std::size_t at) {
    if (!err_) err_ = fail(code, what, at);
    return {};
  }

  std::string any_text() const {
    return emit_set(gbnf::complement({})) + "*";  // a class or a parenthesized group
  }

  std::string emit_set(CharSet s) const {
    gbnf::normalize(s);
    return opt_.json_string ? gbnf::json_char_set(s) : gbnf::char_class(s);
  }

  std::string alternation(int depth) {
    std::vector<std::string> alts;
    while (true) {
      std::string branch = sequence(depth);
      if (err_) return {};
      alts.push_back(branch.empty() ? "\"\"" : branch);
      if (peek() != U'|' || at_end()) break;
      ++pos_;
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (std::size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  std::string sequence(int depth) {
    std::vector<std::string> items;
    std::string lit;  // pending run of literal text (raw UTF-8 / JSON spelling)
    bool anchored_start = false, anchored_end = false;
    auto flush = [&] {
      if (!lit.empty()) items.push_back(gbnf::literal(lit));
      lit.clear();
    };
    while (!at_end() && peek() != U'|' && peek() != U')') {
      const std::size_t start = offset();
      if (peek() == U'^') {
        if (depth != 0 || !items.empty() || !lit.empty() || anchored_start) {
          return set_error(errc::unsupported, "anchor ^ other than at the start", start);
        }
        anchored_start = true;
        ++pos_;
        continue;
      }
      if (peek() == U'$') {
        ++pos_;
        if (depth != 0 || !(at_end() || peek() == U'|')) {
          return set_error(errc::unsupported, "anchor $ other than at the end", start);
        }
        anchored_end = true;
        continue;
      }
      std::string atom_text;
      char32_t single = 0;
      bool is_single = false;
      if (!atom(depth, atom_text, single, is_single)) return {};
      auto [quant, has_quant] = quantifier();
      if (err_) return {};
      if (is_single && !has_quant) {
        if (opt_.json_string) {
          lit += gbnf::json_escape_char(single);
        } else {
          gbnf::append_utf8(lit, single);
        }
        continue;
      }
      flush();
      if (is_single) atom_text = emit_set({{single, single}});
      if (has_quant) {
        if (!atomic(atom_text)) atom_text = "(" + atom_text + ")";
        atom_text += quant;
      }
      items.push_back(std::move(atom_text));
    }
    flush();
    if (opt_.search && depth == 0) {
      if (!anchored_start) items.insert(items.begin(), any_text());
      if (!anchored_end) items.push_back(any_text());
    }
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) out += (i ? " " : "") + items[i];
    return out;
  }

  // True when GBNF text `t` is one term (a literal, class or group, maybe quantified): no space
  // or '|' outside quotes, classes and parentheses.
  static bool atomic(const std::string& t) {
    int d = 0;
    bool in_str = false, in_cls = false;
    for (std::size_t i = 0; i < t.size(); ++i) {
      char c = t[i];
      if (c == '\\') {
        ++i;
      } else if (in_str) {
        in_str = c != '"';
      } else if (in_cls) {
        in_cls = c != ']';
      } else if (c == '"') {
        in_str = true;
      } else if (c == '[') {
        in_cls = true;
      } else if (c == '(') {
        ++d;
      } else if (c == ')') {
        --d;
      } else if (d == 0 && (c == ' ' || c == '|')) {
        return false;
      }
    }
    return true;
  }

  // Parses one atom. Single code points come back in `single` so literal runs can merge.
  bool atom(int depth, std::string& out, char32_t& single, bool& is_single) {
    const std::size_t start = offset();
    char32_t c = peek();
    if (c == U'(') {
      ++pos_;
      if (peek() == U'?') {
        if (peek(1) == U':') {
          pos_ += 2;
        } else if (peek(1) == U'=' || peek(1) == U'!') {
          set_error(errc::unsupported, "lookahead (?= / (?!", start);
          return false;
        } else if (peek(1) == U'<' && (peek(2) == U'=' || peek(2) == U'!')) {
          set_error(errc::unsupported, "lookbehind (?<= / (?<!", start);
          return false;
        } else if (peek(1) == U'<') {
          set_error(errc::unsupported, "named group (?<name>", start);
          return false;
        } else {
          set_error(errc::unsupported, "group modifier (?", start);
          return false;
        }
      }
      std::string inner = alternation(depth + 1);
      if (err_) return false;
      if (peek() != U')' || at_end()) {
        set_error(errc::invalid_argument, "unclosed '('", start);
        return false;
      }
      ++pos_;
      out = "(" + inner + ")";
      return true;
    }
    if (c == U'[') return char_class_atom(out);
    if (c == U'.') {
      ++pos_;
      out = emit_set(complement_of({{U'\n', U'\n'}, {U'\r', U'\r'}, {0x2028, 0x2029}}));
      return true;
    }
    if (c == U'*' || c == U'+' || c == U'?') {
      set_error(errc::invalid_argument, "nothing to repeat", start);
      return false;
    }
    if (c == U'{' && quantifier_ahead()) {
      set_error(errc::invalid_argument, "nothing to repeat", start);
      return false;
    }
    if (c == U'\\') {
      CharSet set;
      if (!escape(false, set)) return false;
      if (set.size() == 1 && set[0].first == set[0].second) {
        single = set[0].first;
        is_single = true;
      } else {
        out = emit_set(set);
      }
      return true;
    }
    ++pos_;
    single = c;
    is_single = true;
    return true;
  }

  static CharSet complement_of(CharSet s) {
    gbnf::normalize(s);
    return gbnf::complement(s);
  }

  static CharSet class_d() { return {{U'0', U'9'}}; }
  static CharSet class_w() { return {{U'0', U'9'}, {U'A', U'Z'}, {U'_', U'_'}, {U'a', U'z'}}; }
  static CharSet class_s() {
    return {{U'\t', U'\r'},   {U' ', U' '},     {0xA0, 0xA0},     {0x1680, 0x1680},
            {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
            {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  }

  int hex_digit(char32_t c) const {
    if (c >= U'0' && c <= U'9') return static_cast<int>(c - U'0');
    if (c >= U'a' && c <= U'f') return static_cast<int>(c - U'a' + 10);
    if (c >= U'A' && c <= U'F') return static_cast<int>(c - U'A' + 10);
    return -1;
  }

  // Parses an escape at pos_ ('\\'); adds what it matches to `set`.
  bool escape(bool in_class, CharSet& set) {
    const std::size_t start = offset();
    ++pos_;
    if (at_end()) {
      set_error(errc::invalid_argument, "trailing backslash", start);
      return false;
    }
    char32_t c = peek();
    ++pos_;
    auto add = [&](CharSet s) { set.insert(set.end(), s.begin(), s.end()); };
    auto hex = [&](int n) -> bool {
      char32_t v = 0;
      for (int i = 0; i < n; ++i) {
        int d = hex_digit(peek());
        if (d < 0) return false;
        v = v * 16 + static_cast<char32_t>(d);
        ++pos_;
      }
      set.emplace_back(v, v);
      return true;
    };
    switch (c) {
      case U'd':
        add(class_d());
        return true;
      case U'D':
        add(complement_of(class_d()));
        return true;
      case U'w':
        add(class_w());
        return true;
      case U'W':
        add(complement_of(class_w()));
        return true;
      case U's':
        add(class_s());
        return true;
      case U'S':
        add(complement_of(class_s()));
        return true;
      case U'n':
        set.emplace_back(U'\n', U'\n');
        return true;
      case U't':
        set.emplace_back(U'\t', U'\t');
        return true;
      case U'r':
        set.emplace_back(U'\r', U'\r');
        return true;
      case U'f':
        set.emplace_back(U'\f', U'\f');
        return true;
      case U'v':
        set.emplace_back(U'\v', U'\v');
        return true;
      case U'0':
        set.emplace_back(0, 0);
        return true;
      case U'x':
        if (hex(2)) return true;
        set_error(errc::invalid_argument, "bad \\x escape", start);
        return false;
      case U'u':
        if (hex(4)) return true;
        set_error(errc::invalid_argument, "bad \\u escape (\\uXXXX)", start);
        return false;
      case U'b':
        if (in_class) {
          set.emplace_back(U'\b', U'\b');
          return true;
        }
        set_error(errc::unsupported, "word boundary \\b", start);
        return false;
      case U'B':
        set_error(errc::unsupported, "word boundary \\B", start);
        return false;
      case U'k':
        set_error(errc::unsupported, "named backreference \\k", start);
        return false;
      case U'p':
      case U'P':
        set_error(errc::unsupported, "Unicode property escape \\p", start);
        return false;
      case U'c':
        set_error(errc::unsupported, "control escape \\c", start);
        return false;
      default:
        break;
    }
    if (c >= U'1' && c <= U'9') {
      set_error(errc::unsupported, "backreference \\" + std::string(1, static_cast<char>(c)),
                start);
      return false;
    }
    if ((c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z')) {
      set_error(errc::unsupported, "escape \\" + std::string(1, static_cast<char>(c)), start);
      return false;
    }
    set.emplace_back(c, c);  // escaped punctuation or any other character: itself
    return true;
  }

  bool char_class_atom(std::string& out) {
    const std::size_t start = offset();
    ++pos_;  // '['
    bool negate = false;
    if (peek() == U'^' && !at_end()) {
      negate = true;
      ++pos_;
    }
    CharSet set;
    bool first = true;
    while (true) {
      if (at_end()) {
        set_error(errc::invalid_argument, "unclosed '['", start);
        return false;
      }
      if (peek() == U']' && !first) break;
      first = false;
      // One class atom: a code point, or a multi-character escape (\d ...).
      auto class_atom = [&](CharSet& s, bool& multi) -> bool {
        multi = false;
        if (peek() == U'\\') {
          CharSet e;
          if (!escape(true, e)) return false;
          multi = !(e.size() == 1 && e[0].first == e[0].second);
          s = e;
          return true;
        }
        s = {{peek(), peek()}};
        ++pos_;
        return true;
      };
      const std::size_t atom_at = offset();
      CharSet lo;
      bool lo_multi = false;
      if (!class_atom(lo, lo_multi)) return false;
      if (peek() == U'-' && !at_end() && pos_ + 1 < cps_.size() && peek(1) != U']') {
        ++pos_;
        CharSet hi;
        bool hi_multi = false;
        if (!class_atom(hi, hi_multi)) return false;
        if (lo_multi || hi_multi || lo[0].first > hi[0].first) {
          set_error(errc::invalid_argument, "bad character range", atom_at);
          return false;
        }
        set.emplace_back(lo[0].first, hi[0].first);
        continue;
      }
      set.insert(set.end(), lo.begin(), lo.end());
    }
    ++pos_;  // ']'
    gbnf::normalize(set);
    if (negate) set = gbnf::complement(set);
    if (set.empty()) {
      set_error(errc::unsupported, "empty character class", start);
      return false;
    }
    out = emit_set(set);
    return true;
  }

  // True when a '{' at pos_ starts {m}, {m,} or {m,n}.
  bool quantifier_ahead() const {
    std::size_t p = pos_ + 1;
    std::size_t digits = 0;
    while (p < cps_.size() && cps_[p] >= U'0' && cps_[p] <= U'9') ++p, ++digits;
    if (digits == 0) return false;
    if (p < cps_.size() && cps_[p] == U',') {
      ++p;
      while (p < cps_.size() && cps_[p] >= U'0' && cps_[p] <= U'9') ++p;
    }
    return p < cps_.size() && cps_[p] == U'}';
  }

  std::pair<std::string, bool> quantifier() {
    if (at_end()) return {"", false};
    const std::size_t start = offset();
    std::string q;
    char32_t c = peek();
    if (c == U'*' || c == U'+' || c == U'?') {
      ++pos_;
      q = std::string(1, static_cast<char>(c));
    } else if (c == U'{' && quantifier_ahead()) {
      ++pos_;
      auto number = [&] {
        long v = 0;
        while (peek() >= U'0' && peek() <= U'9' && !at_end()) {
          v = std::min(v * 10 + static_cast<long>(peek() - U'0'), 100000L);
          ++pos_;
        }
        return v;
      };
      long m = number(), n = m;
      bool open = false;
      if (peek() == U',') {
        ++pos_;
        if (peek() == U'}')
          open = true;
        else
          n = number();
      }
      ++pos_;  // '}'
      if (!open && n < m) {
        set_error(errc::invalid_argument, "quantifier {m,n} with n < m", start);
        return {"", false};
      }
      if (m > 1000 || (!open && n > 1000)) {
        set_error(errc::unsupported, "repetition count over 1000", start);
        return {"", false};
      }
      q = "{" + std::to_string(m) + (open ? "," : n == m ? "" : "," + std::to_string(n)) + "}";
    } else {
      return {"", false};
    }
    if (peek() == U'?' && !at_end()) ++pos_;  // lazy: same language
    if (!at_end() && (peek() == U'*' || peek() == U'+' || peek() == U'?' ||
                      (peek() == U'{' && quantifier_ahead()))) {
      set_error(errc::unsupported, "possessive or stacked quantifier", offset());
      return {"", false};
    }
    return {q, true};
  }

  std::string_view src_;
  RegexOptions opt_;
  std::vector<char32_t> cps_;
  std::vector<std::size_t> offs_;
  std::size_t pos_ = 0;
  std::optional<error> err_;
};

}  // namespace detail

/// Compiles `pattern` to one GBNF expression (no helper rules needed) matching exactly the
/// texts the regex matches under `options` (see the file comment for the subset and semantics).
inline result<std::string> regex_to_gbnf(std::string_view pattern,
                                         const RegexOptions& options = {}) {
  detail::RegexCompiler c(pattern, options);
  return c.run();
}

/// A whole GBNF grammar, "root ::= ...", whose sentences are the texts `pattern` matches whole.
inline result<std::string> regex_grammar(std::string_view pattern) {
  auto e = regex_to_gbnf(pattern);
  if (!e) return e.error();
  return "root ::= " + *e + "\n";
}

}  // namespace edgellm::constrain
