// SPDX-License-Identifier: Apache-2.0
// edgellm-quantize: AWQ (or round-to-nearest) quantisation of an unquantised Hugging Face
// checkpoint from a calibration text, written as an AutoAWQ gemm checkpoint or, with
// --fake-quant, as dequantised fp16 (quant/awq_model.hpp, quant/awq_output.hpp).
#include "cleanup.hpp"
#include "../cli/common.hpp"
#include "../cli/flags.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/quant/awq_output.hpp"
#include "edgellm/thread_pool.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace {

constexpr const char* kProg = "edgellm-quantize";

constexpr const char* kUsage =
    "usage: edgellm-quantize -m DIR --calib FILE --out OUT [options]\n"
    "\n"
    "Quantises the unquantised (F16 / BF16 / F32) Llama / Qwen2 / Qwen3 / Mistral checkpoint in\n"
    "DIR with AutoAWQ's algorithm (docs/formats.md 1.6): FILE is tokenised whole with DIR's\n"
    "tokenizer.json and cut into --samples blocks of --seqlen tokens (fewer if it is short); "
    "layer\n"
    "by layer, the per-channel scales of q/k/v, o (without GQA), gate/up and down are searched on\n"
    "those activations and folded; each group's codes are then chosen on its round-to-nearest\n"
    "grid with the rounding errors compensated against the same activations (--rounding),\n"
    "optionally after AutoAWQ's clip search on v, o, gate, up and down (--clip).\n"
    "OUT is written under a temporary name and renamed when complete: AutoAWQ's gemm layout with\n"
    "a quantization_config in config.json (4 bits), or with --fake-quant every linear dequantised\n"
    "to fp16; tokenizer and generation files are copied, and a .edgellm-quantize file marks it.\n"
    "If anything appears at OUT meanwhile, it is left alone and the output kept at OUT.kept.PID.\n"
    "\n"
    "options:\n"
    "  -m, --model DIR      the unquantised checkpoint (required)\n"
    "  --calib FILE         the calibration text (required; -f/--file is the same flag)\n"
    "  --out OUT            the output directory (required; refused if it exists, see --force;\n"
    "                       never ., /, $HOME, an input or a directory holding one)\n"
    "  --method awq|rtn     awq (default), or round-to-nearest with no search (the baseline)\n"
    "  --bits N             2..8 (default 4; other than 4 needs --fake-quant). 8 bits is\n"
    "                       edgellm's symmetric int8 format (one fp32 scale per group)\n"
    "  --modules-bits P=B,...  bits per linear: B (2..8, or 16 = kept in fp16) for the linears\n"
    "                       whose name (self_attn.q_proj .. mlp.down_proj) contains P; the first\n"
    "                       match wins, e.g. self_attn=8,mlp=4 (attention int8, MLP int4).\n"
    "                       Without --fake-quant B is 4, 8 or 16: 16 goes to\n"
    "                       modules_to_not_convert, 8 to edgellm's int8 extension of the layout\n"
    "                       (edgellm_int8_modules; AutoAWQ does not read it)\n"
    "  --group N            group size (default 128; must divide every linear's input width)\n"
    "  --samples N          calibration blocks (default 32)\n"
    "  --seqlen N           tokens per block (default 512)\n"
    "  --loss-tokens N      tokens the block losses of the scale search use, whole blocks\n"
    "                       (default 4096; 0 = all, AutoAWQ's choice, slower)\n"
    "  --clip               run AutoAWQ's clip search (off by default: it cost perplexity on\n"
    "                       every model measured; docs/performance.md)\n"
    "  --no-clip            no clip search (the default)\n"
    "  --rounding compensated|nearest\n"
    "                       awq's codes on each group's grid: error-compensated against the\n"
    "                       calibration inputs (GPTQ's update within each group; the default),\n"
    "                       or to nearest (AutoAWQ's); the format is the same\n"
    "  --fake-quant         write dequantised fp16 weights instead of the gemm layout\n"
    "  --force              replace OUT if it is an earlier output (it has .edgellm-quantize);\n"
    "                       anything else at OUT is never replaced\n"
    "  -t, --threads N      threads (default 1; at most 4 x the hardware threads, and 256)\n"
    "  --quiet              no progress on stderr\n"
    "  -h, --help           this text\n"
    "  --version            version, git commit and build flags\n"
    "\n"
    "Exit status: 0 on success, 1 on a runtime error, 2 on a usage error.\n";

struct Args {
  std::string model, calib, out;
  edgellm::quant::QuantizeOptions q;
  edgellm::quant::OutputOptions o;
  std::size_t threads = 1;
  bool quiet = false;
};

bool parse_args(int argc, char** argv, Args& a, bool& help, bool& version) {
  const auto fail = [](const std::string& msg) {
    edgellm::cli::usage_error(kProg, msg);
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = edgellm::cli::canonical_flag(argv[i], {{"--file", "--calib"}});
    const std::string flag(arg);
    std::string v;
    const auto value = [&](std::string& out) {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    const auto number = [&](std::size_t& out) {
      if (!value(v)) return fail(flag + ": missing N");
      unsigned long long n = 0;
      if (!edgellm::cli::parse_number(v, n))
        return fail(flag + ": '" + v + "' is not a non-negative integer");
      out = static_cast<std::size_t>(n);
      return true;
    };
    std::size_t n = 0;
    if (arg == "-h" || arg == "--help") {
      help = true;
      return true;
    } else if (arg == "--version") {
      version = true;
      return true;
    } else if (arg == "--model") {
      if (!value(a.model)) return fail(flag + ": missing DIR");
    } else if (arg == "--calib") {
      if (!value(a.calib)) return fail(flag + ": missing FILE");
    } else if (arg == "--out") {
      if (!value(a.out)) return fail(flag + ": missing OUT");
    } else if (arg == "--method") {
      if (!value(v)) return fail(flag + ": missing awq|rtn");
      if (v != "awq" && v != "rtn") return fail(flag + ": '" + v + "' is not awq or rtn");
      a.q.method = v == "awq" ? edgellm::quant::QuantMethod::awq : edgellm::quant::QuantMethod::rtn;
    } else if (arg == "--bits") {
      if (!number(n)) return false;
      if (n < 2 || n > 8) return fail(flag + ": " + v + " is not in [2, 8]");
      a.q.spec.bits = static_cast<unsigned>(n);
    } else if (arg == "--modules-bits") {
      if (!value(v)) return fail(flag + ": missing PATTERN=BITS,...");
      std::string_view rest = v;
      while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        const std::size_t eq = item.find('=');
        unsigned bits = 0;
        const std::string_view b = eq == std::string_view::npos ? "" : item.substr(eq + 1);
        if (eq == std::string_view::npos || eq == 0 || !edgellm::cli::parse_number(b, bits))
          return fail(flag + ": '" + std::string(item) + "' is not PATTERN=BITS");
        if ((bits < 2 || bits > 8) && bits != 16)
          return fail(flag + ": '" + std::string(item) + "': bits must be 2..8 or 16");
        a.q.modules_bits.push_back({std::string(item.substr(0, eq)), bits});
      }
      if (a.q.modules_bits.empty()) return fail(flag + ": empty list");
    } else if (arg == "--group") {
      if (!number(n)) return false;
      if (n == 0) return fail(flag + ": must be at least 1");
      a.q.spec.group = n;
    } else if (arg == "--samples") {
      if (!number(a.q.samples)) return false;
      if (a.q.samples == 0) return fail(flag + ": must be at least 1");
    } else if (arg == "--seqlen") {
      if (!number(a.q.seqlen)) return false;
      if (a.q.seqlen == 0) return fail(flag + ": must be at least 1");
    } else if (arg == "--loss-tokens") {
      if (!number(a.q.loss_tokens)) return false;
    } else if (arg == "--clip") {
      a.q.clip = true;
    } else if (arg == "--no-clip") {
      a.q.clip = false;
    } else if (arg == "--rounding") {
      if (!value(v)) return fail(flag + ": missing nearest|compensated");
      if (v != "nearest" && v != "compensated")
        return fail(flag + ": '" + v + "' is not nearest or compensated");
      a.q.rounding = v == "nearest" ? edgellm::quant::Rounding::nearest
                                    : edgellm::quant::Rounding::compensated;
    } else if (arg == "--fake-quant") {
      a.o.fake_quant = true;
    } else if (arg == "--force") {
      a.o.force = true;
    } else if (arg == "--quiet") {
      a.quiet = true;
    } else if (arg == "--threads") {
      if (!number(a.threads)) return false;
      if (const std::string why = edgellm::cli::check_threads(kProg, a.threads); !why.empty())
        return fail(why);
    } else {
      return fail("unknown argument '" + std::string(argv[i]) + "'");
    }
  }
  if (a.model.empty()) return fail("--model DIR is required");
  if (a.calib.empty()) return fail("--calib FILE is required");
  if (a.out.empty()) return fail("--out OUT is required");
  if (a.q.spec.bits != 4 && !a.o.fake_quant)
    return fail("--bits " + std::to_string(a.q.spec.bits) +
                ": the AutoAWQ gemm layout is 4-bit only; add --fake-quant");
  for (const edgellm::quant::ModuleBits& mb : a.q.modules_bits)
    if (mb.bits != 4 && mb.bits != 8 && mb.bits != 16 && !a.o.fake_quant)
      return fail("--modules-bits " + mb.pattern + "=" + std::to_string(mb.bits) +
                  ": only 4, 8 and 16 bits have a packed layout; add --fake-quant");
  return true;
}

int run(Args& a) {
  const auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "%s: %s\n", kProg, msg.c_str());
    return 1;
  };
  std::error_code ec;
  if (!std::filesystem::is_directory(a.model, ec))
    return fail("--model: '" + a.model + "' is not a directory");
  a.o.inputs = {a.calib};
  // Before the slow steps; write_quantized_model checks again, and again before its rename.
  if (auto st = edgellm::quant::check_quantize_output(a.model, a.out, a.o); !st)
    return fail("--out: " + st.error().message);
  edgellm::tools::remove_temp_on_signal();
  a.o.on_temp = [](const std::string& tmp) { edgellm::tools::set_signal_temp(tmp, true); };
  auto text = edgellm::io::read_text_file(a.calib);
  if (!text) return fail("--calib: " + text.error().message);
  auto tok = edgellm::model::Tokenizer::load(a.model);
  if (!tok) return fail("--model: " + tok.error().message);
  auto ids = tok->encode(*text);
  if (!ids) return fail("--calib: '" + a.calib + "': " + ids.error().message);
  a.q.calib_name = "--calib '" + a.calib + "'";

  std::unique_ptr<edgellm::ThreadPool> pool;
  if (a.threads > 1) {
    auto p = edgellm::ThreadPool::create(a.threads);
    if (!p) return fail(p.error().message);
    pool = std::move(*p);
  }
  a.q.pool = pool.get();
  edgellm::cli::ProgressBar bar(a.quiet);
  const auto progress = [&](const edgellm::quant::LayerProgress& p) {
    bar("quantize (layers)", p.layer, p.layers);
  };
  auto r = edgellm::quant::write_quantized_model(a.model, a.out, *ids, a.q, a.o, progress);
  bar.finish();
  if (!r) return fail(r.error().message);
  if (!a.quiet) {
    std::fprintf(stderr, "%s: %zu layers, %zu x %zu calibration tokens, %.1f s -> %s\n", kProg,
                 r->alphas.size(), r->samples, r->seqlen, r->seconds, a.out.c_str());
    if (a.q.method == edgellm::quant::QuantMethod::awq) {
      // The alpha each scaling group chose: "rtn" where s = 1 won, "-" where not searched.
      std::string line;
      for (const auto& al : r->alphas) {
        line += line.empty() ? "" : " |";
        for (const double v : al) {
          char buf[16];
          std::snprintf(buf, sizeof buf, " %s", std::isnan(v) ? "-" : v < 0 ? "rtn" : "");
          line += buf;
          if (!std::isnan(v) && v >= 0) {
            std::snprintf(buf, sizeof buf, "%.2f", v);
            line += buf;
          }
        }
      }
      std::fprintf(stderr, "%s: alpha per layer (qkv o gate/up down):%s\n", kProg, line.c_str());
    }
  }
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
  return run(a);
}
