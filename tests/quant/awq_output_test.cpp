// SPDX-License-Identifier: Apache-2.0
#include "edgellm/quant/awq_output.hpp"

#include "edgellm/model/weights.hpp"
#include "support/limited_child.hpp"
#include "support/temp_dir.hpp"
#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

namespace test_quant_awq_output {

using namespace edgellm;
using namespace edgellm::quant;

namespace {

std::string fixture(const char* name) { return test::source_dir() + "/tests/data/model/" + name; }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<std::int32_t> tokens(std::size_t n) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::int32_t> d(0, 299);
  std::vector<std::int32_t> t(n);
  for (auto& v : t) v = d(rng);
  return t;
}

QuantizeOptions options() {
  QuantizeOptions o;
  o.spec = {4, 32};
  o.samples = 2;
  o.seqlen = 16;
  return o;
}

OutputOptions out_options(bool fake_quant, bool force) {
  OutputOptions o;
  o.fake_quant = fake_quant;
  o.force = force;
  return o;
}

kernels::TensorBytes bytes_of(const io::Checkpoint& ck, const std::string& name) {
  auto t = ck.find(name);
  REQUIRE(t);
  return kernels::TensorBytes{t->bytes, t->shape(), name};
}

}  // namespace

TEST_CASE("write_quantized_model: the gemm output loads and re-dequantises to the chosen values",
          "[awq_output]") {
  for (const char* name : {"qwen2-fp16", "qwen3-fp16"}) {
    INFO(name);
    test::TempDir tmp;
    const std::string out = tmp.file("out");
    const auto calib = tokens(40);
    auto ref = quantize_model(fixture(name), calib, options());
    REQUIRE(ref);
    auto r = write_quantized_model(fixture(name), out, calib, options());
    REQUIRE(r);
    // Only the output directory is left (no temporary one).
    CHECK(std::distance(std::filesystem::directory_iterator(tmp.path()),
                        std::filesystem::directory_iterator()) == 1);
    CHECK(std::filesystem::exists(out + "/generation_config.json"));
    auto cfg = model::load_model_config(out);
    REQUIRE(cfg);
    REQUIRE(cfg->awq);
    CHECK(cfg->awq->group_size == 32);
    CHECK(cfg->awq->version == model::AwqVersion::gemm);
    auto ck = io::Checkpoint::open(out);
    REQUIRE(ck);
    for (const QuantLayer& L : ref->layers) {
      const std::string pre = "model.layers." + std::to_string(L.index) + ".";
      for (const QuantLinear& q : L.linears) {
        const std::string p = pre + q.name;
        kernels::AwqLinearTensors t{bytes_of(*ck, p + ".qweight"), bytes_of(*ck, p + ".qzeros"),
                                    bytes_of(*ck, p + ".scales")};
        auto back = kernels::import_awq_gemm(t, 32);
        REQUIRE(back);
        CHECK(back->q == q.q4->q);
        CHECK(back->zero == q.q4->zero);
        CHECK(back->scale == q.q4->scale);
        CHECK(kernels::dequantize(*back) == q.weight);
      }
    }
    model::LoadOptions lo;
    auto w = model::load_weights(out, lo);
    REQUIRE(w);
    // The same input gives byte-identical output.
    const std::string out2 = tmp.file("out2");
    REQUIRE(write_quantized_model(fixture(name), out2, calib, options()));
    auto a = io::read_file_bytes(out + "/model.safetensors");
    auto b = io::read_file_bytes(out2 + "/model.safetensors");
    REQUIRE(a);
    REQUIRE(b);
    CHECK(*a == *b);
  }
}

TEST_CASE("write_quantized_model --fake-quant writes the chosen weights as fp16", "[awq_output]") {
  test::TempDir tmp;
  const std::string out = tmp.file("out");
  const auto calib = tokens(40);
  QuantizeOptions o = options();
  o.spec.bits = 3;
  auto ref = quantize_model(fixture("llama-fp16"), calib, o);
  REQUIRE(ref);
  REQUIRE(write_quantized_model(fixture("llama-fp16"), out, calib, o, out_options(true, false)));
  auto cfg = model::load_model_config(out);
  REQUIRE(cfg);
  CHECK_FALSE(cfg->awq);
  auto ck = io::Checkpoint::open(out);
  REQUIRE(ck);
  for (const QuantLayer& L : ref->layers) {
    const std::string pre = "model.layers." + std::to_string(L.index) + ".";
    for (const QuantLinear& q : L.linears) {
      auto v = quant::detail::read_f32(*ck, pre + q.name + ".weight", q.n * q.k);
      REQUIRE(v);
      for (std::size_t i = 0; i < v->size(); ++i)
        REQUIRE((*v)[i] == kernels::f16_to_f32(kernels::f32_to_f16(q.weight[i])));
    }
  }
  REQUIRE(model::load_weights(out));
}

TEST_CASE("write_quantized_model refuses and never leaves a half-written output", "[awq_output]") {
  test::TempDir tmp;
  const std::string out = tmp.file("out");
  const auto calib = tokens(40);
  // Bits other than 4 need fake_quant.
  QuantizeOptions o = options();
  o.spec.bits = 3;
  auto r = write_quantized_model(fixture("qwen2-fp16"), out, calib, o);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("4-bit only"));
  // A failure mid-run (too little calibration text) leaves nothing behind.
  o = options();
  o.seqlen = 64;
  r = write_quantized_model(fixture("qwen2-fp16"), out, calib, o);
  REQUIRE_FALSE(r);
  CHECK(std::distance(std::filesystem::directory_iterator(tmp.path()),
                      std::filesystem::directory_iterator()) == 0);
  // A directory that is not an output of ours is refused, with force too.
  std::filesystem::create_directories(out);
  tmp.write("out/old", "x");
  for (const bool force : {false, true}) {
    r = write_quantized_model(fixture("qwen2-fp16"), out, calib, options(),
                              out_options(false, force));
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("without the .edgellm-quantize file") &&
                                      !Catch::Contains("--force"));
    CHECK(slurp(out + "/old") == "x");
  }
  // An earlier output (it carries the marker) is refused without force and replaced with it.
  tmp.write(std::string("out/") + std::string(kQuantizeMarker), "");
  r = write_quantized_model(fixture("qwen2-fp16"), out, calib, options());
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("exists; not overwritten (--force"));
  CHECK(std::filesystem::exists(out + "/old"));
  REQUIRE(write_quantized_model(fixture("qwen2-fp16"), out, calib, options(),
                                out_options(false, true)));
  CHECK_FALSE(std::filesystem::exists(out + "/old"));
  CHECK(std::filesystem::exists(out + "/model.safetensors"));
  CHECK(std::filesystem::exists(out + "/" + std::string(kQuantizeMarker)));
  CHECK(std::distance(std::filesystem::directory_iterator(tmp.path()),
                      std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("write_quantized_model: never an input or its ancestor; a target that appears "
          "during the run is left alone",
          "[awq_output]") {
  test::TempDir tmp;
  const auto calib = tokens(40);
  std::filesystem::create_directories(tmp.file("a"));
  std::filesystem::copy(fixture("qwen2-fp16"), tmp.file("a/in"));
  tmp.write("a/notes.txt", "mine");
  const std::string model = tmp.file("a/in");
  for (const bool force : {false, true}) {
    for (const std::string& out : {tmp.file("a"), model, tmp.file("a/in/../in")}) {
      INFO(out << " force " << force);
      auto r = write_quantized_model(model, out, calib, options(), out_options(false, force));
      REQUIRE_FALSE(r);
      CHECK_THAT(r.error().message, Catch::Contains("the input '" + model + "'") &&
                                        !Catch::Contains("--force"));
    }
  }
  CHECK(slurp(tmp.file("a/notes.txt")) == "mine");
  CHECK(std::filesystem::exists(model + "/config.json"));
  // The calibration text named as an input.
  OutputOptions with_calib = out_options(false, true);
  with_calib.inputs = {tmp.file("a/notes.txt")};
  auto rc = write_quantized_model(model, tmp.file("a"), calib, options(), with_calib);
  REQUIRE_FALSE(rc);

  // Something appears at the output while the run writes: it stays, the result is kept aside.
  const std::string out = tmp.file("out");
  std::string seen_temp;
  OutputOptions oo;
  oo.on_temp = [&](const std::string& t) {
    if (seen_temp.empty()) {
      seen_temp = t;
      tmp.write("out", "sentinel");
    }
  };
  auto r = write_quantized_model(model, out, calib, options(), oo);
  REQUIRE_FALSE(r);
  CHECK(slurp(out) == "sentinel");
  const std::string kept = out + ".kept." + std::to_string(::getpid());
  CHECK_THAT(r.error().message, Catch::Contains("appeared") && Catch::Contains(kept));
  CHECK(std::filesystem::exists(kept + "/model.safetensors"));
  CHECK_THAT(seen_temp, Catch::Contains(out + ".tmp."));
  CHECK_FALSE(std::filesystem::exists(seen_temp));
}

TEST_CASE("write_quantized_model with modules_bits: int8 attention, fp16 down_proj, int4 rest",
          "[awq_output]") {
  test::TempDir tmp;
  const std::string out = tmp.file("out");
  const auto calib = tokens(40);
  QuantizeOptions o = options();
  o.modules_bits = {{"self_attn", 8}, {"down_proj", 16}};
  auto ref = quantize_model(fixture("qwen2-fp16"), calib, o);
  REQUIRE(ref);
  REQUIRE(write_quantized_model(fixture("qwen2-fp16"), out, calib, o));
  auto cfg = model::load_model_config(out);
  REQUIRE(cfg);
  REQUIRE(cfg->awq);
  CHECK(cfg->awq->modules_to_not_convert == std::vector<std::string>{"mlp.down_proj"});
  CHECK(cfg->awq->int8_modules ==
        std::vector<std::string>{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                 "self_attn.o_proj"});
  auto ck = io::Checkpoint::open(out);
  REQUIRE(ck);
  for (const QuantLayer& L : ref->layers) {
    const std::string pre = "model.layers." + std::to_string(L.index) + ".";
    for (const QuantLinear& q : L.linears) {
      INFO(pre + q.name);
      const std::string p = pre + q.name;
      if (q.name.starts_with("self_attn")) {
        // Symmetric int8: the stored codes and scales re-dequantise to the chosen values.
        REQUIRE(q.q8);
        CHECK(q.spec.bits == 8);
        CHECK(q.spec.symmetric);
        auto codes = ck->find(p + ".qweight");
        auto scales = ck->find(p + ".scales");
        REQUIRE(codes);
        REQUIRE(scales);
        CHECK(codes->type() == io::dtype::i8);
        CHECK(codes->shape() == std::vector<std::size_t>{q.n, q.k});
        CHECK(scales->shape() == std::vector<std::size_t>{q.n, q.k / 32});
        for (std::size_t r = 0; r < q.n; ++r)
          for (std::size_t c = 0; c < q.k; ++c) {
            std::int8_t code;
            float s;
            std::memcpy(&code, codes->bytes.data() + r * q.k + c, 1);
            std::memcpy(&s, scales->bytes.data() + (r * (q.k / 32) + c / 32) * 4, 4);
            REQUIRE(static_cast<float>(code) * s == q.weight[r * q.k + c]);
          }
        // and they are kernels::quantize_q8's values of what was quantised
        auto again = kernels::quantize_q8(q.weight, q.n, q.k, 32);
        REQUIRE(again);
        std::vector<float> row(q.k);
        again->row(0, row.data());
        CHECK(std::equal(row.begin(), row.end(), q.weight.begin()));
      } else if (q.name == "mlp.down_proj") {
        CHECK(q.spec.kept());
        CHECK_FALSE(q.q4);
        CHECK_FALSE(q.q8);
        auto v = quant::detail::read_f32(*ck, p + ".weight", q.n * q.k);
        REQUIRE(v);
        CHECK(*v == q.weight);
      } else {
        REQUIRE(q.q4);
        CHECK(ck->find(p + ".qzeros"));
      }
    }
  }
  // It loads: attention int8, gate/up int4, down dense; and the reference mode too.
  auto w = model::load_weights(out);
  REQUIRE(w);
  const model::LayerWeights& L0 = (*w)->layers[0];
  CHECK(L0.q_proj.int8());
  CHECK(L0.o_proj.int8());
  CHECK(L0.gate_proj.int4());
  CHECK_FALSE(L0.down_proj.quantized());
  std::vector<float> row(L0.q_proj.k());
  L0.q_proj.q8.row(1, row.data());
  const QuantLinear& q0 = ref->layers[0].linears[0];
  CHECK(std::equal(row.begin(), row.end(), q0.weight.begin() + static_cast<std::ptrdiff_t>(q0.k)));
  model::LoadOptions lo;
  lo.fp32_reference = true;
  auto wr = model::load_weights(out, lo);
  REQUIRE(wr);
  std::vector<float> dense(q0.k);
  (*wr)->layers[0].q_proj.dense.row(1, dense.data());
  CHECK(dense == row);
}

TEST_CASE("write_quantized_model refuses modules_bits it cannot write", "[awq_output]") {
  test::TempDir tmp;
  const std::string out = tmp.file("out");
  const auto calib = tokens(40);
  QuantizeOptions o = options();
  o.modules_bits = {{"mlp", 3}};
  auto r = write_quantized_model(fixture("qwen2-fp16"), out, calib, o);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("mlp.gate_proj: 3 bits has no packed layout"));
  o.modules_bits = {{"attention", 8}};
  r = write_quantized_model(fixture("qwen2-fp16"), out, calib, o);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("pattern 'attention' matches none"));
  CHECK_FALSE(std::filesystem::exists(out));
  // With fake_quant, 3 bits for the MLP is fine.
  o.modules_bits = {{"mlp", 3}, {"self_attn", 16}};
  REQUIRE(write_quantized_model(fixture("qwen2-fp16"), out, calib, o, out_options(true, false)));
}

TEST_CASE("quantize_model out of memory names the model and the stage", "[awq_output]") {
  // 2M calibration tokens: the residual streams alone ([M][96] fp32, twice) are 1.5 GB.
  const auto calib = tokens(std::size_t{2} << 20);
  QuantizeOptions o = options();
  o.samples = calib.size() / o.seqlen;
  const std::string dir = fixture("qwen2-fp16");
  const auto out = test::run_limited(test::vm_bytes() + (std::size_t{256} << 20), [&] {
    auto r = quantize_model(dir, calib, o);
    return r ? std::string("ran") : r.error().message;
  });
  if (!out.supported) {
    WARN("skipped: " << out.why_unsupported());
    return;
  }
  INFO(out.describe());
  REQUIRE(out.exited);
  CHECK_THAT(out.output, Catch::Contains("out of memory") && Catch::Contains("quantising " + dir) &&
                             Catch::Contains("layer 1"));
}

}  // namespace test_quant_awq_output
