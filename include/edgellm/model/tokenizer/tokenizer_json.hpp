// SPDX-License-Identifier: Apache-2.0
// Reading a Hugging Face tokenizer.json (docs/formats.md §4): the model, normalizer, added
// tokens, pre-tokenizer, post-processor template and decoder, checked and turned into the
// pipeline's steps. Anything edgellm does not implement is rejected with errc::unsupported and a
// message naming it; the supported set is listed on Tokenizer (model/tokenizer.hpp).
#pragma once

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/detail/unicode.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/model/tokenizer/added_tokens.hpp"
#include "edgellm/model/tokenizer/bpe.hpp"
#include "edgellm/model/tokenizer/decoder.hpp"
#include "edgellm/model/tokenizer/normalizer.hpp"
#include "edgellm/model/tokenizer/pre_tokenizer.hpp"
#include "edgellm/model/tokenizer/pre_tokenizer_regex.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::model::detail::tok {

/// The largest token id accepted. Ids index dense tables (16 bytes per id for the id -> token
/// view), so 2^24 ids, 64 times the largest vocabulary in use, bound them at 256 MiB; a larger
/// id is a corrupt or lying file, refused before any table is sized.
inline constexpr std::int64_t kMaxTokenId = (std::int64_t{1} << 24) - 1;

/// What a tokenizer.json describes, parsed and checked. The Tokenizer builds its lookups (added
/// token tries, special flags, BOS / EOS) from it.
struct TokenizerSpec {
  BpeModel model;
  std::vector<NormalizerStep> normalizers;
  std::vector<AddedToken> added;  ///< file order; tokens with empty content are dropped, as in HF
  std::vector<PreTokenizerStep> pre_tokenizers;
  DecoderChain decoder;
  std::vector<std::int32_t> template_before;  ///< post-processor ids before the text (e.g. BOS)
  std::vector<std::int32_t> template_after;   ///< post-processor ids after the text (e.g. EOS)
  bool byte_level = false;                    ///< a ByteLevel pre-tokenizer is present
};

#define EDGELLM_TOK_TRY(expr)                              \
  do {                                                     \
    if (auto edgellm_tok_st_ = (expr); !edgellm_tok_st_) { \
      return edgellm_tok_st_.error();                      \
    }                                                      \
  } while (0)

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

/// Fills a TokenizerSpec from a parsed tokenizer.json. Errors are errc::format_error (malformed
/// or inconsistent content) or errc::unsupported, with messages "<name>: <json path>: <what>".
class TokenizerJsonParser {
 public:
  explicit TokenizerJsonParser(std::string_view name) : name_(name) {}

  status parse(const io::json::Value& root);
  TokenizerSpec& spec() noexcept { return spec_; }

 private:
  status parse_model(const io::json::Value& model);
  status parse_added_tokens(const io::json::Value* v);
  // One step of a chain, given its object and its "type" (never "Sequence": parse_chain
  // flattens those).
  using StepParser = status (TokenizerJsonParser::*)(const io::json::Value& v,
                                                      const std::string& path,
                                                      const std::string& type);
  status parse_chain(const io::json::Value& v, const std::string& path,
                     std::string_view sequence_key, StepParser parse_step);
  status parse_normalizer(const io::json::Value& v, const std::string& path,
                          const std::string& t);
  status parse_pre_tokenizer(const io::json::Value& v, const std::string& path,
                             const std::string& t);
  status parse_post_processor(const io::json::Value& v, const std::string& path,
                              const std::string& t);
  status parse_decoder(const io::json::Value& v, const std::string& path, const std::string& t);

  error fail(std::string_view path, std::string_view what, errc code = errc::format_error) const {
    std::string m(name_);
    m += ": ";
    m += path;
    m += ": ";
    m += what;
    return make_error(code, "Tokenizer", m);
  }

  std::string name_;
  TokenizerSpec spec_;
};

inline status TokenizerJsonParser::parse(const io::json::Value& root) {
  if (!root.is_object()) {
    return fail("(top level)", "expected an object, got " + io::json::describe(root));
  }
  const io::json::Value* model = member(root, "model");
  if (model == nullptr) return fail("model", "missing");
  EDGELLM_TOK_TRY(parse_model(*model));
  if (const io::json::Value* v = member(root, "normalizer")) {
    EDGELLM_TOK_TRY(
        parse_chain(*v, "normalizer", "normalizers", &TokenizerJsonParser::parse_normalizer));
  }
  EDGELLM_TOK_TRY(parse_added_tokens(member(root, "added_tokens")));
  if (const io::json::Value* v = member(root, "pre_tokenizer")) {
    EDGELLM_TOK_TRY(parse_chain(*v, "pre_tokenizer", "pretokenizers",
                                &TokenizerJsonParser::parse_pre_tokenizer));
  }
  if (const io::json::Value* v = member(root, "post_processor")) {
    EDGELLM_TOK_TRY(parse_chain(*v, "post_processor", "processors",
                                &TokenizerJsonParser::parse_post_processor));
  }
  if (const io::json::Value* v = member(root, "decoder")) {
    spec_.decoder.present = true;
    EDGELLM_TOK_TRY(parse_chain(*v, "decoder", "decoders", &TokenizerJsonParser::parse_decoder));
    // ByteLevel and ByteFallback look at whole tokens; after a Fuse or ByteLevel the rest of
    // the chain sees one growing token, which a streaming decoder cannot hand them.
    bool fused = false;
    for (std::size_t i = 0; i < spec_.decoder.steps.size(); ++i) {
      auto& d = spec_.decoder.steps[i];
      using K = DecoderStep::Kind;
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

inline status TokenizerJsonParser::parse_model(const io::json::Value& model) {
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
  auto& m = spec_.model;
  m.vocab.reserve(vocab->size());
  std::int32_t max_id = -1;
  for (const io::json::Member& e : vocab->as_object()) {
    const auto id = e.value.get_int();
    if (!id || *id < 0 || *id > kMaxTokenId) {
      return fail("model.vocab[\"" + e.key + "\"]",
                  "expected an id in [0, 2^24), got " + io::json::describe(e.value));
    }
    const auto id32 = static_cast<std::int32_t>(*id);
    if (!m.vocab.emplace(e.key, id32).second) {
      return fail("model.vocab", "token \"" + e.key + "\" appears twice");
    }
    max_id = std::max(max_id, id32);
  }
  const auto ids = static_cast<std::size_t>(max_id + 1);
  EDGELLM_TOK_TRY(edgellm::detail::try_assign(m.id_to_token, ids, std::string_view(), name_,
                                              "model.vocab id table for " + std::to_string(ids) +
                                                  " ids"));
  EDGELLM_TOK_TRY(edgellm::detail::try_assign(m.has_id, ids, 0, name_,
                                              "model.vocab id flags for " + std::to_string(ids) +
                                                  " ids"));
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
        return fail(path_key("model", key),
                    "expected a string or null, got " + io::json::describe(*v));
      }
      out = v->as_string();
    }
    return {};
  };
  const auto opt_bool = [&](std::string_view key, bool& out) -> status {
    if (const io::json::Value* v = member(model, key)) {
      if (!v->is_bool()) {
        return fail(path_key("model", key), "expected a boolean, got " + io::json::describe(*v));
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
    const std::string path = path_index("model.merges", rank);
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
    m.merges[pair_key(*ida, *idb)] = MergeValue{rank, *idm};
    ++rank;
  }
  return {};
}

inline status TokenizerJsonParser::parse_added_tokens(const io::json::Value* v) {
  if (v == nullptr) return {};
  if (!v->is_array()) {
    return fail("added_tokens", "expected an array, got " + io::json::describe(*v));
  }
  std::size_t i = 0;
  for (const io::json::Value& e : v->as_array()) {
    const std::string path = path_index("added_tokens", i++);
    if (!e.is_object()) return fail(path, "expected an object, got " + io::json::describe(e));
    AddedToken t;
    const io::json::Value* id = e.find("id");
    const auto idv = id ? id->get_int() : std::nullopt;
    if (!idv || *idv < 0 || *idv > kMaxTokenId) {
      return fail(path + ".id", id ? "expected an id in [0, 2^24), got " + io::json::describe(*id)
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
      const io::json::Value* f = member(e, key);
      if (f == nullptr) continue;
      if (!f->is_bool()) {
        return fail(path_key(path, key), "expected a boolean, got " + io::json::describe(*f));
      }
      *field = f->as_bool();
      if (key == "normalized") have_normalized = true;
    }
    if (!have_normalized) t.normalized = !t.special;  // AddedToken::from's default
    if (t.content.empty()) continue;                  // HF ignores empty added tokens
    spec_.added.push_back(std::move(t));
  }
  return {};
}

/// A normalizer, pre-tokenizer, post-processor or decoder at `path`: an object with a string
/// "type". A "Sequence" holds its steps in the array `sequence_key`; they are flattened, in
/// order (nested Sequences too), into the steps parse_step parses.
inline status TokenizerJsonParser::parse_chain(const io::json::Value& v, const std::string& path,
                                               std::string_view sequence_key,
                                               StepParser parse_step) {
  if (!v.is_object()) return fail(path, "expected an object, got " + io::json::describe(v));
  const io::json::Value* type = member(v, "type");
  if (type == nullptr || !type->is_string()) return fail(path + ".type", "missing or not a string");
  const std::string& t = type->as_string();
  if (t != "Sequence") return (this->*parse_step)(v, path, t);
  const std::string list_path = path + "." + std::string(sequence_key);
  const io::json::Value* list = member(v, sequence_key);
  if (list == nullptr || !list->is_array()) return fail(list_path, "expected an array");
  std::size_t i = 0;
  for (const io::json::Value& e : list->as_array()) {
    EDGELLM_TOK_TRY(parse_chain(e, path_index(list_path, i++), sequence_key, parse_step));
  }
  return {};
}

inline status TokenizerJsonParser::parse_normalizer(const io::json::Value& v,
                                                    const std::string& path, const std::string& t) {
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
        return fail(path_key(path, key), "expected a boolean");
      }
      *field = f->as_bool();
    }
  } else {
    return fail(path + ".type", "normalizer type '" + t + "' is not supported", errc::unsupported);
  }
  spec_.normalizers.push_back(std::move(step));
  return {};
}

inline status TokenizerJsonParser::parse_pre_tokenizer(const io::json::Value& v,
                                                       const std::string& path,
                                                       const std::string& t) {
  const auto flag = [&](std::string_view key, bool def, bool& out) -> status {
    out = def;
    if (const io::json::Value* f = member(v, key)) {
      if (!f->is_bool()) {
        return fail(path_key(path, key), "expected a boolean, got " + io::json::describe(*f));
      }
      out = f->as_bool();
    }
    return {};
  };
  PreTokenizerStep step;
  if (t == "Split") {
    step.kind = PreTokenizerStep::Kind::split;
    const io::json::Value* pattern = member(v, "pattern");
    if (pattern == nullptr || !pattern->is_object()) {
      return fail(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    if (const io::json::Value* re = member(*pattern, "Regex"); re != nullptr && re->is_string()) {
      step.regex = recognize_split_regex(re->as_string());
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
    using B = SplitBehavior;
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
    spec_.byte_level = true;
  } else if (t == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::metaspace;
    const auto r = read_replacement(v);
    if (!r) return fail(path + ".replacement", "expected a one-character string");
    step.replacement = *r;
    const auto scheme = read_prepend_scheme(v);
    if (!scheme) {
      return fail(path + ".prepend_scheme", "expected \"always\", \"first\" or \"never\"");
    }
    step.prepend = *scheme;
    EDGELLM_TOK_TRY(flag("split", true, step.split));
  } else {
    return fail(path + ".type", "pre-tokenizer type '" + t + "' is not supported",
                errc::unsupported);
  }
  spec_.pre_tokenizers.push_back(std::move(step));
  return {};
}

inline status TokenizerJsonParser::parse_post_processor(const io::json::Value& v,
                                                        const std::string& path,
                                                        const std::string& t) {
  if (t == "ByteLevel") return {};  // only trims offsets
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
    const std::string ppath = path_index(path + ".single", i++);
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
      if (!id || *id < 0 || *id > kMaxTokenId) {
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
  spec_.template_before.insert(spec_.template_before.begin(), before.begin(), before.end());
  spec_.template_after.insert(spec_.template_after.end(), after.begin(), after.end());
  return {};
}

inline status TokenizerJsonParser::parse_decoder(const io::json::Value& v,
                                                 const std::string& path, const std::string& t) {
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
        uni::utf8_sequence_length(c->as_string(), 0) != c->as_string().size()) {
      return fail(path + ".content", "expected a one-character string");
    }
    step.content = c->as_string();
    const std::pair<std::string_view, std::size_t*> counts[] = {{"start", &step.start},
                                                                {"stop", &step.stop}};
    for (const auto& [key, field] : counts) {
      const io::json::Value* f = member(v, key);
      const auto n = f ? f->get_int() : std::nullopt;
      if (!n || *n < 0) {
        return fail(path_key(path, key), "expected a non-negative integer");
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
    const auto r = read_replacement(v);
    if (!r) return fail(path + ".replacement", "expected a one-character string");
    step.pattern = *r;
    const auto scheme = read_prepend_scheme(v);
    if (!scheme) {
      return fail(path + ".prepend_scheme", "expected \"always\", \"first\" or \"never\"");
    }
    step.drop_first = *scheme != PrependScheme::never;
  } else {
    return fail(path + ".type", "decoder type '" + t + "' is not supported", errc::unsupported);
  }
  spec_.decoder.steps.push_back(std::move(step));
  return {};
}

/// Parses the root of a tokenizer.json; `name` labels error messages.
inline result<TokenizerSpec> parse_tokenizer_json(const io::json::Value& root,
                                                  std::string_view name) {
  TokenizerJsonParser parser(name);
  EDGELLM_TOK_TRY(parser.parse(root));
  return std::move(parser.spec());
}

/// Parses the text of a tokenizer.json; `name` labels error messages.
inline result<TokenizerSpec> parse_tokenizer_json(std::string_view json_text,
                                                  std::string_view name) {
  // Duplicate vocabulary entries are caught while building the map; skipping the parser's own
  // check halves the parse time of a 150k-entry vocabulary.
  io::json::ParseOptions options;
  options.reject_duplicate_keys = false;
  auto root = io::json::parse(json_text, name, options);
  if (!root) return root.error();
  return parse_tokenizer_json(*root, name);
}

#undef EDGELLM_TOK_TRY

}  // namespace edgellm::model::detail::tok
