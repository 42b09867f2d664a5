// SPDX-License-Identifier: Apache-2.0
// GBNF grammars (llama.cpp's format, grammars/README.md there) parsed into a flat, read-only form
// that GrammarMatcher (constrain/grammar_matcher.hpp) walks to constrain decoding to a grammar.
// The header to include: the compiled form (Grammar) is constrain/compiled_grammar.hpp's, the
// parser (parse_gbnf, the syntax it reads) constrain/gbnf_parser.hpp's; here choices_grammar,
// the grammar of a list of strings.
#pragma once

#include "edgellm/constrain/compiled_grammar.hpp"
#include "edgellm/constrain/gbnf_parser.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::constrain {

/// A grammar whose sentences are exactly `choices` (each valid UTF-8; an empty string allowed).
/// The choices are merged into a trie of code points with a rule per branching node, so that a
/// matcher holds one stack per branch, however long the list.
inline result<std::shared_ptr<const Grammar>> choices_grammar(
    std::span<const std::string> choices) {
  constexpr std::string_view where = "choices_grammar";
  if (choices.empty()) return make_error(errc::invalid_argument, where, "no choices");
  struct Node {
    std::map<std::string, std::uint32_t> next;  // one code point's UTF-8 -> child
    bool end = false;
  };
  std::vector<Node> trie(1);
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const std::string& c = choices[i];
    std::uint32_t node = 0;
    for (std::size_t p = 0; p < c.size();) {
      const auto b = static_cast<unsigned char>(c[p]);
      const std::size_t len = b < 0x80 ? 1 : b >= 0xC2 && b < 0xE0 ? 2 : b >= 0xE0 && b < 0xF0 ? 3
                              : b >= 0xF0 && b < 0xF5 ? 4 : 0;
      // Check the sequence by parsing it as a one-character literal below; here its length.
      if (len == 0 || p + len > c.size())
        return make_error(errc::invalid_argument, where,
                          "choice " + std::to_string(i) + " is not valid UTF-8");
      const std::string cp = c.substr(p, len);
      p += len;
      const auto it = trie[node].next.find(cp);
      if (it != trie[node].next.end()) {
        node = it->second;
      } else {
        const auto child = static_cast<std::uint32_t>(trie.size());
        trie[node].next.emplace(cp, child);
        trie.emplace_back();
        node = child;
      }
    }
    trie[node].end = true;
  }
  static constexpr char kHex[] = "0123456789ABCDEF";
  const auto escape = [](const std::string& cp, std::string& out) {
    const auto c = static_cast<unsigned char>(cp[0]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += cp;
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += cp;  // the parser checks the UTF-8
    }
  };
  const auto rule_name = [](std::uint32_t node) {
    return node == 0 ? std::string("root") : "choice-" + std::to_string(node);
  };
  // A rule per node reached by a branch; chains of single children become one literal.
  std::string text;
  std::vector<std::uint32_t> todo{0};
  while (!todo.empty()) {
    const std::uint32_t node = todo.back();
    todo.pop_back();
    text += rule_name(node) + " ::=";
    bool first = true;
    if (trie[node].end) {  // the empty alternative first: "| " at a line's end would continue
      text += " ";
      first = false;
    }
    for (const auto& [cp, child] : trie[node].next) {
      text += first ? " \"" : "| \"";
      first = false;
      escape(cp, text);
      std::uint32_t at = child;
      while (!trie[at].end && trie[at].next.size() == 1) {
        escape(trie[at].next.begin()->first, text);
        at = trie[at].next.begin()->second;
      }
      text += "\" ";
      if (!trie[at].next.empty()) {
        text += rule_name(at) + " ";
        todo.push_back(at);
      }
    }
    text += "\n";
  }
  auto g = parse_gbnf(text, where);
  if (!g)
    return make_error(errc::invalid_argument, where,
                      "a choice is not valid UTF-8 (" + g.error().message + ")");
  return g;
}

}  // namespace edgellm::constrain
