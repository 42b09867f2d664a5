// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/tokenizer.hpp: encode/decode against the Python oracle's expected ids
// (tests/data/tokenizer, made by tools/make_test_tokenizers.py), the public API, streaming
// decode by id, round trips, and errors at load and encode time. The pipeline's parts have their
// own tests under tests/model/tokenizer/.
#include "edgellm/model/tokenizer.hpp"

#include "edgellm/detail/unicode.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "support/limited_child.hpp"
#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

namespace test_model_tokenizer {

namespace {

namespace fs = std::filesystem;
namespace json = edgellm::io::json;
namespace uni = edgellm::detail::unicode;
namespace tok = edgellm::model::detail::tok;
using Catch::Matchers::Contains;
using edgellm::errc;
using edgellm::model::EncodeOptions;
using edgellm::model::StreamDecoder;
using edgellm::model::Tokenizer;
using Ids = std::vector<std::int32_t>;

std::string data_path(const std::string& name) {
  return edgellm::test::source_dir() + "/tests/data/tokenizer/" + name;
}

json::Value load_json(const std::string& name) {
  auto text = edgellm::io::read_text_file(data_path(name));
  REQUIRE(text.has_value());
  auto v = json::parse(*text, name);
  REQUIRE(v.has_value());
  return std::move(*v);
}

Tokenizer load_tokenizer(const std::string& name) {
  auto t = Tokenizer::load(data_path(name));
  if (!t) FAIL(t.error().message);
  return std::move(*t);
}

Ids ids_of(const json::Value& v) {
  Ids out;
  for (const json::Value& e : v.as_array()) out.push_back(static_cast<std::int32_t>(e.as_int()));
  return out;
}

/// Concatenated StreamDecoder output for `ids`, checking that every chunk is valid UTF-8.
std::string stream_decode(const Tokenizer& t, const Ids& ids, bool skip_special) {
  StreamDecoder d = t.stream_decoder(skip_special);
  std::string out;
  for (const std::int32_t id : ids) {
    const std::string chunk = d.push(id);
    CHECK(uni::find_invalid_utf8(chunk) == std::string_view::npos);
    out += chunk;
  }
  const std::string tail = d.flush();
  CHECK(uni::find_invalid_utf8(tail) == std::string_view::npos);
  return out + tail;
}

/// Printable form of a string for failure messages.
std::string show(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s.substr(0, 120)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + (s.size() > 120 ? "\"..." : "\"");
}

/// How decode(encode(s, {add_special=false, parse_special=false})) relates to s.
enum class RoundTrip { exact, nfc, prefix_space, none };

struct TokenizerCase {
  const char* file;
  RoundTrip round_trip;
};

constexpr TokenizerCase kTokenizers[] = {
    {"qwen2_bytelevel.json", RoundTrip::nfc},
    {"llama3_bytelevel_pairs.json", RoundTrip::exact},
    {"gpt2_bytelevel.json", RoundTrip::prefix_space},
    {"llama2_sentencepiece.json", RoundTrip::exact},
    {"metaspace_pairs.json", RoundTrip::none},  // unknown characters become <unk>
};

}  // namespace

TEST_CASE("Tokenizer matches the Python oracle on the corpus", "[tokenizer]") {
  const TokenizerCase tc = GENERATE(from_range(std::begin(kTokenizers), std::end(kTokenizers)));
  INFO("tokenizer " << tc.file);
  const Tokenizer t = load_tokenizer(tc.file);
  const json::Value expected = load_json(std::string("expected_") + tc.file);
  const json::Value corpus = load_json("corpus.json");
  const json::Array& cases = expected.find("cases")->as_array();
  REQUIRE(cases.size() == corpus.size());

  std::size_t round_trips = 0;
  for (const json::Value& c : cases) {
    const std::string& text = c.find("text")->as_string();
    INFO("text " << show(text));
    const Ids ids = ids_of(*c.find("ids"));
    const Ids ids_plain = ids_of(*c.find("ids_plain"));

    auto got = t.encode(text);
    REQUIRE(got.has_value());
    CHECK(*got == ids);
    auto plain = t.encode(text, EncodeOptions{false, false});
    REQUIRE(plain.has_value());
    CHECK(*plain == ids_plain);

    const std::string& decoded = c.find("decoded")->as_string();
    const std::string& decoded_skip = c.find("decoded_skip")->as_string();
    CHECK(t.decode(ids) == decoded);
    CHECK(t.decode(ids, true) == decoded_skip);
    CHECK(stream_decode(t, ids, false) == decoded);
    CHECK(stream_decode(t, ids, true) == decoded_skip);

    // decode(encode(s)) gives s back, as far as the format allows: not through added tokens
    // (a non-ASCII added token does not survive the ByteLevel decoder, as in HF), and not for
    // text that contains SentencePiece's own "▁".
    bool through_added = false;
    for (const std::int32_t id : ids_plain) {
      for (const auto& a : t.added_tokens()) through_added = through_added || a.id == id;
    }
    if (through_added || text.find("\xE2\x96\x81") != std::string::npos) continue;
    std::string want;
    switch (tc.round_trip) {
      case RoundTrip::exact:
        want = text;
        break;
      case RoundTrip::nfc:
        want = uni::nfc(text);
        break;
      case RoundTrip::prefix_space:
        want = text.empty() || text[0] == ' ' ? text : " " + text;
        break;
      case RoundTrip::none:
        continue;
    }
    CHECK(t.decode(ids_plain) == want);
    ++round_trips;
  }
  if (tc.round_trip != RoundTrip::none) CHECK(round_trips > cases.size() / 2);

  // Arbitrary id sequences (what a model may generate): invalid UTF-8 from byte tokens, stray
  // special tokens, unknown ids.
  const json::Array& randoms = expected.find("random_decodes")->as_array();
  REQUIRE(randoms.size() >= 50);
  for (const json::Value& c : randoms) {
    const Ids ids = ids_of(*c.find("ids"));
    INFO("ids " << json::dump(*c.find("ids")));
    CHECK(t.decode(ids) == c.find("decoded")->as_string());
    CHECK(t.decode(ids, true) == c.find("decoded_skip")->as_string());
    CHECK(stream_decode(t, ids, false) == c.find("decoded")->as_string());
    CHECK(stream_decode(t, ids, true) == c.find("decoded_skip")->as_string());
  }
}

TEST_CASE("Unicode classes and NFC/NFD agree with Python's unicodedata", "[tokenizer]") {
  CHECK(uni::is_letter(U'a'));
  CHECK(uni::is_letter(0x4EF7));   // 价
  CHECK(uni::is_letter(0x20000));  // CJK Ext B, 4-byte UTF-8
  CHECK(uni::is_number(0x0663));   // ARABIC-INDIC DIGIT THREE
  CHECK(uni::is_number(0x216B));   // ROMAN NUMERAL TWELVE (Nl)
  CHECK(uni::is_number(0x00BD));   // ½ (No)
  CHECK(uni::is_space(0x3000));
  CHECK(uni::is_space(0x85));
  CHECK(!uni::is_space(0x200B));  // ZERO WIDTH SPACE is not White_Space
  CHECK(!uni::is_space(0x1C));    // Python's str.isspace says yes; White_Space says no
  CHECK(uni::is_word(U'_'));
  CHECK(uni::is_word(0x0301));  // combining marks are \w
  CHECK(!uni::is_word(U'-'));
  CHECK(uni::char_class(0x10FFFF) == 0);
  CHECK(uni::char_class(0x110000) == 0);

  const json::Value cases = load_json("unicode_cases.json");
  CHECK(cases.find("unicode_version")->as_string() == uni::kTablesVersion);
  for (const json::Value& c : cases.find("cases")->as_array()) {
    const std::string& text = c.find("text")->as_string();
    INFO("text " << show(text));
    CHECK(uni::nfc(text) == c.find("nfc")->as_string());
    CHECK(uni::nfd(text) == c.find("nfd")->as_string());
  }
  const std::string already = "naïve café 日本語 Hello";
  CHECK(uni::quick_check_nfc(already));
  CHECK(uni::nfc(already) == already);
  CHECK(uni::nfc("cafe\xCC\x81") == "caf\xC3\xA9");
  CHECK(uni::nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB") == "\xED\x95\x9C");  // jamo -> 한
}

TEST_CASE("UTF-8 helpers", "[tokenizer]") {
  CHECK(uni::find_invalid_utf8("abc") == std::string_view::npos);
  CHECK(uni::find_invalid_utf8("ab\xC3") == 2);            // truncated
  CHECK(uni::find_invalid_utf8("\xC0\x80") == 0);          // overlong
  CHECK(uni::find_invalid_utf8("a\xED\xA0\x80") == 1);     // surrogate
  CHECK(uni::find_invalid_utf8("\xF4\x90\x80\x80") == 0);  // > U+10FFFF
  CHECK(uni::find_invalid_utf8("\xF0\x9F\x98\x80") == std::string_view::npos);
  // Maximal subparts, as Rust's from_utf8_lossy and Python's errors="replace".
  CHECK(uni::utf8_lossy("a\xE4\xB8"
                        "b") ==
        "a\xEF\xBF\xBD"
        "b");
  CHECK(uni::utf8_lossy("\xF0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(uni::utf8_lossy("\xF0\x9F\x98") == "\xEF\xBF\xBD");
  CHECK(uni::utf8_lossy("\xFF\xFE") == "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("Tokenizer API: vocabulary, special tokens, options", "[tokenizer]") {
  const Tokenizer qwen = load_tokenizer("qwen2_bytelevel.json");
  const auto im_start = qwen.token_to_id("<|im_start|>");
  REQUIRE(im_start.has_value());
  CHECK(qwen.is_special(*im_start));
  CHECK(qwen.id_to_token(*im_start) == std::string_view("<|im_start|>"));
  CHECK(qwen.vocab_size() == static_cast<std::size_t>(*qwen.token_to_id("café")) + 1);
  CHECK(!qwen.is_special(*qwen.token_to_id("café")));  // added, but not special
  REQUIRE(qwen.token_to_id("Ġw").has_value());
  CHECK(qwen.id_to_token(*qwen.token_to_id("Ġw")) == std::string_view("Ġw"));
  CHECK(qwen.id_to_token(0) == std::string_view("!"));
  CHECK(!qwen.id_to_token(-1));
  CHECK(!qwen.id_to_token(static_cast<std::int32_t>(qwen.vocab_size())));
  CHECK(!qwen.token_to_id("no such token"));
  CHECK(!qwen.bos_id());  // Qwen2 adds no BOS
  CHECK(qwen.eos_id() == qwen.token_to_id("<|endoftext|>"));
  CHECK(qwen.is_byte_level());

  // parse_special = false: "<|im_start|>" is plain text; the non-special "café" still matches.
  const auto with = qwen.encode("<|im_start|>café");
  const auto without = qwen.encode("<|im_start|>café", EncodeOptions{true, false});
  REQUIRE(with.has_value());
  REQUIRE(without.has_value());
  CHECK(*with == Ids{*im_start, *qwen.token_to_id("café")});
  CHECK(without->size() > 2);
  CHECK(without->back() == *qwen.token_to_id("café"));
  CHECK(qwen.decode(*without) == qwen.decode(*with));

  const Tokenizer llama = load_tokenizer("llama2_sentencepiece.json");
  CHECK(llama.bos_id() == 1);
  CHECK(llama.eos_id() == 2);
  CHECK(!llama.is_byte_level());
  CHECK(*llama.encode("") == Ids{1});
  CHECK(llama.encode("", EncodeOptions{false, true})->empty());
  CHECK(llama.encode("hi")->front() == 1);
  CHECK(llama.encode("hi", EncodeOptions{false, true})->front() != 1);
  CHECK(llama.decode(Ids{1, 999999, -5}) == "<s>");  // unknown ids are skipped
  CHECK(llama.decode(Ids{1}, true).empty());
  CHECK(llama.token_to_id("<0x0A>") == 3 + 0x0A);

  const Tokenizer meta = load_tokenizer("metaspace_pairs.json");
  const auto m = meta.encode("hi");
  REQUIRE(m.has_value());
  CHECK(m->front() == 1);
  CHECK(m->back() == 2);  // the template's EOS
  CHECK(meta.eos_id() == 2);

  // A directory holding tokenizer.json loads too.
  const fs::path dir =
      fs::temp_directory_path() / ("edgellm-tokenizer-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(data_path("gpt2_bytelevel.json"), dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  auto from_dir = Tokenizer::load(dir.string());
  fs::remove_all(dir);
  REQUIRE(from_dir.has_value());
  CHECK(from_dir->name() == (dir / "tokenizer.json").string());
  CHECK(*from_dir->encode("Hello world") ==
        *load_tokenizer("gpt2_bytelevel.json").encode("Hello world"));
}

TEST_CASE("Tokenizer encodes long inputs", "[tokenizer]") {
  const Tokenizer qwen = load_tokenizer("qwen2_bytelevel.json");
  const Tokenizer llama = load_tokenizer("llama2_sentencepiece.json");
  auto text = edgellm::io::read_text_file(data_path("train.txt"));
  REQUIRE(text.has_value());
  // Without "café", which is an added token of the Qwen2 file (and decodes lossily, as in HF).
  const std::string plain = tok::replace_all(*text, "café", "cafe");
  std::string big;
  for (int i = 0; i < 8; ++i) big += plain;  // ~60 KB
  for (const Tokenizer* t : {&qwen, &llama}) {
    auto ids = t->encode(big, EncodeOptions{false, false});
    REQUIRE(ids.has_value());
    CHECK(ids->size() > big.size() / 8);
    CHECK(t->decode(*ids) == big);
    // Encoding is per pre-token (and per stretch without one), so halves at a line break add up.
    const std::size_t cut = big.find('\n', big.size() / 2) + 1;
    if (t == &qwen) {
      auto a = t->encode(std::string_view(big).substr(0, cut), EncodeOptions{false, false});
      auto b = t->encode(std::string_view(big).substr(cut), EncodeOptions{false, false});
      Ids joined = *a;
      joined.insert(joined.end(), b->begin(), b->end());
      CHECK(joined == *ids);
    }
  }
}

TEST_CASE("StreamDecoder holds back characters split across tokens", "[tokenizer]") {
  const std::string emoji = "\xF0\x9F\x98\x80";  // 😀, 4 bytes

  SECTION("byte-level: one token per byte") {
    const Tokenizer t = load_tokenizer("qwen2_bytelevel.json");
    Ids bytes;
    for (const char ch : emoji) {
      std::string spelled;
      tok::append_byte_level(spelled, std::string_view(&ch, 1));
      const auto id = t.token_to_id(spelled);
      REQUIRE(id.has_value());
      bytes.push_back(*id);
    }
    StreamDecoder d(t);
    CHECK(d.push(bytes[0]).empty());
    CHECK(d.push(bytes[1]).empty());
    CHECK(d.push(bytes[2]).empty());
    CHECK(d.push(bytes[3]) == emoji);
    CHECK(d.flush().empty());
    // Cut short: the pending bytes become one U+FFFD at the end, as decode() gives.
    CHECK(d.push(bytes[0]).empty());
    CHECK(d.push(bytes[1]).empty());
    CHECK(d.flush() == "\xEF\xBF\xBD");
    CHECK(t.decode(Ids{bytes[0], bytes[1]}) == "\xEF\xBF\xBD");
    // A broken sequence followed by ASCII: U+FFFD then the letter, as soon as it is known.
    CHECK(d.push(bytes[0]).empty());
    CHECK(d.push(*t.token_to_id("A")) ==
          "\xEF\xBF\xBD"
          "A");
    // Multi-byte tokens whose boundaries fall inside characters.
    const auto ids = t.encode("日本語😀👍🏽", EncodeOptions{false, false});
    REQUIRE(ids.has_value());
    std::string streamed;
    for (const std::int32_t id : *ids) {
      const std::string chunk = d.push(id);
      CHECK(uni::find_invalid_utf8(chunk) == std::string_view::npos);
      streamed += chunk;
    }
    CHECK(streamed == "日本語😀👍🏽");
    CHECK(d.flush().empty());
  }

  SECTION("SentencePiece byte fallback: <0xXX> runs") {
    const Tokenizer t = load_tokenizer("llama2_sentencepiece.json");
    StreamDecoder d(t);
    const auto byte = [&](int b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      return *t.token_to_id(name);
    };
    CHECK(d.push(*t.token_to_id("\xE2\x96\x81"
                                "a")) == "a");  // leading space stripped
    for (const char ch : emoji) CHECK(d.push(byte(static_cast<unsigned char>(ch))).empty());
    CHECK(d.push(*t.token_to_id("\xE2\x96\x81"
                                "a")) == emoji + " a");
    CHECK(d.flush().empty());
    // An invalid run: HF replaces every byte of it.
    d.push(byte(0xE4));
    d.push(byte(0xB8));
    CHECK(d.flush() == "\xEF\xBF\xBD\xEF\xBF\xBD");
  }
}

TEST_CASE("StreamDecoder output equals decode() on random id sequences", "[tokenizer]") {
  const TokenizerCase tc = GENERATE(from_range(std::begin(kTokenizers), std::end(kTokenizers)));
  INFO("tokenizer " << tc.file);
  const Tokenizer t = load_tokenizer(tc.file);
  std::mt19937 rng(Catch::rngSeed() ^ 0x5EEDu);
  // Interesting ids: byte tokens, added tokens, tokens with spaces or ▁ at either end.
  Ids interesting;
  for (std::int32_t id = 0; id < static_cast<std::int32_t>(t.vocab_size()); ++id) {
    const auto s = t.id_to_token(id);
    if (!s) continue;
    if (s->size() <= 2 || s->starts_with("<0x") || s->starts_with("\xE2\x96\x81") ||
        s->ends_with("\xE2\x96\x81") || s->starts_with("\xC4\xA0") || t.is_special(id)) {
      interesting.push_back(id);
    }
  }
  REQUIRE(!interesting.empty());
  const auto n_vocab = static_cast<std::int32_t>(t.vocab_size());
  std::uniform_int_distribution<std::int32_t> any(-2, n_vocab + 2), len(0, 24);
  std::uniform_int_distribution<std::size_t> pick(0, interesting.size() - 1);
  for (int trial = 0; trial < 300; ++trial) {
    Ids ids(static_cast<std::size_t>(len(rng)));
    for (auto& id : ids) id = rng() % 4 == 0 ? any(rng) : interesting[pick(rng)];
    for (const bool skip : {false, true}) {
      const std::string want = t.decode(ids, skip);
      CHECK(stream_decode(t, ids, skip) == want);
    }
  }
}

TEST_CASE("Tokenizer round-trips random text", "[tokenizer]") {
  const TokenizerCase tc = GENERATE(from_range(std::begin(kTokenizers), std::end(kTokenizers)));
  INFO("tokenizer " << tc.file);
  const Tokenizer t = load_tokenizer(tc.file);
  std::mt19937 rng(Catch::rngSeed() ^ 0xC0DEu);
  // Pieces that stress every stage: whitespace runs, digits, contractions, marks that NFC
  // composes or reorders, Hangul jamo, 4-byte characters, ZWJ, and fragments of added tokens.
  const std::vector<std::string> pool = {" ",
                                         "  ",
                                         "\n",
                                         "\r\n",
                                         "\t",
                                         "a",
                                         "Z",
                                         "the",
                                         "'s",
                                         "'LL",
                                         "7",
                                         "42",
                                         "!",
                                         "...",
                                         "-",
                                         "\xC3\xA9",
                                         "e\xCC\x81",
                                         "\xCC\xA3",
                                         "\xCC\x81",
                                         "\xE4\xBB\xB7",
                                         "\xE1\x84\x92",
                                         "\xE1\x85\xA1",
                                         "\xF0\x9F\x98\x80",
                                         "\xE2\x80\x8D",
                                         "\xC2\xA0",
                                         "\xE3\x80\x80",
                                         "<|",
                                         "|>",
                                         "im_start",
                                         "<s>",
                                         "<mask>",
                                         "caf\xC3\xA9",
                                         "\x00"};
  std::uniform_int_distribution<std::size_t> pick(0, pool.size() - 1), len(0, 30);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    for (std::size_t k = len(rng); k > 0; --k) text += pool[pick(rng)];
    INFO("text " << show(text));
    auto ids = t.encode(text);
    REQUIRE(ids.has_value());
    CHECK(stream_decode(t, *ids, false) == t.decode(*ids));
    auto plain = t.encode(text, EncodeOptions{false, false});
    REQUIRE(plain.has_value());
    bool through_added = false;
    for (const std::int32_t id : *plain) {
      for (const auto& a : t.added_tokens()) through_added = through_added || a.id == id;
    }
    if (through_added) continue;
    switch (tc.round_trip) {
      case RoundTrip::exact:
        CHECK(t.decode(*plain) == text);
        break;
      case RoundTrip::nfc:
        CHECK(t.decode(*plain) == uni::nfc(text));
        break;
      case RoundTrip::prefix_space:
        CHECK(t.decode(*plain) == (text.empty() || text[0] == ' ' ? text : " " + text));
        break;
      case RoundTrip::none:
        break;
    }
  }
}

TEST_CASE("Tokenizer reports bad input clearly", "[tokenizer]") {
  const auto error_of = [](std::string_view json_text) {
    auto t = Tokenizer::from_json(json_text, "t.json");
    REQUIRE(!t.has_value());
    return t.error();
  };

  SECTION("from_json passes on the parser's errors (tokenizer/tokenizer_json_test.cpp)") {
    const auto e = error_of(R"({"model": {"type": "WordPiece", "vocab": {}}})");
    CHECK(e.code == errc::unsupported);
    CHECK_THAT(e.message, Contains("t.json") && Contains("unknown model type 'WordPiece'"));
  }
  SECTION("missing file") {
    auto t = Tokenizer::load(data_path("no_such_tokenizer.json"));
    REQUIRE(!t.has_value());
    CHECK(t.error().code == errc::io_error);
    CHECK_THAT(t.error().message, Contains("no_such_tokenizer.json"));
  }
  SECTION("invalid UTF-8 text names the byte offset") {
    const Tokenizer t = load_tokenizer("qwen2_bytelevel.json");
    for (const std::string_view bad :
         {std::string_view("abc\xFF"
                           "def"),
          std::string_view("abc\xE4\xB8"), std::string_view("abc\xC0\x80"),
          std::string_view("abc\xED\xA0\x80")}) {
      auto r = t.encode(bad);
      REQUIRE(!r.has_value());
      CHECK(r.error().code == errc::invalid_argument);
      CHECK_THAT(r.error().message, Contains("not valid UTF-8") && Contains("offset 3"));
    }
  }
  SECTION("a post-processor template id that names no token") {
    // Found by fuzz_tokenizer_json: the template's BOS id 557 is past the vocabulary and is not
    // the added token's id (114); encode would emit an id decode cannot spell.
    const auto e = error_of(
        R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
            "added_tokens": [{"id": 1, "content": "<s>", "special": true}],
            "post_processor": {"type": "TemplateProcessing",
              "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}],
              "special_tokens": {"<s>": {"id": "<s>", "ids": [557], "tokens": ["<s>"]}}}})");
    CHECK(e.code == errc::format_error);
    CHECK_THAT(e.message, Contains("t.json") && Contains("post_processor") &&
                              Contains("template token id 557"));
  }
  SECTION("unk_token missing from the vocabulary fails at encode time") {
    auto t = Tokenizer::from_json(
        R"({"model": {"type": "BPE", "unk_token": "<unk>", "vocab": {"a": 0}, "merges": []}})",
        "t.json");
    REQUIRE(t.has_value());
    CHECK(*t->encode("aa") == Ids{0, 0});
    auto r = t->encode("ab");
    REQUIRE(!r.has_value());
    CHECK_THAT(r.error().message, Contains("unk_token '<unk>'"));
  }
}

TEST_CASE("Tokenizer handles minimal hand-written files", "[tokenizer]") {
  // No normalizer, no pre-tokenizer, no decoder: BPE over the whole text, decode joins with spaces.
  auto t = Tokenizer::from_json(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "bc": 5},
          "merges": ["a b", "ab c", "b c"]}})",
      "mini.json");
  REQUIRE(t.has_value());
  CHECK(*t->encode("abcab") == Ids{4, 3});
  CHECK(*t->encode("bca") == Ids{5, 0});
  CHECK(*t->encode("axb") == Ids{3});  // unknown "x" without unk_token is dropped, as in HF
  CHECK(t->decode(Ids{4, 3}) == "abc ab");
  CHECK(stream_decode(*t, Ids{4, 3, 2}, false) == "abc ab c");

  // Equal ranks at several places merge leftmost first: "aaa" -> "aa" "a".
  auto t2 = Tokenizer::from_json(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": [["a", "a"]]}, "decoder": {"type": "Fuse"}})",
      "mini2.json");
  REQUIRE(t2.has_value());
  CHECK(*t2->encode("aaa") == Ids{1, 0});
  CHECK(*t2->encode("aaaa") == Ids{1, 1});
  CHECK(t2->decode(Ids{1, 0}) == "aaa");

  // continuing_subword_prefix / end_of_word_suffix (CharBPE style).
  auto t3 = Tokenizer::from_json(
      R"({"model": {"type": "BPE", "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>",
          "vocab": {"h": 0, "##e": 1, "##y</w>": 2, "he": 3, "hey</w>": 4, "h</w>": 5},
          "merges": ["h ##e", "he ##y</w>"]}})",
      "mini3.json");
  REQUIRE(t3.has_value());
  CHECK(*t3->encode("hey") == Ids{4});
  CHECK(*t3->encode("h") == Ids{5});

  // Added tokens: a special token skipped because of parse_special = false still consumes its
  // match (HF's Aho-Corasick scan resumes after it), so a token inside it is not found; lstrip
  // and rstrip swallow whitespace, single_word needs non-word neighbours.
  auto t4 = Tokenizer::from_json(
      R"({"model": {"type": "BPE", "vocab": {"<": 0, "|": 1, "x": 2, ">": 3, " ": 4, "y": 5}, "merges": []},
          "added_tokens": [
            {"id": 10, "content": "<|x|>", "special": true, "normalized": false},
            {"id": 11, "content": "x|>", "special": false, "normalized": false},
            {"id": 12, "content": "y", "special": false, "normalized": false, "lstrip": true, "rstrip": true},
            {"id": 13, "content": "><", "special": false, "normalized": false, "single_word": true}]})",
      "mini4.json");
  REQUIRE(t4.has_value());
  CHECK(*t4->encode("<|x|>") == Ids{10});
  CHECK(*t4->encode("<|x|>", EncodeOptions{true, false}) == Ids{0, 1, 2, 1, 3});
  CHECK(*t4->encode("x|>") == Ids{11});
  CHECK(*t4->encode("x  y  x") == Ids{2, 12, 2});
  CHECK(*t4->encode("x><x") == Ids{2, 3, 0, 2});  // "><" between word characters: no match
  CHECK(*t4->encode("|><|") == Ids{1, 13, 1});
  CHECK(t4->is_special(10));
  CHECK(!t4->is_special(11));
  CHECK(t4->vocab_size() == 14);
}

TEST_CASE("Tokenizer: a vocabulary id that sizes a table beyond memory is an error",
          "[tokenizer]") {
  // Ids above 2^24 - 1 are refused as corrupt before any table is sized.
  for (const char* id : {"16777216", "2147483646"}) {
    auto big = Tokenizer::from_json(
        std::string(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                        "added_tokens": [{"id": )") + id + R"(, "content": "<big>"}]})",
        "big-id.json");
    REQUIRE_FALSE(big);
    CHECK(big.error().code == errc::format_error);
    CHECK_THAT(big.error().message, Contains("big-id.json") && Contains("added_tokens[0].id") &&
                                        Contains("[0, 2^24)"));
  }
  // The largest id makes the id -> token table 256 MiB (16 bytes per id); under an
  // address-space limit of 128 MiB above what the process maps, from_json must return
  // out_of_memory naming the file and the table.
  const std::string text =
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 16777215}, "merges": []}})";
  const auto child = edgellm::test::run_limited(
      edgellm::test::vm_bytes() + (std::size_t{128} << 20), [&] {
        auto t = Tokenizer::from_json(text, "huge-id.json");
        if (t) return std::string("loaded");
        return std::string(edgellm::to_string(t.error().code)) + ": " + t.error().message;
      });
  if (!child.supported) {
    WARN("skipped: RLIMIT_AS does not apply here (" + child.why_unsupported() + ")");
    return;
  }
  INFO(child.describe());
  REQUIRE(child.exited);
  CHECK_THAT(child.output, Contains("out of memory") && Contains("huge-id.json") &&
                               Contains("model.vocab id table") &&
                               Contains("268435456 bytes"));
}

}  // namespace test_model_tokenizer
