// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: tokenizer.json parsing (Tokenizer::from_json on arbitrary bytes). A rejected
// file must get an error naming it; an accepted one must encode a few probe texts to ids the
// tokenizer knows, decode them, and stream-decode them to the same text as decode().
// Seeds: the tokenizer fixtures of tests/data/tokenizer (corpus/tokenizer_json/).
#include "edgellm/model/tokenizer.hpp"
#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view kName = "fuzz-tokenizer.json";

// Texts that reach the pre-tokenizers' branches (letters, digits, spaces, newlines, apostrophes,
// non-ASCII, SentencePiece's U+2581, a byte-fallback-only character) and common added tokens.
constexpr std::string_view kProbes[] = {
    "Hello world", " it's 2024!\n\n  x", "caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87",
    "\xE2\x96\x81lead  trail ", "<|endoftext|><s>x</s><|im_start|>", "\xF0\x9F\x98\x80-a-b",
    ""};

void check_stream(const edgellm::model::Tokenizer& tok, const std::vector<std::int32_t>& ids,
                  bool skip_special) {
  const std::string whole = tok.decode(ids, skip_special);
  auto sd = tok.stream_decoder(skip_special);
  std::string streamed;
  for (const std::int32_t id : ids) streamed += sd.push(id);
  streamed += sd.flush();
  EDGELLM_FUZZ_CHECK(streamed == whole);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tok = edgellm::model::Tokenizer::from_json(text, kName);
  if (!tok) {
    EDGELLM_FUZZ_CHECK(tok.error().message.find(kName) != std::string::npos);
    return 0;
  }
  for (const std::string_view probe : kProbes) {
    for (const bool parse_special : {true, false}) {
      auto ids = tok->encode(probe, {.add_special = true, .parse_special = parse_special});
      if (!ids) continue;  // e.g. a character the vocabulary cannot spell and no unk token
      for (const std::int32_t id : *ids) {
        EDGELLM_FUZZ_CHECK(id >= 0 && static_cast<std::size_t>(id) < tok->vocab_size());
        EDGELLM_FUZZ_CHECK(tok->id_to_token(id).has_value());
      }
      check_stream(*tok, *ids, false);
      check_stream(*tok, *ids, true);
    }
  }
  // Every id in order (bounded), through decode and the stream: unknown ids and byte tokens
  // outside an encode's output included.
  std::vector<std::int32_t> all;
  for (std::int32_t id = -1; id <= 600 && static_cast<std::size_t>(id + 1) <= tok->vocab_size() + 1;
       ++id)
    all.push_back(id);
  check_stream(*tok, all, false);
  check_stream(*tok, all, true);
  return 0;
}
