// SPDX-License-Identifier: Apache-2.0
// edgellm-quantize: AWQ (or round-to-nearest) quantisation of an unquantised Hugging Face
// checkpoint from a calibration text, written as an AutoAWQ gemm checkpoint or, with
// --fake-quant, as dequantised fp16 (quant/awq_model.hpp, quant/awq_output.hpp).
#include "cleanup.hpp"
#include "flags.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/quant/awq_output.hpp"
#include "edgellm/thread_pool.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace {

constexpr const char* kProg = "edgellm-quantize";

constexpr const char* kHead =
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
    "\n";

struct Args {
  std::string model, calib, out;
  edgellm::quant::QuantizeOptions q;
  edgellm::quant::OutputOptions o;
  std::size_t threads = 1;
  bool quiet = false;
};

// --modules-bits P=B,...: appends each item to `out`; "" or why not.
std::string parse_modules_bits(std::string_view v, std::vector<edgellm::quant::ModuleBits>& out) {
  std::string_view rest = v;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const std::size_t eq = item.find('=');
    unsigned bits = 0;
    const std::string_view b = eq == std::string_view::npos ? "" : item.substr(eq + 1);
    if (eq == std::string_view::npos || eq == 0 || !edgellm::cli::parse_number(b, bits))
      return "'" + std::string(item) + "' is not PATTERN=BITS";
    if ((bits < 2 || bits > 8) && bits != 16)
      return "'" + std::string(item) + "': bits must be 2..8 or 16";
    out.push_back({std::string(item.substr(0, eq)), bits});
  }
  if (out.empty()) return "empty list";
  return {};
}

// Parses argv into `a`: nullopt to go on, else the exit status (--help, --version, a usage error).
std::optional<int> parse_args(int argc, char** argv, Args& a) {
  const auto fail = [](const std::string& msg) { return edgellm::cli::usage_error(kProg, msg); };
  using edgellm::cli::flag;
  namespace quant = edgellm::quant;
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  const std::vector<flag> flags{
      flag::string({"-m", "--model"}, "DIR", "the unquantised checkpoint (required)", a.model),
      flag::string({"--calib", "-f", "--file"}, "FILE", "the calibration text (required)", a.calib),
      flag::string({"--out"}, "OUT",
                   "the output directory (required; refused if it exists, see --force;\n"
                   "never ., /, $HOME, an input or a directory holding one)",
                   a.out),
      flag::choice({"--method"}, "awq, or rtn: round-to-nearest with no search (the baseline)",
                   a.q.method,
                   {{"awq", quant::QuantMethod::awq}, {"rtn", quant::QuantMethod::rtn}}),
      flag::number<unsigned>({"--bits"}, "N",
                             "2..8; other than 4 needs --fake-quant. 8 bits is edgellm's\n"
                             "symmetric int8 format (one fp32 scale per group)",
                             a.q.spec.bits, 2, 8),
      flag::custom({"--modules-bits"}, "P=B,...",
                   "bits per linear: B (2..8, or 16 = kept in fp16) for the linears\n"
                   "whose name (self_attn.q_proj .. mlp.down_proj) contains P; the first\n"
                   "match wins, e.g. self_attn=8,mlp=4 (attention int8, MLP int4).\n"
                   "Without --fake-quant B is 4, 8 or 16: 16 goes to\n"
                   "modules_to_not_convert, 8 to edgellm's int8 extension of the layout\n"
                   "(edgellm_int8_modules; AutoAWQ does not read it)",
                   [&a](std::string_view v) { return parse_modules_bits(v, a.q.modules_bits); }),
      flag::number<std::size_t>({"--group"}, "N",
                                "group size; must divide every linear's input width",
                                a.q.spec.group, 1, kMax),
      flag::number<std::size_t>({"--samples"}, "N", "calibration blocks", a.q.samples, 1, kMax),
      flag::number<std::size_t>({"--seqlen"}, "N", "tokens per block", a.q.seqlen, 1, kMax),
      flag::number<std::size_t>({"--loss-tokens"}, "N",
                                "tokens the block losses of the scale search use, whole blocks;\n"
                                "0 = all, AutoAWQ's choice, slower",
                                a.q.loss_tokens, 0, kMax),
      flag::boolean({"--clip"},
                    "run AutoAWQ's clip search (off by default: it cost perplexity on\n"
                    "every model measured; docs/performance.md)",
                    a.q.clip),
      flag::boolean({"--no-clip"}, "no clip search (the default)", a.q.clip, false),
      flag::choice(
          {"--rounding"},
          "awq's codes on each group's grid: error-compensated against the\n"
          "calibration inputs (GPTQ's update within each group), or to nearest\n"
          "(AutoAWQ's); the format is the same",
          a.q.rounding,
          {{"compensated", quant::Rounding::compensated}, {"nearest", quant::Rounding::nearest}}),
      flag::boolean({"--fake-quant"}, "write dequantised fp16 weights instead of the gemm layout",
                    a.o.fake_quant),
      flag::boolean({"--force"},
                    "replace OUT if it is an earlier output (it has .edgellm-quantize);\n"
                    "anything else at OUT is never replaced",
                    a.o.force),
      edgellm::tools::threads_flag(a.threads, kProg,
                                   "threads; at most 4 x the hardware threads, and 256"),
      flag::boolean({"--quiet"}, "no progress on stderr", a.quiet),
  };
  if (const auto rc = edgellm::tools::parse_command_line(
          kProg, argc, argv, {.head = kHead, .sections = {{"options:", &flags}}}))
    return rc;  // --help, --version or a usage error
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
  return std::nullopt;
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
  if (const auto rc = parse_args(argc, argv, a)) return *rc;
  return run(a);
}
