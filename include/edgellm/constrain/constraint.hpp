// SPDX-License-Identifier: Apache-2.0
// What an app or a user asks the output to be, compiled once and started for each generation:
// any JSON value, a JSON object (OpenAI's json_object), a JSON Schema, a GBNF grammar, a
// regular expression or a list of choices. The generate tool, the server and the C API all
// come through here. A compiled Constraint is immutable apart from its mask cache (one per
// vocabulary, locked), so a server keeps one per distinct request and shares it between the
// generations that ask for it: each state's mask is walked once.
#pragma once

#include "edgellm/constrain/grammar.hpp"
#include "edgellm/constrain/grammar_matcher.hpp"
#include "edgellm/constrain/json_constraint.hpp"
#include "edgellm/constrain/json_matcher.hpp"
#include "edgellm/constrain/json_schema.hpp"
#include "edgellm/constrain/regex.hpp"
#include "edgellm/constrain/token_constraint.hpp"
#include "edgellm/constrain/token_trie.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::constrain {

enum class ConstraintKind : std::uint8_t {
  json,         ///< any JSON value
  json_object,  ///< a JSON object
  json_schema,  ///< a JSON text valid against `source`, a JSON Schema (json_schema.hpp)
  grammar,      ///< a sentence of `source`, a GBNF grammar (grammar.hpp)
  regex,        ///< a whole match of `source`, a regular expression (regex.hpp)
  choices,      ///< exactly one of `choices`
};

inline const char* to_string(ConstraintKind k) noexcept {
  switch (k) {
    case ConstraintKind::json: return "json";
    case ConstraintKind::json_object: return "json_object";
    case ConstraintKind::json_schema: return "json_schema";
    case ConstraintKind::grammar: return "grammar";
    case ConstraintKind::regex: return "regex";
    case ConstraintKind::choices: return "choices";
  }
  return "constraint";
}

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::json;
  std::string source{};              ///< the schema (JSON text), the GBNF or the pattern
  std::vector<std::string> choices{};  ///< for choices
  JsonSchemaOptions schema{};        ///< for json_schema
};

class Constraint {
 public:
  /// Compiles `spec`; errors name what was wrong in it (a schema keyword and its JSON pointer,
  /// a grammar's line and column, a pattern's offset).
  static result<std::shared_ptr<const Constraint>> compile(const ConstraintSpec& spec) {
    auto c = std::shared_ptr<Constraint>(new Constraint());
    c->kind_ = spec.kind;
    std::string gbnf;
    switch (spec.kind) {
      case ConstraintKind::json:
      case ConstraintKind::json_object:
        c->json_ = JsonMatcher({.object_only = spec.kind == ConstraintKind::json_object});
        return std::shared_ptr<const Constraint>(std::move(c));
      case ConstraintKind::json_schema: {
        auto g = json_schema_to_gbnf(std::string_view(spec.source), spec.schema);
        if (!g) return g.error();
        gbnf = std::move(*g);
        break;
      }
      case ConstraintKind::grammar: gbnf = spec.source; break;
      case ConstraintKind::regex: {
        auto g = regex_grammar(spec.source);
        if (!g) return g.error();
        gbnf = std::move(*g);
        break;
      }
      case ConstraintKind::choices: {
        auto g = choices_grammar(spec.choices);
        if (!g) return g.error();
        c->grammar_.emplace(std::move(*g));
        return std::shared_ptr<const Constraint>(std::move(c));
      }
    }
    auto g = parse_gbnf(gbnf, to_string(spec.kind));
    if (!g) return g.error();
    c->gbnf_ = std::move(gbnf);
    c->grammar_.emplace(std::move(*g));
    return std::shared_ptr<const Constraint>(std::move(c));
  }

  ConstraintKind kind() const noexcept { return kind_; }
  /// The GBNF a schema or pattern compiled to (the grammar itself for `grammar`; empty for the
  /// JSON kinds and choices).
  const std::string& gbnf() const noexcept { return gbnf_; }

  /// A LogitsProcessor for one generation: `trie` the vocabulary, `stop_ids` the ids that end
  /// it (allowed once the document is whole), `prompt_tokens` the prompt's length,
  /// `max_new_tokens` the generation's budget (0: none; else the document is closed within
  /// it, see token_constraint.hpp).
  result<std::unique_ptr<DocumentConstraint>> start(std::shared_ptr<const TokenTrie> trie,
                                                    std::vector<std::int32_t> stop_ids,
                                                    std::size_t prompt_tokens,
                                                    std::size_t max_new_tokens) const {
    if (!trie) return make_error(errc::invalid_argument, "constraint", "no vocabulary");
    if (grammar_) {
      auto masks = masks_for<GrammarMatcher>(trie, grammar_masks_);
      auto c = TokenConstraint<GrammarMatcher>::create(
          std::move(trie), std::move(stop_ids), prompt_tokens, *grammar_,
          {.shared_cache = std::move(masks), .max_new_tokens = max_new_tokens});
      if (!c) return c.error();
      return std::unique_ptr<DocumentConstraint>(std::move(*c));
    }
    auto masks = masks_for<JsonMatcher>(trie, json_masks_);
    auto c = JsonConstraint::create(std::move(trie), std::move(stop_ids), prompt_tokens, json_,
                                    {.shared_cache = std::move(masks),
                                     .max_new_tokens = max_new_tokens});
    if (!c) return c.error();
    return std::unique_ptr<DocumentConstraint>(std::move(*c));
  }

  /// States whose masks a Constraint keeps, per vocabulary.
  static constexpr std::size_t kCachedStates = 1024;

 private:
  Constraint() = default;

  // The mask cache for `trie`: the one kept, or a new one when the vocabulary changed.
  template <class Matcher>
  std::shared_ptr<MaskCache<Matcher>> masks_for(
      const std::shared_ptr<const TokenTrie>& trie,
      std::shared_ptr<MaskCache<Matcher>>& kept) const {
    std::lock_guard lock(mu_);
    if (!kept || kept->trie() != trie.get())
      kept = std::make_shared<MaskCache<Matcher>>(trie, kCachedStates);
    return kept;
  }

  ConstraintKind kind_ = ConstraintKind::json;
  JsonMatcher json_;
  std::optional<GrammarMatcher> grammar_;  // the start state, for the grammar kinds
  std::string gbnf_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<MaskCache<GrammarMatcher>> grammar_masks_;
  mutable std::shared_ptr<MaskCache<JsonMatcher>> json_masks_;
};

}  // namespace edgellm::constrain
