// SPDX-License-Identifier: Apache-2.0
// edgellm-bench-speculative: speculative decoding against target-only decoding, end to end, and
// the cost model that says when speculation pays.
//
// End to end (default):
//   edgellm-bench-speculative [--target DIR] [--draft DIR|lookup]... [-k 1,3,5] [--adaptive]
//       [--k-max 8] [--temperature 0,0.8] [--threads 1,2] [-n 128] [--prompts FILE]
//       [--prompt-file FILE] [--num-prompts 8] [--prompt-len 64] [--kv-type int8|int4|f16|f32]
//       [--reps 1] [--seed N] [--no-lock] [--packed-cache auto|FILE] [--format json] [--quick]
// For every thread count, temperature, draft and k (and adaptive mode with --adaptive), each
// prompt is decoded for n tokens by the target alone (prefill, then one forward per token) and
// by SpeculativeDecoder, in the same run, interleaved prompt by prompt; prefill is not timed in
// either (the last prompt token is: both forward it as part of decoding). Rows: target_tok_s and
// spec_tok_s (tokens per second of decoding), speedup, acceptance (accepted / drafted), alpha
// (per-token acceptance, accepted / (accepted + rejections), the parameter of the cost model),
// tokens_per_forward, draft_s / target_s (time inside the decoder's draft and target phases),
// and under greedy decoding `identical` (speculative output == target-only output, which must
// hold). Prompts: --prompts FILE (one per line), else chunks of --prompt-len tokens from
// --prompt-file (default models/kjv-heldout.txt, held-out text of the bundled models), else
// built-in short prompts; token ids from the target dir's tokenizer.json, or synthetic ids when
// it has none (the test fixtures).
//
// Cost model (--cost-model):
//   edgellm-bench-speculative --cost-model [--target DIR] [--draft DIR|lookup]
//       [--acceptance A|measured] [--acceptance-from T,D] [--context P] [--k-max 8]
//       [--threads 1,2] [--reps 10]
// With the target holding P tokens (default 64): t1 = one decode step (1 token), t(k+1) = one
// forward over k + 1 tokens (LogitsMode::all), td = one draft step (1 token + picking it). Each
// t(k+1) is timed right after a t1, in --reps rounds over every k; per k = 1..k_max:
// verify_cost = min over rounds of t(k+1) / min over rounds of t1, draft_cost = min td / min t1
// (noise on this host only adds time: preemption, neighbours' memory traffic, a bimodal
// 80 / 150 ms decode step within one minute; the fastest of several runs is the cost on a quiet
// machine, as the bandwidth probe takes its best rep) and projected_speedup =
// E[tokens](k) / (verify_cost + k draft_cost), E[tokens](k) = (1 - a^(k+1)) / (1 - a) at the
// acceptance a (--acceptance, default 0.7; `measured`: alpha of a greedy k = 5 run over the
// prompts; --acceptance-from T,D: that alpha measured on another pair, such as the bundled one
// when the timed pair are random-weight stand-ins for big models). The summary row gives best_k
// (0 when no k beats plain decoding, speedup 1) and
// adaptive_k: the k that AdaptiveDraftLength settles on when fed these costs and acceptances
// drawn at rate a (a simulated run of 2000 steps), with adaptive_vs_best = its projected
// speedup / the best one.
//
// Defaults: --target models/kjv-target-awq --draft models/kjv-draft-awq (the bundled pair, made
// by tools/train_tiny.py). --quick: the committed fixtures (target tests/data/model/qwen2-awq-gemm,
// drafts lookup and tests/data/model/llama-fp16, random weights, vocab 300), n = 16, 1 thread.
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/decode/lookup_draft.hpp"
#include "edgellm/decode/sampler.hpp"
#include "edgellm/decode/speculative.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"
#include "edgellm/session.hpp"
#include "edgellm/thread_pool.hpp"
#include "harness.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace bench = edgellm::bench;
namespace fs = std::filesystem;
using namespace edgellm;
using Tokens = std::vector<std::int32_t>;
using WeightsPtr = std::shared_ptr<const model::TransformerWeights>;

namespace {

struct Args {
  std::string target;
  std::vector<std::string> drafts;
  std::vector<std::size_t> ks = {5};
  bool adaptive = false;
  std::size_t k_max = 8;
  std::vector<double> temperatures = {0.0};
  std::size_t n = 128;
  std::string prompts_file, prompt_file;
  std::size_t num_prompts = 8, prompt_len = 64;
  std::string kv = "int8";
  std::uint64_t seed = 1;
  bool lock = true;
  std::string target_packed_cache;  // LoadOptions::packed_cache for the target ("" = none)
  bool force = false;                // LoadOptions::packed_cache_overwrite for it
  bool allow_extra = false;          // LoadOptions::allow_extra_tensors for every model
  // A draft only proposes: int4 lm_head costs nothing in exactness and most of a small draft's
  // step is its lm_head (4096 x 128 fp16 for the bundled one).
  model::LmHeadFormat draft_lm_head = model::LmHeadFormat::q4;
  model::LmHeadFormat target_lm_head = model::LmHeadFormat::as_stored;
  bool cost_model = false;
  std::string acceptance = "0.7";
  std::string acceptance_from;  // cost model: "TARGET,DRAFT" whose greedy acceptance is used
  std::size_t context = 64;
};

[[noreturn]] void die(const std::string& why, int code = 1) {
  bench::note("edgellm-bench-speculative: {}", why);
  std::exit(code);
}

/// The repository root: $EDGELLM_SOURCE_DIR, else two levels above this file (CMake compiles it
/// by absolute path), so --quick finds the committed fixtures from any working directory.
std::string source_dir() {
  if (const char* env = std::getenv("EDGELLM_SOURCE_DIR"); env != nullptr && *env != '\0')
    return env;
  const fs::path here(__FILE__);
  return here.is_absolute() ? here.parent_path().parent_path().string() : std::string(".");
}

/// `p` as given when it exists (or is absolute), else relative to the repository root.
std::string resolve(const std::string& p) {
  if (p.empty() || p == "lookup" || fs::path(p).is_absolute() || fs::exists(p)) return p;
  const fs::path alt = fs::path(source_dir()) / p;
  return fs::exists(alt) ? alt.string() : p;
}

/// The comma-separated items of `s` (--acceptance-from T,D), as strings.
std::vector<std::string> split(const std::string& s) {
  const auto items = bench::flag::split_list(s);
  return {items.begin(), items.end()};
}

/// A number >= 0 (--acceptance, validated already when the command line was parsed).
double to_double(const std::string& flag, const std::string& s) {
  const auto v = cli::parse_real(s, 0.0);
  if (!v) die(fmt::format("{}: '{}' is not a number >= 0", flag, s), 2);
  return *v;
}

std::string short_name(const std::string& dir) {
  if (dir == "lookup") return dir;
  const fs::path p = fs::path(dir).lexically_normal();
  return p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
}

WeightsPtr load(const std::string& dir, bool lock,
                model::LmHeadFormat lm_head = model::LmHeadFormat::as_stored,
                const std::string& packed_cache = {}, const Args* args = nullptr) {
  if (!fs::exists(dir)) {
    die(
        fmt::format("{}: not found (the bundled models are written by tools/train_tiny.py; pass "
                    "--target/--draft DIR, or --quick for the committed test fixtures)",
                    dir));
  }
  EngineOptions eo;
  eo.load.lm_head = lm_head;
  eo.load.packed_cache = packed_cache;
  if (args != nullptr) {
    eo.load.packed_cache_overwrite = args->force && !packed_cache.empty();
    eo.load.allow_extra_tensors = args->allow_extra;
  }
  eo.load_tokenizer = false;  // prompts are encoded with the target's tokenizer.json
  auto engine = Engine::load(dir, eo);
  if (!engine) die(engine.error().message);
  if (!(*engine)->lm_head_note().empty()) bench::note("[spec] {}: {}", dir, (*engine)->lm_head_note());
  const WeightsPtr w = (*engine)->weights();
  if (!w->packed_cache_note.empty())
    bench::note("[spec] {}: packed cache: {}", dir, w->packed_cache_note);
  const double s = (*engine)->load_seconds();
  bool locked = lock;
  if (lock) {
    for (const std::span<const std::byte> r : w->streamed_ranges())
      locked = bench::lock_memory(r.data(), r.size(), "weights") && locked;
  }
  bench::note("[spec] {}: loaded in {:.2f} s, {} layers, hidden {}, vocab {}, lm_head {}, {:.1f} "
              "MB owned ({})",
              dir, s, w->config.num_hidden_layers, w->config.hidden_size,
              w->config.vocab_size, w->lm_head.int4() ? "int4" : w->lm_head.int8() ? "int8" : "as stored",
              static_cast<double>(w->owned_bytes()) / 1e6,
              locked ? "mlocked" : "not locked");
  return w;
}

// ---------------------------------------------------------------------------------------------
// Prompts

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) die(fmt::format("{}: cannot open", path));
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line.find_first_not_of(" \t\r") != std::string::npos)
      lines.push_back(line);
  return lines;
}

Tokens synthetic(std::size_t len, std::size_t vocab, std::uint64_t salt) {
  Tokens t(len);
  std::uint64_t x = 0x9E3779B97F4A7C15ull * (salt + 1);
  for (auto& id : t) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<std::int32_t>((x >> 33) % vocab);
  }
  return t;
}

std::vector<Tokens> make_prompts(const Args& a, const std::string& target_dir, std::size_t vocab,
                                 bool quick) {
  std::vector<Tokens> prompts;
  const fs::path tok_path = fs::path(target_dir) / "tokenizer.json";
  if (!fs::exists(tok_path)) {
    const std::size_t count = quick ? 2 : a.num_prompts;
    bench::note("[spec] {}: no tokenizer.json, {} synthetic prompts of {} ids", target_dir, count,
                a.prompt_len);
    for (std::size_t i = 0; i < count; ++i) prompts.push_back(synthetic(a.prompt_len, vocab, i));
    return prompts;
  }
  auto tok = model::Tokenizer::load(tok_path.string());
  if (!tok) die(tok.error().message);
  const auto encode = [&](const std::string& text) {
    auto ids = tok->encode(text);
    if (!ids) die(ids.error().message);
    Tokens t;
    for (auto id : *ids)
      if (id >= 0 && static_cast<std::size_t>(id) < vocab) t.push_back(id);
    return t;
  };
  if (!a.prompts_file.empty()) {
    for (const auto& line : read_lines(a.prompts_file)) prompts.push_back(encode(line));
  } else {
    const std::string file =
        resolve(a.prompt_file.empty() ? "models/kjv-heldout.txt" : a.prompt_file);
    if (fs::exists(file)) {
      // Evenly spaced starting lines; whole lines until prompt_len tokens, then cut to it.
      const auto lines = read_lines(file);
      const std::size_t count = std::min(a.num_prompts, lines.size());
      for (std::size_t i = 0; i < count; ++i) {
        Tokens t;
        for (std::size_t l = i * lines.size() / count; l < lines.size() && t.size() < a.prompt_len;
             ++l) {
          const Tokens more = encode(lines[l] + "\n");
          t.insert(t.end(), more.begin(), more.end());
        }
        if (t.size() > a.prompt_len) t.resize(a.prompt_len);
        prompts.push_back(std::move(t));
      }
      bench::note("[spec] {} prompts of up to {} tokens from {}", prompts.size(), a.prompt_len,
                  file);
    } else {
      if (!a.prompt_file.empty()) die(fmt::format("{}: not found", a.prompt_file));
      for (const char* text : {"In the beginning God created the heaven and the earth.",
                               "And it came to pass, when the king heard",
                               "Blessed are they that mourn: for they", "The LORD is my shepherd;"})
        prompts.push_back(encode(text));
      bench::note("[spec] built-in prompts (no {})", file);
    }
  }
  prompts.erase(
      std::remove_if(prompts.begin(), prompts.end(), [](const Tokens& t) { return t.empty(); }),
      prompts.end());
  if (prompts.empty()) die("no prompts");
  return prompts;
}

// ---------------------------------------------------------------------------------------------
// End to end

decode::SamplingOptions sampling(double temperature, std::uint64_t seed) {
  decode::SamplingOptions o;  // top-k 40, top-p 0.95 when sampling
  o.temperature = static_cast<float>(temperature);
  o.seed = seed;
  return o;
}

template <class M>
void must(M&& st) {
  if (!st) die(st.error().message);
}

/// Target-only decoding of n tokens after `prompt`, whose last token is not yet forwarded
/// (the model holds prompt minus its last token). Returns the seconds taken.
template <class Target>
double plain_decode(Target& t, const Tokens& prompt, std::size_t n, decode::Sampler& sampler,
                    Tokens& out) {
  std::vector<float> logits(t.vocab_size());
  Tokens hist = prompt;
  out.clear();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    must(t.forward({&hist.back(), 1}, decode::LogitsMode::last, logits));
    auto tok = sampler.sample(logits, hist);
    if (!tok) die(tok.error().message);
    hist.push_back(*tok);
    out.push_back(*tok);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class Target>
void prefill(Target& t, const Tokens& prompt) {
  std::vector<float> logits(t.vocab_size());
  must(t.truncate(0));
  if (prompt.size() > 1)
    must(t.forward(std::span<const std::int32_t>(prompt).first(prompt.size() - 1),
                   decode::LogitsMode::last, logits));
}

struct E2eResult {
  double plain_s = 0, spec_s = 0;
  std::size_t plain_tokens = 0, spec_tokens = 0;
  bool identical = true;
  decode::SpeculativeStats stats;
};

template <class Target, class Draft>
E2eResult run_config(Target& target, Draft& draft, const decode::SpeculativeOptions& so,
                     const std::vector<Tokens>& prompts, std::size_t n, double temperature,
                     std::uint64_t seed, int reps) {
  E2eResult r;
  auto dec = decode::SpeculativeDecoder<Target, Draft>::create(target, draft, so);
  if (!dec) die(dec.error().message);
  for (int rep = 0; rep < reps; ++rep) {
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      const Tokens& prompt = prompts[p];
      const std::uint64_t s = seed + 1000 * static_cast<std::uint64_t>(rep) + p;
      auto plain_sampler = decode::Sampler::create(sampling(temperature, s));
      auto spec_sampler = decode::Sampler::create(sampling(temperature, s));
      if (!plain_sampler || !spec_sampler) die("bad sampling options");
      Tokens plain_out;
      prefill(target, prompt);
      r.plain_s += plain_decode(target, prompt, n, *plain_sampler, plain_out);
      r.plain_tokens += n;

      // The decoder reuses only what the models still hold: truncated to 0, they prefill anew.
      must(target.truncate(0));
      must(draft.truncate(0));
      must(dec->begin(prompt));
      Tokens hist = prompt, out;
      const auto t0 = std::chrono::steady_clock::now();
      while (out.size() < n) {
        const std::size_t before = out.size();
        must(dec->step(*spec_sampler, hist, out));
        hist.insert(hist.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
      }
      r.spec_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.spec_tokens += out.size();
      if (temperature == 0.0) {
        out.resize(n);
        if (out != plain_out) {
          r.identical = false;
          bench::note("[spec] prompt {}: speculative greedy output differs from target-only", p);
        }
      }
    }
  }
  r.stats = dec->stats();
  return r;
}

template <class Cache>
int run_e2e(const Args& a, const bench::options& opts, const std::string& target_dir,
            const std::vector<std::string>& drafts) {
  const WeightsPtr tw = load(target_dir, a.lock, a.target_lm_head, a.target_packed_cache, &a);
  std::map<std::string, WeightsPtr> dws;
  for (const auto& d : drafts)
    if (d != "lookup" && !dws.count(d)) dws[d] = load(d, a.lock, a.draft_lm_head, {}, &a);
  const std::size_t V = tw->config.vocab_size;
  for (const auto& [d, w] : dws) {
    if (w->config.vocab_size != V)
      die(fmt::format("{}: vocab_size {} differs from the target's {}", d, w->config.vocab_size,
                      V));
  }
  const std::vector<Tokens> prompts = make_prompts(a, target_dir, V, opts.quick);
  std::size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  std::size_t kcap = a.adaptive ? a.k_max : 0;
  for (auto k : a.ks) kcap = std::max(kcap, k);
  const int reps = opts.reps_or(1);

  bench::table out(opts, {"target",   "draft",       "mode",         "k",
                          "k_max",    "temperature", "threads",      "kv_type",
                          "prompts",  "n",           "target_tok_s", "spec_tok_s",
                          "speedup",  "acceptance",  "alpha",        "tokens_per_forward",
                          "draft_s",  "target_s",    "spec_s",       "target_only_s",
                          "identical"});
  for (int threads : opts.threads_or(opts.quick ? std::vector<int>{1} : std::vector<int>{1, 2})) {
    auto pool = ThreadPool::create(static_cast<std::size_t>(threads));
    if (!pool) die(pool.error().message);
    model::TransformerOptions to;
    to.pool = pool->get();
    to.context_size = longest + a.n + kcap + 8;
    auto target = model::Transformer<Cache>::create(tw, to);
    if (!target) die(target.error().message);
    {  // warm-up: fault in the weights' pages
      Tokens warm;
      auto g = decode::Sampler::create(decode::SamplingOptions::greedy());
      prefill(*target, prompts.front());
      (void)plain_decode(*target, prompts.front(), std::min<std::size_t>(a.n, 8), *g, warm);
    }
    for (double temp : a.temperatures) {
      for (const auto& d : drafts) {
        std::vector<decode::SpeculativeOptions> configs;
        for (auto k : a.ks) {
          decode::SpeculativeOptions so;
          so.k = k;
          configs.push_back(so);
        }
        if (a.adaptive) {
          decode::SpeculativeOptions so;
          so.k = std::min(a.ks.front(), a.k_max);
          so.adaptive = true;
          so.k_max = a.k_max;
          configs.push_back(so);
        }
        for (const auto& so : configs) {
          E2eResult r;
          if (d == "lookup") {
            auto lookup = decode::LookupDraft::create(V, to.context_size);
            if (!lookup) die(lookup.error().message);
            r = run_config(*target, *lookup, so, prompts, a.n, temp, a.seed, reps);
          } else {
            auto draft = model::Transformer<Cache>::create(dws.at(d), to);
            if (!draft) die(draft.error().message);
            r = run_config(*target, *draft, so, prompts, a.n, temp, a.seed, reps);
          }
          const double plain_tps = static_cast<double>(r.plain_tokens) / r.plain_s;
          const double spec_tps = static_cast<double>(r.spec_tokens) / r.spec_s;
          const auto& s = r.stats;
          bench::note(
              "[spec] t={} T={} {} {} k={}: target-only {:.1f} tok/s, speculative {:.1f} "
              "tok/s ({:.2f}x), acceptance {:.1f}% (alpha {:.1f}%), {:.2f} tok/forward{}",
              threads, temp, short_name(d), so.adaptive ? "adaptive" : "fixed", so.k, plain_tps,
              spec_tps, spec_tps / plain_tps, 100 * s.acceptance_rate(),
              100 * s.acceptance_per_token(), s.tokens_per_forward(),
              temp == 0.0 ? (r.identical ? ", output identical" : ", OUTPUT DIFFERS") : "");
          out.row({short_name(target_dir),
                   short_name(d),
                   so.adaptive ? "adaptive" : "fixed",
                   so.k,
                   so.adaptive ? so.k_max : so.k,
                   temp,
                   threads,
                   a.kv,
                   static_cast<long long>(prompts.size()),
                   static_cast<long long>(a.n),
                   plain_tps,
                   spec_tps,
                   spec_tps / plain_tps,
                   s.acceptance_rate(),
                   s.acceptance_per_token(),
                   s.tokens_per_forward(),
                   s.draft_seconds,
                   s.target_seconds,
                   r.spec_s,
                   r.plain_s,
                   // null: sampled output is not compared
                   temp == 0.0 ? bench::value(r.identical) : bench::value()});
          if (temp == 0.0 && !r.identical) return 3;
        }
      }
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Cost model

/// Greedy k = 5 speculative decoding over the prompts: the measured per-token acceptance.
template <class Target, class Draft>
double measure_alpha(Target& target, Draft& draft, const std::vector<Tokens>& prompts,
                     std::size_t n) {
  decode::SpeculativeOptions so;
  so.k = 5;
  const E2eResult r = run_config(target, draft, so, prompts, n, 0.0, 1, 1);
  bench::note("[spec] measured acceptance {:.1f}% per drafted token, alpha {:.1f}% ({} drafted)",
              100 * r.stats.acceptance_rate(), 100 * r.stats.acceptance_per_token(),
              r.stats.drafted);
  return r.stats.acceptance_per_token();
}

/// The k AdaptiveDraftLength settles on with these costs (in decode steps) when drafts are
/// accepted at rate `alpha`: the most frequent k over the last 1000 of 2000 simulated steps.
std::size_t simulate_adaptive(double alpha, const std::vector<double>& verify, double draft_cost,
                              std::size_t k_max) {
  decode::AdaptiveDraftLength ctl(std::min<std::size_t>(5, k_max), k_max);
  decode::Rng rng(12345);
  std::vector<std::size_t> freq(k_max + 1, 0);
  for (int step = 0; step < 2000; ++step) {
    const std::size_t k = ctl.next(k_max);
    std::size_t acc = 0;
    while (acc < k && rng.uniform() < alpha) ++acc;
    // Seconds: 1 ms per decode step (any unit works: the controller compares ratios).
    ctl.record(k, acc, 1e-3 * draft_cost * static_cast<double>(k), 1e-3 * verify[k]);
    if (step >= 1000) ++freq[k];
  }
  return static_cast<std::size_t>(std::max_element(freq.begin(), freq.end()) - freq.begin());
}

template <class Cache>
int run_cost_model(const Args& a, const bench::options& opts, const std::string& target_dir,
                   const std::string& draft_dir) {
  const WeightsPtr tw = load(target_dir, a.lock, a.target_lm_head, a.target_packed_cache, &a);
  const WeightsPtr dw =
      draft_dir == "lookup" ? nullptr : load(draft_dir, a.lock, a.draft_lm_head, {}, &a);
  const std::size_t V = tw->config.vocab_size;
  const std::size_t P = a.context, K = a.k_max;
  const int reps = opts.reps_or(opts.quick ? 3 : 10);
  const Tokens ctx = synthetic(P, V, 7);
  const Tokens extra = synthetic(K + 1, V, 8);
  // The acceptance of another pair (the bundled one: random-weight stand-ins for big models
  // accept nothing), measured once: a greedy k = 5 run over the prompts, on one thread.
  double pair_alpha = 0.0;
  if (!a.acceptance_from.empty()) {
    const auto dirs = split(a.acceptance_from);
    const WeightsPtr pt = load(dirs[0], a.lock, model::LmHeadFormat::as_stored, {}, &a),
                     pd = load(dirs[1], a.lock, a.draft_lm_head, {}, &a);
    if (pt->config.vocab_size != pd->config.vocab_size)
      die(fmt::format("--acceptance-from: {} has vocab {}, {} has {}", dirs[0],
                      pt->config.vocab_size, dirs[1], pd->config.vocab_size));
    const std::vector<Tokens> prompts = make_prompts(a, dirs[0], pt->config.vocab_size, opts.quick);
    std::size_t longest = 0;
    for (const auto& p : prompts) longest = std::max(longest, p.size());
    model::TransformerOptions po;
    po.context_size = longest + a.n + 16;
    auto tgt = model::Transformer<Cache>::create(pt, po);
    auto dr = model::Transformer<Cache>::create(pd, po);
    if (!tgt || !dr) die("--acceptance-from: cannot create the models");
    pair_alpha = measure_alpha(*tgt, *dr, prompts, a.n);
  }
  bench::table out(opts, {"target", "draft", "threads", "row", "k", "verify_cost", "draft_cost",
                          "verify_cost_median", "acceptance", "projected_speedup", "decode_ms",
                          "verify_ms", "draft_ms", "best_k", "adaptive_k", "adaptive_vs_best"});
  for (int threads : opts.threads_or(opts.quick ? std::vector<int>{1} : std::vector<int>{1, 2})) {
    auto pool = ThreadPool::create(static_cast<std::size_t>(threads));
    if (!pool) die(pool.error().message);
    model::TransformerOptions to;
    to.pool = pool->get();
    to.context_size = P + 2 * K + 16;
    auto target = model::Transformer<Cache>::create(tw, to);
    if (!target) die(target.error().message);
    std::vector<float> logits((K + 1) * V);
    must(target->forward(ctx, decode::LogitsMode::last, logits));
    // Target: one forward over m tokens after the P-token context, then back to P.
    const auto run_target = [&](std::size_t m) {
      const auto t0 = std::chrono::steady_clock::now();
      must(target->forward(std::span<const std::int32_t>(extra).first(m),
                           m == 1 ? decode::LogitsMode::last : decode::LogitsMode::all, logits));
      bench::do_not_optimize(logits[0]);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      must(target->truncate(P));
      return s;
    };
    // The decode step is the unit of every cost, and this host's speed drifts by tens of percent
    // within a minute (at times alternating between two speeds from one forward to the next):
    // so each verify forward is timed right after a decode step, in rounds that visit every k,
    // and a cost is the ratio of the fastest times (noise only adds time). The median of the
    // ratios within pairs is reported beside it (verify_cost_median) to show the spread.
    for (std::size_t m = 1; m <= K + 1; ++m) run_target(m);  // warm-up
    std::vector<std::vector<double>> ratio(K + 1), verify_t(K + 1);
    std::vector<double> decode_t;
    for (int r = 0; r < reps; ++r) {
      for (std::size_t k = 1; k <= K; ++k) {
        const double t1 = run_target(1), tv = run_target(k + 1);
        decode_t.push_back(t1);
        verify_t[k].push_back(tv);
        ratio[k].push_back(tv / t1);
      }
    }
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return bench::quantile_sorted(v, 0.5);
    };
    const double t1 = *std::min_element(decode_t.begin(), decode_t.end());
    std::vector<double> verify(K + 1, 1.0), verify_s(K + 1, t1);  // [k]: k + 1 tokens
    std::vector<double> verify_median(K + 1, 1.0);
    for (std::size_t k = 1; k <= K; ++k) {
      verify_s[k] = *std::min_element(verify_t[k].begin(), verify_t[k].end());
      verify[k] = verify_s[k] / t1;
      verify_median[k] = median(ratio[k]);
    }
    // Draft: one token forward and the greedy pick, after the same context.
    auto greedy = decode::Sampler::create(decode::SamplingOptions::greedy());
    decode::SparseDistribution dist;
    const auto time_draft = [&](auto& draft) {
      std::vector<float> dl(V);
      must(draft.forward(ctx, decode::LogitsMode::last, dl));
      const auto t = bench::measure(
          [&] {
            must(draft.forward(std::span<const std::int32_t>(extra).first(1),
                               decode::LogitsMode::last, dl));
            must(greedy->distribution(dl, {}, dist));
            bench::do_not_optimize(dist.ids[0]);
            must(draft.truncate(P));
          },
          reps);
      return t.min_us * 1e-6;
    };
    double td = 0.0, alpha = 0.0;
    const bool measured = a.acceptance == "measured" && a.acceptance_from.empty();
    std::vector<Tokens> prompts;
    model::TransformerOptions acc_opts = to;  // the acceptance run's models
    if (measured) {
      prompts = make_prompts(a, target_dir, V, opts.quick);
      std::size_t longest = 0;
      for (const auto& p : prompts) longest = std::max(longest, p.size());
      acc_opts.context_size = longest + a.n + K + 8;
    }
    if (dw) {
      auto draft = model::Transformer<Cache>::create(dw, to);
      if (!draft) die(draft.error().message);
      td = time_draft(*draft);
      if (measured) {
        auto tgt = model::Transformer<Cache>::create(tw, acc_opts);
        auto dr = model::Transformer<Cache>::create(dw, acc_opts);
        if (!tgt || !dr) die("cannot create the models for the acceptance run");
        alpha = measure_alpha(*tgt, *dr, prompts, a.n);
      }
    } else {
      auto lookup = decode::LookupDraft::create(V, to.context_size);
      if (!lookup) die(lookup.error().message);
      td = time_draft(*lookup);
      if (measured) {
        auto tgt = model::Transformer<Cache>::create(tw, acc_opts);
        auto lk = decode::LookupDraft::create(V, acc_opts.context_size);
        if (!tgt || !lk) die("cannot create the models for the acceptance run");
        alpha = measure_alpha(*tgt, *lk, prompts, a.n);
      }
    }
    if (!a.acceptance_from.empty())
      alpha = pair_alpha;
    else if (!measured)
      alpha = to_double("--acceptance", a.acceptance);
    if (alpha >= 1.0) alpha = 0.999;
    const double draft_cost = td / t1;
    std::size_t best_k = 0;  // 0: plain decoding (speedup 1) beats every k
    std::vector<double> speedup(K + 1, 1.0);
    for (std::size_t k = 1; k <= K; ++k) {
      speedup[k] = decode::projected_speedup(alpha, k, verify[k], draft_cost);
      if (speedup[k] > speedup[best_k]) best_k = k;
    }
    const std::size_t adaptive_k = simulate_adaptive(alpha, verify, draft_cost, K);
    const double adaptive_vs_best = speedup[adaptive_k] / speedup[best_k];
    for (std::size_t k = 1; k <= K; ++k) {
      out.row({short_name(target_dir), short_name(draft_dir), threads, "k", k, verify[k],
               draft_cost, verify_median[k], alpha, speedup[k], t1 * 1e3, verify_s[k] * 1e3, td * 1e3, best_k,
               adaptive_k, adaptive_vs_best});
    }
    out.row({short_name(target_dir), short_name(draft_dir), threads, "summary", best_k,
             verify[best_k], draft_cost, verify_median[best_k], alpha, speedup[best_k], t1 * 1e3,
             verify_s[best_k] * 1e3, td * 1e3, best_k, adaptive_k, adaptive_vs_best});
    bench::note(
        "[spec] t={} decode step {:.3f} ms, draft step {:.3f} decode steps; acceptance "
        "{:.2f}: best k = {} ({:.2f}x), adaptive k = {} ({:.2f}x, {:.0f}% of the best)",
        threads, t1 * 1e3, draft_cost, alpha, best_k, speedup[best_k], adaptive_k,
        speedup[adaptive_k], 100 * adaptive_vs_best);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  bench::options opts;
  using bench::flag;
  constexpr std::size_t kMax = 100000000;
  const std::vector<std::pair<std::string, model::LmHeadFormat>> lm_heads = {
      {"q4", model::LmHeadFormat::q4}, {"as_stored", model::LmHeadFormat::as_stored}};
  bench::parse_options(
      argc, argv, opts,
      {
          flag::string({"--target", "-m", "--model"}, "DIR", "target checkpoint", a.target)
              .shows_default("models/kjv-target-awq; --quick: the qwen2-awq-gemm fixture"),
          flag::strings({"--draft"}, "DIR|lookup",
                        "draft checkpoint or n-gram lookup; repeatable or a comma list", a.drafts,
                        /*comma_list=*/true)
              .shows_default("models/kjv-draft-awq; --quick: lookup and the llama-fp16 fixture"),
          flag::list<std::size_t>({"-k"}, "LIST", "draft lengths", a.ks, 1, kMax),
          flag::boolean({"--adaptive"}, "also run adaptive k (first k from -k, up to --k-max)",
                        a.adaptive),
          flag::number<std::size_t>({"--k-max"}, "N", "adaptive / cost-model largest k", a.k_max,
                                    1, kMax),
          flag::real_list({"--temperature", "--temp"}, "LIST",
                          "0 = greedy; sampling uses top-k 40, top-p 0.95", a.temperatures, 0.0),
          flag::number<std::size_t>({"-n"}, "N", "tokens decoded per prompt", a.n, 1, kMax)
              .shows_default("128; --quick: 16"),
          flag::string({"--prompts"}, "FILE", "one prompt per line", a.prompts_file),
          flag::string({"--prompt-file"}, "FILE", "text to cut prompts from", a.prompt_file)
              .shows_default("models/kjv-heldout.txt"),
          flag::number<std::size_t>({"--num-prompts"}, "N", "prompts cut from --prompt-file",
                                    a.num_prompts, 1, kMax),
          flag::number<std::size_t>({"--prompt-len"}, "N",
                                    "tokens per prompt cut from --prompt-file", a.prompt_len, 1,
                                    kMax)
              .shows_default("64; --quick: 16"),
          flag::string({"--kv-type", "--kv"}, "int8|int4|f16|f32", "KV cache (as edgellm-generate)",
                       a.kv),
          flag::number<std::uint64_t>({"--seed", "-s"}, "N", "sampling seed", a.seed, 0, kMax),
          flag::boolean({"--no-lock"}, "do not mlock the packed weights", a.lock, false),
          flag::string({"--packed-cache"}, "auto|FILE",
                       "map the target's int4 weights from a packed cache (written if\n"
                       "missing; see edgellm-bench)",
                       a.target_packed_cache),
          flag::boolean({"--force"},
                        "with --packed-cache FILE: replace a file there of another model",
                        a.force),
          flag::boolean({"--allow-extra-tensors"},
                        "load checkpoints holding tensors their config.json does not use",
                        a.allow_extra),
          flag::choice({"--draft-lm-head"}, "the draft's lm_head: int4 at load or as stored",
                       a.draft_lm_head, lm_heads),
          flag::choice({"--target-lm-head"}, "the target's (both arms of the comparison)",
                       a.target_lm_head, lm_heads),
          flag::boolean({"--cost-model"}, "measure verify/draft costs and project speedups instead",
                        a.cost_model),
          flag::custom({"--acceptance"}, "A|measured", "cost model: acceptance rate (default 0.7)",
                       [&a](std::string_view v) {
                         if (v != "measured" && !cli::parse_real(v, 0.0))
                           return fmt::format("'{}' is neither a number >= 0 nor 'measured'", v);
                         a.acceptance = std::string(v);
                         return std::string();
                       }),
          flag::custom({"--acceptance-from"}, "T,D",
                       "cost model: use the acceptance measured on this pair (greedy,\n"
                       "k = 5, the prompts), e.g. the bundled models/kjv-target-awq,\n"
                       "models/kjv-draft-awq",
                       [&a](std::string_view v) {
                         if (flag::split_list(v).size() != 2)
                           return fmt::format("'{}' is not TARGET,DRAFT", v);
                         a.acceptance_from = std::string(v);
                         return std::string();
                       }),
          flag::number<std::size_t>({"--context", "-c"}, "P",
                                    "cost model: tokens held by the models while timing",
                                    a.context, 1, kMax),
          flag::threads({"-t"}, "thread counts; same as --threads", opts.threads)
              .shows_default("1,2; --quick: 1"),
      },
      "Speculative decoding against target-only decoding, end to end, or its cost model.");
  const bool target_given = opts.was_given("--target"), drafts_given = opts.was_given("--draft"),
             n_given = opts.was_given("-n"), len_given = opts.was_given("--prompt-len");
  const std::size_t kmax_allowed = decode::SpeculativeOptions::kMaxDraft;
  for (auto k : a.ks)
    if (k > kmax_allowed) die(fmt::format("-k: {} is above {}", k, kmax_allowed), 2);
  if (a.k_max > kmax_allowed) die(fmt::format("--k-max: {} is above {}", a.k_max, kmax_allowed), 2);
  if (a.adaptive && a.ks.front() > a.k_max)
    die(fmt::format("--adaptive: the first k {} is above --k-max {}", a.ks.front(), a.k_max), 2);

  if (opts.quick) {
    const std::string fixtures = source_dir() + "/tests/data/model/";
    if (!target_given) a.target = fixtures + "qwen2-awq-gemm";
    if (!drafts_given) a.drafts = {"lookup", fixtures + "llama-fp16"};
    if (!n_given) a.n = 16;
    if (!len_given) a.prompt_len = 16;
    if (!a.cost_model) a.adaptive = true;
    a.context = std::min<std::size_t>(a.context, 32);
  } else {
    if (!target_given) a.target = "models/kjv-target-awq";
    if (!drafts_given) a.drafts = {"models/kjv-draft-awq"};
  }
  a.target = resolve(a.target);
  for (auto& d : a.drafts) d = resolve(d);
  if (a.cost_model && a.drafts.size() != 1) die("--cost-model takes one --draft", 2);

  const auto kv_type = cache::parse_kv_type(a.kv);
  if (!kv_type) die(fmt::format("--kv-type: {}", kv_type.error().message), 2);
  a.kv = cache::kv_type_name(*kv_type);
  return cache::with_kv_type(*kv_type, [&](auto tag) {
    using Cache = typename decltype(tag)::type;
    return a.cost_model ? run_cost_model<Cache>(a, opts, a.target, a.drafts.front())
                        : run_e2e<Cache>(a, opts, a.target, a.drafts);
  });
}
