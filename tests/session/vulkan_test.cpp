// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/session/vulkan.hpp on the bundled model (lavapipe in CI, validation on): a
// Session on the app's Vulkan device generates the tokens a plain decoder over the same device
// model does; speculative decoding (a draft model, prompt lookup) gives the same greedy tokens
// as plain decoding; the prompt cache round-trips through a file and refuses a CPU state; a
// Session that opens its own device and one on an app's adopted handles (the W4A8 decode GEMVs
// of VulkanSessionOptions::backend_options too); errors that name what the device cannot run;
// out of device memory and a lost device (through a loader that injects them: fault_loader.c)
// as errors that leave nothing allocated and a Session that goes on.
#include "edgellm/session/vulkan.hpp"

#include "backend/vulkan/test_device.hpp"
#include "edgellm/decode/generate.hpp"
#include "support/temp_dir.hpp"
#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace test_session_vulkan {

namespace {

using namespace edgellm;
namespace vk = edgellm::backend::vk;
using Ids = std::vector<std::int32_t>;

std::shared_ptr<const Engine> load_engine(const char* name, const EngineOptions& o = {}) {
  auto e = Engine::load(test::source_dir() + "/models/" + name, o);
  INFO((e ? std::string() : e.error().message));
  REQUIRE(e);
  return *e;
}

SessionOptions greedy(cache::KvType kv = cache::KvType::f16) {
  SessionOptions o;
  o.sampling = decode::SamplingOptions::greedy();
  o.kv_type = kv;
  o.context_size = 96;
  o.max_batch = 16;
  return o;
}

Session make_session(vk::Device& dev, std::shared_ptr<const Engine> engine,
                     const SessionOptions& o) {
  VulkanSessionOptions vo;
  vo.device = &dev;
  auto s = create_vulkan_session(std::move(engine), o, vo);
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
  return out->tokens;
}

constexpr const char* kPrompt = "And God said, Let there be";

}  // namespace

TEST_CASE("a Vulkan Session decodes as a plain decoder on the device, with and without drafts",
          "[vulkan][vk_session]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    const auto engine = load_engine("kjv-target-awq");
    const std::size_t n = static_cast<std::size_t>(edgellm::test::scaled(24, 8));
    Session plain = make_session(*dev, engine, greedy());
    CHECK(std::string(plain.backend_name()) == "vulkan");
    const Ids want = generate_ids(plain, kPrompt, n);
    REQUIRE(want.size() == n);
    CHECK(plain.bytes() > 0);

    // The same decode written out by hand: the device model and decode::PlainDecoder.
    {
      const auto& c = engine->config();
      model::TransformerOptions to;
      to.context_size = 96;
      to.max_batch = 16;
      auto kv = vk::KVCache::create(*dev, vk::KvFormat::f16, c.num_hidden_layers,
                                    c.num_key_value_heads, c.head_dim, 96);
      auto b = vk::Backend::create(*dev, VulkanModel::model_shape(c, 16));
      REQUIRE((kv && b));
      auto m = VulkanModel::assemble(engine->weights(), to, std::move(*kv), std::move(*b));
      REQUIRE(m);
      auto ids = engine->tokenizer()->encode(kPrompt, {.add_special = true});
      REQUIRE(ids);
      auto dec = decode::PlainDecoder<VulkanModel>::create(*m);
      REQUIRE(dec);
      auto sampler = decode::Sampler::create(decode::SamplingOptions::greedy());
      REQUIRE(sampler);
      decode::GenerateOptions go;
      go.max_new_tokens = n;
      Ids got;
      auto st = decode::generate(*dec, *sampler, *engine->tokenizer(), *ids, go,
                                 [](std::string_view) { return true; }, &got);
      INFO((st ? std::string() : st.error().message));
      REQUIRE(st);
      CHECK(got == want);
    }

    // A draft model on the same device: greedy speculative output is the target's own.
    SessionOptions so = greedy();
    so.draft = load_engine("kjv-draft-awq", EngineOptions::draft_of(engine->options()));
    so.speculative.k = 4;
    Session spec = make_session(*dev, engine, so);
    CHECK(generate_ids(spec, kPrompt, n) == want);
    REQUIRE(spec.speculative_stats() != nullptr);
    CHECK(spec.speculative_stats()->drafted > 0);

    // Prompt lookup, and the next turn of a chat reusing what the cache holds.
    SessionOptions lo = greedy();
    lo.prompt_lookup = true;
    Session lookup = make_session(*dev, engine, lo);
    CHECK(generate_ids(lookup, kPrompt, n) == want);
    REQUIRE(plain.reset());
    CHECK(plain.position() == 0);
    CHECK(generate_ids(plain, kPrompt, n) == want);
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("a Vulkan Session's prompt cache restores the prefix and refuses a CPU state",
          "[vulkan][vk_session]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    const auto engine = load_engine("kjv-target-awq");
    test::TempDir dir("edgellm-vk-session");
    const std::string path = dir.file("prompt.bin");
    const std::size_t n = static_cast<std::size_t>(edgellm::test::scaled(12, 6));
    Session a = make_session(*dev, engine, greedy(cache::KvType::int8));
    const Ids want = generate_ids(a, kPrompt, n);
    REQUIRE(a.save_prompt_cache(path));

    Session b = make_session(*dev, engine, greedy(cache::KvType::int8));
    auto held = b.load_prompt_cache(path);
    INFO((held ? std::string() : held.error().message));
    REQUIRE(held);
    CHECK(held->size() == b.position());
    CHECK(generate_ids(b, kPrompt, n) == want);
    CHECK(b.stats().cached_tokens > 0);

    // A state saved by a CPU Session is refused by name; the Vulkan Session is unchanged.
    auto cpu = Session::create(engine, greedy(cache::KvType::int8));
    REQUIRE(cpu);
    generate_ids(*cpu, kPrompt, 2);
    const std::string cpu_path = dir.file("cpu.bin");
    REQUIRE(cpu->save_prompt_cache(cpu_path));
    Session c = make_session(*dev, engine, greedy(cache::KvType::int8));
    auto bad = c.load_prompt_cache(cpu_path);
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().message,
               Catch::Contains(cpu_path) && Catch::Contains("KVCacheQ8") &&
                   Catch::Contains("VulkanKVCacheQ8"));
    CHECK(c.position() == 0);
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("a Vulkan Session on its own device, on an app's adopted handles; what it refuses",
          "[vulkan][vk_session]") {
  auto probe = test::vulkan_test_device();
  if (!probe) return;
  probe.reset();
  const auto engine = load_engine("kjv-target-awq");
  // Its own device (the default rule), closed after the models.
  Ids own;
  {
    auto s = create_vulkan_session(engine, greedy());
    INFO((s ? std::string() : s.error().message));
    REQUIRE(s);
    own = generate_ids(*s, kPrompt, 4);
    CHECK(own.size() == 4);
  }
  // An Android app's way: the app's instance, device and queue adopted by a vk::Device that
  // destroys none of them (here another Device stands in for the app's own code).
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto app = test::vulkan_test_device();
    REQUIRE(app);
    log = app->validation_log();
    const vk::AdoptedHandles h = test::handles_of(*app);
    auto adopted = vk::Device::adopt(h);
    INFO((adopted ? std::string() : adopted.error().message));
    REQUIRE(adopted);
    {
      Session s = make_session(**adopted, engine, greedy());
      CHECK(generate_ids(s, kPrompt, 4) == own);
    }
    // VulkanSessionOptions::backend_options reaches the models' backends: the adopted device
    // enables no optional feature, so no shaderIntegerDotProduct; int8_dot is refused by name,
    // int8 runs the portable W4A8 decode GEMVs.
    {
      VulkanSessionOptions vo;
      vo.device = adopted->get();
      vo.backend_options.gemv = vk::GemvChoice::int8_dot;
      auto refused = create_vulkan_session(engine, greedy(), vo);
      REQUIRE_FALSE(refused);
      CHECK_THAT(refused.error().message, Catch::Contains("shaderIntegerDotProduct"));
      vo.backend_options.gemv = vk::GemvChoice::int8;
      auto s = create_vulkan_session(engine, greedy(), vo);
      INFO((s ? std::string() : s.error().message));
      REQUIRE(s);
      CHECK(generate_ids(*s, kPrompt, 4).size() == 4);
    }
    adopted->reset();  // before the app's device: the adopter destroys nothing of the app's
  }
  test::require_no_validation_messages(*log);
  const auto fails = [&](const std::shared_ptr<const Engine>& e, const SessionOptions& o,
                         const VulkanSessionOptions& vo, const char* text) {
    auto s = create_vulkan_session(e, o, vo);
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error().message, Catch::Contains(text));
  };
  fails(nullptr, greedy(), {}, "engine: null");
  fails(engine, greedy(cache::KvType::f32), {}, "kv_type f32");
  SessionOptions budget = greedy();
  budget.memory_budget.bytes = std::size_t{1} << 30;
  fails(engine, budget, {}, "memory_budget");
  VulkanSessionOptions no_such;
  no_such.device_options.device_index = 99;
  fails(engine, greedy(), no_such, "99");
  // An int8 lm_head (the CLI's default on the CPU) has no shader: the message says what to do.
  EngineOptions eo;
  eo.load.lm_head = model::LmHeadFormat::int8;
  fails(load_engine("kjv-target-awq", eo), greedy(), {}, "--lm-head f16");
}

#ifdef EDGELLM_VK_FAULT_LOADER
TEST_CASE("a Vulkan Session reports out of device memory and a lost device, and goes on",
          "[vulkan][vk_session]") {
  auto probe = test::vulkan_test_device();
  if (!probe) return;
  probe.reset();
  void* lib = ::dlopen(EDGELLM_VK_FAULT_LOADER, RTLD_NOW | RTLD_LOCAL);
  INFO(EDGELLM_VK_FAULT_LOADER);
  REQUIRE(lib != nullptr);
  using SetFn = void (*)(std::uint64_t, std::int64_t);
  using AllocatedFn = std::uint64_t (*)();
  const auto set_faults = reinterpret_cast<SetFn>(::dlsym(lib, "edgellm_fault_set"));
  const auto allocated = reinterpret_cast<AllocatedFn>(::dlsym(lib, "edgellm_fault_allocated"));
  REQUIRE((set_faults && allocated));
  std::shared_ptr<const vk::ValidationLog> log;
  {
    vk::DeviceOptions o;
    o.loader_library = EDGELLM_VK_FAULT_LOADER;
    o.validation = test::vulkan_validation_available();
    auto dev = vk::Device::create(o);
    INFO((dev ? std::string() : dev.error().message));
    REQUIRE(dev);
    log = (*dev)->validation_log();
    const auto engine = load_engine("kjv-target-awq");
    VulkanSessionOptions vo;
    vo.device = dev->get();

    // A model bigger than the device's memory: 1 MiB left for about 5 MB of weights.
    const std::uint64_t before = allocated();
    set_faults(before + (1u << 20), -1);
    auto too_big = create_vulkan_session(engine, greedy(), vo);
    REQUIRE_FALSE(too_big);
    CHECK(too_big.error().code == errc::out_of_memory);
    CHECK_THAT(too_big.error().message,
               Catch::Contains("VK_ERROR_OUT_OF_DEVICE_MEMORY") && Catch::Contains("--backend cpu"));
    CHECK(allocated() == before);  // what was allocated before the failure is freed

    // A device lost in the middle of a generation: an error that says so, the Session at the
    // state before the call, and, the device back, the same tokens as before.
    set_faults(0, -1);
    Session s = make_session(**dev, engine, greedy());
    const Ids want = generate_ids(s, kPrompt, 8);
    REQUIRE(s.reset());
    set_faults(0, 3);  // the prefill and two decode steps, then every submission fails
    GenerateOptions g;
    g.max_new_tokens = 8;
    g.ignore_eos = true;
    auto lost = s.generate(kPrompt, g);
    REQUIRE_FALSE(lost);
    CHECK_THAT(lost.error().message,
               Catch::Contains("VK_ERROR_DEVICE_LOST") && Catch::Contains("--backend cpu"));
    set_faults(0, -1);
    CHECK(generate_ids(s, kPrompt, 8) == want);  // without a reset
    REQUIRE(s.reset());
    CHECK(generate_ids(s, kPrompt, 8) == want);
  }
  CHECK(allocated() == 0);  // the Sessions and the device freed every allocation
  test::require_no_validation_messages(*log);
  ::dlclose(lib);
}
#endif

}  // namespace test_session_vulkan
