// SPDX-License-Identifier: Apache-2.0
// The memory plan against what a load then measures: owned weight bytes and Session::bytes()
// exactly (fixtures and the bundled model, every load option), peak RSS within 10 % on the
// bundled model (in a child process, its RSS before loading subtracted: a model of 8 MB is
// small beside the process's own few MB), budgets that refuse before allocating or shrink the
// context, and budget parsing.
#include "edgellm/plan.hpp"
#include "edgellm/session.hpp"

#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <malloc.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace test_plan {

namespace {

using namespace edgellm;

// Sanitizers replace the allocator and add shadow memory: RSS and heap figures mean nothing.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

std::string bundled() { return test::source_dir() + "/models/kjv-target-awq"; }

std::uint64_t proc_status_bytes(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  return 0;
}

// Fills the session's whole context through the model (chunks of max_batch, so the scratch and
// workspace reach their planned size) and returns Session::bytes().
std::size_t fill_and_measure(Session& s) {
  const std::size_t V = s.engine()->config().vocab_size;
  std::vector<std::int32_t> ids(s.context_size() - 1);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 31 + 7) % V);
  GenerateOptions go;
  go.max_new_tokens = 1;
  go.ignore_eos = true;
  auto g = s.generate(std::span<const std::int32_t>(ids), go);
  INFO((g ? std::string() : g.error().message));
  REQUIRE(g);
  return s.bytes();
}

}  // namespace

TEST_CASE("plan: owned weight bytes equal what the load owns, for every fixture and option",
          "[plan]") {
  const std::string dirs[] = {"llama-awq-gemm", "llama-awq-gemv", "llama-bf16",     "llama-fp16",
                              "qwen2-awq-gemm", "qwen2-fp16",     "qwen3-awq-gemm", "qwen3-fp16",
                              "smollm3-awq-gemm", "smollm3-fp16"};
  for (const std::string& name : dirs) {
    for (const auto lm_head : {model::LmHeadFormat::as_stored, model::LmHeadFormat::int8,
                               model::LmHeadFormat::q4}) {
      for (const bool ref : {false, true}) {
        const std::string dir = test::source_dir() + "/tests/data/model/" + name;
        CAPTURE(name, static_cast<int>(lm_head), ref);
        model::LoadOptions lo;
        lo.lm_head = lm_head;
        lo.fp32_reference = ref;
        auto plan = plan_weights(dir, lo);
        INFO((plan ? std::string() : plan.error().message));
        REQUIRE(plan);
        auto w = model::load_weights(dir, lo);
        if (!w) {  // an int4 lm_head the shape refuses: the plan falls back as Engine does
          CHECK(plan->lm_head == "as_stored");
          continue;
        }
        CHECK(plan->owned_bytes == (*w)->owned_bytes());
        CHECK(plan->lm_head == ((*w)->lm_head.int4()   ? "q4"
                                : (*w)->lm_head.int8() ? "int8"
                                                       : "as_stored"));
        CHECK(plan->config.hidden_size == (*w)->config.hidden_size);
        CHECK(plan->load_peak_bytes >= plan->owned_bytes);
      }
    }
  }
}

TEST_CASE("plan: Session::bytes() after a full context equals the plan's model bytes",
          "[plan]") {
  for (const auto kv : {cache::KvType::int8, cache::KvType::f16, cache::KvType::f32,
                        cache::KvType::int4}) {
    for (const std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
      CAPTURE(cache::kv_type_name(kv), threads);
      EngineOptions eo;
      eo.threads = threads;
      eo.load.lm_head = threads == 2 ? model::LmHeadFormat::q4 : model::LmHeadFormat::as_stored;
      SessionOptions so;
      so.kv_type = kv;
      so.context_size = 200;
      so.max_batch = 48;
      auto plan = plan_memory(bundled(), eo, so);
      INFO((plan ? std::string() : plan.error().message));
      REQUIRE(plan);
      auto engine = Engine::load(bundled(), eo);
      REQUIRE(engine);
      CHECK(plan->weights.owned_bytes == (*engine)->weights()->owned_bytes());
      auto s = Session::create(*engine, so);
      REQUIRE(s);
      CHECK(plan->session.context_size == s->context_size());
      CHECK(fill_and_measure(*s) == plan->session.model_bytes);
    }
  }
}

// The measurement of the next test, run in a fresh process (this binary re-executed with the
// hidden tag): a forked child would share the parent's heap pages and miscount them.
TEST_CASE("plan: child that loads the bundled model and fills 2048 tokens", "[.plan_child]") {
  const char* out_path = std::getenv("EDGELLM_PLAN_CHILD_OUT");
  if (out_path == nullptr) return;
  {
    // Warm up on the bundled draft model (same code paths): the code pages of this binary that
    // loading and decoding touch are then in the baseline, not in the measured peak.
    auto warm = Engine::load(test::source_dir() + "/models/kjv-draft-awq");
    REQUIRE(warm);
    SessionOptions wo;
    wo.context_size = 300;
    auto ws = Session::create(*warm, wo);
    REQUIRE(ws);
    fill_and_measure(*ws);
  }
  ::malloc_trim(0);                                    // freed heap pages leave the RSS
  std::ofstream("/proc/self/clear_refs") << "5";       // VmHWM restarts from VmRSS
  const std::uint64_t baseline = proc_status_bytes("VmRSS");
  auto engine = Engine::load(bundled());
  REQUIRE(engine);
  SessionOptions so;
  so.context_size = 2048;
  auto s = Session::create(*engine, so);
  REQUIRE(s);
  fill_and_measure(*s);
  std::ofstream(out_path) << baseline << " " << proc_status_bytes("VmHWM") << "\n";
}

TEST_CASE("plan: peak RSS of load + a full context matches the plan within 10 % (bundled)",
          "[plan]") {
  // In a fresh process, whose RSS before loading (the binary, libraries and the code pages a
  // warm-up run touched: a few MiB beside an 8 MB model) is subtracted from its peak (VmHWM)
  // after loading and filling the context.
  SessionOptions so;
  so.context_size = 2048;
  auto plan = plan_memory(bundled(), {}, so);
  REQUIRE(plan);
  if (kSanitized) {
    WARN("sanitizer build: peak RSS not compared");
    return;
  }
  char exe[4096];
  const auto len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) {
    WARN("no /proc/self/exe: peak RSS not measured");
    return;
  }
  exe[len] = '\0';
  const std::string out = std::filesystem::temp_directory_path() /
                          ("edgellm_plan_child_" + std::to_string(::getpid()));
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("EDGELLM_PLAN_CHILD_OUT", out.c_str(), 1);
    ::setenv("EDGELLM_SOURCE_DIR", test::source_dir().c_str(), 1);
    if (std::FILE* quiet = std::freopen("/dev/null", "w", stdout)) (void)quiet;
    char tag[] = "[.plan_child]";
    char* args[] = {exe, tag, nullptr};
    ::execv(exe, args);
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 127) {  // this binary cannot be re-executed (an emulator without binfmt)
    WARN("could not re-execute " << exe << ": peak RSS not measured");
    return;
  }
  REQUIRE(WEXITSTATUS(status) == 0);
  std::uint64_t baseline = 0, peak = 0;
  std::ifstream(out) >> baseline >> peak;
  std::filesystem::remove(out);
  REQUIRE(peak > baseline);
  const double measured = static_cast<double>(peak - baseline);
  const double planned = static_cast<double>(plan->peak_bytes());
  INFO("planned " << mib(plan->peak_bytes()) << ", measured " << mib(peak - baseline)
                  << " over a baseline of " << mib(baseline));
  CHECK(measured >= 0.9 * planned);
  CHECK(measured <= 1.1 * planned);
}

TEST_CASE("plan: a budget below the plan refuses the load before any large allocation",
          "[plan]") {
  EngineOptions eo;
  eo.memory_budget.bytes = 1 << 20;  // 1 MiB: the bundled weights need ~8
  // Once first, so that code paths (and an emulator's translations) are warm, then the peak
  // restarts from the current RSS (clear_refs 5) and must barely move on the second refusal.
  (void)Engine::load(bundled(), eo);
  std::ofstream("/proc/self/clear_refs") << "5";
  const std::uint64_t before = proc_status_bytes("VmHWM");
  auto e = Engine::load(bundled(), eo);
  REQUIRE_FALSE(e);
  CHECK(e.error().code == errc::out_of_memory);
  CHECK_THAT(e.error().message, Catch::Contains("needs") && Catch::Contains("budget 1.0 MiB") &&
                                    Catch::Contains("weights") && Catch::Contains("kjv-target-awq"));
  // No weight was converted: the peak moved by far less than the 5 MB of int4 weights.
  CHECK(proc_status_bytes("VmHWM") - before < (std::uint64_t{2} << 20));

  eo.memory_budget.bytes = std::uint64_t{1} << 30;
  REQUIRE(Engine::load(bundled(), eo));
  eo.memory_budget = {};
  eo.memory_budget.available_fraction = 0.9;
  eo.memory_budget.meminfo_path = test::source_dir() + "/tests/data/meminfo/android-3.10-no-available.txt";
  CHECK(Engine::load(bundled(), eo));
  eo.memory_budget.meminfo_path = "/nonexistent/meminfo";
  auto no_info = Engine::load(bundled(), eo);
  REQUIRE_FALSE(no_info);
  CHECK_THAT(no_info.error().message, Catch::Contains("/nonexistent/meminfo"));
}

TEST_CASE("plan: a session budget refuses, or shrinks the context to fit", "[plan]") {
  auto engine = Engine::load(bundled());
  REQUIRE(engine);
  SessionOptions so;
  so.context_size = 2048;
  auto full = plan_memory(bundled(), {}, so);
  REQUIRE(full);
  const std::uint64_t budget = full->session.total_bytes() / 2;
  so.memory_budget.bytes = budget;
  auto refused = Session::create(*engine, so);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == errc::out_of_memory);
  CHECK_THAT(refused.error().message, Catch::Contains("KV") && Catch::Contains("2048 tokens int8") &&
                                          Catch::Contains("budget"));
  so.shrink_context_to_fit = true;
  auto shrunk = Session::create(*engine, so);
  REQUIRE(shrunk);
  CHECK(shrunk->context_size() < 2048);
  CHECK(shrunk->context_size() > 0);
  CHECK_THAT(shrunk->memory_note(), Catch::Contains("shrunk from 2048"));
  CHECK(fill_and_measure(*shrunk) <= budget);
  // One more token would not have fitted.
  SessionOptions bigger = so;
  bigger.context_size = shrunk->context_size() + 1;
  bigger.memory_budget = {};
  auto p = plan_memory(bundled(), {}, bigger);
  REQUIRE(p);
  CHECK(p->session.total_bytes() > budget);
  // Nothing fits in 1 KiB.
  so.memory_budget.bytes = 1024;
  CHECK_FALSE(Session::create(*engine, so));
}

TEST_CASE("plan: decide_budget on the whole plan, and the tool's budget strings", "[plan]") {
  SessionOptions so;
  so.context_size = 2048;
  auto p = plan_memory(bundled(), {}, so);
  REQUIRE(p);
  CHECK(decide_budget(*p, 0, false).fits);
  CHECK(decide_budget(*p, p->peak_bytes(), false).fits);
  const auto refused = decide_budget(*p, p->peak_bytes() - 1, false);
  CHECK_FALSE(refused.fits);
  CHECK_THAT(refused.message, Catch::Contains("needs") && Catch::Contains("2048 tokens int8"));
  const auto shrunk = decide_budget(*p, p->engine_peak_bytes() + p->session.total_bytes() / 2, true);
  CHECK(shrunk.fits);
  CHECK(shrunk.shrunk);
  CHECK(shrunk.context_size < 2048);

  auto b = parse_budget("512MiB");
  REQUIRE(b);
  CHECK(b->bytes == 512ull << 20);
  CHECK(parse_budget("1.5G")->bytes == 3ull << 29);
  CHECK(parse_budget("123")->bytes == 123);
  CHECK(parse_budget("50%")->available_fraction == Approx(0.5));
  // phone: 3.8 GiB, or 90 % of MemAvailable when that is less
  auto phone = parse_budget("phone");
  REQUIRE(phone);
  const std::uint64_t gib38 = 4080218931;  // 3.8 GiB
  phone->meminfo_path = test::source_dir() + "/tests/data/meminfo/linux-6.1.txt";  // 22.6 GiB
  CHECK(resolve_budget(*phone).value() == gib38);
  MemoryBudget small = *phone;
  small.bytes = std::uint64_t{64} << 30;  // the fraction is then the smaller
  CHECK(resolve_budget(small).value() == std::uint64_t{23661568} * 1024 * 9 / 10);
  for (const char* bad : {"", "%", "0", "150%", "12XB", "-5", "0%"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_budget(bad));
  }
}

TEST_CASE("plan: errors name what is missing", "[plan]") {
  auto none = plan_memory("/nonexistent/model");
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error().message, Catch::Contains("/nonexistent/model"));
  // The fixtures have no tokenizer.json: a plan that loads one says so.
  const std::string dir = test::source_dir() + "/tests/data/model/llama-awq-gemm";
  auto no_tok = plan_memory(dir);
  REQUIRE_FALSE(no_tok);
  CHECK_THAT(no_tok.error().message, Catch::Contains("tokenizer.json"));
  PlanOptions po;
  po.load_tokenizer = false;
  CHECK(plan_memory(dir, po));
  po.sessions = 0;
  CHECK_FALSE(plan_memory(dir, po));
}

TEST_CASE("plan: the tokenizer estimate bounds its measured heap", "[plan]") {
  // mallinfo2 counts the heap bytes in use (small blocks and mmapped ones): the loaded
  // tokenizer's, against kTokenizerPerFileByte x the size of tokenizer.json.
  auto p = plan_memory(bundled());
  REQUIRE(p);
  if (kSanitized) {
    WARN("sanitizer build: heap not measured");
    return;
  }
  const auto heap = [] {
    const struct mallinfo2 m = ::mallinfo2();
    return static_cast<std::uint64_t>(m.uordblks + m.hblkhd);
  };
  const std::uint64_t before = heap();
  auto tok = model::Tokenizer::load(bundled());
  REQUIRE(tok);
  const std::uint64_t used = heap() - before;
  INFO("tokenizer heap " << used << " bytes, planned " << p->tokenizer_bytes);
  CHECK(used <= p->tokenizer_bytes);
  CHECK(used * 3 >= p->tokenizer_bytes);
}

TEST_CASE("choose_within_budget: lm_head, then KV type, then context, each only when needed",
          "[plan]") {
  using F = model::LmHeadFormat;
  using K = cache::KvType;
  PlanOptions o;
  o.kv_type = K::f32;
  o.context_size = 2048;
  o.load.lm_head = F::as_stored;
  const auto peak = [&](F f, K k, std::size_t ctx) {
    PlanOptions t = o;
    t.load.lm_head = f;
    t.kv_type = k;
    t.context_size = ctx;
    auto p = plan_memory(bundled(), t);
    REQUIRE(p);
    return p->peak_bytes();
  };
  const std::uint64_t given = peak(F::as_stored, K::f32, 2048);

  // Fits as given: nothing changes.
  auto same = choose_within_budget(bundled(), o, given);
  REQUIRE(same);
  CHECK(same->note.empty());
  CHECK(same->options.load.lm_head == F::as_stored);
  CHECK(same->options.kv_type == K::f32);
  CHECK(same->plan.peak_bytes() == given);

  // Just below: the lm_head changes first, to the first of int8, int4 that fits alone.
  const std::uint64_t i8 = peak(F::int8, K::f32, 2048), q4 = peak(F::q4, K::f32, 2048);
  const std::uint64_t lm_budget = std::min(i8, q4);
  REQUIRE(lm_budget < given);
  const F least = i8 <= q4 ? F::int8 : F::q4;
  auto lm = choose_within_budget(bundled(), o, lm_budget);
  REQUIRE(lm);
  CHECK(lm->options.load.lm_head == least);
  CHECK(lm->options.kv_type == K::f32);
  CHECK(lm->options.context_size == 2048);
  CHECK_THAT(lm->note, Catch::Contains("lm_head f16 -> "));
  CHECK(lm->plan.peak_bytes() <= lm_budget);

  // Below every lm_head at f32: the lm_head asked stays when a narrower KV cache fits with it
  // (f16 first, then int8, then int4).
  for (const K kv : {K::f16, K::int8, K::int4}) {
    const std::uint64_t b = peak(F::as_stored, kv, 2048);
    CAPTURE(cache::kv_type_name(kv));
    REQUIRE(b < lm_budget);
    auto narrow = choose_within_budget(bundled(), o, b);
    REQUIRE(narrow);
    CHECK(narrow->options.load.lm_head == F::as_stored);
    CHECK(narrow->options.kv_type == kv);
    CHECK(narrow->options.context_size == 2048);
    CHECK(narrow->plan.peak_bytes() == b);
    CHECK(narrow->note == "to fit the budget of " + mib(b) + ": KV f32 -> " +
                              cache::kv_type_name(kv) + " (peak " + mib(given) + " -> " + mib(b) +
                              ")");
  }

  // The lm_head asked cannot get there, another can: none fits alone, and f16 as stored (the
  // mapped lm_head counted whole) stays above a budget that int8 reaches with int4 KV and a
  // shorter context. (Taking the lowest peak at int8 KV, int4, would stop at its load's peak.)
  {
    PlanOptions asked = o;
    asked.kv_type = K::int8;
    PlanOptions floor = asked;
    floor.kv_type = K::int4;
    floor.context_size = 256;
    auto f16_floor = plan_memory(bundled(), floor);
    floor.load.lm_head = F::int8;
    auto int8_floor = plan_memory(bundled(), floor);
    floor.load.lm_head = F::q4;
    auto q4_floor = plan_memory(bundled(), floor);
    REQUIRE(f16_floor);
    REQUIRE(int8_floor);
    REQUIRE(q4_floor);
    REQUIRE(int8_floor->peak_bytes() < f16_floor->peak_bytes());
    const std::uint64_t b = (int8_floor->peak_bytes() + f16_floor->peak_bytes()) / 2;
    REQUIRE(b < q4_floor->peak_bytes());
    auto other = choose_within_budget(bundled(), asked, b);
    REQUIRE(other);
    CHECK(other->options.load.lm_head == F::int8);
    CHECK(other->options.kv_type == K::int4);
    CHECK(other->options.context_size < 2048);
    CHECK(other->options.context_size >= 256);
    CHECK(other->plan.peak_bytes() <= b);
    CHECK_THAT(other->note, Catch::StartsWith("to fit the budget of " + mib(b) +
                                              ": lm_head f16 -> int8 (peak ") &&
                                Catch::Contains("; KV int8 -> int4 (peak ") &&
                                Catch::Contains("; context 2048 -> "));
  }

  // Below every KV type at 2048 tokens, the lm_head fixed as stored (at 512 the load's peak,
  // not the context, is the plan's peak): the context shrinks, to the longest that fits (one
  // more token does not).
  PlanOptions o2048 = o;
  o2048.context_size = 2048;
  BudgetFreedom head_fixed;
  head_fixed.lm_head = false;
  const std::uint64_t ctx_budget = peak(F::as_stored, K::int4, 1000);
  REQUIRE(ctx_budget < peak(F::as_stored, K::int4, 2048));
  auto ctx = choose_within_budget(bundled(), o2048, ctx_budget, head_fixed);
  REQUIRE(ctx);
  CHECK(ctx->options.load.lm_head == F::as_stored);
  CHECK(ctx->options.kv_type == K::int4);
  const std::size_t got = ctx->options.context_size;
  CHECK(got >= 1000);
  CHECK(got < 2048);
  CHECK(ctx->plan.peak_bytes() <= ctx_budget);
  CHECK(peak(F::as_stored, K::int4, got + 1) > ctx_budget);
  CHECK_THAT(ctx->note, Catch::Contains("context 2048 -> " + std::to_string(got) + " tokens"));

  // What the caller fixed stays: with the lm_head fixed, the KV cache narrows instead.
  BudgetFreedom fixed_head;
  fixed_head.lm_head = false;
  auto kept = choose_within_budget(bundled(), o, lm_budget, fixed_head);
  REQUIRE(kept);
  CHECK(kept->options.load.lm_head == F::as_stored);
  CHECK(kept->options.kv_type != K::f32);
  CHECK(kept->plan.peak_bytes() <= lm_budget);
  // The context never below min_context: refused with the smallest plan and the budget.
  BudgetFreedom long_context = head_fixed;
  long_context.min_context = 1500;
  auto refused = choose_within_budget(bundled(), o2048, ctx_budget, long_context);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == errc::out_of_memory);
  CHECK_THAT(refused.error().message, Catch::Contains("nothing fits the budget of") &&
                                          Catch::Contains("kjv-target-awq"));
  auto tiny = choose_within_budget(bundled(), o, 1 << 20);
  REQUIRE_FALSE(tiny);
  CHECK_THAT(tiny.error().message, Catch::Contains("budget of 1.0 MiB"));
  CHECK_FALSE(choose_within_budget(bundled(), o, 0));
  CHECK_FALSE(choose_within_budget("/nonexistent/model", o, given));
}

}  // namespace test_plan
