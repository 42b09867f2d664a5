// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: encode and streaming decode on the tokenizer fixtures of tests/data/tokenizer
// (one of each kind). Input: byte 0 picks the tokenizer, byte 1 the options, the rest is text
// (or, with option bit 3, raw token ids, 2 bytes each, little-endian).
//
// Properties checked:
//  - encode of invalid UTF-8 fails (invalid_argument); of valid UTF-8 gives ids the tokenizer
//    knows;
//  - for any ids (encoded or raw): the streamed decode (push() per id, then flush()) equals
//    decode() byte for byte, with and without skip_special, and is valid UTF-8;
//  - decode(encode(text)) == text where the tokenizer is lossless for that input
//    (add_special off, parse_special off so special-token text stays plain text):
//      gpt2_bytelevel       ByteLevel, add_prefix_space: any valid UTF-8 that starts with ' '
//                           (otherwise the pre-tokenizer prepends one, which decode keeps);
//      llama3_bytelevel     byte-level, no normalizer: any valid UTF-8 without "<mask>" (a
//                           non-special added token with lstrip/rstrip, so spaces around it go);
//      qwen2_bytelevel      NFC normalizer: any valid UTF-8 already in NFC;
//      llama2_sentencepiece Prepend + Replace ' '->U+2581, byte fallback, decoder Strip(1):
//                           any valid UTF-8 without U+2581 (it decodes to ' ');
//      metaspace_pairs      not lossless (NFD, left strip, a "the"->"THE" decoder Replace).
#include "edgellm/detail/unicode.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

enum class Lossless { any_leading_space, without_mask, nfc, without_u2581, no };

struct Kind {
  const char* file;
  Lossless lossless;
};

constexpr Kind kKinds[] = {
    {"tokenizer/gpt2_bytelevel.json", Lossless::any_leading_space},
    {"tokenizer/llama3_bytelevel_pairs.json", Lossless::without_mask},
    {"tokenizer/qwen2_bytelevel.json", Lossless::nfc},
    {"tokenizer/llama2_sentencepiece.json", Lossless::without_u2581},
    {"tokenizer/metaspace_pairs.json", Lossless::no},
};
constexpr std::size_t kKindCount = sizeof kKinds / sizeof kKinds[0];

// Loaded once per process (the fixtures are constant); a fixture that does not load is a broken
// harness, so trap.
const std::vector<std::unique_ptr<edgellm::model::Tokenizer>>& tokenizers() {
  static const auto all = [] {
    std::vector<std::unique_ptr<edgellm::model::Tokenizer>> v;
    for (const Kind& k : kKinds) {
      auto t = edgellm::model::Tokenizer::load(edgellm::fuzz::data_path(k.file));
      EDGELLM_FUZZ_CHECK(t.has_value());
      v.push_back(std::make_unique<edgellm::model::Tokenizer>(std::move(*t)));
    }
    return v;
  }();
  return all;
}

bool lossless_for(Lossless l, std::string_view text) {
  switch (l) {
    case Lossless::any_leading_space: return text.empty() || text.front() == ' ';
    case Lossless::without_mask: return text.find("<mask>") == std::string_view::npos;
    case Lossless::nfc: return edgellm::detail::unicode::nfc(text) == text;
    case Lossless::without_u2581: return text.find("\xE2\x96\x81") == std::string_view::npos;
    case Lossless::no: return false;
  }
  return false;
}

std::string check_stream(const edgellm::model::Tokenizer& tok,
                         const std::vector<std::int32_t>& ids, bool skip_special) {
  const std::string whole = tok.decode(ids, skip_special);
  auto sd = tok.stream_decoder(skip_special);
  std::string streamed;
  for (const std::int32_t id : ids) {
    const std::string piece = sd.push(id);
    // Every piece is printable at once: valid UTF-8 on its own.
    EDGELLM_FUZZ_CHECK(edgellm::detail::unicode::find_invalid_utf8(piece) == std::string::npos);
    streamed += piece;
  }
  streamed += sd.flush();
  EDGELLM_FUZZ_CHECK(streamed == whole);
  EDGELLM_FUZZ_CHECK(edgellm::detail::unicode::find_invalid_utf8(whole) == std::string::npos);
  return whole;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const Kind& kind = kKinds[data[0] % kKindCount];
  const edgellm::model::Tokenizer& tok = *tokenizers()[data[0] % kKindCount];
  const bool add_special = (data[1] & 1) != 0, parse_special = (data[1] & 2) != 0,
             skip_special = (data[1] & 4) != 0, raw_ids = (data[1] & 8) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);

  if (raw_ids) {
    // Any ids, including unknown and negative ones (a model may sample an id past the
    // tokenizer's vocabulary when the embedding table is padded).
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i + 1 < text.size(); i += 2) {
      const auto v = static_cast<std::int16_t>(static_cast<std::uint8_t>(text[i]) |
                                               (static_cast<std::uint8_t>(text[i + 1]) << 8));
      ids.push_back(v);
    }
    (void)check_stream(tok, ids, skip_special);
    return 0;
  }

  const bool valid = edgellm::detail::unicode::find_invalid_utf8(text) == std::string_view::npos;
  auto ids = tok.encode(text, {.add_special = add_special, .parse_special = parse_special});
  if (!valid) {
    EDGELLM_FUZZ_CHECK(!ids && ids.error().code == edgellm::errc::invalid_argument);
    return 0;
  }
  EDGELLM_FUZZ_CHECK(ids.has_value());
  for (const std::int32_t id : *ids)
    EDGELLM_FUZZ_CHECK(id >= 0 && static_cast<std::size_t>(id) < tok.vocab_size());
  const std::string whole = check_stream(tok, *ids, skip_special);
  if (!add_special && !parse_special && lossless_for(kind.lossless, text)) {
    EDGELLM_FUZZ_CHECK(whole == text);
  }
  return 0;
}
