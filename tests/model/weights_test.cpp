// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/weights.hpp: loading the fixture checkpoints in every mode, dense
// views of stored tensors, the progress callback, and the errors for broken checkpoints (each
// names file and tensor).
#include "edgellm/model/weights.hpp"

#include "edgellm/kernels/float16.hpp"
#include "model/model_test_support.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace test_model_weights {

namespace {

using Catch::Matchers::Contains;
using edgellm::errc;
using edgellm::model::DenseType;
using edgellm::model::LmHeadFormat;
using edgellm::model::load_weights;
using edgellm::model::LoadOptions;
using edgellm::test::copy_fixture;
using edgellm::test::edit_tensor_header;
using edgellm::test::model_fixture;
using edgellm::test::replace_in_file;
using edgellm::test::TempDir;

// The error of loading `dir` with `opts`, which must fail.
edgellm::error load_error(const std::string& dir, const LoadOptions& opts = {}) {
  auto w = load_weights(dir, opts);
  REQUIRE_FALSE(w);
  return w.error();
}

// Resident kB of every mapping of a file under `dir` (Linux /proc/self/smaps), or -1 if the
// file cannot be read.
long mapped_rss_kb(const std::string& dir) {
  std::ifstream f("/proc/self/smaps");
  if (!f) return -1;
  std::string line;
  bool in = false;
  long kb = 0;
  while (std::getline(f, line)) {
    // A mapping header starts with "<hex>-<hex> "; attribute lines with "Name:".
    const std::size_t sp = line.find(' ');
    const std::string first = line.substr(0, sp);
    if (sp != std::string::npos && first.find('-') != std::string::npos &&
        first.find_first_not_of("0123456789abcdef-") == std::string::npos) {
      in = line.find(dir) != std::string::npos;
    } else if (in && line.rfind("Rss:", 0) == 0) {
      kb += std::stol(line.substr(4));
    }
  }
  return kb;
}

}  // namespace

TEST_CASE("dense_matrix_view wraps a stored tensor; other dtypes are refused", "[model]") {
  std::vector<std::uint16_t> storage = {0x3C00, 0x4000, 0xC000, 0x0000, 0x3800, 0x3C00};
  edgellm::io::TensorInfo info;
  info.name = "w";
  info.type = edgellm::io::dtype::f16;
  info.shape = {2, 3};
  info.nbytes = storage.size() * 2;
  const edgellm::io::TensorView view{&info, std::as_bytes(std::span(storage))};
  auto m = edgellm::model::dense_matrix_view(view);
  REQUIRE(m);
  CHECK(m->type() == DenseType::f16);
  CHECK(m->n() == 2);
  CHECK(m->k() == 3);
  CHECK(m->data() == reinterpret_cast<const std::byte*>(storage.data()));  // not copied
  CHECK(m->owned_bytes() == 0);
  std::vector<float> row(3);
  m->row(1, row.data());
  CHECK(row == std::vector<float>{0.0f, 0.5f, 1.0f});
  auto c = edgellm::model::dense_matrix_copy(view);
  REQUIRE(c);
  CHECK(c->data() != m->data());
  CHECK(c->owned_bytes() == 12);
  info.type = edgellm::io::dtype::i32;
  info.shape = {3};
  auto bad = edgellm::model::dense_matrix_view(view);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == errc::unsupported);
  CHECK_THAT(bad.error().message, Contains("w: dtype I32"));
}

TEST_CASE("load_weights: every fixture, int4 and fp32 reference", "[model]") {
  for (const auto& f : edgellm::test::kFixtures) {
    const std::string dir = model_fixture(f.name);
    INFO(dir);
    for (bool reference : {false, true}) {
      LoadOptions opts;
      opts.fp32_reference = reference;
      auto w = load_weights(dir, opts);
      INFO((w ? std::string() : w.error().message));
      REQUIRE(w);
      const auto& c = (*w)->config;
      REQUIRE((*w)->layers.size() == c.num_hidden_layers);
      CHECK((*w)->embed_tokens.n() == c.vocab_size);
      CHECK((*w)->embed_tokens.k() == c.hidden_size);
      CHECK((*w)->norm.size() == c.hidden_size);
      // lm_head stays as stored (fp16 or bf16 view), tied or not.
      CHECK_FALSE((*w)->lm_head.quantized());
      CHECK((*w)->lm_head.dense.owned_bytes() == 0);
      CHECK((*w)->lm_head.dense.type() == (*w)->embed_tokens.type());
      for (const auto& L : (*w)->layers) {
        for (const auto* lin :
             {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj}) {
          CHECK(lin->quantized() == !reference);
          if (!reference) {
            CHECK(lin->q4.group_size() == (c.awq ? c.awq->group_size : (*w)->rtn_group_size));
          } else {
            CHECK(lin->dense.type() == DenseType::f32);
          }
        }
        CHECK(L.q_proj.n() == c.num_attention_heads * c.head_dim);
        CHECK(L.k_proj.n() == c.num_key_value_heads * c.head_dim);
        CHECK(L.down_proj.k() == c.intermediate_size);
        CHECK(L.q_proj.bias.size() == (c.attention_qkv_bias ? L.q_proj.n() : 0));
        CHECK(L.v_proj.bias.size() == (c.attention_qkv_bias ? L.v_proj.n() : 0));
        CHECK(L.o_proj.bias.empty());
        CHECK(L.q_norm.size() == (c.attention_qk_norm ? c.head_dim : 0));
        CHECK(L.k_norm.size() == (c.attention_qk_norm ? c.head_dim : 0));
      }
      // Converted tensors' mapped pages were handed back (every fixture has page-sized ones).
      CHECK((*w)->released_source_bytes > 0);
      CHECK((*w)->owned_bytes() > 0);
    }
  }
}

TEST_CASE("load_weights: group sizes, lm_head q4, keeping source pages", "[model]") {
  {
    auto w = load_weights(model_fixture("llama-fp16"));  // hidden 64, intermediate 192
    REQUIRE(w);
    CHECK((*w)->rtn_group_size == 64);
    CHECK((*w)->layers[0].q_proj.q4.group_size() == 64);
  }
  {
    auto w = load_weights(model_fixture("qwen2-fp16"));  // hidden 96: only 32 divides
    REQUIRE(w);
    CHECK((*w)->rtn_group_size == 32);
    CHECK((*w)->config.tie_word_embeddings);
  }
  {
    LoadOptions o;
    o.rtn_group_size = 32;
    auto w = load_weights(model_fixture("llama-fp16"), o);
    REQUIRE(w);
    CHECK((*w)->layers[1].down_proj.q4.group_size() == 32);
  }
  {
    LoadOptions o;
    o.lm_head = LmHeadFormat::q4;
    for (const char* name : {"llama-fp16", "qwen2-awq-gemm"}) {
      auto w = load_weights(model_fixture(name), o);
      REQUIRE(w);
      REQUIRE((*w)->lm_head.quantized());
      CHECK((*w)->lm_head.q4.n() == (*w)->config.vocab_size);
      CHECK((*w)->lm_head.q4.group_size() == ((*w)->config.hidden_size % 64 == 0 ? 64 : 32));
    }
  }
  {
    LoadOptions o;
    o.release_source_pages = false;
    auto w = load_weights(model_fixture("llama-awq-gemm"), o);
    REQUIRE(w);
    CHECK((*w)->released_source_bytes == 0);
  }
  {
    LoadOptions o;
    o.rtn_group_size = 128;  // does not divide hidden_size 64
    auto e = load_error(model_fixture("llama-fp16"), o);
    CHECK(e.code == errc::invalid_argument);
    CHECK_THAT(e.message, Contains("rtn_group_size: 128 does not divide hidden_size = 64"));
    o.rtn_group_size = 48;
    CHECK(load_error(model_fixture("llama-fp16"), o).code == errc::invalid_argument);
  }
}

TEST_CASE("load_weights gathers the int4 matrices into one arena, in decode order", "[model]") {
  for (const LmHeadFormat head : {LmHeadFormat::as_stored, LmHeadFormat::q4}) {
    for (const char* name : {"llama-fp16", "qwen2-awq-gemm"}) {
      CAPTURE(name, head == LmHeadFormat::q4);
      LoadOptions o;
      o.lm_head = head;
      // By default a model this small (under 32 MiB of int4) keeps its matrices where they were
      // made: it runs from the last-level cache.
      {
        auto small = load_weights(model_fixture(name), o);
        REQUIRE(small);
        CHECK((*small)->int4_arena.empty());
        CHECK((*small)->layers[0].q_proj.q4.owns_data());
      }
      o.int4_arena_min_bytes = 0;
      auto w = load_weights(model_fixture(name), o);
      REQUIRE(w);
      const edgellm::model::TransformerWeights& tw = **w;
      const std::byte* arena = tw.int4_arena.data.get();
      REQUIRE(arena != nullptr);
      // Each matrix starts where the one read before it ends (64-byte aligned), none owns a
      // buffer of its own, and together they fill the arena's used bytes.
      const std::byte* next = arena;
      std::size_t matrices = 0;
      const auto check = [&](const edgellm::kernels::Linear& l) {
        REQUIRE(l.int4());
        CHECK_FALSE(l.q4.owns_data());
        CHECK(l.q4.data() == next);
        next = l.q4.data() + (l.q4.byte_size() + 63) / 64 * 64;
        ++matrices;
      };
      for (const auto& L : tw.layers)
        for (const auto* l : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj,
                              &L.up_proj, &L.down_proj})
          check(*l);
      CHECK(matrices == 7 * tw.layers.size());
      CHECK(static_cast<std::size_t>(next - arena) == tw.int4_arena.bytes);
      // The arena's bytes are counted as the weights' own.
      CHECK(tw.owned_bytes() >= tw.int4_arena.bytes);
      // Locked or advised as one range, then the matrices outside it: an int4 or int8 lm_head
      // (its own allocation: copying it into the arena would be the load's largest transient),
      // a dense one has no range.
      const auto ranges = tw.streamed_ranges();
      REQUIRE_FALSE(ranges.empty());
      CHECK(ranges.front().data() == arena);
      CHECK(ranges.front().size() == tw.int4_arena.capacity);
      CHECK(tw.int4_arena.capacity % (std::size_t{2} << 20) == 0);
      const bool head_range = tw.lm_head.int4() || tw.lm_head.int8();
      CHECK(ranges.size() == (head_range ? 2u : 1u));
      if (head_range) CHECK_FALSE(tw.int4_arena.contains(ranges.back().data()));
      // That these are the packed bytes: packed_cache_test.cpp compares this load with the
      // packed cache's mapped views, which stay where they were written.
    }
  }
}

TEST_CASE("load_weights releases the mapped pages of converted tensors", "[model]") {
  // Resident memory of the file mappings after loading, with and without releasing: the
  // difference is the released bytes (pages that stayed mapped after conversion otherwise).
  for (const char* name : {"qwen2-fp16", "llama-fp16"}) {
    const std::string dir = std::filesystem::canonical(model_fixture(name)).string();
    long rss[2] = {0, 0};
    std::size_t released = 0;
    for (int release = 0; release < 2; ++release) {
      LoadOptions o;
      o.release_source_pages = release == 1;
      auto w = load_weights(dir, o);
      REQUIRE(w);
      rss[release] = mapped_rss_kb(dir);
      if (release) released = (*w)->released_source_bytes;
    }
    if (rss[0] < 0) {
      WARN("/proc/self/smaps is not readable: resident memory not checked");
      return;
    }
    INFO(name << ": resident " << rss[0] << " kB kept, " << rss[1] << " kB released, " << released
              << " bytes released");
    REQUIRE(released > 0);
    CHECK(rss[0] - rss[1] >= static_cast<long>(released / 1024 / 2));
  }
}

TEST_CASE("load_weights: the progress callback is monotone, named and ends at total", "[model]") {
  struct Call {
    std::string stage;
    std::uint64_t done, total;
  };
  const struct {
    const char* fixture;
    bool fp32, q4_head;
    const char* stage;
  } cases[] = {
      {"llama-awq-gemm", false, false, "repacking int4"},
      {"qwen2-awq-gemm", false, true, "repacking int4"},
      {"llama-fp16", false, false, "quantizing to int4"},
      {"llama-fp16", true, false, "loading fp32 reference"},
  };
  for (const auto& c : cases) {
    INFO(c.fixture << (c.fp32 ? " fp32" : "") << (c.q4_head ? " lm_head q4" : ""));
    std::vector<Call> calls;
    LoadOptions o;
    o.fp32_reference = c.fp32;
    if (c.q4_head) o.lm_head = LmHeadFormat::q4;
    o.progress = [&](std::string_view stage, std::uint64_t done, std::uint64_t total) {
      calls.push_back({std::string(stage), done, total});
    };
    auto w = load_weights(model_fixture(c.fixture), o);
    REQUIRE(w);
    CHECK_FALSE((*w)->options.progress);  // not kept: it may point to the caller's stack
    const auto& cfg = (*w)->config;
    // One call first, one per linear, one for the lm_head.
    REQUIRE(calls.size() == 1 + 7 * cfg.num_hidden_layers + 1);
    const std::uint64_t total = calls.front().total;
    CHECK(total > 0);
    CHECK(calls.front().done == 0);
    CHECK(calls.back().done == total);
    for (std::size_t i = 0; i < calls.size(); ++i) {
      CHECK(calls[i].stage == c.stage);
      CHECK(calls[i].total == total);
      if (i > 0) CHECK(calls[i].done >= calls[i - 1].done);
    }
    // The lm_head's share: its weights when it is quantised here, else nothing.
    const std::uint64_t head = c.q4_head ? std::uint64_t{cfg.vocab_size} * cfg.hidden_size : 0;
    CHECK(calls.back().done - calls[calls.size() - 2].done == head);
  }
  // A packed cache that is read: its own stage.
  TempDir tmp;
  const std::string dir = copy_fixture("llama-awq-gemm", tmp);
  LoadOptions o;
  o.packed_cache = "auto";
  REQUIRE(load_weights(dir, o));  // writes it
  std::vector<std::string> stages;
  o.progress = [&](std::string_view stage, std::uint64_t, std::uint64_t) {
    stages.emplace_back(stage);
  };
  REQUIRE(load_weights(dir, o));  // reads it
  REQUIRE_FALSE(stages.empty());
  CHECK(stages.front() == "reading packed cache");
}

TEST_CASE("load_weights: shared weights outlive the loader's views", "[model]") {
  auto w = load_weights(model_fixture("qwen2-fp16"));
  REQUIRE(w);
  std::shared_ptr<const edgellm::model::TransformerWeights> keep = *w;
  w = load_error(model_fixture("no-such-fixture"));  // drop the result's reference
  std::vector<float> row(keep->embed_tokens.k());
  keep->embed_tokens.row(299, row.data());
  for (float v : row) REQUIRE(std::isfinite(v));
}

TEST_CASE("load_weights errors name the file and tensor", "[model]") {
  TempDir tmp;

  SECTION("missing directory") {
    auto e = load_error(tmp.file("nothing"));
    CHECK(e.code == errc::io_error);
    CHECK_THAT(e.message, Contains("nothing/config.json"));
  }
  SECTION("missing tensor") {
    const std::string dir = copy_fixture("llama-fp16", tmp);
    const std::string t = "model.layers.1.mlp.down_proj.weight";
    edit_tensor_header(dir + "/model.safetensors", t, "\"" + t + "\"",
                       "\"model.layers.1.mlp.down_proj.weighX\"");
    auto e = load_error(dir);
    CHECK_THAT(e.message, Contains("missing tensor 'model.layers.1.mlp.down_proj.weight'"));
    CHECK_THAT(e.message, Contains(dir));
    CHECK_THAT(e.message, Contains("[hidden_size, intermediate_size]"));
  }
  SECTION("missing q_norm of a Qwen3 model, fp16 and AWQ") {
    for (const char* name : {"qwen3-fp16", "qwen3-awq-gemm"}) {
      TempDir d;
      const std::string dir = copy_fixture(name, d);
      const std::string t = "model.layers.1.self_attn.q_norm.weight";
      edit_tensor_header(dir + "/model.safetensors", t, "\"" + t + "\"",
                         "\"model.layers.1.self_attn.q_norm.weighX\"");
      auto e = load_error(dir);
      CHECK(e.code == errc::format_error);
      CHECK(e.message == "[load_weights] " + dir + ": missing tensor '" + t +
                             "' (expected shape [32] = [head_dim])");
    }
  }
  SECTION("a k_norm of a dtype the model cannot use") {
    const std::string dir = copy_fixture("qwen3-fp16", tmp);
    const std::string t = "model.layers.0.self_attn.k_norm.weight";
    edit_tensor_header(dir + "/model.safetensors", t, "\"F16\"", "\"I16\"");
    auto e = load_error(dir);
    CHECK(e.code == errc::unsupported);
    CHECK(e.message == "[load_weights] " + dir + "/model.safetensors: " + t +
                           ": dtype I16, expected F16 or BF16 or F32");
  }
  SECTION("missing lm_head of an untied model") {
    const std::string dir = copy_fixture("llama-fp16", tmp);
    edit_tensor_header(dir + "/model.safetensors", "lm_head.weight", "\"lm_head.weight\"",
                       "\"lm_head.weighX\"");
    CHECK_THAT(load_error(dir).message, Contains("missing tensor 'lm_head.weight'"));
  }
  SECTION("wrong shape in the file") {
    const std::string dir = copy_fixture("llama-fp16", tmp);
    const std::string t = "model.layers.1.mlp.down_proj.weight";
    edit_tensor_header(dir + "/model.safetensors", t, "[64,192]", "[192,64]");
    auto e = load_error(dir);
    CHECK(e.code == errc::shape_mismatch);
    CHECK(e.message == "[load_weights] " + dir + "/model.safetensors: " + t +
                           ": shape [192, 64] but config says [64, 192] (" +
                           "[hidden_size, intermediate_size])");
  }
  SECTION("config disagrees with the tensors") {
    const std::string dir = copy_fixture("qwen2-fp16", tmp);
    replace_in_file(dir + "/config.json", "\"intermediate_size\": 192",
                    "\"intermediate_size\": 160");
    auto e = load_error(dir);
    CHECK(e.code == errc::shape_mismatch);
    CHECK_THAT(e.message, Contains("model.layers.0.mlp.gate_proj.weight: shape [192, 96] but "
                                   "config says [160, 96]"));
    CHECK_THAT(e.message, Contains("model-0000"));  // the shard holding it
  }
  SECTION("wrong shape of an AWQ tensor") {
    const std::string dir = copy_fixture("llama-awq-gemm", tmp);
    const std::string t = "model.layers.0.self_attn.o_proj.qzeros";
    edit_tensor_header(dir + "/model.safetensors", t, "[1,8]", "[8,1]");
    auto e = load_error(dir);
    CHECK(e.code == errc::shape_mismatch);
    CHECK_THAT(e.message, Contains(t + ": shape [8, 1] but config says [1, 8] ([K/G, N/8]; N = "
                                       "hidden_size = 64, K = num_attention_heads * head_dim = 64, "
                                       "G = group_size = 64, AWQ gemm)"));
  }
  SECTION("a known dtype the model cannot use") {
    const std::string dir = copy_fixture("llama-fp16", tmp);
    const std::string t = "model.layers.0.input_layernorm.weight";
    edit_tensor_header(dir + "/model.safetensors", t, "\"F16\"", "\"I16\"");
    auto e = load_error(dir);
    CHECK(e.code == errc::unsupported);
    CHECK(e.message == "[load_weights] " + dir + "/model.safetensors: " + t +
                           ": dtype I16, expected F16 or BF16 or F32");
  }
  SECTION("AWQ scales must be F16") {
    const std::string dir = copy_fixture("qwen2-awq-gemm", tmp);
    const std::string t = "model.layers.1.mlp.up_proj.scales";
    edit_tensor_header(dir + "/model.safetensors", t, "\"F16\"", "\"I16\"");
    CHECK_THAT(load_error(dir).message, Contains(t + ": dtype I16, expected F16"));
  }
  SECTION("unknown dtype") {
    const std::string dir = copy_fixture("llama-fp16", tmp);
    const std::string t = "model.layers.0.self_attn.k_proj.weight";
    edit_tensor_header(dir + "/model.safetensors", t, "\"F16\"", "\"Q16\"");
    auto e = load_error(dir);
    CHECK(e.code == errc::unsupported);
    CHECK_THAT(e.message, Contains("model.safetensors"));
    CHECK_THAT(e.message, Contains(t));
    CHECK_THAT(e.message, Contains("unknown dtype \"Q16\""));
  }
  SECTION("unsupported model_type") {
    const std::string dir = copy_fixture("llama-fp16", tmp);
    replace_in_file(dir + "/config.json", "\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"");
    auto e = load_error(dir);
    CHECK(e.code == errc::unsupported);
    CHECK_THAT(e.message, Contains("config.json"));
    CHECK_THAT(e.message, Contains("\"gpt2\" is not supported"));
  }
  SECTION("unsupported AWQ version") {
    const std::string dir = copy_fixture("llama-awq-gemm", tmp);
    replace_in_file(dir + "/config.json", "\"version\": \"gemm\"", "\"version\": \"gemv_fast\"");
    auto e = load_error(dir);
    CHECK(e.code == errc::unsupported);
    CHECK_THAT(e.message, Contains("quantization_config.version"));
    CHECK_THAT(e.message, Contains("gemv_fast"));
  }
  SECTION("AWQ group size the kernels do not have") {
    const std::string dir = copy_fixture("llama-awq-gemm", tmp);
    replace_in_file(dir + "/config.json", "\"group_size\": 64", "\"group_size\": 16");
    auto e = load_error(dir);
    CHECK(e.code == errc::unsupported);
    CHECK_THAT(e.message, Contains("quantization_config.group_size 16 is not supported by the "
                                   "int4 kernels"));
  }
  SECTION("AWQ group size that does not divide K") {
    const std::string dir = copy_fixture("llama-awq-gemm", tmp);
    replace_in_file(dir + "/config.json", "\"group_size\": 64", "\"group_size\": 128");
    CHECK_THAT(load_error(dir).message,
               Contains("model.layers.0.self_attn.q_proj: K = hidden_size = 64 is not a multiple "
                        "of group_size 128"));
  }
  SECTION("AWQ tensors where the config says unquantised") {
    const std::string dir = copy_fixture("llama-awq-gemm", tmp);
    replace_in_file(dir + "/config.json", "\"modules_to_not_convert\": null",
                    "\"modules_to_not_convert\": [\"o_proj\"]");
    CHECK_THAT(load_error(dir).message,
               Contains("missing tensor 'model.layers.0.self_attn.o_proj.weight'"));
  }
  SECTION("int8 extension modules whose tensors are int4") {
    const std::string dir = copy_fixture("llama-awq-gemm", tmp);
    replace_in_file(dir + "/config.json", "\"modules_to_not_convert\": null",
                    "\"modules_to_not_convert\": null, \"edgellm_int8_modules\": [\"mlp.up_proj\"]");
    CHECK_THAT(load_error(dir).message,
               Contains("model.layers.0.mlp.up_proj.qweight: dtype I32, expected I8"));
  }
  SECTION("a shard named by the index is missing") {
    const std::string dir = copy_fixture("qwen2-fp16", tmp);
    std::filesystem::remove(dir + "/model-00002-of-00003.safetensors");
    auto e = load_error(dir);
    CHECK(e.code == errc::io_error);
    CHECK_THAT(e.message, Contains("model-00002-of-00003.safetensors"));
  }
}

namespace {

// Rewrites `dir`/model.safetensors with its tensors plus `extra`.
void add_tensors(const std::string& dir, const std::vector<edgellm::test::TensorOut>& extra) {
  std::vector<edgellm::test::TensorOut> all;
  {
    auto ckpt = edgellm::io::Checkpoint::open(dir);
    REQUIRE(ckpt);
    for (const std::string& name : ckpt->names()) {
      auto t = ckpt->find(name);
      REQUIRE(t);
      all.push_back({name, std::string(edgellm::io::dtype_name(t->type())), t->shape(),
                     std::string(reinterpret_cast<const char*>(t->bytes.data()), t->bytes.size())});
    }
  }
  all.insert(all.end(), extra.begin(), extra.end());
  edgellm::test::write_safetensors(dir + "/model.safetensors", all);
}

}  // namespace

TEST_CASE("load_weights: tensors the config does not use are an error unless allowed",
          "[model]") {
  TempDir tmp;
  SECTION("every fixture and the bundled models use all their tensors") {
    std::vector<std::string> dirs;
    for (const auto& f : edgellm::test::kFixtures) dirs.push_back(model_fixture(f.name));
    for (const char* m : {"kjv-target-awq", "kjv-draft-awq", "kjv-target-fp16", "kjv-draft-fp16"})
      dirs.push_back(edgellm::test::source_dir() + "/models/" + m);
    for (const std::string& dir : dirs) {
      INFO(dir);
      auto cfg = edgellm::model::load_model_config(dir);
      REQUIRE(cfg);
      auto ckpt = edgellm::io::Checkpoint::open(dir);
      REQUIRE(ckpt);
      CHECK(edgellm::model::unused_tensors(*ckpt, *cfg).empty());
    }
  }
  SECTION("a config.json with fewer layers than the checkpoint") {
    const std::string dir = copy_fixture("llama-fp16", tmp);
    replace_in_file(dir + "/config.json", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
    auto e = load_error(dir);
    CHECK(e.code == errc::format_error);
    CHECK_THAT(e.message, Contains("[load_weights] " + dir + ": 9 tensors of the checkpoint are "
                                   "not used by its config.json (num_hidden_layers 1; is it "));
    CHECK_THAT(e.message, Contains("model.layers.1.input_layernorm.weight, "
                                   "model.layers.1.mlp.down_proj.weight"));
    CHECK_THAT(e.message, Contains(", ... (LoadOptions::allow_extra_tensors"));
    LoadOptions allow;
    allow.allow_extra_tensors = true;
    auto w = load_weights(dir, allow);
    REQUIRE(w);
    CHECK((*w)->layers.size() == 1);
  }
  SECTION("q_norm / k_norm are unused tensors for the families without them") {
    const std::string dir = copy_fixture("qwen3-fp16", tmp);
    replace_in_file(dir + "/config.json", "\"model_type\": \"qwen3\"", "\"model_type\": \"llama\"");
    auto e = load_error(dir);
    CHECK(e.code == errc::format_error);
    CHECK_THAT(e.message, Contains("4 tensors of the checkpoint are not used by its config.json"));
    CHECK_THAT(e.message, Contains("model.layers.0.self_attn.k_norm.weight, "
                                   "model.layers.0.self_attn.q_norm.weight, "));
  }
  SECTION("known-harmless tensors count as used; any other extra one is named") {
    const std::string dir = copy_fixture("llama-fp16", tmp);
    // A tied checkpoint that still stores lm_head.weight, plus an old transformers' inv_freq.
    replace_in_file(dir + "/config.json", "\"tie_word_embeddings\": false",
                    "\"tie_word_embeddings\": true");
    add_tensors(dir, {{"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {4},
                       std::string(16, '\0')}});
    REQUIRE(load_weights(dir));
    add_tensors(dir, {{"model.layers.0.mlp.extra.weight", "F32", {2}, std::string(8, '\0')}});
    auto e = load_error(dir);
    CHECK_THAT(e.message, Contains("1 tensors of the checkpoint are not used by its config.json"));
    CHECK_THAT(e.message, Contains("): model.layers.0.mlp.extra.weight (LoadOptions::"));
  }
}

}  // namespace test_model_weights
