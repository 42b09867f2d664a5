// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer/stream_decoder.hpp: DecoderStream fed one token at a time
// gives, concatenated with flush(), exactly DecoderChain::decode of the whole list, and every
// chunk it returns is valid UTF-8; for each kind of chain real files use and for the fused
// Replace / Strip steps that hold text back.
#include "edgellm/model/tokenizer/stream_decoder.hpp"

#include "edgellm/detail/unicode.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace test_model_tokenizer_stream_decoder {

namespace {

namespace tok = edgellm::model::detail::tok;
namespace uni = edgellm::detail::unicode;
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

tok::DecoderChain chain(std::vector<Step> steps) {
  tok::DecoderChain c;
  c.present = true;
  c.steps = std::move(steps);
  return c;
}

/// The byte-level spelling of `bytes`.
std::string byte_level(std::string_view bytes) {
  std::string out;
  tok::append_byte_level(out, bytes);
  return out;
}

std::string stream(tok::DecoderStream& s, const V& tokens) {
  std::string out;
  for (const std::string& t : tokens) {
    const std::string chunk = s.push(t);
    CHECK(uni::find_invalid_utf8(chunk) == std::string_view::npos);
    out += chunk;
  }
  const std::string tail = s.flush();
  CHECK(uni::find_invalid_utf8(tail) == std::string_view::npos);
  return out + tail;
}

}  // namespace

TEST_CASE("stream decoder holds back what a later token can change", "[tokenizer]") {
  SECTION("ByteLevel: a character split across tokens") {
    const auto c = chain({step(Kind::byte_level)});
    tok::DecoderStream s(c);
    CHECK(s.push(byte_level("\xF0\x9F")).empty());  // the first half of 😀
    CHECK(s.push(byte_level("\x98\x80")) == "\xF0\x9F\x98\x80");
    CHECK(s.push(byte_level("\xF0")).empty());
    CHECK(s.flush() == "\xEF\xBF\xBD");  // cut short: U+FFFD, as decode() gives
  }
  SECTION("ByteFallback: a run of byte tokens") {
    const auto c = chain({step(Kind::byte_fallback), step(Kind::fuse)});
    tok::DecoderStream s(c);
    CHECK(s.push("<0xC3>").empty());
    CHECK(s.push("<0xA9>").empty());  // still a run: HF decodes it as a whole
    CHECK(s.push("x") == "\xC3\xA9x");
  }
  SECTION("Replace after Fuse: a partial match of the pattern") {
    const auto c = chain({step(Kind::fuse), replace("ab", "-", true)});
    tok::DecoderStream s(c);
    CHECK(s.push("xa") == "x");  // "a" may start "ab"
    CHECK(s.push("b") == "-");
    CHECK(s.push("a").empty());
    CHECK(s.flush() == "a");
  }
  SECTION("Strip after Fuse: trailing characters") {
    const auto c = chain({step(Kind::fuse), strip(" ", 1, 2, true)});
    tok::DecoderStream s(c);
    CHECK(s.push(" a ") == "a");  // the leading space stripped, the trailing one held
    CHECK(s.push(" ").empty());
    CHECK(s.push("b") == "  b");
    CHECK(s.push("   ") == " ");  // at most `stop` trailing characters are held
    CHECK(s.flush().empty());     // the trailing spaces, up to `stop` of them, are stripped
  }
  SECTION("no decoder: tokens joined by spaces") {
    const tok::DecoderChain none;
    tok::DecoderStream s(none);
    CHECK(s.push("a") == "a");
    CHECK(s.push("b") == " b");
    CHECK(s.flush().empty());
    CHECK(s.push("c") == "c");  // flush() starts a new stream
  }
}

TEST_CASE("stream decoder output equals the chain's decode on random token lists", "[tokenizer]") {
  const std::vector<tok::DecoderChain> chains = {
      tok::DecoderChain{},
      chain({step(Kind::byte_level)}),
      chain({replace(kMeta, " "), step(Kind::byte_fallback), step(Kind::fuse),
             strip(" ", 1, 0, true)}),
      chain({step(Kind::byte_fallback), metaspace(kMeta)}),
      chain({step(Kind::fuse), replace("\xE2\x96\x81\xE2\x96\x81", "_", true),
             strip("_", 2, 3, true), metaspace(kMeta, true)}),
  };
  const V pool = {kMeta,      kMeta + "a", "a" + kMeta, "<0xE4>",   "<0xB8>",   "<0xAD>",
                  "<0x41>",   "x",         "ab",        "_",        " ",        "\xC4\xA0",
                  "\xC3\x83", "\xC2\xA9",  "\xC3\xA4",  "\xC2\xB8", "\xC2\xAD", "\xE6\x97\xA5"};
  std::mt19937 rng(Catch::rngSeed() ^ 0xDEC0u);
  std::uniform_int_distribution<std::size_t> pick(0, pool.size() - 1), len(0, 20);
  for (std::size_t ci = 0; ci < chains.size(); ++ci) {
    tok::DecoderStream s(chains[ci]);
    for (int trial = 0; trial < 300; ++trial) {
      V tokens(len(rng));
      for (std::string& t : tokens) t = pool[pick(rng)];
      INFO("chain " << ci << ", trial " << trial);
      CHECK(stream(s, tokens) == chains[ci].decode(tokens));
    }
  }
}

}  // namespace test_model_tokenizer_stream_decoder
