// SPDX-License-Identifier: Apache-2.0
// The bundled KJV models (models/, trained by tools/train_tiny.py) against their Python
// oracles (tests/data/bundled, written by tools/make_bundled_fixtures.py): the tokenizer on the
// tricky-string corpus and the whole held-out text, fp32-reference greedy decoding against
// PyTorch, and held-out perplexity of the int4 model and of each KV cache type.
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/decode/model.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/model/transformer.hpp"

#include "support/test_env.hpp"
#include "model/model_test_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace test_model_bundled_model {

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

namespace {

/// A KVCache that runs the fp32 cache and the int8 cache side by side on the same keys, values
/// and queries (the bundled model's own activations, every layer) and keeps per (query, head)
/// the relative L2 error of the int8 attention output against the fp32 one. The model continues
/// on the fp32 output, so every layer sees exactly the activations of an fp32-KV run.
struct DualCache {
  cache::KVCacheF32 f32;
  cache::KVCacheQ8 q8;
  std::vector<float> out_q8;                       // scratch [n_q][heads][head_dim]
  std::shared_ptr<std::vector<double>> rel_error;  // one per (query, head, layer) attended
  std::shared_ptr<std::pair<double, double>> sq;   // sums of |error|^2 and |fp32 output|^2

  static result<DualCache> create(std::size_t layers, std::size_t kv_heads, std::size_t head_dim,
                                  std::size_t capacity) {
    auto a = cache::KVCacheF32::create(layers, kv_heads, head_dim, capacity);
    if (!a) return a.error();
    auto b = cache::KVCacheQ8::create(layers, kv_heads, head_dim, capacity);
    if (!b) return b.error();
    return DualCache{std::move(*a), std::move(*b), {}, std::make_shared<std::vector<double>>(),
                     std::make_shared<std::pair<double, double>>()};
  }
  std::size_t layers() const { return f32.layers(); }
  std::size_t kv_heads() const { return f32.kv_heads(); }
  std::size_t head_dim() const { return f32.head_dim(); }
  std::size_t capacity() const { return f32.capacity(); }
  std::size_t length() const { return f32.length(); }
  std::size_t bytes() const { return f32.bytes() + q8.bytes(); }
  status truncate(std::size_t n) {
    if (auto s = f32.truncate(n); !s) return s;
    return q8.truncate(n);
  }
  status append(std::size_t layer, std::size_t first, std::size_t n, std::span<const float> k,
                std::span<const float> v) {
    if (auto s = f32.append(layer, first, n, k, v); !s) return s;
    return q8.append(layer, first, n, k, v);
  }
  status attend(std::size_t layer, std::span<const float> q, std::size_t n_q, std::size_t first,
                std::size_t heads, std::span<float> out, ThreadPool* pool) {
    if (auto s = f32.attend(layer, q, n_q, first, heads, out, pool); !s) return s;
    out_q8.resize(out.size());
    if (auto s = q8.attend(layer, q, n_q, first, heads, out_q8, pool); !s) return s;
    const std::size_t hd = head_dim();
    for (std::size_t i = 0; i < n_q * heads; ++i) {
      double err = 0.0, ref = 0.0;
      for (std::size_t d = 0; d < hd; ++d) {
        const double a = out[i * hd + d], b = out_q8[i * hd + d];
        err += (a - b) * (a - b);
        ref += a * a;
      }
      rel_error->push_back(std::sqrt(err / std::max(ref, 1e-30)));
      sq->first += err;
      sq->second += ref;
    }
    return {};
  }
};
static_assert(cache::KVCache<DualCache>);

}  // namespace

TEST_CASE("bundled models: int8 KV attention error on the target's own activations",
          "[bundled][kv]") {
  const Ids all = ids_of(*load_json(root() + "/tests/data/bundled/heldout_ids.json").find("ids"));
  const std::size_t prompt = test::scaled<std::size_t>(512, 128), decode = 32;
  auto awq = load("kjv-target-awq", false);
  auto s = session<DualCache>(awq, prompt + decode);
  const auto errors = s.cache().rel_error;
  const auto sq = s.cache().sq;
  // A held-out prompt in one forward (every query of every layer), then single-token decode
  // steps continuing the held-out text (the shape of attention at decode time).
  std::vector<float> logits(s.vocab_size());
  REQUIRE(s.forward(std::span(all).first(prompt), decode::LogitsMode::last, logits));
  for (std::size_t t = 0; t < decode; ++t)
    REQUIRE(s.forward(std::span(all).subspan(prompt + t, 1), decode::LogitsMode::last, logits));
  const std::vector<double>& e = *errors;
  const auto& c = awq->config;
  REQUIRE(e.size() == c.num_hidden_layers * c.num_attention_heads * (prompt + decode));
  std::vector<double> sorted = e;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0.0;
  for (double v : e) sum += v;
  const double mean = sum / static_cast<double>(e.size());
  const double total = std::sqrt(sq->first / sq->second);
  const double p99 = sorted[sorted.size() * 99 / 100];
  WARN("int8 vs fp32 KV attention output on kjv-target-awq activations ("
       << e.size() << " (query, head, layer) outputs): relative L2 error of all outputs "
       << total * 100 << " %, per output mean " << mean * 100 << " %, p99 " << p99 * 100
       << " %, worst " << sorted.back() * 100 << " %");
  // The bar: 1 % of the fp32 result, over the whole attention output and on average per head.
  CHECK(total <= 0.01);
  CHECK(mean <= 0.01);
  // The tail is where a head's softmax is sharp and split between two positions with different
  // values: the key rounding (half a step, amax / 254) moves the split. Measured p99 ~3.7 %; a
  // regression guard, not a bar.
  CHECK(p99 <= 0.06);
}

}  // namespace test_model_bundled_model
