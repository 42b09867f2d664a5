// SPDX-License-Identifier: Apache-2.0
// edgellm-logits: runs a checkpoint on a list of token ids and writes the logits as JSON in the
// shape of tools/reference_forward.py's output, to compare edgellm with other implementations.
#include "cleanup.hpp"
#include "flags.hpp"
#include "vulkan_model.hpp"
#include "edgellm/decode/model.hpp"
#include "edgellm/io/atomic_file.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

constexpr const char* kProg = "edgellm-logits";

constexpr const char* kHead =
    "usage: edgellm-logits -m DIR --ids 1,2,3 --out FILE.json [options]\n"
    "\n"
    "Runs the checkpoint in DIR (HF Llama / Qwen2 / Qwen3 / Mistral: fp16/bf16/fp32, or AutoAWQ "
    "gemm/gemv)\n"
    "on the token ids at positions 0.. and writes\n"
    "  {\"ids\": [...], \"vocab_size\": V, \"mode\": \"...\", \"logits\": [[V floats], ...]}\n"
    "(one row: the last position; with --all-positions one row per id), the layout of\n"
    "tools/reference_forward.py. FILE.json may be '-' for stdout. FILE.json is written under a\n"
    "temporary name and renamed, so an earlier file is replaced whole or not at all; it may\n"
    "replace any regular file, never a device, FIFO, directory or the model.\n"
    "\n";

constexpr const char* kTail =
    "Exit status: 0 on success, 1 on a runtime error (a bad model, an id outside its\n"
    "vocab_size), 2 on a usage error (including more ids than max_position_embeddings).\n";

struct Args {
  std::string model, out;
  std::vector<std::int32_t> ids;
  bool all_positions = false, fp32_reference = false, exact = false, allow_extra_tensors = false;
  bool quiet = false, force_context = false;
  std::size_t threads = 1;
  edgellm::model::LmHeadFormat lm_head = edgellm::model::LmHeadFormat::int8;
  bool lm_head_given = false;  // else int8 falls back to f16 when no group size fits
  edgellm::tools::BackendKind backend = edgellm::tools::BackendKind::cpu;
  std::optional<std::uint32_t> device;
  std::optional<edgellm::backend::vk::GemvChoice> vk_gemv;
};

// Parses argv into `a`: nullopt to go on, else the exit status (--help, --version, a usage error).
std::optional<int> parse_args(int argc, char** argv, Args& a) {
  const auto fail = [](const std::string& msg) { return edgellm::cli::usage_error(kProg, msg); };
  using edgellm::cli::flag;
  bool have_ids = false;
  const std::vector<flag> flags{
      flag::string({"-m", "--model"}, "DIR", "the checkpoint directory (required)", a.model),
      edgellm::tools::token_ids_flag({"--ids"}, "the token ids, a comma-separated list (required)",
                                     a.ids)
          .on_set([&have_ids] { have_ids = true; }),
      flag::string({"--out"}, "FILE.json", "where the JSON goes, '-' for stdout (required)", a.out),
      flag::boolean({"--all-positions"}, "logits of every position, not only the last",
                    a.all_positions),
      flag::boolean({"--fp32-reference"},
                    "dense fp32 weights and math (AWQ weights dequantised as AutoAWQ does)",
                    a.fp32_reference),
      flag::boolean({"--exact"}, "int4 matmuls on the exact path (default: the fast W4A8 path)",
                    a.exact),
      edgellm::tools::lm_head_flag("f16 (the stored tensor as is), int8 or int4: the lm_head\n"
                                   "quantised at load (as_stored and q4 are accepted aliases;\n"
                                   "f16 by default with --backend vulkan); ignored with\n"
                                   "--fp32-reference",
                                   a.lm_head)
          .on_set([&a] { a.lm_head_given = true; }),
      edgellm::tools::threads_flag(a.threads, kProg),
      edgellm::tools::backend_flag("cpu, or vulkan: the whole forward on a Vulkan device (int4\n"
                                   "linears, an f16 lm_head unless --lm-head is given; f16 KV)",
                                   a.backend),
      flag::number<std::uint32_t>({"--device"}, "N", "the Vulkan device's index", a.device, 0,
                                  std::numeric_limits<std::uint32_t>::max())
          .shows_default("discrete > integrated > CPU"),
      edgellm::tools::vk_gemv_flag(
          "with --backend vulkan, the int4 one-row GEMVs: auto (W4A8\n"
          "where the device accelerates integer dot products and --exact is\n"
          "not given, else fp32), fp32, int8 or int8-dot",
          a.vk_gemv)
          .shows_default("auto"),
      flag::boolean({"--allow-extra-tensors"},
                    "load a checkpoint holding tensors its config.json does not use",
                    a.allow_extra_tensors),
      flag::boolean({"--force-context"},
                    "allow more ids than the model's max_position_embeddings (RoPE\n"
                    "untrained there)",
                    a.force_context),
      flag::boolean({"--quiet"},
                    "no loading progress (a bar on a terminal, else a line per 10 %) and\n"
                    "no 'wrote' line on stderr; errors and warnings still",
                    a.quiet),
  };
  if (const auto rc = edgellm::tools::parse_command_line(
          kProg, argc, argv, {kHead, {{"options:", &flags}}, kTail, 20}))
    return rc;  // --help, --version or a usage error
  if (a.model.empty()) return fail("--model DIR is required");
  if (a.backend == edgellm::tools::BackendKind::vulkan) {
    if (const std::string why = edgellm::tools::vulkan_unavailable(); !why.empty())
      return fail(why);
    if (a.fp32_reference)
      return fail("--fp32-reference runs on the CPU only; drop --backend vulkan");
  } else if (a.device) {
    return fail("--device: applies to --backend vulkan only");
  } else if (a.vk_gemv) {
    return fail("--vk-gemv: applies to --backend vulkan only");
  }
  if (!have_ids) return fail("--ids is required");
  if (a.out.empty()) return fail("--out FILE.json is required");
  if (a.fp32_reference && a.exact) {
    return fail("--exact selects the int4 path; it cannot be combined with --fp32-reference");
  }
  return std::nullopt;
}

// The JSON text of the result. Non-finite logits (not valid JSON numbers) become null.
std::string to_json(const Args& a, std::size_t vocab, const char* mode,
                    const std::vector<float>& logits, std::size_t rows, std::size_t& non_finite) {
  std::string out = "{\"ids\": [";
  for (std::size_t i = 0; i < a.ids.size(); ++i)
    out += fmt::format("{}{}", i ? ", " : "", a.ids[i]);
  out += fmt::format("], \"vocab_size\": {}, \"mode\": \"{}\", \"logits\": [", vocab, mode);
  for (std::size_t r = 0; r < rows; ++r) {
    out += r ? ",\n[" : "\n[";
    for (std::size_t v = 0; v < vocab; ++v) {
      const float x = logits[r * vocab + v];
      if (v) out += ", ";
      if (std::isfinite(x)) {
        out += fmt::format("{}", x);  // shortest text that reads back as the same float
      } else {
        out += "null";
        ++non_finite;
      }
    }
    out += ']';
  }
  out += "]}\n";
  return out;
}

// The ids against config.json, before the weights are read (a 7B load takes a minute): each in
// [0, vocab_size), and no more of them than max_position_embeddings without --force-context.
// Returns 0 to go on, else the exit status (the message printed).
int check_before_load(const Args& a) {
  std::error_code ec;
  if (!std::filesystem::is_directory(a.model, ec)) return 0;  // the load says so
  auto cfg = edgellm::model::load_model_config(a.model);
  if (!cfg) {
    std::fprintf(stderr, "edgellm-logits: %s\n", cfg.error().message.c_str());
    return 1;
  }
  if (const std::string why = edgellm::cli::check_context(
          "--ids", "a prompt of " + std::to_string(a.ids.size()) + " ids", a.ids.size(),
          cfg->max_position_embeddings, a.force_context);
      !why.empty()) {
    return edgellm::cli::usage_error(kProg, why);
  }
  for (std::size_t i = 0; i < a.ids.size(); ++i) {
    if (a.ids[i] < 0 || static_cast<std::size_t>(a.ids[i]) >= cfg->vocab_size) {
      std::fprintf(stderr,
                   "edgellm-logits: --ids: id %d (item %zu) is out of range: the model's "
                   "vocab_size is %zu\n",
                   a.ids[i], i + 1, cfg->vocab_size);
      return 1;
    }
  }
  return 0;
}

int run(const Args& a) {
  const auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "edgellm-logits: %s\n", msg.c_str());
    return 1;
  };
  // --out is a plain output like cc -o: any regular file is replaced (io::OutputRule's default),
  // never a device, FIFO or directory, nor the model. Checked before the slow load.
  const std::string inputs[] = {a.model};
  edgellm::io::OutputRule out_rule;
  out_rule.inputs = inputs;
  const auto out_error = [&](const edgellm::error& e) {
    const bool not_a_file = e.message.find("not a regular file") != std::string::npos;
    return fail("--out: " + e.message + (not_a_file ? " ('-' writes to stdout)" : ""));
  };
  if (a.out != "-") {
    if (auto st = edgellm::io::check_output_path(a.out, out_rule, "--out"); !st)
      return out_error(st.error());
  }
  std::unique_ptr<edgellm::ThreadPool> pool;
  if (a.threads > 1) {
    auto p = edgellm::ThreadPool::create(a.threads);
    if (!p) return fail(p.error().message);
    pool = std::move(*p);
  }
  edgellm::model::LoadOptions lo;
  lo.fp32_reference = a.fp32_reference;
  lo.allow_extra_tensors = a.allow_extra_tensors;
  edgellm::cli::ProgressBar progress(a.quiet);
  lo.progress = std::ref(progress);
  const bool on_vulkan = a.backend == edgellm::tools::BackendKind::vulkan;
  // The device runs an f16 lm_head (or int4), not the CPU's default int8.
  lo.lm_head = on_vulkan && !a.lm_head_given ? edgellm::model::LmHeadFormat::as_stored : a.lm_head;
  auto w = edgellm::model::load_weights(a.model, lo);
  if (!w && !a.lm_head_given && !a.fp32_reference) {
    lo.lm_head = edgellm::model::LmHeadFormat::as_stored;  // e.g. no group size divides hidden
    w = edgellm::model::load_weights(a.model, lo);
  }
  progress.finish();
  if (!w) return fail(w.error().message);

  edgellm::model::TransformerOptions to;
  to.pool = pool.get();
  to.path = a.exact ? edgellm::kernels::MatmulPath::exact : edgellm::kernels::MatmulPath::fast;
  // Exactly the cache the prompt needs (a default-sized cache could be gigabytes). Prompts
  // longer than max_position_embeddings run with --force-context (RoPE is defined there, merely
  // untrained); a Mistral prompt longer than its sliding window is refused by create().
  to.context_size = a.ids.size();
  const auto mode =
      a.all_positions ? edgellm::decode::LogitsMode::all : edgellm::decode::LogitsMode::last;
  const std::size_t rows = a.all_positions ? a.ids.size() : 1;
  std::vector<float> logits;
  std::size_t vocab = 0;
  const auto forward = [&](auto& t) -> int {
    vocab = t.vocab_size();
    logits.resize(rows * vocab);
    if (auto st = t.forward(a.ids, mode, logits); !st) return fail("--ids: " + st.error().message);
    return 0;
  };
  if (on_vulkan) {
#if EDGELLM_TOOLS_VULKAN
    // An f16 KV cache on the device: the closest it keeps to this tool's fp32 one.
    auto vm = edgellm::tools::make_vulkan_model(
        *w, to, edgellm::cache::KvType::f16, a.device,
        a.vk_gemv.value_or(edgellm::backend::vk::GemvChoice::automatic));
    if (!vm) return fail(vm.error().message);
    if (const int rc = forward(*vm->model); rc != 0) return rc;
#endif
  } else {
    auto t = edgellm::model::Transformer<>::create(*w, to);
    if (!t) return fail(t.error().message);
    if (const int rc = forward(*t); rc != 0) return rc;
  }

  const char* mode_name = a.fp32_reference ? "fp32-reference"
                          : on_vulkan      ? "int4-vulkan"
                          : a.exact        ? "int4-exact"
                                           : "int4-fast";
  std::size_t non_finite = 0;
  const std::string text = to_json(a, vocab, mode_name, logits, rows, non_finite);
  if (non_finite) {
    std::fprintf(stderr, "edgellm-logits: warning: %zu non-finite logits written as null\n",
                 non_finite);
  }
  if (a.out == "-") {
    const bool ok = std::fwrite(text.data(), 1, text.size(), stdout) == text.size();
    if (!ok || std::fflush(stdout) != 0) return fail("--out: write to '-' failed");
  } else {
    auto file = edgellm::io::AtomicFileWriter::create(a.out, "--out", out_rule);
    if (!file) return out_error(file.error());
    edgellm::tools::remove_temp_on_signal();
    edgellm::tools::set_signal_temp(file->temp_path());
    auto st = file->write(std::as_bytes(std::span(text)));
    if (st) st = file->commit();
    edgellm::tools::set_signal_temp("");
    if (!st) return fail(st.error().message);
  }
  if (a.out != "-" && !a.quiet) {
    std::fprintf(stderr, "wrote %s (%zu row(s) of %zu logits, %s)\n", a.out.c_str(), rows, vocab,
                 mode_name);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const auto rc = parse_args(argc, argv, a)) return *rc;
  if (const int rc = check_before_load(a); rc != 0) return rc;
  const int rc = run(a);  // a failed --out write has said so already
  return rc == 0 ? edgellm::cli::finish_stdout(kProg, rc) : rc;
}
