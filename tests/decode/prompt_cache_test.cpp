// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/decode/prompt_cache.hpp on real fixture transformers (tests/data/model):
// save_prompt_cache / restore_prompt_cache in memory (the restored session's logits are bit for
// bit those of a session that prefilled the prefix itself, int8 and fp32 KV), the file format
// of write_prompt_cache / read_prompt_cache (layout, round trip, overwrite, unwritable path),
// damaged files (missing, empty, bad magic, truncated in each part, flipped bytes in the ids,
// their checksum and the state blob, trailing bytes), and caches from another model, matmul
// path or KV type, which are refused and leave the target model as it was.
#include "edgellm/decode/prompt_cache.hpp"

#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/model/transformer.hpp"
#include "model/model_test_support.hpp"
#include "support/model_archetype.hpp"
#include "support/temp_dir.hpp"
#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <sys/stat.h>

namespace test_decode_prompt_cache {

namespace {

using Catch::Matchers::Contains;
using edgellm::errc;
using edgellm::cache::KVCacheF16;
using edgellm::cache::KVCacheF32;
using edgellm::cache::KVCacheQ8;
using edgellm::decode::LogitsMode;
using edgellm::decode::PromptCache;
using edgellm::kernels::MatmulPath;
using edgellm::model::Transformer;
using edgellm::model::TransformerOptions;
using edgellm::test::TempDir;
using WeightsPtr = std::shared_ptr<const edgellm::model::TransformerWeights>;
namespace decode = edgellm::decode;

// Whether a directory holds only finished files (no temporary file of an atomic write is left).
bool no_temp_files(const TempDir& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().filename().string().find(".tmp") != std::string::npos) return false;
  return true;
}

static_assert(decode::PrefixModel<Transformer<KVCacheQ8>>);
static_assert(decode::PrefixModel<Transformer<KVCacheF16>>);
static_assert(decode::PrefixModel<Transformer<KVCacheF32>>);
static_assert(!decode::PrefixModel<edgellm::test::ModelArchetype>);  // no save/load_prefix

// A prompt of valid ids (every fixture has a 300-token vocabulary and a 128-token context).
const std::vector<std::int32_t> kPrompt = {1,  17, 42,  99,  150, 299, 0,  7,   7,   256, 33,  12,
                                           40, 60, 254, 180, 36,  2,   66, 216, 254, 211, 215, 82};
constexpr std::size_t kHead = 9;        // the cached prefix ("system prompt")
constexpr std::size_t kPrefilled = 15;  // what the saving session had consumed when it saved

std::span<const std::int32_t> prompt(std::size_t from, std::size_t to) {
  return std::span<const std::int32_t>(kPrompt).subspan(from, to - from);
}

WeightsPtr load(const std::string& name) {
  auto w = edgellm::model::load_weights(edgellm::test::model_fixture(name));
  INFO(name << ": " << (w ? std::string() : w.error().message));
  REQUIRE(w);
  return *w;
}

// Fixture weights, loaded once per process (immutable; sessions share them).
WeightsPtr weights(const std::string& name) {
  static std::map<std::string, WeightsPtr> loaded;
  WeightsPtr& w = loaded[name];
  if (!w) w = load(name);
  return w;
}

template <class Cache>
Transformer<Cache> session(const WeightsPtr& w, MatmulPath path = MatmulPath::exact) {
  TransformerOptions o;
  o.path = path;
  auto t = Transformer<Cache>::create(w, o);
  INFO((t ? std::string() : t.error().message));
  REQUIRE(t);
  return std::move(*t);
}

template <class Cache>
std::vector<float> forward_all(Transformer<Cache>& t, std::span<const std::int32_t> ids) {
  std::vector<float> out(ids.size() * t.vocab_size());
  auto st = t.forward(ids, LogitsMode::all, out);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The whole KV state of `t` (its save_prefix blob at position()), to check it did not change.
template <class Cache>
std::vector<std::byte> snapshot(const Transformer<Cache>& t) {
  std::vector<std::byte> blob;
  REQUIRE(t.save_prefix(t.position(), blob));
  return blob;
}

std::uint64_t load_le(const std::string& s, std::size_t at, std::size_t bytes) {
  std::uint64_t v = 0;
  for (std::size_t i = bytes; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(s.at(at + i));
  return v;
}

std::string with_le64(std::string s, std::size_t at, std::uint64_t v) {
  for (std::size_t i = 0; i < 8; ++i) s.at(at + i) = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

std::string flipped(std::string s, std::size_t at, unsigned char mask = 0x01) {
  s.at(at) = static_cast<char>(static_cast<unsigned char>(s.at(at)) ^ mask);
  return s;
}

std::string as_string(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Runs prompt(0, kHead) then prompt(kHead, kPrefilled) through `m` and saves the first kHead.
template <class Cache>
PromptCache prefill_and_save(Transformer<Cache>& m) {
  forward_all(m, prompt(0, kHead));
  forward_all(m, prompt(kHead, kPrefilled));
  PromptCache c;
  auto st = decode::save_prompt_cache(m, prompt(0, kHead), c);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st);
  return c;
}

struct Setup {
  const char* fixture;
  MatmulPath path;
};
// An RTN-quantised fp16 checkpoint on the exact path; AWQ ones on the fast (W4A8) path, one of
// them Qwen3 (per-head q/k norms before the keys are cached).
const Setup kSetups[] = {{"llama-fp16", MatmulPath::exact},
                         {"qwen2-awq-gemm", MatmulPath::fast},
                         {"qwen3-awq-gemm", MatmulPath::fast}};

}  // namespace

TEMPLATE_TEST_CASE("prompt cache: a saved prefix restores the model bit for bit", "[prompt_cache]",
                   KVCacheQ8, KVCacheF32) {
  const Setup s = kSetups[GENERATE(0, 1, 2)];
  INFO(s.fixture << ", " << TestType::type_name);
  const WeightsPtr w = weights(s.fixture);
  const auto head = prompt(0, kHead);
  const auto rest = prompt(kHead, kPrompt.size());

  // The saving session has consumed more than the prefix it saves.
  auto a = session<TestType>(w, s.path);
  const PromptCache saved = prefill_and_save(a);
  CHECK(a.position() == kPrefilled);  // saving leaves the model as it was
  CHECK(saved.tokens == std::vector<std::int32_t>(head.begin(), head.end()));
  std::vector<std::byte> direct;
  REQUIRE(a.save_prefix(kHead, direct));
  CHECK(saved.state == direct);

  // The reference: a session that prefilled the prefix itself, then ran the rest.
  auto c = session<TestType>(w, s.path);
  forward_all(c, head);
  const auto expect = forward_all(c, rest);

  SECTION("into a fresh session over the same weights") {
    auto b = session<TestType>(w, s.path);
    REQUIRE(decode::restore_prompt_cache(b, saved));
    CHECK(b.position() == kHead);
    CHECK(same_bits(forward_all(b, rest), expect));
  }
  SECTION("into a session over a second load of the same checkpoint") {
    auto b = session<TestType>(load(s.fixture), s.path);
    REQUIRE(decode::restore_prompt_cache(b, saved));
    CHECK(b.position() == kHead);
    CHECK(same_bits(forward_all(b, rest), expect));
  }
  SECTION("over a session holding another context, and back into the saving one") {
    auto b = session<TestType>(w, s.path);
    forward_all(b, prompt(3, 20));
    REQUIRE(decode::restore_prompt_cache(b, saved));
    CHECK(b.position() == kHead);
    CHECK(same_bits(forward_all(b, rest), expect));
    // The cache is not consumed: restored again over the advanced session, same bits.
    REQUIRE(decode::restore_prompt_cache(b, saved));
    CHECK(same_bits(forward_all(b, rest), expect));
    REQUIRE(decode::restore_prompt_cache(a, saved));
    CHECK(a.position() == kHead);
    CHECK(same_bits(forward_all(a, rest), expect));
  }
  SECTION("the restored state is what makes the logits") {
    auto bare = session<TestType>(w, s.path);  // the rest without the prefix
    CHECK_FALSE(same_bits(forward_all(bare, rest), expect));
    auto other = session<TestType>(w, s.path);  // the rest after another prefix of equal length
    forward_all(other, prompt(1, 1 + kHead));
    CHECK_FALSE(same_bits(forward_all(other, rest), expect));
  }
}

TEST_CASE("prompt cache: saving more tokens than the model holds fails", "[prompt_cache]") {
  const WeightsPtr w = weights("llama-fp16");
  auto m = session<KVCacheQ8>(w);
  forward_all(m, prompt(0, 5));
  const PromptCache before{{7, 8, 9}, {std::byte{1}, std::byte{2}}};
  PromptCache out = before;

  auto st = decode::save_prompt_cache(m, prompt(0, 6), out);
  REQUIRE_FALSE(st);
  CHECK(st.error().code == errc::invalid_argument);
  CHECK_THAT(st.error().message,
             Contains("[save_prompt_cache] tokens: 6 but the model holds only 5"));
  CHECK(out.tokens == before.tokens);
  CHECK(out.state == before.state);
  CHECK(m.position() == 5);

  auto fresh = session<KVCacheQ8>(w);
  st = decode::save_prompt_cache(fresh, prompt(0, 1), out);
  REQUIRE_FALSE(st);
  CHECK_THAT(st.error().message, Contains("tokens: 1 but the model holds only 0"));
  CHECK(out.tokens == before.tokens);
  CHECK(out.state == before.state);

  // Exactly position() tokens is fine.
  REQUIRE(decode::save_prompt_cache(m, prompt(0, 5), out));
  CHECK(out.tokens == std::vector<std::int32_t>(kPrompt.begin(), kPrompt.begin() + 5));
  CHECK(out.state == snapshot(m));
}

TEST_CASE("prompt cache: empty prefix resets the model; no state is refused", "[prompt_cache]") {
  const WeightsPtr w = weights("llama-fp16");
  auto m = session<KVCacheF32>(w);
  forward_all(m, prompt(0, 7));
  PromptCache empty;
  REQUIRE(decode::save_prompt_cache(m, {}, empty));
  CHECK(empty.tokens.empty());
  CHECK(empty.state.size() == edgellm::cache::kPrefixHeaderBytes + 8);

  TempDir dir("edgellm-prompt-cache");
  const std::string path = dir.file("empty.prompt");
  REQUIRE(decode::write_prompt_cache(path, empty));
  CHECK(std::filesystem::file_size(path) == 24 + empty.state.size());
  auto back = decode::read_prompt_cache(path);
  REQUIRE(back);
  CHECK(back->tokens.empty());
  CHECK(back->state == empty.state);

  REQUIRE(decode::restore_prompt_cache(m, *back));
  CHECK(m.position() == 0);
  auto fresh = session<KVCacheF32>(w);
  CHECK(same_bits(forward_all(m, prompt(0, 7)), forward_all(fresh, prompt(0, 7))));

  // A default PromptCache has no state blob at all.
  const auto state = snapshot(m);
  auto st = decode::restore_prompt_cache(m, PromptCache{});
  REQUIRE_FALSE(st);
  CHECK(st.error().code == errc::format_error);
  CHECK_THAT(st.error().message,
             Contains("[KVCacheF32::import_prefix] blob of 0 bytes is shorter than the 88 bytes"));
  CHECK(m.position() == 7);
  CHECK(snapshot(m) == state);
}

TEMPLATE_TEST_CASE("prompt cache: a file round trip restores bit for bit", "[prompt_cache]",
                   KVCacheQ8, KVCacheF32) {
  INFO(TestType::type_name);
  const WeightsPtr w = weights("llama-fp16");
  const auto head = prompt(0, kHead);
  const auto rest = prompt(kHead, kPrompt.size());
  auto a = session<TestType>(w);
  const PromptCache saved = prefill_and_save(a);
  auto c = session<TestType>(w);
  forward_all(c, head);
  const auto expect = forward_all(c, rest);

  TempDir dir("edgellm-prompt-cache");
  const std::string path = dir.file("system.prompt");
  REQUIRE(decode::write_prompt_cache(path, saved));
  CHECK(std::filesystem::exists(path));
  CHECK(no_temp_files(dir));

  // Layout: magic, u64 count, i32 ids, u64 checksum of the ids, the state blob as is.
  const std::string bytes = edgellm::test::read_file(path);
  REQUIRE(bytes.size() == 8 + 8 + 4 * kHead + 8 + saved.state.size());
  CHECK(bytes.compare(0, 8, "ELLMPCT1") == 0);
  CHECK(load_le(bytes, 8, 8) == kHead);
  for (std::size_t i = 0; i < kHead; ++i)
    CHECK(load_le(bytes, 16 + 4 * i, 4) == static_cast<std::uint32_t>(head[i]));
  CHECK(load_le(bytes, 16 + 4 * kHead, 8) == decode::detail::tokens_checksum(head));
  CHECK(bytes.compare(24 + 4 * kHead, std::string::npos, as_string(saved.state)) == 0);

  auto back = decode::read_prompt_cache(path);
  INFO((back ? std::string() : back.error().message));
  REQUIRE(back);
  CHECK(back->tokens == saved.tokens);
  CHECK(back->state == saved.state);

  auto b = session<TestType>(w);
  REQUIRE(decode::restore_prompt_cache(b, *back));
  CHECK(b.position() == kHead);
  CHECK(same_bits(forward_all(b, rest), expect));

  SECTION("writing over an existing file replaces it") {
    auto m = session<TestType>(w);
    forward_all(m, prompt(10, 14));
    PromptCache shorter;
    REQUIRE(decode::save_prompt_cache(m, prompt(10, 14), shorter));
    REQUIRE(decode::write_prompt_cache(path, shorter));
    auto again = decode::read_prompt_cache(path);
    REQUIRE(again);
    CHECK(again->tokens == std::vector<std::int32_t>(kPrompt.begin() + 10, kPrompt.begin() + 14));
    CHECK(again->state == shorter.state);
    CHECK(no_temp_files(dir));
  }
  SECTION("an unwritable path is an error naming the file, and no file appears") {
    const std::string bad = dir.file("no/such/dir/system.prompt");
    auto st = decode::write_prompt_cache(bad, saved);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::io_error);
    CHECK_THAT(st.error().message, Contains("[write_prompt_cache] '" + bad +
                                            "': cannot create the temporary file '" + bad +
                                            ".tmp."));
    CHECK_THAT(st.error().message, Contains("No such file or directory"));
    CHECK_FALSE(std::filesystem::exists(bad));
  }
}

TEST_CASE("prompt cache: damaged files are refused with a clear error", "[prompt_cache]") {
  const WeightsPtr w = weights("llama-fp16");
  auto src = session<KVCacheQ8>(w);
  const PromptCache saved = prefill_and_save(src);
  TempDir dir("edgellm-prompt-cache");
  const std::string good_path = dir.file("good.prompt");
  REQUIRE(decode::write_prompt_cache(good_path, saved));
  const std::string good = edgellm::test::read_file(good_path);
  const std::size_t ids_at = 16, sum_at = ids_at + 4 * kHead, blob_at = sum_at + 8;
  REQUIRE(good.size() == blob_at + saved.state.size());
  REQUIRE(saved.state.size() > 200);

  // Every refusal leaves this model as it was.
  auto target = session<KVCacheQ8>(w);
  forward_all(target, prompt(2, 7));
  const auto target_state = snapshot(target);
  const auto unchanged = [&] {
    CHECK(target.position() == 5);
    CHECK(snapshot(target) == target_state);
  };

  int count = 0;
  const auto write = [&](const std::string& bytes) {
    return dir.write("bad-" + std::to_string(count++) + ".prompt", bytes);
  };
  // read_prompt_cache refuses the file with a format_error naming it and `what`.
  const auto read_refuses = [&](const std::string& bytes, const std::string& what) {
    const std::string path = write(bytes);
    INFO(path << " (" << bytes.size() << " bytes)");
    auto r = decode::read_prompt_cache(path);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == errc::format_error);
    CHECK_THAT(r.error().message, Contains("[read_prompt_cache] " + path + ": " + what));
  };
  // read_prompt_cache accepts the file (the state is checked on restore), restore refuses it.
  const auto restore_refuses = [&](const std::string& bytes, const std::string& what) {
    const std::string path = write(bytes);
    INFO(path << " (" << bytes.size() << " bytes)");
    auto r = decode::read_prompt_cache(path);
    INFO((r ? std::string() : r.error().message));
    REQUIRE(r);
    CHECK(r->tokens == saved.tokens);
    auto st = decode::restore_prompt_cache(target, *r);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::format_error);
    CHECK_THAT(st.error().message, Contains("[KVCacheQ8::import_prefix] " + what));
    unchanged();
  };
  const std::string bad_magic = "not an edgellm prompt cache (bad magic or too short)";
  const std::string bad_ids = "token ids fail their checksum (corrupted file)";
  const std::string too_many = "token count 9 exceeds the file size";

  SECTION("the good file restores") {
    auto r = decode::read_prompt_cache(good_path);
    REQUIRE(r);
    REQUIRE(decode::restore_prompt_cache(target, *r));
    CHECK(target.position() == kHead);
  }
  SECTION("missing file") {
    const std::string path = dir.file("missing.prompt");
    auto r = decode::read_prompt_cache(path);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == errc::io_error);
    CHECK_THAT(r.error().message, Contains("[MappedFile::open] '" + path + "': cannot open"));
  }
  SECTION("a directory") {
    auto r = decode::read_prompt_cache(dir.str());
    REQUIRE_FALSE(r);
    CHECK(r.error().code == errc::io_error);
    CHECK_THAT(r.error().message, Contains(dir.str()));
  }
  SECTION("empty file") { read_refuses("", bad_magic); }
  SECTION("wrong magic") {
    for (std::size_t i = 0; i < 8; ++i) read_refuses(flipped(good, i), bad_magic);
    read_refuses("ELLMPCT2" + good.substr(8), bad_magic);
    // A Transformer prefix file (the bare KV blob) is not a prompt cache, and the other way round.
    const std::string kv_path = dir.file("prefix.kv");
    REQUIRE(src.save_prefix_file(kHead, kv_path));
    read_refuses(edgellm::test::read_file(kv_path), bad_magic);
    auto st = target.load_prefix_file(good_path);
    REQUIRE_FALSE(st);
    CHECK_THAT(
        st.error().message,
        Contains(good_path + ": [KVCacheQ8::import_prefix] not a KV prefix blob (bad magic)"));
    unchanged();
  }
  SECTION("truncated inside the header") {
    for (std::size_t cut : {1, 7, 8, 12, 16, 23}) read_refuses(good.substr(0, cut), bad_magic);
  }
  SECTION("truncated inside the token ids or their checksum") {
    for (std::size_t cut : {ids_at + 8, ids_at + 4 * 4 + 2, sum_at, sum_at + 4, blob_at - 1})
      read_refuses(good.substr(0, cut), too_many);
  }
  SECTION("truncated inside the state blob: read accepts it, restore refuses it") {
    const std::size_t n = saved.state.size();
    restore_refuses(good.substr(0, blob_at), "blob of 0 bytes is shorter than the 88 bytes");
    restore_refuses(good.substr(0, blob_at + 40), "blob of 40 bytes is shorter than the 88 bytes");
    restore_refuses(good.substr(0, blob_at + 88),
                    "blob of 88 bytes but its header describes more (truncated or corrupted)");
    restore_refuses(good.substr(0, blob_at + n / 2),
                    "blob of " + std::to_string(n / 2) + " bytes but its header describes more");
    restore_refuses(good.substr(0, good.size() - 1),
                    "blob of " + std::to_string(n - 1) + " bytes but its header describes " +
                        std::to_string(n) + " (truncated or corrupted)");
  }
  SECTION("a flipped byte in the token ids or their checksum") {
    for (std::size_t at = ids_at; at < blob_at; ++at) read_refuses(flipped(good, at), bad_ids);
    read_refuses(flipped(good, ids_at + 5, 0x80), bad_ids);
  }
  SECTION("a corrupted token count") {
    read_refuses(with_le64(good, 8, kHead - 1), bad_ids);  // the checksum is read from the ids
    read_refuses(with_le64(good, 8, kHead + 1), bad_ids);  // an id is read from the checksum
    read_refuses(with_le64(good, 8, ~std::uint64_t{0}),
                 "token count " + std::to_string(~std::uint64_t{0}) + " exceeds the file size");
    // 4 * n wraps around to 4 * kHead: must still be refused, not read out of bounds.
    const std::uint64_t wraps = (std::uint64_t{1} << 62) + kHead;
    read_refuses(with_le64(good, 8, wraps),
                 "token count " + std::to_string(wraps) + " exceeds the file size");
  }
  SECTION("a flipped byte in the state blob: read accepts it, restore refuses it") {
    const std::size_t n = saved.state.size();
    for (std::size_t at : {blob_at + 40, blob_at + 88, blob_at + 88 + 150, blob_at + n / 2,
                           good.size() - 9, good.size() - 1}) {
      restore_refuses(flipped(good, at), "checksum mismatch");
    }
    restore_refuses(flipped(good, blob_at), "not a KV prefix blob (bad magic)");
  }
  SECTION("trailing bytes become part of the state: read accepts them, restore refuses them") {
    const std::size_t n = saved.state.size();
    restore_refuses(good + "x", "blob of " + std::to_string(n + 1) +
                                    " bytes but its header describes " + std::to_string(n) +
                                    " (truncated or corrupted)");
    restore_refuses(good + good, "blob of " + std::to_string(2 * n + blob_at) +
                                     " bytes but its header describes " + std::to_string(n));
  }
}

TEST_CASE("prompt cache: another model, path or KV type is refused", "[prompt_cache]") {
  const WeightsPtr w = weights("llama-fp16");
  const auto save_from = [](auto&& m) {
    forward_all(m, prompt(0, kHead));
    PromptCache c;
    REQUIRE(decode::save_prompt_cache(m, prompt(0, kHead), c));
    return c;
  };
  // The target has consumed 5 tokens of the same prompt; its twin never sees a bad cache.
  auto target = session<KVCacheQ8>(w);
  auto twin = session<KVCacheQ8>(w);
  forward_all(target, prompt(0, 5));
  forward_all(twin, prompt(0, 5));
  const auto state = snapshot(target);
  const auto refused = [&](const PromptCache& c, const std::string& what) {
    auto st = decode::restore_prompt_cache(target, c);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::invalid_argument);
    CHECK_THAT(st.error().message, Contains("[KVCacheQ8::import_prefix] " + what));
    CHECK(target.position() == 5);
    CHECK(snapshot(target) == state);
  };
  const auto fingerprint = [&](std::uint64_t other) {
    return "the prefix was saved by another model: fingerprint " +
           edgellm::detail::hex64(other) + ", this model's is " +
           edgellm::detail::hex64(target.model_fingerprint());
  };

  SECTION("another model of another shape") {
    auto other = session<KVCacheQ8>(weights("qwen2-fp16"));
    CHECK(other.model_fingerprint() != target.model_fingerprint());
    refused(save_from(other), fingerprint(other.model_fingerprint()));
  }
  SECTION("another model of the same shape") {
    auto other = session<KVCacheQ8>(weights("llama-awq-gemm"));
    CHECK(other.model_fingerprint() != target.model_fingerprint());
    refused(save_from(other), fingerprint(other.model_fingerprint()));
  }
  SECTION("the same weights on the other matmul path") {
    auto other = session<KVCacheQ8>(w, MatmulPath::fast);
    CHECK(other.model_fingerprint() != target.model_fingerprint());
    refused(save_from(other), fingerprint(other.model_fingerprint()));
  }
  SECTION("another KV type, in memory and through a file") {
    auto f32 = session<KVCacheF32>(w);
    CHECK(f32.model_fingerprint() == target.model_fingerprint());
    const PromptCache c = save_from(f32);
    refused(c, "the prefix holds KV type KVCacheF32, this cache is KVCacheQ8");
    TempDir dir("edgellm-prompt-cache");
    REQUIRE(decode::write_prompt_cache(dir.file("f32.prompt"), c));
    auto back = decode::read_prompt_cache(dir.file("f32.prompt"));
    REQUIRE(back);
    refused(*back, "the prefix holds KV type KVCacheF32, this cache is KVCacheQ8");
    // And the other way round.
    auto q8 = session<KVCacheQ8>(w);
    auto st = decode::restore_prompt_cache(f32, save_from(q8));
    REQUIRE_FALSE(st);
    CHECK_THAT(st.error().message, Contains("[KVCacheF32::import_prefix] the prefix holds KV type "
                                            "KVCacheQ8, this cache is KVCacheF32"));
    CHECK(f32.position() == kHead);
  }
  // Whatever was refused, the target continues exactly like its twin.
  CHECK(same_bits(forward_all(target, prompt(5, 12)), forward_all(twin, prompt(5, 12))));
}

TEST_CASE("prompt cache: a token/state length mismatch is refused", "[prompt_cache]") {
  // A cache whose ids and state disagree (5 ids, a state of 9 positions) would leave the caller
  // feeding tokens at the wrong position: refused by restore_prompt_cache and read_prompt_cache.
  const WeightsPtr w = weights("llama-fp16");
  auto src = session<KVCacheQ8>(w);
  const PromptCache saved = prefill_and_save(src);  // 9 ids, state of 9 positions
  const PromptCache lying{std::vector<std::int32_t>(kPrompt.begin(), kPrompt.begin() + 5),
                          saved.state};

  auto m = session<KVCacheQ8>(w);
  auto st = decode::restore_prompt_cache(m, lying);
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("holds 9 positions") != std::string::npos);
  CHECK(m.position() == 0);

  TempDir dir("edgellm-prompt-cache");
  const std::string path = dir.file("lying.prompt");
  REQUIRE(decode::write_prompt_cache(path, lying));
  auto back = decode::read_prompt_cache(path);
  REQUIRE_FALSE(back);
  CHECK(back.error().message.find(path) != std::string::npos);
  CHECK(back.error().message.find("holds 9 positions") != std::string::npos);
}

TEST_CASE("prompt cache: devices, FIFOs and directories are refused at once, never read",
          "[prompt_cache]") {
  TempDir dir("edgellm-prompt-cache");
  const std::string fifo = dir.file("fifo.prompt");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& path : {std::string("/dev/zero"), std::string("/dev/full"), fifo,
                                 dir.path().string()}) {
    if (!std::filesystem::exists(path)) continue;
    INFO(path);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = decode::read_prompt_cache(path);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == errc::io_error);
    CHECK_THAT(r.error().message, Contains("'" + path + "': is a "));
    CHECK_THAT(r.error().message, Contains("not a regular file"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  }
}

TEST_CASE("prompt cache: a file that is not a prompt cache is never overwritten",
          "[prompt_cache]") {
  TempDir dir("edgellm-prompt-cache");
  PromptCache c;
  c.tokens = {1, 2, 3};
  c.state.assign(64, std::byte{7});  // write_prompt_cache does not look into the state

  const std::string notes = dir.write("notes.txt", "my notes");
  auto st = decode::write_prompt_cache(notes, c);
  REQUIRE_FALSE(st);
  CHECK(st.error().code == errc::io_error);
  CHECK_THAT(st.error().message, Contains("[write_prompt_cache] '" + notes +
                                          "': exists and is not an edgellm prompt cache; not "
                                          "overwritten"));
  CHECK(edgellm::test::read_file(notes) == "my notes");

  auto d = decode::write_prompt_cache(dir.path().string(), c);
  REQUIRE_FALSE(d);
  CHECK_THAT(d.error().message, Contains("is a directory"));

  // Nothing, an empty file (mktemp's) or an older prompt cache: written.
  const std::string path = dir.file("system.prompt");
  REQUIRE(decode::write_prompt_cache(path, c));
  c.tokens = {4, 5};
  REQUIRE(decode::write_prompt_cache(path, c));
  auto back = decode::read_prompt_cache(path);
  REQUIRE(back);
  CHECK(back->tokens == c.tokens);
  const std::string empty = dir.write("empty.prompt", "");
  REQUIRE(decode::write_prompt_cache(empty, c));

  // check_prompt_cache_path says the same before anything is written (or a model loaded).
  CHECK(decode::check_prompt_cache_path(path));
  CHECK(decode::check_prompt_cache_path(dir.file("missing.prompt")));
  auto other = decode::check_prompt_cache_path(notes);
  REQUIRE_FALSE(other);
  CHECK_THAT(other.error().message, Contains("[check_prompt_cache_path] '" + notes +
                                             "': exists and is not an edgellm prompt cache"));
  CHECK_FALSE(decode::check_prompt_cache_path(dir.path().string()));
}

}  // namespace test_decode_prompt_cache
