// SPDX-License-Identifier: Apache-2.0
// Splits a chat template into text and the tokens of its {{ }} and {% %} tags, applying the
// whitespace rules Hugging Face transformers renders with: trim_blocks (the newline after a
// block or comment tag goes), lstrip_blocks (spaces and tabs before a block or comment tag on
// its own line go), and the `-` / `+` markers ({%- -%} {{- -}} strip all whitespace on that side,
// {%+ keeps it). Comments {# #} vanish. Every token keeps its byte offset for line:column
// messages.
#pragma once

#include "edgellm/detail/utf8.hpp"
#include "edgellm/result.hpp"

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::model::detail::jinja {

/// "line L, column C" (1-based; columns count bytes) of byte `pos` in `src`.
inline std::string line_col(std::string_view src, std::size_t pos) {
  std::size_t line = 1, start = 0;
  for (std::size_t i = 0; i < pos && i < src.size(); ++i) {
    if (src[i] == '\n') {
      ++line;
      start = i + 1;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(pos - start + 1);
}

/// "[chat_template] NAME: line L, column C: MESSAGE" with the given category.
inline error template_error(errc code, std::string_view name, std::string_view src, std::size_t pos,
                            std::string_view message) {
  std::string m = "[chat_template] ";
  m += name;
  m += ": ";
  m += line_col(src, pos);
  m += ": ";
  m += message;
  return error{code, std::move(m)};
}

struct Token {
  enum class Type : std::uint8_t {
    text,         ///< literal template text (after whitespace control)
    var_begin,    ///< {{
    var_end,      ///< }}
    block_begin,  ///< {%
    block_end,    ///< %}
    name,         ///< identifier or keyword
    string,       ///< string literal, escapes decoded
    integer,
    floating,
    op,           ///< operator or punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
    eof,
  };
  Type type = Type::eof;
  std::string text;
  std::size_t pos = 0;
  std::int64_t ival = 0;
  double fval = 0.0;
};

namespace lex {

inline bool is_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
inline bool is_name_start(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
inline bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

inline int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace lex

/// Tokenizes `src`; errors are errc::format_error with line:column.
inline result<std::vector<Token>> tokenize(std::string_view src, std::string_view name) {
  using T = Token::Type;
  std::vector<Token> out;
  std::size_t pos = 0;
  enum class Trim { none, all, newline } trim_next = Trim::none;
  const auto fail = [&](std::size_t at, const std::string& msg) {
    return template_error(errc::format_error, name, src, at, msg);
  };

  while (pos < src.size()) {
    // Next tag opener.
    std::size_t start = pos;
    while (start < src.size()) {
      start = src.find('{', start);
      if (start == std::string_view::npos || start + 1 >= src.size()) {
        start = src.size();
        break;
      }
      const char k = src[start + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++start;
    }
    std::string text(src.substr(pos, start - pos));
    const std::size_t text_pos = pos;
    // Whitespace control from the previous tag's end.
    if (trim_next == Trim::all) {
      std::size_t i = 0;
      while (i < text.size() && lex::is_space(text[i])) ++i;
      text.erase(0, i);
    } else if (trim_next == Trim::newline) {
      if (text.starts_with("\r\n")) text.erase(0, 2);
      else if (text.starts_with("\n")) text.erase(0, 1);
    }
    trim_next = Trim::none;
    if (start < src.size()) {
      const char kind = src[start + 1];
      const char mod = start + 2 < src.size() ? src[start + 2] : '\0';
      if (mod == '-') {
        while (!text.empty() && lex::is_space(text.back())) text.pop_back();
      } else if ((kind == '%' || kind == '#') && mod != '+') {
        // lstrip_blocks: only when the tag starts its line (after spaces and tabs).
        const std::size_t nl = text.rfind('\n');
        const std::size_t tail = nl == std::string::npos ? 0 : nl + 1;
        const bool line_start =
            nl != std::string::npos || text_pos == 0 || src[text_pos - 1] == '\n';
        bool blank = true;
        for (std::size_t i = tail; i < text.size(); ++i)
          if (text[i] != ' ' && text[i] != '\t') blank = false;
        if (line_start && blank) text.erase(tail);
      }
    }
    if (!text.empty()) out.push_back(Token{T::text, std::move(text), text_pos, 0, 0.0});
    if (start >= src.size()) break;

    const char kind = src[start + 1];
    std::size_t p = start + 2;
    if (p < src.size() && (src[p] == '-' || src[p] == '+')) ++p;
    if (kind == '#') {
      const std::size_t end = src.find("#}", p);
      if (end == std::string_view::npos) return fail(start, "unclosed comment: no '#}'");
      if (end > p && src[end - 1] == '-') trim_next = Trim::all;
      else if (!(end > p && src[end - 1] == '+')) trim_next = Trim::newline;
      pos = end + 2;
      continue;
    }
    const bool block = kind == '%';
    out.push_back(Token{block ? T::block_begin : T::var_begin, {}, start, 0, 0.0});
    int depth = 0;  // open ( [ {: a '}}' inside a dict literal does not end the tag
    bool closed = false;
    while (p < src.size()) {
      const char c = src[p];
      if (lex::is_space(c)) {
        ++p;
        continue;
      }
      // Tag end, with its whitespace marker.
      const char closer = block ? '%' : '}';
      if ((c == '-' || c == '+') && p + 2 < src.size() && src[p + 1] == closer && src[p + 2] == '}' &&
          (block || depth == 0)) {
        out.push_back(Token{block ? T::block_end : T::var_end, {}, p, 0, 0.0});
        trim_next = c == '-' ? Trim::all : Trim::none;
        pos = p + 3;
        closed = true;
        break;
      }
      if (c == closer && p + 1 < src.size() && src[p + 1] == '}' && (block || depth == 0)) {
        out.push_back(Token{block ? T::block_end : T::var_end, {}, p, 0, 0.0});
        trim_next = block ? Trim::newline : Trim::none;
        pos = p + 2;
        closed = true;
        break;
      }
      Token t;
      t.pos = p;
      if (lex::is_name_start(c)) {
        std::size_t e = p;
        while (e < src.size() && (lex::is_name_start(src[e]) || lex::is_digit(src[e]))) ++e;
        t.type = T::name;
        t.text = std::string(src.substr(p, e - p));
        p = e;
      } else if (lex::is_digit(c)) {
        std::size_t e = p;
        while (e < src.size() && (lex::is_digit(src[e]) || src[e] == '_')) ++e;
        bool is_float = false;
        if (e + 1 < src.size() && src[e] == '.' && lex::is_digit(src[e + 1])) {
          is_float = true;
          ++e;
          while (e < src.size() && lex::is_digit(src[e])) ++e;
        }
        if (e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
          std::size_t f = e + 1;
          if (f < src.size() && (src[f] == '+' || src[f] == '-')) ++f;
          if (f < src.size() && lex::is_digit(src[f])) {
            is_float = true;
            e = f;
            while (e < src.size() && lex::is_digit(src[e])) ++e;
          }
        }
        std::string digits;
        for (std::size_t i = p; i < e; ++i)
          if (src[i] != '_') digits += src[i];
        t.text = digits;
        if (is_float) {
          t.type = T::floating;
          std::from_chars(digits.data(), digits.data() + digits.size(), t.fval);
        } else {
          t.type = T::integer;
          std::int64_t v = 0;
          for (char d : digits) {
            if (v > (INT64_MAX - (d - '0')) / 10) return fail(p, "integer literal too large");
            v = v * 10 + (d - '0');
          }
          t.ival = v;
        }
        p = e;
      } else if (c == '\'' || c == '"') {
        std::string s;
        std::size_t e = p + 1;
        bool done = false;
        while (e < src.size()) {
          const char d = src[e];
          if (d == c) {
            done = true;
            ++e;
            break;
          }
          if (d != '\\' || e + 1 >= src.size()) {
            s += d;
            ++e;
            continue;
          }
          const char x = src[e + 1];
          e += 2;
          switch (x) {
            case 'n': s += '\n'; break;
            case 't': s += '\t'; break;
            case 'r': s += '\r'; break;
            case 'b': s += '\b'; break;
            case 'f': s += '\f'; break;
            case 'v': s += '\v'; break;
            case 'a': s += '\a'; break;
            case '0': s += '\0'; break;
            case '\\': s += '\\'; break;
            case '\'': s += '\''; break;
            case '"': s += '"'; break;
            case '\n': break;  // line continuation
            case 'x':
            case 'u':
            case 'U': {
              const std::size_t n = x == 'x' ? 2 : x == 'u' ? 4 : 8;
              std::uint32_t cp = 0;
              for (std::size_t i = 0; i < n; ++i) {
                const int h = e + i < src.size() ? lex::hex_value(src[e + i]) : -1;
                if (h < 0) return fail(e - 2, std::string("malformed \\") + x + " escape in a string literal");
                cp = cp * 16 + static_cast<std::uint32_t>(h);
              }
              if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                return fail(e - 2, "string escape names no Unicode scalar value");
              edgellm::detail::append_utf8(s, static_cast<char32_t>(cp));
              e += n;
              break;
            }
            default:  // Python keeps unknown escapes as written
              s += '\\';
              s += x;
          }
        }
        if (!done) return fail(p, "unterminated string literal");
        t.type = T::string;
        t.text = std::move(s);
        p = e;
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        t.type = T::op;
        for (std::string_view two : kTwo) {
          if (src.substr(p, 2) == two) {
            t.text = std::string(two);
            break;
          }
        }
        if (t.text.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
            std::string what = "unexpected character '";
            what += c;
            what += "' in a tag";
            return fail(p, what);
          }
          t.text = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') ++depth;
          if (c == ')' || c == ']' || c == '}') --depth;
        }
        p += t.text.size();
      }
      out.push_back(std::move(t));
    }
    if (!closed) return fail(start, block ? "unclosed block tag: no '%}'" : "unclosed expression tag: no '}}'");
  }
  out.push_back(Token{T::eof, {}, src.size(), 0, 0.0});
  return out;
}

}  // namespace edgellm::model::detail::jinja
