// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer/normalizer.hpp: each normalizer step alone and the Llama-2
// sequence (Prepend ▁, Replace " " -> ▁).
#include "edgellm/model/tokenizer/normalizer.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

namespace test_model_tokenizer_normalizer {

namespace {

namespace tok = edgellm::model::detail::tok;
using Step = tok::NormalizerStep;
using Kind = tok::NormalizerStep::Kind;
const std::string kMeta = "\xE2\x96\x81";  // ▁

Step step(Kind kind, std::string pattern = {}, std::string content = {}) {
  Step s;
  s.kind = kind;
  s.pattern = std::move(pattern);
  s.content = std::move(content);
  return s;
}
Step strip(bool left, bool right) {
  Step s = step(Kind::strip);
  s.left = left;
  s.right = right;
  return s;
}

}  // namespace

TEST_CASE("normalizer steps", "[tokenizer]") {
  CHECK(tok::normalize({}, "as is") == "as is");

  const std::vector<Step> nfc = {step(Kind::nfc)};
  CHECK(tok::normalize(nfc, "cafe\xCC\x81") == "caf\xC3\xA9");
  const std::vector<Step> nfd = {step(Kind::nfd)};
  CHECK(tok::normalize(nfd, "caf\xC3\xA9") == "cafe\xCC\x81");

  const std::vector<Step> prepend = {step(Kind::prepend, kMeta)};
  CHECK(tok::normalize(prepend, "hi") == kMeta + "hi");
  CHECK(tok::normalize(prepend, "").empty());  // nothing to prepend to

  const std::vector<Step> replace = {step(Kind::replace, " ", kMeta)};
  CHECK(tok::normalize(replace, "a b") == "a" + kMeta + "b");

  const std::string text = "  a b \t\xE3\x80\x80";
  CHECK(tok::normalize(std::vector<Step>{strip(true, true)}, text) == "a b");
  CHECK(tok::normalize(std::vector<Step>{strip(true, false)}, text) == "a b \t\xE3\x80\x80");
  CHECK(tok::normalize(std::vector<Step>{strip(false, true)}, text) == "  a b");
  CHECK(tok::normalize(std::vector<Step>{strip(true, true)}, " \t ").empty());
}

TEST_CASE("normalizer: the Llama-2 sequence applies in order", "[tokenizer]") {
  const std::vector<Step> llama2 = {step(Kind::prepend, kMeta), step(Kind::replace, " ", kMeta)};
  CHECK(tok::normalize(llama2, "hi there") == kMeta + "hi" + kMeta + "there");
  // The other order replaces first, so a leading space gives two ▁.
  const std::vector<Step> reversed = {llama2[1], llama2[0]};
  CHECK(tok::normalize(reversed, " x") == kMeta + kMeta + "x");
}

}  // namespace test_model_tokenizer_normalizer
