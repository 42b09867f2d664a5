// SPDX-License-Identifier: Apache-2.0
// edgellm-perplexity: sliding-window perplexity of a checkpoint on a text file, and with
// --kl-base the KL divergence of its next-token distributions to a base model's (llama.cpp's
// perplexity tool and its --kl-divergence, in one run with both models loaded).
#include "flags.hpp"
#include "edgellm/io/json_write.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace {

constexpr const char* kProg = "edgellm-perplexity";
// Largest --text read: far above any evaluation set.
constexpr std::size_t kMaxTextBytes = std::size_t{1} << 30;

constexpr const char* kHead =
    "usage: edgellm-perplexity -m DIR --text FILE [options]\n"
    "\n"
    "Perplexity of the checkpoint in DIR on the text of FILE, in sliding windows:\n"
    "  * FILE is tokenised whole with DIR's tokenizer.json, special tokens added as its\n"
    "    post-processor adds them (a BOS only where the tokenizer adds one);\n"
    "  * window k holds tokens [k*stride, k*stride + ctx) and runs on an empty KV cache; only\n"
    "    full windows run (the at most stride-1 tokens after the last one are not scored);\n"
    "  * a window scores the tokens no earlier window scored, each predicted from the tokens\n"
    "    before it in the window: the first window all but its first token, later ones their\n"
    "    last stride tokens (with stride == ctx, the default: all but the first token of each\n"
    "    window, so N tokens in ctx-token windows score N - N/ctx of them);\n"
    "  * NLL = -log softmax(logits)[next token], in double; ppl = exp(mean NLL), its standard\n"
    "    error ppl x the standard error of the mean NLL (the delta method, as llama.cpp).\n"
    "With --kl-base BASE, BASE (same tokenizer) runs the same windows in dense fp32 reference\n"
    "mode and, over the scored tokens, the tool reports the mean KL(base || model) in nats, its\n"
    "99th percentile (linear interpolation between the sorted values) and the top-1 agreement\n"
    "(the fraction of tokens where both models' most probable token is the same), as llama.cpp's\n"
    "--kl-divergence does.\n"
    "\n";

struct Args {
  std::string model, text, kl_base;
  std::size_t ctx = 512, stride = 0, max_tokens = 0, threads = 1;
  bool json = false, fp32_reference = false, exact = false, allow_extra_tensors = false;
  bool quiet = false, force_context = false;
  edgellm::model::LmHeadFormat lm_head = edgellm::model::LmHeadFormat::int8;
  bool lm_head_given = false;  // else int8 falls back to f16 when no group size fits
  edgellm::cache::KvType kv_type = edgellm::cache::KvType::f32;  // of --model, not --kl-base
};

// Parses argv into `a`: nullopt to go on, else the exit status (--help, --version, a usage error).
std::optional<int> parse_args(int argc, char** argv, Args& a) {
  const auto fail = [](const std::string& msg) { return edgellm::cli::usage_error(kProg, msg); };
  using edgellm::cli::flag;
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  bool have_stride = false;
  const std::vector<flag> flags{
      flag::string({"-m", "--model"}, "DIR",
                   "the checkpoint directory (required; its tokenizer.json\n"
                   "tokenises FILE)",
                   a.model),
      flag::string({"--text", "-f", "--file"}, "FILE",
                   "the evaluation text (required; a pipe such as <(cmd) or `-` for\n"
                   "stdin is read to its end)",
                   a.text),
      flag::number<std::size_t>({"-c", "--ctx", "--context", "--ctx-size"}, "N",
                                "window size in tokens, at least 2 (a window of 1 token scores\n"
                                "nothing); at most the model's max_position_embeddings unless\n"
                                "--force-context",
                                a.ctx, 2, kMax),
      flag::boolean({"--force-context"},
                    "allow --ctx above max_position_embeddings (RoPE untrained there)",
                    a.force_context),
      flag::number<std::size_t>({"--stride"}, "N", "tokens between window starts, 1..ctx", a.stride,
                                0, kMax)
          .shows_default("ctx")
          .on_set([&have_stride] { have_stride = true; }),
      flag::number<std::size_t>({"-n", "--max-tokens", "--n-predict"}, "N",
                                "only the first N tokens of FILE", a.max_tokens, 1, kMax)
          .shows_default("all"),
      flag::string({"--kl-base"}, "BASE",
                   "a base checkpoint (e.g. the fp16 one) to measure KL divergence to", a.kl_base),
      flag::choice({"--format"},
                   "one human line or one JSON object on stdout:\n"
                   "{\"model\", \"text\", \"ctx\", \"stride\", \"windows\",\n"
                   "\"tokens\", \"nll\", \"ppl\", \"ppl_stderr\"} and with --kl-base\n"
                   "\"base\", \"kl\", \"kl_stderr\", \"kl_p99\", \"top1\" (a fraction)",
                   a.json, {{"text", false}, {"json", true}}),
      flag::boolean({"--fp32-reference"},
                    "the model in dense fp32 weights and math (AWQ weights dequantised as\n"
                    "AutoAWQ does); default: int4 (fp16 checkpoints quantised at load)",
                    a.fp32_reference),
      flag::boolean({"--exact"}, "int4 matmuls on the exact path (default: the fast W4A8 path)",
                    a.exact),
      edgellm::tools::lm_head_flag(
          "f16 (the stored tensor as is), int8 or int4: the model's lm_head\n"
          "quantised at load, as edgellm-generate (ignored with\n"
          "--fp32-reference and for the --kl-base model)",
          a.lm_head)
          .on_set([&a] { a.lm_head_given = true; }),
      edgellm::tools::kv_type_flag({"--kv-type"},
                                   "the KV cache of --model: f32, f16, int8 or int4 (the\n"
                                   "--kl-base model and --fp32-reference keep f32)",
                                   a.kv_type),
      edgellm::tools::threads_flag(a.threads, kProg),
      flag::boolean({"--allow-extra-tensors"},
                    "load checkpoints holding tensors their config.json does not use",
                    a.allow_extra_tensors),
      flag::boolean({"--quiet"}, "no progress (loading, one step per window) on stderr", a.quiet),
  };
  if (const auto rc = edgellm::tools::parse_command_line(
          kProg, argc, argv, {.head = kHead, .sections = {{"options:", &flags}}}))
    return rc;  // --help, --version or a usage error
  if (a.model.empty()) return fail("--model DIR is required");
  if (a.text.empty()) return fail("--text FILE is required");
  if (!have_stride) a.stride = a.ctx;
  if (a.stride == 0 || a.stride > a.ctx) {
    return fail("--stride: " + std::to_string(a.stride) + " is not in [1, --ctx " +
                std::to_string(a.ctx) + "]");
  }
  if (a.fp32_reference && a.exact) {
    return fail("--exact selects the int4 path; it cannot be combined with --fp32-reference");
  }
  return std::nullopt;
}

using Model = edgellm::model::Transformer<>;

// Loads `dir` and makes a Transformer (KV cache Cache) whose context holds one window.
template <class Cache = edgellm::cache::KVCacheF32>
edgellm::result<edgellm::model::Transformer<Cache>> load_model(const std::string& dir, bool fp32_reference, const Args& a,
                                  edgellm::ThreadPool* pool,
                                  edgellm::cli::ProgressBar& progress) {
  edgellm::model::LoadOptions lo;
  lo.fp32_reference = fp32_reference;
  lo.allow_extra_tensors = a.allow_extra_tensors;
  lo.progress = std::ref(progress);
  lo.lm_head = fp32_reference ? edgellm::model::LmHeadFormat::as_stored : a.lm_head;
  auto w = edgellm::model::load_weights(dir, lo);
  if (!w && !fp32_reference && !a.lm_head_given) {
    lo.lm_head = edgellm::model::LmHeadFormat::as_stored;  // e.g. no group size divides hidden
    w = edgellm::model::load_weights(dir, lo);
  }
  progress.finish();
  if (!w) return w.error();
  edgellm::model::TransformerOptions to;
  to.pool = pool;
  to.path = a.exact ? edgellm::kernels::MatmulPath::exact : edgellm::kernels::MatmulPath::fast;
  to.context_size = a.ctx;
  return edgellm::model::Transformer<Cache>::create(*w, to);
}

// log of the sum of exp(row), in double: the normaliser of the log-softmax.
double log_sum_exp(const float* row, std::size_t n) {
  double mx = row[0];
  for (std::size_t v = 1; v < n; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double z = 0.0;
  for (std::size_t v = 0; v < n; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
  return mx + std::log(z);
}

// Index of the largest value, the first one on ties.
std::size_t arg_max(const float* row, std::size_t n) {
  return static_cast<std::size_t>(std::max_element(row, row + n) - row);
}

// KL(base || model) of one position in nats, from both rows of logits and their normalisers.
double kl_divergence(const float* base, double lse_base, const float* model, double lse_model,
                     std::size_t n) {
  double kl = 0.0;
  for (std::size_t v = 0; v < n; ++v) {
    const double lp_b = static_cast<double>(base[v]) - lse_base;
    const double lp_m = static_cast<double>(model[v]) - lse_model;
    kl += std::exp(lp_b) * (lp_b - lp_m);
  }
  return kl;
}

// Mean and standard error of the mean of values whose sum and sum of squares are given.
std::pair<double, double> mean_stderr(double sum, double sum2, std::size_t n) {
  const double N = static_cast<double>(n), mean = sum / N;
  if (n < 2) return {mean, 0.0};
  const double var = std::max(0.0, sum2 / N - mean * mean);
  return {mean, std::sqrt(var / (N - 1.0))};
}

// llama.cpp's percentile: linear interpolation between the sorted values.
double percentile(std::vector<double> v, double fraction) {
  std::sort(v.begin(), v.end());
  const double p = fraction * static_cast<double>(v.size() - 1);
  const auto i = static_cast<std::size_t>(p);
  const double f = p - static_cast<double>(i);
  return (1.0 - f) * v[i] + f * v[std::min(i + 1, v.size() - 1)];
}

struct Scores {
  std::size_t windows = 0, tokens = 0, top1 = 0;
  double nll = 0.0, nll2 = 0.0, kl = 0.0, kl2 = 0.0;
  std::vector<double> kls;  // one per scored token, with a base
};

// Runs every window through `m` (and `base`, when given) and accumulates the scores.
template <class M>
edgellm::status score(const Args& a, std::span<const std::int32_t> ids, M& m, Model* base,
                      edgellm::cli::ProgressBar& progress, Scores& s) {
  const std::size_t V = m.vocab_size(), ctx = a.ctx;
  // Pieces of max_batch tokens: the same chunks forward() would make of a whole window, so the
  // logits are those of one call, with a buffer of max_batch rows instead of ctx.
  const std::size_t piece = std::min(ctx, edgellm::model::TransformerOptions{}.max_batch);
  std::vector<float> lm(piece * V), lb(base ? piece * V : 0);  // [piece][V] logits
  const std::size_t windows = 1 + (ids.size() - ctx) / a.stride;
  progress("perplexity", 0, windows);
  for (std::size_t w = 0; w < windows; ++w) {
    const std::size_t start = w * a.stride;
    // Window positions [first, ctx) are scored: the ones no earlier window scored, never 0.
    const std::size_t first = w == 0 ? 1 : std::max<std::size_t>(1, ctx - a.stride);
    if (auto st = m.truncate(0); !st) return st;
    if (base) {
      if (auto st = base->truncate(0); !st) return st;
    }
    for (std::size_t off = 0; off < ctx; off += piece) {
      const std::size_t n = std::min(piece, ctx - off);
      const auto toks = ids.subspan(start + off, n);
      if (auto st = m.forward(toks, edgellm::model::LogitsMode::all, lm); !st) return st;
      if (base) {
        if (auto st = base->forward(toks, edgellm::model::LogitsMode::all, lb); !st) return st;
      }
      for (std::size_t r = 0; r < n; ++r) {
        const std::size_t j = off + r + 1;  // the window position row r predicts
        if (j < first || j >= ctx) continue;
        const float* row = lm.data() + r * V;
        const double lse = log_sum_exp(row, V);
        const double nll = lse - static_cast<double>(row[ids[start + j]]);
        s.nll += nll;
        s.nll2 += nll * nll;
        ++s.tokens;
        if (base) {
          const float* brow = lb.data() + r * V;
          const double kl = kl_divergence(brow, log_sum_exp(brow, V), row, lse, V);
          s.kl += kl;
          s.kl2 += kl * kl;
          s.kls.push_back(kl);
          s.top1 += arg_max(brow, V) == arg_max(row, V) ? 1 : 0;
        }
      }
    }
    ++s.windows;
    progress("perplexity", w + 1, windows);
  }
  progress.finish();
  return {};
}

std::string report(const Args& a, const Scores& s) {
  const auto [nll, nll_se] = mean_stderr(s.nll, s.nll2, s.tokens);
  const double ppl = std::exp(nll), ppl_se = ppl * nll_se;
  const bool kl = !a.kl_base.empty();
  double kl_mean = 0, kl_se = 0, kl_p99 = 0, top1 = 0;
  if (kl) {
    std::tie(kl_mean, kl_se) = mean_stderr(s.kl, s.kl2, s.tokens);
    kl_p99 = percentile(s.kls, 0.99);
    top1 = static_cast<double>(s.top1) / static_cast<double>(s.tokens);
  }
  namespace json = edgellm::io::json;
  if (a.json) {
    std::string out = fmt::format(
        "{{\"model\":{},\"text\":{},\"ctx\":{},\"stride\":{},\"windows\":{},\"tokens\":{},"
        "\"nll\":{},\"ppl\":{},\"ppl_stderr\":{}",
        json::escape(a.model), json::escape(a.text), a.ctx, a.stride, s.windows, s.tokens, nll, ppl,
        ppl_se);
    if (kl) {
      out += fmt::format(",\"base\":{},\"kl\":{},\"kl_stderr\":{},\"kl_p99\":{},\"top1\":{}",
                         json::escape(a.kl_base), kl_mean, kl_se, kl_p99, top1);
    }
    return out + "}\n";
  }
  std::string out =
      fmt::format("{}: ppl {:.4f} +/- {:.4f} over {} tokens of {} ({} windows of {}, stride {})",
                  a.model, ppl, ppl_se, s.tokens, a.text, s.windows, a.ctx, a.stride);
  if (kl) {
    out += fmt::format("; KL to {} {:.6f} +/- {:.6f} nats (p99 {:.6f}), top-1 agreement {:.3f} %",
                       a.kl_base, kl_mean, kl_se, kl_p99, 100.0 * top1);
  }
  return out + "\n";
}

int run(const Args& a) {
  const auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "%s: %s\n", kProg, msg.c_str());
    return 1;
  };
  auto text = edgellm::cli::read_text_argument(a.text, "--text", kMaxTextBytes);
  if (!text) return fail("--text: " + text.error().message);
  if (text->empty()) return fail("--text: '" + a.text + "' is empty");
  for (const auto& [flag, dir] : {std::pair{"--model", &a.model}, {"--kl-base", &a.kl_base}}) {
    std::error_code ec;
    if (!dir->empty() && !std::filesystem::is_directory(*dir, ec)) {
      return fail(std::string(flag) + ": '" + *dir + "' is not a directory" +
                  (ec ? " (" + ec.message() + ")" : ""));
    }
  }
  // --ctx against each model's config.json before anything large is read.
  for (const auto& [flag, dir] : {std::pair{"--model", &a.model}, {"--kl-base", &a.kl_base}}) {
    if (dir->empty()) continue;
    auto cfg = edgellm::model::load_model_config(*dir);
    if (!cfg) return fail(std::string(flag) + ": " + cfg.error().message);
    if (const std::string why =
            edgellm::cli::check_context("--ctx", std::to_string(a.ctx), a.ctx,
                                          cfg->max_position_embeddings, a.force_context);
        !why.empty()) {
      const bool base = std::string_view(flag) == "--kl-base";
      return edgellm::cli::usage_error(kProg, why + (base ? " (--kl-base '" + *dir + "')" : ""));
    }
  }
  auto tok = edgellm::model::Tokenizer::load(a.model);
  if (!tok) return fail("--model: " + tok.error().message);
  auto encoded = tok->encode(*text);
  if (!encoded) return fail("--text: '" + a.text + "': " + encoded.error().message);
  std::vector<std::int32_t>& ids = *encoded;
  const std::size_t all = ids.size();
  if (a.max_tokens != 0 && a.max_tokens < ids.size()) ids.resize(a.max_tokens);
  if (ids.size() < a.ctx) {
    return fail(
        "--text: '" + a.text + "' has " + std::to_string(all) + " tokens" +
        (ids.size() < all ? " (" + std::to_string(ids.size()) + " with --max-tokens)" : "") +
        ", fewer than one window of --ctx " + std::to_string(a.ctx));
  }

  std::unique_ptr<edgellm::ThreadPool> pool;
  if (a.threads > 1) {
    auto p = edgellm::ThreadPool::create(a.threads);
    if (!p) return fail(p.error().message);
    pool = std::move(*p);
  }
  edgellm::cli::ProgressBar progress(a.quiet);
  std::optional<Model> base;
  if (!a.kl_base.empty()) {
    auto b = load_model(a.kl_base, true, a, pool.get(), progress);
    if (!b) return fail("--kl-base: " + b.error().message);
    base = std::move(*b);
  }
  const auto kv = a.fp32_reference ? edgellm::cache::KvType::f32 : a.kv_type;
  return edgellm::cache::with_kv_type(kv, [&](auto tag) {
    using Cache = typename decltype(tag)::type;
    auto m = load_model<Cache>(a.model, a.fp32_reference, a, pool.get(), progress);
    if (!m) return fail("--model: " + m.error().message);
    if (base && base->vocab_size() != m->vocab_size()) {
      return fail("--kl-base: '" + a.kl_base + "' has a vocabulary of " +
                  std::to_string(base->vocab_size()) + " tokens, --model '" + a.model +
                  "' one of " + std::to_string(m->vocab_size()) +
                  ": the models must share the tokenizer");
    }
    Scores s;
    if (auto st = score(a, ids, *m, base ? &*base : nullptr, progress, s); !st) {
      return fail(st.error().message);
    }
    const std::string out = report(a, s);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const auto rc = parse_args(argc, argv, a)) return *rc;
  const int rc = run(a);
  return rc == 0 ? edgellm::cli::finish_stdout(kProg, rc) : rc;
}
