// SPDX-License-Identifier: Apache-2.0
#include "edgellm/quant/awq_output.hpp"

#include "edgellm/model/weights.hpp"
#include "support/temp_dir.hpp"
#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <random>
#include <vector>

using namespace edgellm;
using namespace edgellm::quant;

namespace {

std::string fixture(const char* name) { return test::source_dir() + "/tests/data/model/" + name; }

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
  REQUIRE(write_quantized_model(fixture("llama-fp16"), out, calib, o, {.fake_quant = true}));
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
  // An existing output is refused without force and replaced with it.
  std::filesystem::create_directories(out);
  tmp.write("out/old", "x");
  r = write_quantized_model(fixture("qwen2-fp16"), out, calib, options());
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("exists"));
  CHECK(std::filesystem::exists(out + "/old"));
  REQUIRE(write_quantized_model(fixture("qwen2-fp16"), out, calib, options(), {.force = true}));
  CHECK_FALSE(std::filesystem::exists(out + "/old"));
  CHECK(std::filesystem::exists(out + "/model.safetensors"));
}
