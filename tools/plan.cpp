// SPDX-License-Identifier: Apache-2.0
// edgellm-plan: the memory plan of loading a checkpoint and running sessions over it, before
// anything is loaded (edgellm::plan_memory: config.json and the safetensors headers only), as
// one JSON object, and the decision under a budget. --measure then loads it, fills the context
// and reports the measured peak RSS beside the plan.
#include "flags.hpp"
#include "edgellm/plan.hpp"
#include "edgellm/io/json_write.hpp"
#include "edgellm/io/meminfo.hpp"
#include "edgellm/session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace edgellm;

constexpr const char* kProg = "edgellm-plan";

constexpr const char* kHead = R"(usage: edgellm-plan -m DIR [options]

Prints the memory plan of Engine::load(DIR) and Session::create() with these options as one
JSON object (bytes as integers): weights mapped and resident, the transient peak of loading,
KV cache for the context and KV type, scratch, tokenizer, and the peak; with --budget, whether
it fits. Nothing is loaded: config.json and the safetensors headers are read.

)";

constexpr const char* kTail =
    R"(Exit status: 0 fits (or no budget), 1 a runtime error or a plan over the budget (a refusal),
2 bad arguments.
)";

int usage_error(const std::string& msg) { return cli::usage_error(kProg, msg); }

struct Measured {
  // VmRSS before loading and right after it, VmHWM after loading and after filling the contexts
  std::uint64_t baseline_rss = 0, loaded_rss = 0, peak_rss = 0, load_peak_rss = 0;
  std::uint64_t weights_owned = 0, session_bytes = 0;
  std::size_t context = 0;
  std::size_t decoded = 0;           // tokens decoded one at a time after the prefill
  double decode_tokens_per_s = 0.0;  // their rate, in the last of the --sessions
};

// Loads, creates the sessions and fills each context with synthetic tokens (chunks of
// max_batch; one row of logits), as the plan assumes: all but the last `decode` of them as one
// prefill, those one at a time (each the argmax of the logits before), as a generation does.
result<Measured> measure(const std::string& dir, const EngineOptions& eo, const SessionOptions& so,
                         std::size_t sessions, std::size_t decode) {
  Measured m;
  m.baseline_rss = edgellm::io::current_rss_bytes();
  auto engine = Engine::load(dir, eo);
  if (!engine) return engine.error();
  m.load_peak_rss = edgellm::io::peak_rss_bytes();
  m.loaded_rss = edgellm::io::current_rss_bytes();
  m.weights_owned = (*engine)->weights()->owned_bytes();
  const std::size_t V = (*engine)->config().vocab_size;
  // A Transformer per session as Session::create builds it, driven with token ids (no
  // tokenizer needed), plus the logits row the decoder keeps.
  const auto fill = [&](auto tag) -> status {
    using Cache = typename decltype(tag)::type;
    std::vector<model::Transformer<Cache>> models;
    std::vector<std::vector<float>> logits;
    for (std::size_t s = 0; s < sessions; ++s) {
      model::TransformerOptions to;
      to.context_size = so.context_size;
      if (to.context_size == 0) {
        const model::ModelConfig& c = (*engine)->config();
        to.context_size = std::min<std::size_t>(c.max_position_embeddings, 4096);
        if (c.sliding_window) to.context_size = std::min(to.context_size, *c.sliding_window);
      }
      to.max_batch = so.max_batch;
      to.pool = so.pool != nullptr ? so.pool : (*engine)->pool();
      auto t = model::Transformer<Cache>::create((*engine)->weights(), to);
      if (!t) return t.error();
      std::vector<std::int32_t> ids(t->context_size());
      for (std::size_t i = 0; i < ids.size(); ++i)
        ids[i] = static_cast<std::int32_t>((i * 7919 + 13) % V);
      logits.emplace_back(V);
      const std::size_t steps = std::min(decode, ids.size() - 1);
      const std::span<const std::int32_t> prompt(ids.data(), ids.size() - steps);
      if (auto st = t->forward(prompt, decode::LogitsMode::last, logits.back()); !st) return st;
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < steps; ++i) {
        const auto next = static_cast<std::int32_t>(
            std::max_element(logits.back().begin(), logits.back().end()) - logits.back().begin());
        if (auto st = t->forward(std::span(&next, 1), decode::LogitsMode::last, logits.back()); !st)
          return st;
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      m.decoded = steps;
      m.decode_tokens_per_s = steps > 0 && seconds > 0 ? static_cast<double>(steps) / seconds : 0;
      m.session_bytes = t->bytes();
      m.context = t->context_size();
      models.push_back(std::move(*t));
    }
    m.peak_rss = edgellm::io::peak_rss_bytes();
    return {};
  };
  if (auto st = cache::with_kv_type(so.kv_type, fill); !st) return st.error();
  return m;
}

void add_weights(std::string& o, const char* key, const WeightsPlan& w) {
  o += fmt::format("\"{}\":{{\"dir\":", key);
  io::json::append_escaped(o, w.dir);
  o += fmt::format(
      ",\"lm_head\":\"{}\",\"int4_source\":\"{}\",\"mapped_bytes\":{},\"owned_bytes\":{},"
      "\"mapped_resident_bytes\":{},\"resident_bytes\":{},\"load_peak_bytes\":{},"
      "\"load_peak_tensor\":",
      w.lm_head, w.int4_source, w.files_bytes, w.owned_bytes, w.mapped_resident_bytes,
      w.resident_bytes(), w.load_peak_bytes);
  io::json::append_escaped(o, w.load_peak_tensor);
  o += "}";
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, draft, format = "json", meminfo = "/proc/meminfo";
  EngineOptions eo;
  eo.load.lm_head = model::LmHeadFormat::int8;  // the CLIs' default (edgellm-generate's)
  SessionOptions so;
  std::size_t sessions = 1, k = 5;
  bool shrink = false, do_measure = false, exact = false, choose = false;
  std::size_t decode_tokens = 0;
  BudgetFreedom freedom;  // --choose: what the flags left open
  std::optional<MemoryBudget> budget;
  using cli::flag;
  const std::vector<flag> flags{
      flag::string({"-m", "--model"}, "DIR", "checkpoint directory (required)", dir),
      flag::number<std::size_t>({"-c", "--context", "--ctx-size"}, "N", "tokens per session",
                                so.context_size, 1, std::size_t{1} << 24)
          .shows_default("min(model maximum, 4096)")
          .on_set([&] { freedom.context = false; }),
      tools::kv_type_flag({"--kv-type", "--kv"}, "int8, int4, f16 or f32", so.kv_type).on_set([&] {
        freedom.kv_type = false;
      }),
      flag::number<std::size_t>({"-t", "--threads"}, "N",
                                "threads of the pool; attention scratch is per thread", eo.threads,
                                1, 1024),
      flag::number<std::size_t>({"--max-batch"}, "N", "most tokens per forward chunk", so.max_batch,
                                1, 65536),
      flag::number<std::size_t>({"--sessions"}, "N", "sessions over the one loaded model", sessions,
                                1, 1024),
      tools::lm_head_flag(
          "f16 (as stored), int8 or int4 (quantised at load), as edgellm-generate;\n"
          "int8 falls back to f16 when no group size divides hidden_size unless\n"
          "given; as_stored and q4 are accepted aliases",
          eo.load.lm_head)
          .on_set([&] {
            eo.lm_head_fallback = false;
            freedom.lm_head = false;
          }),
      flag::string({"--packed-cache"}, "auto|FILE",
                   "int4 weights from a packed-weight cache (planned as valid if the\n"
                   "file exists)",
                   eo.load.packed_cache),
      flag::boolean({"--packed-cache-copy"}, "copy them into owned memory instead of mapping them",
                    eo.load.packed_cache_copy),
      flag::boolean({"--no-release-source-pages"},
                    "keep converted tensors' source pages mapped (LoadOptions)",
                    eo.load.release_source_pages, false),
      flag::boolean({"--exact"}, "the exact int4 path (no quantised-activation workspace)", exact),
      flag::boolean({"--fp32-reference"}, "dense fp32 weights", eo.load.fp32_reference),
      flag::boolean({"--no-tokenizer"}, "weights only (as edgellm-bench loads them)",
                    eo.load_tokenizer, false),
      flag::string({"--draft"}, "DIR", "a draft model for speculative decoding", draft),
      flag::number<std::size_t>({"-k"}, "N", "tokens drafted per step with --draft", k, 1, 32),
      flag::parsed({"--budget"}, "B", "BYTES, NN[KMG]iB, NN% of MemAvailable (/proc/meminfo) or phone\n"
                   "(3.8 GiB, or 90 % of MemAvailable when less)",
                   budget, parse_budget),
      flag::boolean({"--shrink-context-to-fit"},
                    "with --budget: the largest context that fits instead of a refusal", shrink),
      flag::boolean({"--choose"},
                    "with --budget: choose what the flags leave open so that it fits: the\n"
                    "lm_head (int8, f16, int4), then the KV type (f16, int8, int4), then the\n"
                    "context (the longest that fits, at least 256); says what and why",
                    choose),
      flag::string({"--meminfo"}, "FILE", "read the available memory from FILE", meminfo),
      flag::boolean({"--measure"},
                    "then load, create the sessions, fill every context and add the\n"
                    "measured bytes (VmRSS before loading, VmHWM after) to the output",
                    do_measure),
      flag::number<std::size_t>({"--decode"}, "N",
                                "with --measure: the last N tokens of each context decoded one\n"
                                "at a time after the prefill, as a generation does, and their\n"
                                "rate measured (decode_tokens_per_s)",
                                decode_tokens, 0, std::size_t{1} << 24),
      flag::choice({"--format"}, "one JSON object or one line of text", format,
                   {{"json", "json"}, {"text", "text"}}),
  };
  if (const auto rc =
          tools::parse_command_line(kProg, argc, argv, {kHead, {{"", &flags}}, kTail, 25}))
    return *rc;  // --help, --version or a usage error
  if (dir.empty()) return usage_error("no model: pass --model DIR");
  if (shrink && !budget) return usage_error("--shrink-context-to-fit needs --budget");
  if (choose && !budget) return usage_error("--choose needs --budget");
  if (choose && shrink) return usage_error("--choose shrinks the context itself; drop --shrink-context-to-fit");
  if (budget) budget->meminfo_path = meminfo;
  if (exact && do_measure) return usage_error("--measure runs the fast path; drop --exact");
  if (decode_tokens > 0 && !do_measure) return usage_error("--decode needs --measure");
  so.speculative.k = k;

  PlanOptions po = plan_options(eo, so, sessions);
  po.path = exact ? kernels::MatmulPath::exact : kernels::MatmulPath::fast;
  if (!draft.empty()) {
    po.draft_dir = draft;
    po.draft_load = EngineOptions::draft_of(eo).load;
  }
  auto plan = plan_memory(dir, po);
  if (!plan) {
    std::fprintf(stderr, "edgellm-plan: %s\n", plan.error().message.c_str());
    return 1;
  }
  BudgetDecision decision;
  decision.context_size = plan->session.context_size;
  std::string chosen;  // --choose: what it changed and why
  if (budget) {
    auto bytes = resolve_budget(*budget);
    if (!bytes) {
      std::fprintf(stderr, "edgellm-plan: %s\n", bytes.error().message.c_str());
      return 1;
    }
    if (choose) {
      auto c = choose_within_budget(dir, po, *bytes, freedom);
      if (!c) {
        std::fprintf(stderr, "edgellm-plan: %s\n", c.error().message.c_str());
        return 1;
      }
      po = c->options;
      *plan = std::move(c->plan);
      chosen = c->note.empty() ? "the settings fit as given" : c->note;
      eo.load.lm_head = po.load.lm_head;
      so.kv_type = po.kv_type;
      so.context_size = plan->session.context_size;
      std::fprintf(stderr, "edgellm-plan: %s\n", chosen.c_str());
    }
    decision = decide_budget(*plan, *bytes, shrink);
  }
  std::optional<Measured> measured;
  if (do_measure && decision.fits) {
    SessionOptions mso = so;
    mso.context_size = decision.context_size;
    if (!draft.empty()) {
      std::fprintf(stderr, "edgellm-plan: --measure does not load --draft; measuring without it\n");
    }
    auto m = measure(dir, eo, mso, sessions, decode_tokens);
    if (!m) {
      std::fprintf(stderr, "edgellm-plan: %s\n", m.error().message.c_str());
      return 1;
    }
    measured = *m;
  }

  const MemoryPlan& p = *plan;
  const SessionPlan& s = p.session;
  if (format == "text") {
    std::printf("%s: %s\n", dir.c_str(), plan_summary(p).c_str());
    if (budget) std::printf("%s\n", decision.fits ? (decision.shrunk ? decision.message.c_str() : "fits the budget") : decision.message.c_str());
    if (measured) {
      std::printf("measured: peak RSS %s (baseline %s before loading; %s loaded, %s at the "
                  "loading peak), session %s\n",
                  mib(measured->peak_rss).c_str(), mib(measured->baseline_rss).c_str(),
                  mib(measured->loaded_rss).c_str(), mib(measured->load_peak_rss).c_str(),
                  mib(measured->session_bytes).c_str());
    }
    return decision.fits ? 0 : 1;
  }
  std::string o = "{\"model\":";
  io::json::append_escaped(o, dir);
  o += fmt::format(
      ",\"context_size\":{},\"kv_type\":\"{}\",\"max_batch\":{},\"threads\":{},\"sessions\":{},",
      s.context_size, cache::kv_type_name(so.kv_type), so.max_batch, po.threads, sessions);
  add_weights(o, "weights", p.weights);
  if (p.has_draft) {
    o += ",";
    add_weights(o, "draft", p.draft);
  }
  o += fmt::format(
      ",\"tokenizer_bytes\":{},\"tokenizer_load_peak_bytes\":{},\"embedding_touched_bytes\":{},"
      "\"session\":{{\"kv_cache_bytes\":{},\"activation_bytes\":{},\"workspace_bytes\":{},"
      "\"attention_scratch_bytes\":{},\"logits_bytes\":{},\"model_bytes\":{},\"scratch_bytes\":{},"
      "\"total_bytes\":{}}},"
      "\"engine_bytes\":{},\"engine_peak_bytes\":{},\"steady_bytes\":{},\"peak_bytes\":{}",
      p.tokenizer_bytes, p.tokenizer_load_peak_bytes, p.embedding_touched_bytes, s.kv_cache_bytes, s.activation_bytes,
      s.workspace_bytes, s.attention_scratch_bytes, s.logits_bytes, s.model_bytes,
      s.scratch_bytes(), s.total_bytes(), p.engine_bytes(), p.engine_peak_bytes(),
      p.steady_bytes(), p.peak_bytes());
  if (budget) {
    o += fmt::format(",\"budget\":{{\"bytes\":{},\"fits\":{},\"context_size\":{},\"shrunk\":{},"
                     "\"message\":",
                     decision.budget_bytes, decision.fits, decision.context_size, decision.shrunk);
    io::json::append_escaped(o, decision.message);
    if (choose) {
      o += fmt::format(",\"chosen\":{{\"lm_head\":\"{}\",\"kv_type\":\"{}\",\"context_size\":{},"
                       "\"note\":",
                       model::lm_head_format_name(po.load.lm_head), cache::kv_type_name(po.kv_type),
                       s.context_size);
      io::json::append_escaped(o, chosen);
      o += "}";
    }
    o += "}";
  }
  if (measured) {
    o += fmt::format(
        ",\"measured\":{{\"context_size\":{},\"baseline_rss_bytes\":{},\"loaded_rss_bytes\":{},"
        "\"load_peak_rss_bytes\":{},\"peak_rss_bytes\":{},\"weights_owned_bytes\":{},"
        "\"session_model_bytes\":{},\"decoded_tokens\":{},\"decode_tokens_per_s\":{:.3f}}}",
        measured->context, measured->baseline_rss, measured->loaded_rss, measured->load_peak_rss,
        measured->peak_rss,
        measured->weights_owned, measured->session_bytes, measured->decoded,
        measured->decode_tokens_per_s);
  }
  o += "}";
  std::printf("%s\n", o.c_str());
  if (!decision.fits) std::fprintf(stderr, "edgellm-plan: %s\n", decision.message.c_str());
  return decision.fits ? 0 : 1;
}
