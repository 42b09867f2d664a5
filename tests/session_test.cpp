// SPDX-License-Identifier: Apache-2.0
// The session facade on the bundled model: the same tokens as the low-level path, two sessions
// over one Engine on two threads, cancel from the callback, reset, the cached prompt prefix,
// KV types, prompt cache, speculative decoding, errors that name what was wrong, two threads
// loading one checkpoint, and loading and generating under an address-space limit.
#include "edgellm/session.hpp"

#include "support/limited_child.hpp"
#include "support/temp_dir.hpp"
#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace test_session {

namespace {

using namespace edgellm;
using Ids = std::vector<std::int32_t>;

std::string model_dir(const char* name = "kjv-target-awq") {
  return test::source_dir() + "/models/" + name;
}

std::shared_ptr<const Engine> load_engine(const EngineOptions& o = {}, const char* name = "kjv-target-awq") {
  auto e = Engine::load(model_dir(name), o);
  INFO((e ? std::string() : e.error().message));
  REQUIRE(e);
  return *e;
}

SessionOptions greedy() {
  SessionOptions o;
  o.sampling = decode::SamplingOptions::greedy();
  return o;
}

Session make_session(std::shared_ptr<const Engine> engine, const SessionOptions& o = greedy()) {
  auto s = Session::create(std::move(engine), o);
  INFO((s ? std::string() : s.error().message));
  REQUIRE(s);
  return std::move(*s);
}

Ids generate_ids(Session& s, std::string_view prompt, std::size_t n) {
  GenerateOptions g;
  g.max_new_tokens = n;
  g.ignore_eos = true;
  auto out = s.generate(prompt, g);
  INFO((out ? std::string() : out.error().message));
  REQUIRE(out);
  CHECK(out->tokens.size() == n);
  return out->tokens;
}

}  // namespace

TEST_CASE("Session: greedy tokens equal the low-level Transformer + PlainDecoder path", "[session]") {
  const auto engine = load_engine();
  REQUIRE(engine->tokenizer() != nullptr);
  for (const auto kv : {cache::KvType::int8, cache::KvType::f16, cache::KvType::f32,
                        cache::KvType::int4}) {
    INFO(cache::kv_type_name(kv));
    SessionOptions so = greedy();
    so.kv_type = kv;
    so.context_size = 256;
    Session s = make_session(engine, so);
    CHECK(s.kv_type() == kv);
    const Ids got = generate_ids(s, "And God said", 24);

    Ids want;
    cache::with_kv_type(kv, [&](auto tag) {
      using M = model::Transformer<typename decltype(tag)::type>;
      auto m = M::create(engine->weights(), {.context_size = 256});
      REQUIRE(m);
      auto sampler = decode::Sampler::create(decode::SamplingOptions::greedy());
      REQUIRE(sampler);
      auto dec = decode::PlainDecoder<M>::create(*m);
      REQUIRE(dec);
      auto prompt = engine->tokenizer()->encode("And God said");
      REQUIRE(prompt);
      decode::GenerateOptions go;
      go.max_new_tokens = 24;
      auto st = decode::generate(*dec, *sampler, *engine->tokenizer(), *prompt, go,
                                 [](std::string_view) { return true; }, &want);
      REQUIRE(st);
    });
    CHECK(got == want);
    CHECK(s.position() > 0);
    CHECK(s.stats().generations == 1);
    CHECK(s.stats().new_tokens == 24);
    CHECK(s.stats().last.time_to_first_token_s > 0.0);
  }
}

TEST_CASE("Session: two sessions over one Engine on two threads give the tokens of one alone", "[session]") {
  EngineOptions eo;
  eo.threads = 2;  // the Engine's pool, shared by both sessions (its run() serialises them)
  const auto engine = load_engine(eo);
  REQUIRE(engine->pool() != nullptr);
  const std::string prompts[2] = {"And God said", "In the beginning"};
  Ids alone[2];
  for (int i = 0; i < 2; ++i) {
    Session s = make_session(engine);
    alone[i] = generate_ids(s, prompts[i], 32);
  }
  CHECK(alone[0] != alone[1]);

  Session a = make_session(engine), b = make_session(engine);
  Ids got[2];
  std::string errors[2];
  const auto work = [&](Session& s, int i) {
    GenerateOptions g;
    g.max_new_tokens = 32;
    g.ignore_eos = true;
    auto out = s.generate(prompts[i], g);
    if (out) got[i] = out->tokens;
    else errors[i] = out.error().message;
  };
  std::thread ta(work, std::ref(a), 0), tb(work, std::ref(b), 1);
  ta.join();
  tb.join();
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  CHECK(got[0] == alone[0]);
  CHECK(got[1] == alone[1]);
}

TEST_CASE("Session: the callback cancels within one token and the session goes on", "[session]") {
  const auto engine = load_engine();
  Session s = make_session(engine);
  const Ids want = generate_ids(s, "And God said", 20);

  REQUIRE(s.reset());
  std::size_t calls = 0;
  std::string text;
  GenerateOptions g;
  g.max_new_tokens = 20;
  g.ignore_eos = true;
  auto out = s.generate("And God said", g, [&](std::string_view piece, std::int32_t token) {
    text += piece;
    CHECK(token >= 0);
    return ++calls < 3;
  });
  REQUIRE(out);
  CHECK(out->stats.stop == decode::StopReason::callback);
  CHECK(calls == 3);
  REQUIRE(out->tokens.size() >= 3);
  CHECK(out->tokens.size() <= 4);  // the token that completed the third piece, at most one more
  CHECK(Ids(want.begin(), want.begin() + static_cast<long>(out->tokens.size())) == out->tokens);
  CHECK_FALSE(text.empty());

  // Usable again: the same prompt gives the same greedy tokens as before.
  CHECK(generate_ids(s, "And God said", 20) == want);
}

TEST_CASE("Session: reset forgets the conversation and restarts the sampler", "[session]") {
  const auto engine = load_engine();
  SessionOptions so;
  so.sampling.seed = 42;  // sampled, not greedy
  Session s = make_session(engine, so);
  const Ids first = generate_ids(s, "And God said", 16);
  const Ids second = generate_ids(s, "And God said", 16);  // the random stream went on
  CHECK(first != second);
  REQUIRE(s.reset());
  CHECK(s.position() == 0);
  CHECK(s.stats().generations == 0);
  CHECK(generate_ids(s, "And God said", 16) == first);
  REQUIRE(s.set_sampling(decode::SamplingOptions::greedy()));
  Session greedy = make_session(engine);
  CHECK(generate_ids(s, "And the LORD", 8) == generate_ids(greedy, "And the LORD", 8));
}

TEST_CASE("Session: cached_tokens counts the prompt prefix the cache kept", "[session]") {
  const auto engine = load_engine();
  const model::Tokenizer& tok = *engine->tokenizer();
  auto p = tok.encode("And God said, Let there be light", {.add_special = true});
  REQUIRE(p);
  const Ids first = *p;
  for (const bool lookup : {false, true}) {
    INFO((lookup ? "prompt lookup" : "plain"));
    SessionOptions so = greedy();
    so.prompt_lookup = lookup;
    Session s = make_session(engine, so);
    GenerateOptions g;
    g.max_new_tokens = 6;
    g.ignore_eos = true;
    auto a = s.generate(std::span<const std::int32_t>(first), g);
    REQUIRE(a);
    CHECK(a->stats.cached_tokens == 0);
    CHECK(a->stats.prefilled_tokens() == first.size());
    // The next turn extends the first prompt with the answer and more: the cache holds the
    // prompt and the emitted tokens but the last (pending, never forwarded).
    const std::size_t held = s.position();
    if (!lookup) CHECK(held == first.size() + a->tokens.size() - 1);
    Ids second = first;
    second.insert(second.end(), a->tokens.begin(), a->tokens.end());
    second.insert(second.end(), first.begin() + 1, first.end());
    auto b = s.generate(std::span<const std::int32_t>(second), g);
    REQUIRE(b);
    CHECK(b->stats.prompt_tokens == second.size());
    if (lookup) {  // a speculative step may have verified tokens past the budget: not these
      CHECK(b->stats.cached_tokens >= first.size());
      CHECK(b->stats.cached_tokens <= first.size() + a->tokens.size());
    } else {
      CHECK(b->stats.cached_tokens == held);
    }
    CHECK(b->stats.prefilled_tokens() == second.size() - b->stats.cached_tokens);
    CHECK(s.stats().cached_tokens == b->stats.cached_tokens);
    // A prompt that diverges at token 3 keeps 3; after reset, none.
    Ids third(first.begin(), first.begin() + 3);
    third.push_back(first[1]);
    auto c = s.generate(std::span<const std::int32_t>(third), g);
    REQUIRE(c);
    CHECK(c->stats.cached_tokens == 3);
    REQUIRE(s.reset());
    auto d = s.generate(std::span<const std::int32_t>(second), g);
    REQUIRE(d);
    CHECK(d->stats.cached_tokens == 0);
  }
}

TEST_CASE("Session: speculative decoding and prompt lookup keep greedy tokens", "[session]") {
  const auto engine = load_engine();
  Session plain = make_session(engine);
  const Ids want = generate_ids(plain, "And God said", 24);

  const auto draft = load_engine(EngineOptions::draft_of(engine->options()), "kjv-draft-awq");
  CHECK(draft->tokenizer() == nullptr);
  SessionOptions so = greedy();
  so.draft = draft;
  so.speculative.k = 3;
  Session spec = make_session(engine, so);
  CHECK(generate_ids(spec, "And God said", 24) == want);
  REQUIRE(spec.speculative_stats() != nullptr);
  CHECK(spec.speculative_stats()->drafted > 0);

  SessionOptions lo = greedy();
  lo.prompt_lookup = true;
  Session lookup = make_session(engine, lo);
  CHECK(generate_ids(lookup, "And God said", 24) == want);
  CHECK(plain.speculative_stats() == nullptr);
}

TEST_CASE("Session: a profile counts the target's ops and fork-joins, tokens unchanged",
          "[session]") {
  const auto engine = load_engine();
  auto pool = ThreadPool::create(2);
  REQUIRE(pool);
  SessionOptions so = greedy();
  so.pool = pool->get();
  Session plain = make_session(engine, so);
  const Ids want = generate_ids(plain, "And God said", 8);

  backend::Profile profile;
  so.profile = &profile;
  const std::uint64_t regions0 = (*pool)->regions();
  Session profiled = make_session(engine, so);
  CHECK(generate_ids(profiled, "And God said", 8) == want);
  const std::size_t L = engine->config().num_hidden_layers;
  const std::uint64_t chunks = profile[backend::OpKind::embed].calls;  // one per forward chunk
  CHECK(chunks >= 8);                                                   // prefill + 7 steps
  CHECK(profile[backend::OpKind::other].calls == 2 * chunks);           // begin, finish
  for (auto k : {backend::OpKind::qkv, backend::OpKind::attention, backend::OpKind::o_proj,
                 backend::OpKind::gate_up, backend::OpKind::silu_mul, backend::OpKind::down})
    CHECK(profile[k].calls == L * chunks);
  CHECK(profile[backend::OpKind::rope].calls == 2 * L * chunks);
  CHECK(profile[backend::OpKind::add].calls == 2 * L * chunks);
  CHECK(profile[backend::OpKind::lm_head].calls >= 8);
  CHECK(profile[backend::OpKind::qkv].regions >= L * chunks);  // each matmul forks at least once
  CHECK(profile.total().regions == (*pool)->regions() - regions0);
  CHECK(profile.total().ns > 0);

  // With a draft model only the target's steps are counted: still L of each per chunk.
  backend::Profile spec_profile;
  SessionOptions spec_o = so;
  spec_o.profile = &spec_profile;
  spec_o.draft = load_engine(EngineOptions::draft_of(engine->options()), "kjv-draft-awq");
  Session spec = make_session(engine, spec_o);
  CHECK(generate_ids(spec, "And God said", 8) == want);
  const std::uint64_t spec_chunks = spec_profile[backend::OpKind::embed].calls;
  CHECK(spec_chunks > 0);
  CHECK(spec_profile[backend::OpKind::qkv].calls == L * spec_chunks);
}

TEST_CASE("Session: a prompt cache file restores the prefix", "[session]") {
  const auto engine = load_engine();
  test::TempDir dir("edgellm-session");
  const std::string path = dir.file("prompt.bin");
  Session a = make_session(engine);
  const Ids want = generate_ids(a, "In the beginning God created the heaven", 12);
  REQUIRE(a.save_prompt_cache(path));

  Session b = make_session(engine);
  auto held = b.load_prompt_cache(path);
  INFO((held ? std::string() : held.error().message));
  REQUIRE(held);
  CHECK(held->size() == b.position());
  CHECK(generate_ids(b, "In the beginning God created the heaven", 12) == want);

  // Another KV type's state is refused, the file named; the session is unchanged.
  SessionOptions so = greedy();
  so.kv_type = cache::KvType::f32;
  Session c = make_session(engine, so);
  auto bad = c.load_prompt_cache(path);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains(path));
  CHECK(c.position() == 0);
}

TEST_CASE("Session: errors are values that name what was wrong", "[session]") {
  const std::string missing = test::source_dir() + "/models/no-such-model";
  auto e = Engine::load(missing);
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error().message, Catch::Contains(missing));

  const auto engine = load_engine();
  CHECK_FALSE(Session::create(nullptr));
  SessionOptions both;
  both.draft = engine;
  both.prompt_lookup = true;
  CHECK_FALSE(Session::create(engine, both));
  SessionOptions bad_sampling;
  bad_sampling.sampling.top_p = 2.0f;
  CHECK_FALSE(Session::create(engine, bad_sampling));
  SessionOptions no_batch;
  no_batch.max_batch = 0;
  CHECK_FALSE(Session::create(engine, no_batch));

  Session s = make_session(engine);
  CHECK_FALSE(s.generate(""));
  CHECK_FALSE(s.generate("And", {.max_new_tokens = 0}));
  const Ids out_of_range = {1, static_cast<std::int32_t>(engine->config().vocab_size)};
  CHECK_FALSE(s.generate(std::span<const std::int32_t>(out_of_range)));
  CHECK_FALSE(s.save_prompt_cache(std::string(missing) + "/x.bin"));  // no prompt yet
  CHECK(generate_ids(s, "And", 4).size() == 4);  // still usable

  EngineOptions no_tok;
  no_tok.load_tokenizer = false;
  Session blind = make_session(load_engine(no_tok));
  auto r = blind.generate("And");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("tokenizer"));

  SessionOptions lookup;
  lookup.prompt_lookup = true;
  Session spec = make_session(engine, lookup);
  CHECK_FALSE(spec.load_prompt_cache(missing));
}

TEST_CASE("Session: an exception from the callback reaches the caller; the session goes on",
          "[session]") {
  // The library turns its own exceptions into errors; the application's are its own.
  Session s = make_session(load_engine());
  GenerateOptions g;
  g.max_new_tokens = 8;
  struct Stop {};
  CHECK_THROWS_AS(s.generate("And God said", g, [](std::string_view, std::int32_t) -> bool {
    throw Stop{};
  }), Stop);
  CHECK(generate_ids(s, "And God said", 4).size() == 4);
}

TEST_CASE("Session: two threads load one checkpoint with packed_cache auto", "[session]") {
  // Both loads may build and write the cache at once; each must load, and both Engines must
  // generate the tokens of a load without the cache. (Under ThreadSanitizer: no reports.)
  test::TempDir tmp("edgellm-session-load");
  const std::string dir = tmp.file("model");
  std::filesystem::copy(model_dir("kjv-draft-awq"), dir);
  const auto plain = load_engine({}, "kjv-draft-awq");
  Session ref = make_session(plain);
  const Ids want = generate_ids(ref, "And God said", 8);

  EngineOptions eo;
  eo.load.packed_cache = "auto";
  std::shared_ptr<const Engine> got[2];
  std::string errors[2];
  const auto work = [&](int i) {
    auto e = Engine::load(dir, eo);
    if (e) got[i] = *e;
    else errors[i] = e.error().message;
  };
  std::thread ta(work, 0), tb(work, 1);
  ta.join();
  tb.join();
  for (int i = 0; i < 2; ++i) {
    INFO(errors[i]);
    REQUIRE(got[i]);
    Session s = make_session(got[i]);
    CHECK(generate_ids(s, "And God said", 8) == want);
  }
}

namespace {
// A child's report: "ok <tokens>" or "error <code>: <message>".
std::string load_and_generate(const std::string& dir) {
  EngineOptions eo;
  eo.threads = 2;  // a pool: its threads are created under the limit too
  auto e = Engine::load(dir, eo);
  if (!e) return std::string("error ") + to_string(e.error().code) + ": " + e.error().message;
  SessionOptions so = greedy();
  so.context_size = 64;
  auto s = Session::create(*e, so);
  if (!s) return std::string("error ") + to_string(s.error().code) + ": " + s.error().message;
  GenerateOptions g;
  g.max_new_tokens = 4;
  g.ignore_eos = true;
  auto out = s->generate("And God said", g);
  if (!out) return std::string("error ") + to_string(out.error().code) + ": " + out.error().message;
  std::string r = "ok";
  for (const std::int32_t t : out->tokens) r += " " + std::to_string(t);
  return r;
}

std::size_t vm_peak_bytes() {  // /proc/self/status VmPeak, 0 where unknown
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmPeak:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  return 0;
}
}  // namespace

TEST_CASE("Session: under an address-space limit, load and generate end cleanly", "[memory_limit]") {
  // Engine::load (weights, tokenizer, a 2-thread pool), Session::create and a 4-token generation
  // in a child under RLIMIT_AS, at limits from just above the baseline to above what they need:
  // each child ends with "ok" and the unlimited run's tokens, or an error value, never a signal.
  const std::string dir = model_dir("kjv-draft-awq");
  const std::size_t base = test::vm_bytes();
  std::size_t need = 0;
  std::string want;
  const auto measure = test::run_limited(0, [&] {  // no limit: how much the run maps at most
    std::string r = load_and_generate(dir);
    return std::to_string(vm_peak_bytes()) + " " + r;
  });
  if (!measure.supported) {
    WARN("skipped: RLIMIT_AS does not apply here (" + measure.why_unsupported() + ")");
    return;
  }
  INFO(measure.describe());
  REQUIRE(measure.exited);
  const auto space = measure.output.find(' ');
  need = std::stoull(measure.output.substr(0, space)) - base;
  want = measure.output.substr(space + 1);
  REQUIRE(want.rfind("ok ", 0) == 0);

  // 21 limits: base + 64 KiB, then need / 2^(i/2) for i = 18 .. 0 (steps of sqrt(2); most of
  // `need` is address space reserved but barely used: a thread's stack, its malloc arena), then
  // need * 5/4. The failures land in different places: mapping the checkpoint, converting
  // weights, the tokenizer, the pool's threads, the session's cache, generation.
  std::vector<std::size_t> limits = {base + (std::size_t{64} << 10)};
  for (int i = 18; i >= 0; --i)
    limits.push_back(base + (i % 2 ? (need >> (i / 2 + 1)) * 1414 / 1000 : need >> (i / 2)));
  limits.push_back(base + need * 5 / 4);
  std::size_t oks = 0, errors = 0;
  std::string table;
  for (const std::size_t limit : limits) {
    const auto child = test::run_limited(limit, [&] { return load_and_generate(dir); });
    if (!child.supported) {  // the emulator ignores the limit (qemu-user)
      WARN("skipped: RLIMIT_AS does not apply here (" + child.why_unsupported() + ")");
      return;
    }
    table += "  base + " + std::to_string((limit - base) >> 10) + " KiB: " +
             (child.exited ? child.output.substr(0, 120) : child.describe()) + "\n";
    INFO(table);
    REQUIRE(child.exited);
    if (child.output == want) {
      ++oks;
    } else {
      CHECK(child.output.rfind("error ", 0) == 0);
      ++errors;
    }
  }
  INFO(table);
  CHECK(oks >= 1);
  CHECK(errors >= 1);
  WARN("baseline " + std::to_string(base >> 10) + " KiB, the run maps up to " +
       std::to_string(need >> 10) + " KiB more:\n" + table);
}

}  // namespace test_session
