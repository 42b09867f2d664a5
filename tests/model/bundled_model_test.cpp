// SPDX-License-Identifier: Apache-2.0
// The bundled KJV models (models/, trained by tools/train_tiny.py) against their Python
// oracles (tests/data/bundled, written by tools/make_bundled_fixtures.py): the tokenizer on the
// tricky-string corpus and the whole held-out text, fp32-reference greedy decoding against
// PyTorch, and held-out perplexity of the int4 model and of each KV cache type.
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/model/transformer.hpp"

#include "support/test_env.hpp"
#include "model/model_test_support.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace json = edgellm::io::json;
using namespace edgellm;
using Ids = std::vector<std::int32_t>;

std::string root() { return test::source_dir(); }

json::Value load_json(const std::string& path) {
  auto text = io::read_text_file(path);
  INFO(path);
  REQUIRE(text.has_value());
  auto v = json::parse(*text, path);
  REQUIRE(v.has_value());
  return std::move(*v);
}

Ids ids_of(const json::Value& v) {
  Ids out;
  for (const json::Value& e : v.as_array()) out.push_back(static_cast<std::int32_t>(e.as_int()));
  return out;
}

model::Tokenizer bundled_tokenizer() {
  auto t = model::Tokenizer::load(root() + "/models/kjv-target-fp16/tokenizer.json");
  INFO((t ? std::string() : t.error().message));
  REQUIRE(t);
  return std::move(*t);
}

std::shared_ptr<const model::TransformerWeights> load(const std::string& name, bool reference) {
  model::LoadOptions o;
  o.fp32_reference = reference;
  auto w = model::load_weights(root() + "/models/" + name, o);
  INFO((w ? std::string() : w.error().message));
  REQUIRE(w);
  return *w;
}

template <class Cache>
model::Transformer<Cache> session(const std::shared_ptr<const model::TransformerWeights>& w,
                                  std::size_t context, kernels::MatmulPath path = kernels::MatmulPath::fast) {
  model::TransformerOptions o;
  o.context_size = context;
  o.max_batch = 128;
  o.path = path;
  auto t = model::Transformer<Cache>::create(w, o);
  INFO((t ? std::string() : t.error().message));
  REQUIRE(t);
  return std::move(*t);
}

/// Mean negative log-likelihood (nats per token) of ids[1..n) given the preceding tokens, in
/// consecutive windows of `window` tokens (each window starts with a fresh cache).
template <class Cache>
double mean_nll(model::Transformer<Cache>& t, const Ids& ids, std::size_t window) {
  const std::size_t V = t.vocab_size();
  std::vector<float> logits(window * V);
  double nll = 0.0;
  std::size_t count = 0;
  for (std::size_t b = 0; b + 1 < ids.size(); b += window) {
    const std::size_t n = std::min(window, ids.size() - b);
    REQUIRE(t.truncate(0));
    REQUIRE(t.forward(std::span(ids).subspan(b, n), decode::LogitsMode::all, logits));
    for (std::size_t i = 0; i + 1 < n; ++i) {
      const float* row = logits.data() + i * V;
      double mx = row[0];
      for (std::size_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double z = 0.0;
      for (std::size_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
      nll += std::log(z) + mx - row[static_cast<std::size_t>(ids[b + i + 1])];
      ++count;
    }
  }
  return nll / static_cast<double>(count);
}

}  // namespace

TEST_CASE("bundled tokenizer matches the Python oracle on the corpus and the held-out text",
          "[bundled][tokenizer]") {
  const model::Tokenizer t = bundled_tokenizer();
  const json::Value expected = load_json(root() + "/tests/data/bundled/expected_kjv_tokenizer.json");
  for (const json::Value& c : expected.find("cases")->as_array()) {
    const std::string& text = c.find("text")->as_string();
    INFO("text " << text.substr(0, 80));
    auto got = t.encode(text);
    REQUIRE(got);
    CHECK(*got == ids_of(*c.find("ids")));
    auto plain = t.encode(text, {.add_special = false, .parse_special = false});
    REQUIRE(plain);
    CHECK(*plain == ids_of(*c.find("ids_plain")));
    CHECK(t.decode(*got) == c.find("decoded")->as_string());
    // Byte-level BPE with an NFC normalizer: decode(encode(s)) == NFC(s) for every string.
    CHECK(t.decode(*plain) == detail::unicode::nfc(text));
  }
  for (const json::Value& c : expected.find("random_decodes")->as_array())
    CHECK(t.decode(ids_of(*c.find("ids"))) == c.find("decoded")->as_string());

  auto held = io::read_text_file(root() + "/models/kjv-heldout.txt");
  REQUIRE(held);
  const Ids want = ids_of(*load_json(root() + "/tests/data/bundled/heldout_ids.json").find("ids"));
  auto ids = t.encode(*held, {.add_special = false, .parse_special = false});
  REQUIRE(ids);
  CHECK(ids->size() == want.size());
  CHECK(*ids == want);
  CHECK(t.decode(*ids) == *held);
  auto stream = t.stream_decoder();
  std::string streamed;
  for (const std::int32_t id : *ids) streamed += stream.push(id);
  streamed += stream.flush();
  CHECK(streamed == *held);
}

TEST_CASE("bundled fp16 target in fp32 reference mode: greedy tokens equal PyTorch's",
          "[bundled][model]") {
  const json::Value expected = load_json(root() + "/tests/data/bundled/greedy_fp16.json");
  auto w = load("kjv-target-fp16", true);
  auto t = session<cache::KVCacheF32>(w, 256, kernels::MatmulPath::exact);
  const std::size_t V = t.vocab_size();
  std::vector<float> logits(V);
  bool first = true;
  for (const json::Value& c : expected.find("cases")->as_array()) {
    INFO("prompt " << c.find("prompt")->as_string());
    const Ids prompt = ids_of(*c.find("ids")), want = ids_of(*c.find("greedy"));
    REQUIRE(t.truncate(0));
    REQUIRE(t.forward(prompt, decode::LogitsMode::last, logits));
    if (first) {
      // Same fp32 math, different summation order: ~1e-6 of the logit range.
      std::vector<float> ref;
      for (const json::Value& x : c.find("last_logits")->as_array())
        ref.push_back(static_cast<float>(x.as_double()));
      REQUIRE(ref.size() == V);
      CHECK(test::max_abs_diff(logits.data(), ref.data(), V) / test::logit_range(ref) < 1e-4f);
      first = false;
    }
    Ids got;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const std::int32_t next = test::argmax(logits.data(), V);
      got.push_back(next);
      if (i + 1 < want.size()) REQUIRE(t.forward(std::span(&next, 1), decode::LogitsMode::last, logits));
    }
    CHECK(got == want);
  }
}

TEST_CASE("bundled models: held-out perplexity of int4 weights and of each KV cache type",
          "[bundled][model]") {
  const Ids all = ids_of(*load_json(root() + "/tests/data/bundled/heldout_ids.json").find("ids"));
  const std::size_t n = test::scaled<std::size_t>(2048, 512), window = 512;
  const Ids ids(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(std::min(n, all.size())));
  auto fp16 = load("kjv-target-fp16", false);  // int4 by RTN at load, fast path
  auto awq = load("kjv-target-awq", false);
  auto s_f32 = session<cache::KVCacheF32>(awq, window);
  auto s_f16 = session<cache::KVCacheF16>(awq, window);
  const double nll_f32 = mean_nll(s_f32, ids, window);
  const double nll_f16 = mean_nll(s_f16, ids, window);
  auto s_q8 = session<cache::KVCacheQ8>(awq, window);
  const double nll_q8 = mean_nll(s_q8, ids, window);
  auto s_rtn = session<cache::KVCacheF32>(fp16, window);
  const double nll_rtn = mean_nll(s_rtn, ids, window);
  WARN("held-out perplexity over " << ids.size() << " tokens: awq int4 "
                                    << std::exp(nll_f32) << " (f16 KV " << std::exp(nll_f16) << ", int8 KV " << std::exp(nll_q8)
                                    << "), fp16 checkpoint quantised at load " << std::exp(nll_rtn));
  // The model learned something: far below the uniform distribution's log(4096) = 8.3 nats.
  CHECK(nll_f32 < 5.0);
  // The committed AWQ file and RTN at load are the same quantiser (AutoAWQ's, group 128).
  CHECK(std::abs(nll_rtn - nll_f32) / nll_f32 < 0.01);
  // fp16 and int8 keys/values: perplexity within 0.5 % of fp32 KV.
  CHECK(std::abs(std::exp(nll_f16) / std::exp(nll_f32) - 1.0) < 0.005);
  CHECK(std::abs(std::exp(nll_q8) / std::exp(nll_f32) - 1.0) < 0.005);
}
