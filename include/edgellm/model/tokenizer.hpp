// SPDX-License-Identifier: Apache-2.0
// Hugging Face tokenizer.json BPE tokenizers (byte-level GPT-2 / Qwen2 / Llama-3, and
// SentencePiece-style Llama-2 / Mistral): text to token ids, ids to text, streaming decode.
// The pipeline's stages live under model/tokenizer/: tokenizer_json.hpp reads the file,
// added_tokens.hpp, normalizer.hpp, pre_tokenizer.hpp (with pre_tokenizer_regex.hpp) and
// bpe.hpp encode, decoder.hpp and stream_decoder.hpp decode.
#pragma once

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/detail/guard_exceptions.hpp"
#include "edgellm/detail/unicode.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/model/tokenizer/added_tokens.hpp"
#include "edgellm/model/tokenizer/bpe.hpp"
#include "edgellm/model/tokenizer/decoder.hpp"
#include "edgellm/model/tokenizer/normalizer.hpp"
#include "edgellm/model/tokenizer/pre_tokenizer.hpp"
#include "edgellm/model/tokenizer/stream_decoder.hpp"
#include "edgellm/model/tokenizer/text.hpp"
#include "edgellm/model/tokenizer/tokenizer_json.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
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

class Tokenizer;

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
  std::string flush() { return stream_.flush(); }

  /// Drops any held-back text and starts a new stream.
  void reset() { stream_.reset(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  detail::tok::DecoderStream stream_;
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

  /// The raw bytes token `id` adds to a text it is decoded in the middle of (before any UTF-8
  /// repair: a byte-level token may hold part of a character), for constraints that match
  /// output bytes (constrain/); empty for an unknown id. See DecoderChain::token_bytes.
  std::string token_bytes(std::int32_t id) const {
    const auto text = token_text(id);
    return text ? decoder_.token_bytes(*text) : std::string();
  }

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
  std::span<const AddedToken> added_tokens() const noexcept { return added_.tokens; }

  /// True when the pre-tokenizer is ByteLevel (GPT-2 / Qwen2 / Llama-3 style).
  bool is_byte_level() const noexcept { return byte_level_; }

  /// The name given to from_json, or the loaded file's path.
  const std::string& name() const noexcept { return name_; }

 private:
  friend class StreamDecoder;
  Tokenizer() = default;

  status finalize();
  std::optional<std::string_view> token_text(std::int32_t id) const;

  std::string name_;
  detail::tok::BpeModel model_;
  detail::tok::AddedVocabulary added_;
  std::vector<detail::tok::NormalizerStep> normalizers_;
  std::vector<detail::tok::PreTokenizerStep> pre_tokenizers_;
  detail::tok::DecoderChain decoder_;
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

inline result<Tokenizer> Tokenizer::load(const std::string& path) {
  // The guard: an allocation that fails on a huge or hostile file is an error, not an abort.
  return edgellm::detail::guard_exceptions("Tokenizer::load", [&]() -> result<Tokenizer> {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string file = path;
    if (fs::is_directory(path, ec)) file = (fs::path(path) / "tokenizer.json").string();
    auto text = io::read_text_file(file, io::kMaxTokenizerJsonBytes);
    if (!text) return text.error();
    return from_json(*text, file);
  });
}

inline result<Tokenizer> Tokenizer::from_json(std::string_view json_text, std::string_view name) {
  auto spec = detail::tok::parse_tokenizer_json(json_text, name);
  if (!spec) return spec.error();
  Tokenizer t;
  t.name_ = std::string(name);
  t.model_ = std::move(spec->model);
  t.normalizers_ = std::move(spec->normalizers);
  t.pre_tokenizers_ = std::move(spec->pre_tokenizers);
  t.decoder_ = std::move(spec->decoder);
  t.byte_level_ = spec->byte_level;
  t.template_before_ = std::move(spec->template_before);
  t.template_after_ = std::move(spec->template_after);
  // `normalized` added tokens are matched in normalized text, so by their normalized content.
  t.added_ = detail::tok::AddedVocabulary::build(std::move(spec->added), [&t](std::string_view s) {
    return detail::tok::normalize(t.normalizers_, s);
  });
  if (auto st = t.finalize(); !st) {
    return make_error(st.error().code, "Tokenizer::from_json",
                      std::string(name) + ": " + st.error().message);
  }
  return t;
}

inline status Tokenizer::finalize() {
  std::size_t size = model_.id_to_token.size();
  for (const auto& t : added_.tokens) size = std::max(size, static_cast<std::size_t>(t.id) + 1);
  vocab_size_ = size;

  // Special flags by id. HF's decode skips a token whose *string* is a special token's content,
  // so a vocabulary entry spelled like one counts as well. An added token's id sizes the table:
  // a huge id is an out_of_memory error, not an abort.
  if (auto st = edgellm::detail::try_assign(special_, size, 0, "Tokenizer",
                                            "special-token flags for " + std::to_string(size) +
                                                " ids");
      !st)
    return st;
  for (const auto& t : added_.tokens) {
    if (!t.special) continue;
    special_[static_cast<std::size_t>(t.id)] = 1;
    if (const auto id = model_.lookup(t.content)) special_[static_cast<std::size_t>(*id)] = 1;
  }

  const auto special_named =
      [&](std::initializer_list<std::string_view> names) -> std::optional<std::int32_t> {
    for (const std::string_view n : names) {
      const auto it = added_.by_content.find(n);
      if (it != added_.by_content.end() && is_special(it->second)) return it->second;
    }
    return std::nullopt;
  };
  // The post-processor's template ids are emitted as they are: each must name a token, or
  // encode would hand the model an id that decode and the vocabulary know nothing of.
  for (const auto* ids : {&template_before_, &template_after_}) {
    for (const std::int32_t id : *ids) {
      if (!id_to_token(id)) {
        return make_error(errc::format_error, "post_processor",
                          "template token id " + std::to_string(id) +
                              " is neither in model.vocab nor in added_tokens");
      }
    }
  }
  bos_ = !template_before_.empty()
             ? std::optional<std::int32_t>(template_before_.front())
             : special_named({"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"});
  eos_ = !template_after_.empty()
             ? std::optional<std::int32_t>(template_after_.back())
             : special_named({"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"});
  return {};
}

// ================================================================================================
// Encoding
// ================================================================================================

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
    detail::tok::pre_tokenize(pre_tokenizers_, pieces);
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
  added_.split(
      text, added_.raw_trie, options.parse_special,
      [&](detail::tok::Span raw) {
        const std::string normalized =
            detail::tok::normalize(normalizers_, text.substr(raw.begin, raw.end - raw.begin));
        if (normalized.empty()) return;
        added_.split(
            normalized, added_.normalized_trie, options.parse_special,
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
  if (const auto it = added_.by_content.find(token); it != added_.by_content.end()) {
    return it->second;
  }
  return model_.lookup(token);
}

inline std::optional<std::string_view> Tokenizer::id_to_token(std::int32_t id) const {
  return token_text(id);
}

inline std::optional<std::string_view> Tokenizer::token_text(std::int32_t id) const {
  if (const auto added = added_.content_of(id)) return added;
  if (id >= 0 && static_cast<std::size_t>(id) < model_.has_id.size() &&
      model_.has_id[static_cast<std::size_t>(id)] != 0) {
    return model_.id_to_token[static_cast<std::size_t>(id)];
  }
  return std::nullopt;
}

inline std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const std::int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    if (const auto t = token_text(id)) tokens.emplace_back(*t);
  }
  return decoder_.decode(std::move(tokens));
}

// --- StreamDecoder -------------------------------------------------------------------------------

inline StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tok_(&tokenizer), skip_special_(skip_special), stream_(tokenizer.decoder_) {}

inline std::string StreamDecoder::push(std::int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  const auto text = tok_->token_text(id);
  if (!text) return {};
  return stream_.push(*text);
}

}  // namespace edgellm::model
