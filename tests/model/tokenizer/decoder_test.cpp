// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer/decoder.hpp: the per-token helpers (byte tokens, Strip,
// Metaspace) and whole chains as real files configure them (Llama-2, byte-level, none).
#include "edgellm/model/tokenizer/decoder.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace test_model_tokenizer_decoder {

namespace {

namespace tok = edgellm::model::detail::tok;
using Step = tok::DecoderStep;
using Kind = tok::DecoderStep::Kind;
using V = std::vector<std::string>;
const std::string kMeta = "\xE2\x96\x81";  // ▁

/// Decoder steps as the loader builds them.
Step step(Kind kind) {
  Step s;
  s.kind = kind;
  return s;
}
Step replace(std::string pattern, std::string content, bool fused = false) {
  Step s = step(Kind::replace);
  s.pattern = std::move(pattern);
  s.content = std::move(content);
  s.fused_input = fused;
  return s;
}
Step strip(std::string ch, std::size_t start, std::size_t stop, bool fused = false) {
  Step s = step(Kind::strip);
  s.content = std::move(ch);
  s.start = start;
  s.stop = stop;
  s.fused_input = fused;
  return s;
}
Step metaspace(std::string replacement, bool fused = false) {
  Step s = step(Kind::metaspace);
  s.pattern = std::move(replacement);
  s.fused_input = fused;
  return s;
}
const std::string kFffd = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

TEST_CASE("decoder helpers", "[tokenizer]") {
  CHECK(tok::parse_byte_token("<0x0A>") == 0x0A);
  CHECK(tok::parse_byte_token("<0xab>") == 0xAB);
  CHECK(!tok::parse_byte_token("<0xG0>"));
  CHECK(!tok::parse_byte_token("<0x0A"));
  CHECK(!tok::parse_byte_token("<0x0AB>"));

  CHECK(tok::strip_token("xxaxx", "x", 1, 1) == "xax");
  CHECK(tok::strip_token("  a", " ", 5, 0) == "a");
  CHECK(tok::strip_token("xx", "x", 1, 5).empty());  // the trailing strip stops at the leading one
  CHECK(tok::strip_token("abc", "", 1, 1) == "abc");

  // HF's Metaspace decoder drops every ▁ of the first token (not only the leading one).
  CHECK(tok::metaspace_token(kMeta + "a" + kMeta + "b", kMeta, false) == " a b");
  CHECK(tok::metaspace_token(kMeta + "a" + kMeta + "b", kMeta, true) == "ab");
}

TEST_CASE("decoder chains", "[tokenizer]") {
  SECTION("none: tokens joined by spaces") {
    const tok::DecoderChain none;
    CHECK(none.decode(V{"abc", "ab"}) == "abc ab");
    CHECK(none.decode(V{}).empty());
  }
  SECTION("Llama-2: Replace, ByteFallback, Fuse, Strip") {
    tok::DecoderChain c;
    c.present = true;
    c.steps = {replace(kMeta, " "), step(Kind::byte_fallback), step(Kind::fuse),
               strip(" ", 1, 0, true)};
    CHECK(c.decode(V{kMeta + "Hello", kMeta + "world", "<0x21>"}) == "Hello world!");
    CHECK(c.decode(V{"<0xC3>", "<0xA9>", "x"}) == "\xC3\xA9x");
    // An invalid run: one U+FFFD per byte.
    CHECK(c.decode(V{"<0xE4>", "<0xB8>"}) == kFffd + kFffd);
    CHECK(c.apply(V{kMeta + "a", kMeta + "b"}) == V{"a b"});  // one token after Fuse
  }
  SECTION("ByteLevel: bytes back to text, invalid UTF-8 becomes U+FFFD") {
    tok::DecoderChain c;
    c.present = true;
    c.steps = {step(Kind::byte_level)};
    CHECK(c.decode(V{"Hello", "\xC4\xA0world"}) == "Hello world");
    CHECK(c.decode(V{"\xC3\x83"}) == kFffd);  // the lone byte 0xC3
  }
  SECTION("Metaspace: the first token loses its replacement characters") {
    tok::DecoderChain c;
    c.present = true;
    c.steps = {step(Kind::byte_fallback), metaspace(kMeta)};
    CHECK(c.decode(V{kMeta + "a", kMeta + "b"}) == "a b");
    c.steps[1].drop_first = false;  // prepend_scheme "never"
    CHECK(c.decode(V{kMeta + "a", kMeta + "b"}) == " a b");
  }
}

}  // namespace test_model_tokenizer_decoder
