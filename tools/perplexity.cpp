// SPDX-License-Identifier: Apache-2.0
// edgellm-perplexity: sliding-window perplexity of a checkpoint on a text file, and with
// --kl-base the KL divergence of its next-token distributions to a base model's (llama.cpp's
// perplexity tool and its --kl-divergence, in one run with both models loaded).
#include "../cli/common.hpp"
#include "../cli/flags.hpp"
#include "edgellm/io/json_write.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
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

constexpr const char* kUsage =
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
    "\n"
    "options:\n"
    "  -m, --model DIR      the checkpoint directory (required; its tokenizer.json\n"
    "                       tokenises FILE)\n"
    "  --text FILE          the evaluation text (required; -f/--file is the same flag; a\n"
    "                       pipe such as <(cmd) or `-` for stdin is read to its end)\n"
    "  -c, --ctx N          window size in tokens (default 512; at least 2; at most the\n"
    "                       model's max_position_embeddings unless --force-context)\n"
    "  --force-context      allow --ctx above max_position_embeddings (RoPE untrained there)\n"
    "  --stride N           tokens between window starts (default: ctx; 1..ctx)\n"
    "  -n, --max-tokens N   only the first N tokens of FILE (default: all)\n"
    "  --kl-base BASE       a base checkpoint (e.g. the fp16 one) to measure KL divergence to\n"
    "  --format text|json   one human line (default) or one JSON object on stdout:\n"
    "                       {\"model\", \"text\", \"ctx\", \"stride\", \"windows\",\n"
    "                       \"tokens\", \"nll\", \"ppl\", \"ppl_stderr\"} and with --kl-base\n"
    "                       \"base\", \"kl\", \"kl_stderr\", \"kl_p99\", \"top1\" (a fraction)\n"
    "  --fp32-reference     the model in dense fp32 weights and math (AWQ weights dequantised as\n"
    "                       AutoAWQ does); default: int4 (fp16 checkpoints quantised at load)\n"
    "  --exact              int4 matmuls on the exact path (default: the fast W4A8 path)\n"
    "  --lm-head F          f16 (the stored tensor as is), int8 or int4: the model's lm_head\n"
    "                       quantised at load (default int8, as edgellm-generate; ignored with\n"
    "                       --fp32-reference and for the --kl-base model)\n"
    "  -t, --threads N      threads for matmuls and attention (default 1; at most 4 x the\n"
    "                       hardware threads, and 256)\n"
    "  --allow-extra-tensors  load checkpoints holding tensors their config.json does not use\n"
    "  --quiet              no progress (loading, one step per window) on stderr\n"
    "  -h, --help           this text\n"
    "  --version            version, git commit, build flags and the int4 microkernel used here\n"
    "\n"
    "Exit status: 0 on success, 1 on a runtime error, 2 on a usage error.\n";

struct Args {
  std::string model, text, kl_base;
  std::size_t ctx = 512, stride = 0, max_tokens = 0, threads = 1;
  bool json = false, fp32_reference = false, exact = false, allow_extra_tensors = false;
  bool quiet = false, force_context = false;
  edgellm::model::LmHeadFormat lm_head = edgellm::model::LmHeadFormat::int8;
  bool lm_head_given = false;  // else int8 falls back to f16 when no group size fits
};

// Parses argv; on error prints the reason and returns false (exit code 2).
bool parse_args(int argc, char** argv, Args& a, bool& help, bool& version) {
  const auto fail = [](const std::string& msg) {
    edgellm::cli::usage_error(kProg, msg);
    return false;
  };
  bool have_stride = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg =
        edgellm::cli::canonical_flag(argv[i], {{"--file", "--text"}, {"--context", "--ctx"}});
    const std::string flag(arg);  // messages name the flag in full (-t is --threads)
    std::string v;
    const auto value = [&](std::string& out) {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    // A positive integer value of `flag` into `out`.
    const auto number = [&](std::size_t& out) {
      if (!value(v)) return fail(flag + ": missing N");
      unsigned long long n = 0;
      if (!edgellm::cli::parse_number(v, n)) {
        return fail(flag + ": '" + v + "' is not a non-negative integer");
      }
      out = static_cast<std::size_t>(n);
      return true;
    };
    if (arg == "-h" || arg == "--help") {
      help = true;
      return true;
    } else if (arg == "--version") {
      version = true;
      return true;
    } else if (arg == "--fp32-reference") {
      a.fp32_reference = true;
    } else if (arg == "--lm-head") {
      if (!value(v)) return fail("--lm-head: missing f16, int8 or int4");
      const auto f = edgellm::model::parse_lm_head_format(v);
      if (!f) return fail("--lm-head: '" + v + "' is not f16, int8 or int4");
      a.lm_head = *f;
      a.lm_head_given = true;
    } else if (arg == "--exact") {
      a.exact = true;
    } else if (arg == "--allow-extra-tensors") {
      a.allow_extra_tensors = true;
    } else if (arg == "--force-context") {
      a.force_context = true;
    } else if (arg == "--quiet") {
      a.quiet = true;
    } else if (arg == "--model") {
      if (!value(a.model)) return fail(flag + ": missing DIR");
    } else if (arg == "--text") {
      if (!value(a.text)) return fail(flag + ": missing FILE");
    } else if (arg == "--kl-base") {
      if (!value(a.kl_base)) return fail(flag + ": missing DIR");
    } else if (arg == "--format") {
      if (!value(v)) return fail(flag + ": missing text|json");
      if (v != "text" && v != "json") return fail(flag + ": '" + v + "' is not text or json");
      a.json = v == "json";
    } else if (arg == "--ctx") {
      if (!number(a.ctx)) return false;
      if (a.ctx < 2)
        return fail(flag + ": " + v + " is less than 2 (a window of 1 token scores nothing)");
    } else if (arg == "--stride") {
      if (!number(a.stride)) return false;
      have_stride = true;
    } else if (arg == "--max-tokens") {
      if (!number(a.max_tokens)) return false;
      if (a.max_tokens == 0) return fail(flag + ": must be at least 1");
    } else if (arg == "--threads") {
      if (!number(a.threads)) return false;
      if (const std::string why = edgellm::cli::check_threads(kProg, a.threads); !why.empty()) {
        return fail(why);
      }
    } else {
      return fail("unknown argument '" + std::string(argv[i]) + "'");
    }
  }
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
  return true;
}

using Model = edgellm::model::Transformer<>;

// Loads `dir` and makes a Transformer whose context holds one window.
edgellm::result<Model> load_model(const std::string& dir, bool fp32_reference, const Args& a,
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
  return Model::create(*w, to);
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
edgellm::status score(const Args& a, std::span<const std::int32_t> ids, Model& m, Model* base,
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
  auto m = load_model(a.model, a.fp32_reference, a, pool.get(), progress);
  if (!m) return fail("--model: " + m.error().message);
  std::optional<Model> base;
  if (!a.kl_base.empty()) {
    auto b = load_model(a.kl_base, true, a, pool.get(), progress);
    if (!b) return fail("--kl-base: " + b.error().message);
    if (b->vocab_size() != m->vocab_size()) {
      return fail("--kl-base: '" + a.kl_base + "' has a vocabulary of " +
                  std::to_string(b->vocab_size()) + " tokens, --model '" + a.model + "' one of " +
                  std::to_string(m->vocab_size()) + ": the models must share the tokenizer");
    }
    base = std::move(*b);
  }

  Scores s;
  if (auto st = score(a, ids, *m, base ? &*base : nullptr, progress, s); !st) {
    return fail(st.error().message);
  }
  const std::string out = report(a, s);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  bool help = false, version = false;
  if (!parse_args(argc, argv, a, help, version)) return edgellm::cli::kUsageExit;
  if (version) return edgellm::cli::print_version(kProg);
  if (help) {
    std::fputs(kUsage, stdout);
    return edgellm::cli::finish_stdout(kProg, 0);
  }
  const int rc = run(a);
  return rc == 0 ? edgellm::cli::finish_stdout(kProg, rc) : rc;
}
