// SPDX-License-Identifier: Apache-2.0
// edgellm-generate: text in, text out. Loads a Hugging Face checkpoint directory (config.json,
// *.safetensors, tokenizer.json), encodes the prompt, generates with the sampler and streams the
// text to stdout; statistics go to stderr. With no arguments it runs the bundled KJV model.
// Loading, the KV cache, sampling and (speculative) decoding are edgellm::Engine and Session.
#include "flags.hpp"
#include "vulkan_model.hpp"
#include "edgellm/session.hpp"
#include "edgellm/model/chat_template.hpp"
#include "edgellm/constrain/constraint.hpp"
#include "edgellm/constrain/tool_calls.hpp"
#include "edgellm/detail/cpu_topology.hpp"
#include "edgellm/detail/unicode.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/io/meminfo.hpp"
#include "edgellm/model/generation_config.hpp"
#include "edgellm/thread_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using namespace edgellm;

constexpr const char* kProg = "edgellm-generate";

constexpr const char* kHead = R"(usage: edgellm-generate [options]

Generates text from a Hugging Face checkpoint directory (Llama / Qwen2 / Mistral; AutoAWQ int4,
or fp16/bf16 quantised to int4 at load) with its tokenizer.json. Text streams to stdout,
statistics (time to first token, tokens/s, peak memory) to stderr. With no arguments it
generates from the bundled model (models/kjv-target-awq) with a fixed prompt.

)";

constexpr const char* kGenerationHeading =
    R"(generation (the sampling defaults below give way to the checkpoint's generation_config.json
where it sets temperature, top_k, top_p, min_p, repetition_penalty or do_sample false = greedy;
a flag wins over both; what was applied is printed on stderr):)";

constexpr const char* kConstraintHeading =
    R"(output constraint (tokens that would leave the language are never drawn; the generation
ends where the document is whole, and when -n runs short the document is closed within it):)";

constexpr const char* kTail =
    R"(Exit status: 0 on success (a cache that could not be saved is a warning on stderr, shown even
with --quiet), 1 on a runtime error (bad model, prompt, lost output: stdout closed or full), 2 on
bad arguments (including --threads or --context out of range). The arguments, the prompt and
generation_config.json are checked before the weights are loaded.
)";

// 2 threads (on a uniform machine, unchanged), or the performance cores of a big.LITTLE CPU:
// a thread on a little core would hold up every fork-join.
std::size_t default_threads() {
  const auto topology = edgellm::detail::read_cpu_topology();
  return topology.heterogeneous() ? topology.performance.size() : 2;
}

// -n -1: no budget of tokens; generation ends at the end of the text or a full context.
constexpr std::size_t kNoTokenLimit = static_cast<std::size_t>(-1);

struct Args {
  std::string model, prompt = "And God said", system, prompt_file;
  std::vector<std::int32_t> prompt_ids;
  std::vector<std::int32_t> prompt_tokens;  ///< the prompt's ids, checked before the load
  bool have_prompt_ids = false, chat = false, fp32_reference = false, print_ids = false;
  bool ignore_eos = false, pin = false, force = false, force_context = false;
  bool allow_extra_tensors = false, quiet = false;
  bool display_prompt = true;  // --no-display-prompt: false
  bool random_seed = false;    // -s -1: main() draws one and prints it
  model::LmHeadFormat lm_head = model::LmHeadFormat::int8;
  bool lm_head_given = false;  // an explicit --lm-head fails rather than falling back
  // max_tokens: kNoTokenLimit for -n -1 (until the end of the text or a full context)
  std::size_t threads = default_threads(), context = 0, max_tokens = 128;
  cache::KvType kv_type = cache::KvType::int8;
  std::optional<MemoryBudget> memory_budget;
  tools::BackendKind backend = tools::BackendKind::cpu;
  std::optional<std::uint32_t> device;
  std::optional<backend::vk::GemvChoice> vk_gemv;
  std::string prompt_cache;
  std::string packed_cache;
  std::string draft;
  std::size_t k = 5;
  bool adaptive = false;
  decode::SamplingOptions sampling;
  std::vector<std::string> stops;
  // The output constraint: the flag that chose it, its argument (--choice: the list)
  std::string constraint_flag, constraint_arg;
  constrain::ConstraintSpec constraint_spec;
  std::shared_ptr<const constrain::Constraint> constraint;  // compiled before the load
  bool print_grammar = false;
  // --tools: the OpenAI tools array and --tool-choice; read_tools() fills the rest before the
  // load: the checkpoint's chat template, its call format, the rendered prompt, the call grammar
  std::string tools_file, tool_choice = "auto";
  io::json::Value tools_json;
  std::optional<model::ChatTemplate> tools_template;
  constrain::ToolCallFormat tools_format = constrain::ToolCallFormat::qwen;
  std::string tools_prompt;
  std::shared_ptr<const constrain::ToolCallGrammar> tools_grammar;  // null: --tool-choice none
  std::vector<std::string> given;  ///< every spelling of every flag on the command line
  bool was_given(std::string_view flag) const {
    return std::find(given.begin(), given.end(), flag) != given.end();
  }
};

int usage_error(const std::string& msg) { return cli::usage_error(kProg, msg); }

// Parses argv into `a`: nullopt to go on, else the exit status (--help, --version, a usage error).
std::optional<int> parse_args(int argc, char** argv, Args& a) {
  using cli::flag;
  const std::vector<flag> model{
      flag::string({"-m", "--model"}, "DIR", "checkpoint directory", a.model)
          .non_empty("leave out -m for the bundled model")
          .shows_default("the bundled KJV model"),
      flag::boolean({"--fp32-reference"},
                    "dense fp32 weights and math (slow; for checking against PyTorch)",
                    a.fp32_reference),
      tools::threads_flag(a.threads, kProg,
                          "threads for matmuls and attention (on a big.LITTLE CPU the default\n"
                          "is its performance cores). At most 4 x the hardware threads (and\n"
                          "256); a warning above the hardware threads"),
      flag::boolean({"--pin"}, "pin the threads to the performance cores (sched_setaffinity)",
                    a.pin),
      flag::number<std::size_t>(
          {"-c", "--context", "--ctx-size"}, "N",
          "context size in tokens; above the model's max_position_embeddings\n"
          "only with --force-context",
          a.context, 1, std::size_t{1} << 24)
          .shows_default("min(model maximum, 4096)"),
      flag::boolean({"--force-context"},
                    "allow --context above max_position_embeddings (RoPE untrained there)",
                    a.force_context),
      tools::kv_type_flag({"--kv-type"},
                          "KV cache storage: int8, int4, f16 or f32 (int8: half the\n"
                          "memory of f16, per position and head; int4: 0.28 of f16, per\n"
                          "position, head and 32 values)",
                          a.kv_type),
      flag::string({"--packed-cache"}, "auto|FILE",
                   "map the int4 weights from a packed-weight cache instead of repacking\n"
                   "them at every start (`auto`: DIR/edgellm-packed-q4.bin); written on\n"
                   "the first run, rebuilt when the checkpoint or options change; an\n"
                   "existing FILE of another model (or not a packed cache) is left alone",
                   a.packed_cache)
          .non_empty(),
      flag::boolean({"--force"},
                    "with --packed-cache FILE: replace a regular file there that is not a\n"
                    "packed cache of this checkpoint (never a device, FIFO or directory)",
                    a.force),
      tools::lm_head_flag("f16 (the stored tensor as is), int8 or int4: the lm_head quantised\n"
                          "at load (int8: half the bytes per token of f16; falls back to f16\n"
                          "when no group size divides hidden_size); as_stored and q4 are\n"
                          "accepted aliases; ignored with --fp32-reference",
                          a.lm_head)
          .on_set([&a] { a.lm_head_given = true; }),
      flag::parsed({"--memory-budget"}, "B",
                   "BYTES, NN[KMG]iB, NN% of MemAvailable, or phone (3.8 GiB, or 90 % of\n"
                   "MemAvailable when less): before loading, choose what\n"
                   "no flag fixed so that the plan fits (edgellm-plan --choose: the\n"
                   "lm_head, then the KV type, then the context); says what it chose, or\n"
                   "refuses with the plan when nothing fits (CPU backend)",
                   a.memory_budget, parse_budget),
      tools::backend_flag("cpu, or vulkan: weights, activations and the KV cache on a Vulkan\n"
                          "device, a decode step one submission (int4 linears; the lm_head as\n"
                          "stored unless --lm-head is given; --kv-type int8 or f16)",
                          a.backend),
      flag::number<std::uint32_t>({"--device"}, "N", "the Vulkan device's index", a.device, 0, 1024)
          .shows_default("discrete > integrated > CPU"),
      tools::vk_gemv_flag("with --backend vulkan, the int4 decode GEMVs: auto (W4A8 where the\n"
                          "device accelerates integer dot products, else fp32), fp32, int8 (W4A8\n"
                          "everywhere) or int8-dot (W4A8 on integer dot products; refused where\n"
                          "the device lacks them); the prompt stays fp32",
                          a.vk_gemv)
          .shows_default("auto"),
      flag::boolean({"--allow-extra-tensors"},
                    "load a checkpoint holding tensors its config.json does not use\n"
                    "(by default an error: the config may not be this checkpoint's)",
                    a.allow_extra_tensors),
      flag::string({"--prompt-cache"}, "FILE",
                   "reuse the KV state of a previous prompt's common prefix from FILE (a\n"
                   "system prompt is prefilled once), and save this prompt's state to it;\n"
                   "a prompt cache of another model or context is rebuilt (a warning), a\n"
                   "FILE that is not a prompt cache is refused before the load",
                   a.prompt_cache)
          .non_empty(),
  };
  const std::vector<flag> prompt{
      flag::string({"-p", "--prompt"}, "TEXT", "the prompt", a.prompt)
          .shows_default("\"" + a.prompt + "\""),
      flag::string({"-f", "--file"}, "FILE",
                   "the prompt from FILE (`-` = stdin) instead of --prompt", a.prompt_file)
          .non_empty(),
      tools::token_ids_flag({"--prompt-ids"}, "the prompt as token ids instead of text",
                            a.prompt_ids)
          .on_set([&a] { a.have_prompt_ids = true; }),
      flag::boolean({"-i", "--interactive", "--chat"},
                    "interactive chat on stdin, one user message a line, in the\n"
                    "checkpoint's chat_template (ChatML, with a warning, when\n"
                    "tokenizer_config.json has none). The whole conversation is rendered\n"
                    "each turn and only what the KV cache does not hold yet is prefilled\n"
                    "(the stats line says how many prompt tokens were cached). Empty lines\n"
                    "are skipped; `/reset` forgets the conversation (the --system message\n"
                    "stays); `/exit` or end of input (Ctrl-D) ends it. Ctrl-C stops an\n"
                    "answer (what was said stays in the conversation) and returns to the\n"
                    "prompt; Ctrl-C at the prompt ends the chat (exit 0). When the context\n"
                    "fills, the oldest turns are dropped (the --system message stays), with\n"
                    "a note on stderr, and the chat goes on. A line that is not UTF-8 is\n"
                    "reported and skipped",
                    a.chat),
      flag::string({"--system"}, "TEXT", "system message for --chat or --tools", a.system),
  };
  constexpr std::size_t kMaxCount = 1000000000;  // -n, --top-k, --repeat-last-n
  const std::vector<flag> generation{
      flag::number<std::size_t>({"-n", "--max-tokens", "--n-predict"}, "N",
                                "most tokens to generate; -1 = until the end of the text or a\n"
                                "full context",
                                a.max_tokens, 1, kMaxCount)
          .also_accepts("-1", [&a] { a.max_tokens = kNoTokenLimit; }),
      flag::custom({"--greedy"}, "", "always the most probable token (same as --temperature 0)",
                   [&a](std::string_view) {
                     a.sampling.temperature = 0.0f;
                     return std::string();
                   }),
      flag::real({"--temp", "--temperature"}, "T", "sampling temperature; 0 = greedy",
                 a.sampling.temperature, 0, 1e6),
      flag::number<std::size_t>({"--top-k"}, "K", "keep the K most probable tokens; 0 = off",
                                a.sampling.top_k, 0, kMaxCount),
      flag::real({"--top-p"}, "P", "keep the smallest set of tokens with probability mass >= P",
                 a.sampling.top_p, 1e-9, 1),
      flag::real({"--min-p"}, "P", "drop tokens less probable than P x the most probable; 0 = off",
                 a.sampling.min_p, 0, 0.999999),
      flag::real({"--repeat-penalty"}, "R",
                 "divide (or multiply, if negative) the logits of recent tokens",
                 a.sampling.repetition_penalty, 1e-6, 1e6),
      flag::number<std::size_t>({"--repeat-last-n"}, "N",
                                "how many recent tokens the penalty looks at; 0 = all",
                                a.sampling.penalty_last_n, 0, kMaxCount),
      flag::number<std::uint64_t>({"-s", "--seed"}, "S",
                                  "random seed: the same seed gives the same text; -1 = a\n"
                                  "random seed, printed on stderr (\"seed: N\") unless --quiet",
                                  a.sampling.seed, 0, std::numeric_limits<std::uint64_t>::max())
          .on_set([&a] { a.random_seed = false; })
          .also_accepts("-1", [&a] { a.random_seed = true; }),
      flag::strings({"--stop"}, "STRING",
                    "stop before this text (repeatable); the model's eos ids always stop", a.stops)
          .non_empty(),
      flag::boolean({"--ignore-eos"}, "do not stop at the model's eos ids", a.ignore_eos),
  };
  const std::vector<flag> speculative{
      flag::string({"--draft"}, "DIR|lookup",
                   "a draft model (same tokenizer as --model) proposes tokens that the model\n"
                   "verifies in one batched forward; `lookup` drafts by n-gram lookup in the\n"
                   "prompt and the text so far. The output distribution is the model's own\n"
                   "(greedy: the same tokens as without --draft)",
                   a.draft)
          .non_empty(),
      flag::number<std::size_t>({"-k"}, "N", "tokens drafted per step", a.k, 1, 32),
      flag::boolean({"--adaptive"},
                    "choose k each step from measured acceptance and costs, and stop\n"
                    "drafting when it does not pay",
                    a.adaptive),
  };
  // One constraint at most: a second kind is a usage error naming both flags.
  const auto constrain_by = [&a](std::string_view name, constrain::ConstraintKind kind) {
    return [&a, name, kind](std::string_view v) -> std::string {
      if (!a.constraint_flag.empty() && a.constraint_flag != name)
        return fmt::format("{} and {} both constrain the output: choose one", a.constraint_flag,
                           name);
      a.constraint_flag = std::string(name);
      a.constraint_spec.kind = kind;
      if (kind == constrain::ConstraintKind::choices) {
        if (v.empty()) return "an empty choice";
        a.constraint_spec.choices.emplace_back(v);
      } else {
        a.constraint_arg = std::string(v);
      }
      return std::string();
    };
  };
  const std::vector<flag> constraint{
      flag::custom({"--json"}, "", "the output is one JSON value (RFC 8259)",
                   constrain_by("--json", constrain::ConstraintKind::json)),
      flag::custom({"--json-schema", "-j"}, "FILE|JSON",
                   "the output is a JSON text valid against this JSON Schema (a file, or\n"
                   "the schema itself when it starts with '{')",
                   constrain_by("--json-schema", constrain::ConstraintKind::json_schema)),
      flag::custom({"--grammar", "--grammar-file"}, "FILE|GBNF",
                   "the output is a sentence of this GBNF grammar (llama.cpp's format; a\n"
                   "file, or the grammar itself when it contains \"::=\")",
                   constrain_by("--grammar", constrain::ConstraintKind::grammar)),
      flag::custom({"--regex"}, "PATTERN", "the output is a whole match of this regular expression",
                   constrain_by("--regex", constrain::ConstraintKind::regex)),
      flag::custom({"--choice"}, "TEXT", "the output is one of these texts (repeatable)",
                   constrain_by("--choice", constrain::ConstraintKind::choices)),
      flag::boolean({"--print-grammar"},
                    "print the GBNF grammar the constraint compiles to, and exit", a.print_grammar),
      flag::string({"--tools"}, "FILE",
                   "tool calls: FILE holds OpenAI's tools array. The prompt (-p/-f) is a user\n"
                   "message (after the --system message, if given) rendered with the\n"
                   "checkpoint's chat_template and its `tools`; a call the model opens is\n"
                   "held to the tool's `parameters` schema (Qwen <tool_call>, Llama 3.1/3.2\n"
                   "JSON, Mistral [TOOL_CALLS], told from the template). stdout is one JSON\n"
                   "line: {\"text\": ..., \"tool_calls\": [{\"name\": ..., \"arguments\":\n"
                   "{...}}]}. A checkpoint without a chat_template, or one whose template\n"
                   "shows no tool calls, is refused",
                   a.tools_file)
          .non_empty(),
      flag::string({"--tool-choice"}, "auto|none|required|NAME",
                   "with --tools: auto (text or calls, the model decides), none (no\n"
                   "constraint; the reply is all text), required (only calls) or the\n"
                   "function NAME (one call of it)",
                   a.tool_choice)
          .non_empty()
          .shows_default("auto"),
  };
  const std::vector<flag> output{
      flag::boolean({"--print-ids"}, "print the generated token ids as a JSON list instead of text",
                    a.print_ids),
      flag::boolean({"--no-display-prompt"},
                    "do not echo the prompt to stdout before the generated text", a.display_prompt,
                    false),
      flag::boolean({"--quiet"},
                    "only the text (and errors, warnings) on stderr: no loading progress,\n"
                    "no load, defaults or statistics lines. The progress is a bar with an\n"
                    "ETA when stderr is a terminal, else one line per 10 %",
                    a.quiet),
  };
  const tools::Help help{kHead,
                         {{"model:", &model},
                          {"prompt:", &prompt},
                          {kGenerationHeading, &generation},
                          {"speculative decoding:", &speculative},
                          {kConstraintHeading, &constraint},
                          {"output:", &output}},
                         kTail,
                         22};
  if (const auto rc = tools::parse_command_line(kProg, argc, argv, help, [&a](const flag& f) {
        a.given.insert(a.given.end(), f.names.begin(), f.names.end());
      }))
    return rc;  // --help, --version or a usage error
  if (a.chat && a.have_prompt_ids) return usage_error("--chat and --prompt-ids cannot be combined");
  if (!a.constraint_flag.empty() && a.chat)
    return usage_error(a.constraint_flag + ": not with --chat (constrain a single generation)");
  if (!a.tools_file.empty()) {
    if (!a.constraint_flag.empty())
      return usage_error("--tools and " + a.constraint_flag + " both constrain the output: choose one");
    if (a.chat || a.have_prompt_ids || a.print_ids || !a.prompt_cache.empty())
      return usage_error(std::string("--tools: not with ") +
                         (a.chat ? "--chat (one user message: -p or -f)"
                          : a.have_prompt_ids ? "--prompt-ids (the prompt is a user message: -p or -f)"
                          : a.print_ids ? "--print-ids (stdout is the JSON reply)"
                                        : "--prompt-cache"));
  } else if (a.was_given("--tool-choice")) {
    return usage_error("--tool-choice: only with --tools");
  }
  if (a.print_grammar && a.constraint_flag.empty() && a.tools_file.empty())
    return usage_error("--print-grammar: give the constraint (--json-schema, --grammar, --regex, "
                       "--choice or --tools)");
  // Each source of the prompt excludes the others: none is quietly ignored.
  if (a.was_given("--prompt") && (a.have_prompt_ids || !a.prompt_file.empty() || a.chat)) {
    return usage_error(std::string("--prompt and ") +
                       (a.have_prompt_ids ? "--prompt-ids"
                        : a.chat          ? "--chat (its messages come from stdin)"
                                          : "--file") +
                       " both give the prompt: choose one");
  }
  if (a.was_given("--system") && !a.chat && a.tools_file.empty())
    return usage_error("--system: only with --chat/-i or --tools (a plain prompt has no system "
                       "message)");
  if (!a.prompt_file.empty() && (a.chat || a.have_prompt_ids))
    return usage_error("--file gives the prompt: not with --chat or --prompt-ids");
  if (a.chat && !a.prompt_cache.empty())
    return usage_error("--prompt-cache is not supported with --chat");
  if (!a.draft.empty() && !a.prompt_cache.empty())
    return usage_error("--prompt-cache is not supported with --draft");
  if (a.force && (a.packed_cache.empty() || a.packed_cache == "auto"))
    return usage_error("--force: only with --packed-cache FILE (an `auto` cache is ours anyway)");
  if (a.memory_budget && a.backend == tools::BackendKind::vulkan)
    return usage_error(
        "--memory-budget plans host memory: CPU backend only; drop --backend vulkan");
  if (a.backend == tools::BackendKind::vulkan) {
    if (a.fp32_reference)
      return usage_error("--fp32-reference runs on the CPU only; drop --backend vulkan");
  } else if (a.device) {
    return usage_error("--device: applies to --backend vulkan only");
  } else if (a.vk_gemv) {
    return usage_error("--vk-gemv: applies to --backend vulkan only");
  }
  return std::nullopt;
}

// The checkpoint's generation_config.json sampling defaults, where no flag chose otherwise
// (--temperature/--temp/--greedy, --top-k, --top-p, --min-p, --repeat-penalty); do_sample false
// means greedy. Its eos ids already stop generation (the Engine reads them). Returns the line
// that says what was applied, empty when the file sets nothing.
std::string apply_generation_config(const model::GenerationConfig& g, Args& a) {
  std::vector<std::string> applied, overridden;
  const auto take = [&](const char* key, const char* flag, const auto& value, auto& target,
                        const std::string& text) {
    if (!value) return;
    if (a.was_given(flag) || (std::string_view(flag) == "--temperature" && a.was_given("--greedy"))) {
      overridden.push_back(fmt::format("{} (by {})", key, flag));
      return;
    }
    target = *value;
    applied.push_back(text.empty() ? std::string(key) : fmt::format("{} {}", key, text));
  };
  const auto real = [](const std::optional<float>& x) { return x ? fmt::format("{}", *x) : ""; };
  if (g.do_sample == false) {
    const std::optional<float> zero = 0.0f;
    take("do_sample false (greedy)", "--temperature", zero, a.sampling.temperature, "");
  } else {
    take("temperature", "--temperature", g.temperature, a.sampling.temperature, real(g.temperature));
  }
  take("top_k", "--top-k", g.top_k, a.sampling.top_k, g.top_k ? std::to_string(*g.top_k) : "");
  take("top_p", "--top-p", g.top_p, a.sampling.top_p, real(g.top_p));
  take("min_p", "--min-p", g.min_p, a.sampling.min_p, real(g.min_p));
  take("repetition_penalty", "--repeat-penalty", g.repetition_penalty,
       a.sampling.repetition_penalty, real(g.repetition_penalty));
  if (!g.eos_token_ids.empty()) {
    std::string ids;
    for (const std::int32_t id : g.eos_token_ids) ids += fmt::format("{}{}", ids.empty() ? "" : ",", id);
    applied.push_back(a.ignore_eos ? "eos " + ids + " (ignored: --ignore-eos)" : "eos " + ids);
  }
  if (applied.empty() && overridden.empty()) return {};
  const auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& x : v) out += (out.empty() ? "" : ", ") + x;
    return out;
  };
  std::string line = "generation defaults from " + g.source + ": " +
                     (applied.empty() ? std::string("none applied") : join(applied));
  if (!overridden.empty()) line += "; flags chose " + join(overridden);
  return line;
}

// The bundled model: next to the current directory, else relative to the executable
// (build/<preset>/bin/ -> repository root), else the source tree this binary was built from.
std::string default_model_dir(const char* argv0) {
  const std::string rel = "models/kjv-target-awq";
  std::vector<fs::path> candidates = {fs::path(rel)};
  std::error_code ec;
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / "../../.." / rel);
  (void)argv0;
#ifdef EDGELLM_SOURCE_DIR
  candidates.push_back(fs::path(EDGELLM_SOURCE_DIR) / rel);
#endif
  for (const auto& c : candidates)
    if (fs::is_directory(c, ec)) return fs::weakly_canonical(c, ec).string();
  return rel;  // does not exist: the loader names it in its error
}

// What the command line and the prompt can get wrong, checked before the weights are read (a 7B
// load takes a minute): --context against config.json, the prompt encoded by the tokenizer alone
// (milliseconds) and its length against the context, --prompt-ids against vocab_size, --system,
// the --prompt-cache path. Fills a.prompt_tokens (not in chat mode). Returns 0 to go on, else
// the exit status (the message printed).
int check_before_load(Args& a) {
  const auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "edgellm-generate: %s\n", msg.c_str());
    return 1;
  };
  std::error_code ec;
  if (!fs::is_directory(a.model, ec)) return 0;  // Engine::load says so
  auto cfg = model::load_model_config(a.model);
  if (!cfg) return fail(cfg.error().message);
  if (const std::string why =
          cli::check_context("--context", std::to_string(a.context), a.context,
                               cfg->max_position_embeddings, a.force_context);
      !why.empty()) {
    return usage_error(why);
  }
  if (!a.prompt_cache.empty()) {
    if (auto st = decode::check_prompt_cache_path(a.prompt_cache); !st)
      return fail("--prompt-cache: " + st.error().message);
  }
  auto tokenizer = model::Tokenizer::load(a.model);
  if (!tokenizer) return fail(tokenizer.error().message);
  if (a.chat) {
    auto ids = tokenizer->encode(a.system);
    if (!ids) return fail("--system: " + ids.error().message);
    return 0;
  }
  const std::string_view flag = a.have_prompt_ids        ? "--prompt-ids"
                                : a.prompt_file.empty() ? "--prompt"
                                                         : "--file";
  if (a.have_prompt_ids) {
    for (std::size_t i = 0; i < a.prompt_ids.size(); ++i) {
      const std::int32_t id = a.prompt_ids[i];
      if (id < 0 || static_cast<std::size_t>(id) >= cfg->vocab_size) {
        return fail(fmt::format("--prompt-ids: id {} (item {}) is out of range: the model's "
                                "vocab_size is {}",
                                id, i + 1, cfg->vocab_size));
      }
    }
    a.prompt_tokens = a.prompt_ids;
  } else {
    if (a.prompt.empty())
      return fail(fmt::format("{}: empty (give some text or --prompt-ids)", flag));
    auto ids = tokenizer->encode(a.prompt, {.add_special = true, .parse_special = false});
    if (!ids) return fail(fmt::format("{}: {}", flag, ids.error().message));
    if (ids->empty()) return fail(fmt::format("{}: encodes to no tokens", flag));
    a.prompt_tokens = std::move(*ids);
  }
  const std::size_t context = Session::context_size_for(*cfg, a.context);
  if (a.prompt_tokens.size() > context) {
    return fail(fmt::format("{}: {} tokens do not fit the context of {} (raise --context)", flag,
                            a.prompt_tokens.size(), context));
  }
  return 0;
}

// Reads the constraint's argument (a file unless it is the text itself) and compiles it into
// a.constraint; errors name the flag.
status compile_constraint(Args& a) {
  using constrain::ConstraintKind;
  const ConstraintKind kind = a.constraint_spec.kind;
  const std::string& arg = a.constraint_arg;
  const bool inline_text =
      (kind == ConstraintKind::json_schema && (arg.starts_with('{') || arg == "true")) ||
      (kind == ConstraintKind::grammar && arg.find("::=") != std::string::npos) ||
      kind == ConstraintKind::regex;
  if (kind == ConstraintKind::json_schema || kind == ConstraintKind::grammar) {
    if (inline_text) {
      a.constraint_spec.source = arg;
    } else {
      auto text = io::read_text_file(arg, std::size_t{16} << 20);
      if (!text) return error{errc::io_error, a.constraint_flag + ": " + text.error().message};
      a.constraint_spec.source = std::move(*text);
    }
  } else if (kind == ConstraintKind::regex) {
    a.constraint_spec.source = arg;
  }
  auto c = constrain::Constraint::compile(a.constraint_spec);
  if (!c) return error{c.error().code, a.constraint_flag + ": " + c.error().message};
  a.constraint = std::move(*c);
  return {};
}

// --tools, before the weights are loaded: the tools array, the checkpoint's chat template and
// its call format, the conversation rendered with the tools, and the call grammar (unless
// --tool-choice none). Errors name the flag.
status read_tools(Args& a) {
  const auto err = [](errc code, const std::string& msg) { return error{code, "--tools: " + msg}; };
  auto text = io::read_text_file(a.tools_file, std::size_t{16} << 20);
  if (!text) return err(errc::io_error, text.error().message);
  auto doc = io::json::parse(*text, a.tools_file);
  if (!doc) return err(doc.error().code, doc.error().message);
  auto tools = constrain::parse_tools(*doc);
  if (!tools) return err(tools.error().code, tools.error().message);
  if (tools->empty()) return err(errc::invalid_argument, a.tools_file + ": the tools array is empty");
  auto found = model::ChatTemplate::find(a.model);
  if (!found) return err(found.error().code, "chat template: " + found.error().message);
  if (!*found)
    return err(errc::invalid_argument,
               a.model + " has no chat_template in tokenizer_config.json: tool calls need the "
               "checkpoint's own template (it renders the tools and says the call format)");
  const auto format = constrain::detect_tool_call_format((*found)->source());
  if (!format)
    return err(errc::unsupported,
               "the chat template of " + a.model + " shows no tool calls (Qwen <tool_call>, Llama "
               "3.1/3.2 JSON with \"parameters\", Mistral [TOOL_CALLS])");
  io::json::Array messages;
  const auto message = [&messages](const char* role, const std::string& content) {
    io::json::Object m;
    m.append("role", role);
    m.append("content", content);
    messages.emplace_back(std::move(m));
  };
  if (!a.system.empty()) message("system", a.system);
  message("user", a.prompt);
  model::ChatRenderOptions ro;
  ro.variables.emplace_back("tools", *doc);
  auto rendered = (*found)->render_json(io::json::Value(std::move(messages)), ro);
  if (!rendered) return err(rendered.error().code, rendered.error().message);
  const constrain::ToolChoice choice = constrain::parse_tool_choice(a.tool_choice);
  if (choice.mode != constrain::ToolChoice::Mode::none) {
    auto g = constrain::ToolCallGrammar::compile(*tools, {.format = *format, .choice = choice});
    if (!g) return err(g.error().code, g.error().message);
    a.tools_grammar = std::move(*g);
  }
  a.tools_json = std::move(*doc);
  a.tools_template = std::move(**found);
  a.tools_format = *format;
  a.tools_prompt = std::move(*rendered);
  return {};
}

// The prefill rate counts the prefilled tokens only (the cached ones cost nothing).
void print_stats(const decode::GenerateStats& s) {
  std::fprintf(stderr,
               "\n[%zu prompt tokens (%zu cached, %zu prefilled), %zu generated; stop: %s]\n"
               "time to first token %.1f ms | prefill %.1f tok/s | decode %.1f tok/s | "
               "peak memory %.1f MB\n",
               s.prompt_tokens, s.cached_tokens, s.prefilled_tokens(), s.new_tokens,
               decode::to_string(s.stop),
               s.time_to_first_token_s * 1e3, s.prefill_tok_s(), s.decode_tok_s(),
               static_cast<double>(edgellm::io::peak_rss_bytes()) / 1e6);
}

// Sums `s` into `total` (an answer made of several calls, a whole chat); the time to first
// token and the stop reason are the first call's and the last call's.
void add_stats(decode::GenerateStats& total, const decode::GenerateStats& s, bool first) {
  if (first) total.time_to_first_token_s = s.time_to_first_token_s;
  total.prompt_tokens += s.prompt_tokens;
  total.cached_tokens += s.cached_tokens;
  total.new_tokens += s.new_tokens;
  total.prefill_s += s.prefill_s;
  total.decode_s += s.decode_s;
  total.stop = s.stop;
}

// The end of a chat: its answers and the tokens of all of them.
void print_chat_totals(std::size_t answers, const decode::GenerateStats& t) {
  std::fprintf(stderr,
               "[chat ended: %zu answer%s; %zu prompt tokens (%zu cached, %zu prefilled), %zu new "
               "tokens]\nprefill %.1f tok/s | decode %.1f tok/s | peak memory %.1f MB\n",
               answers, answers == 1 ? "" : "s", t.prompt_tokens, t.cached_tokens,
               t.prefilled_tokens(), t.new_tokens, t.prefill_tok_s(), t.decode_tok_s(),
               static_cast<double>(edgellm::io::peak_rss_bytes()) / 1e6);
}

// Set by SIGINT during --chat, and nothing else is done in the handler: the token callback
// stops the answer; at the prompt StdinLines sees it and the chat ends.
volatile std::sig_atomic_t g_interrupted = 0;

void on_sigint(int) { g_interrupted = 1; }

// --chat's Ctrl-C, with SA_RESTART so that a write to stdout is not cut short.
void catch_sigint() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
}

// stdin line by line through read(2), with its own buffer so that a wait happens only when no
// whole line is buffered. The wait is ppoll with SIGINT blocked outside it: a Ctrl-C that comes
// just before the wait is not lost (a blocking read would sleep through it).
class StdinLines {
 public:
  enum class Got { line, end, interrupted };

  Got next(std::string& line) {
    for (;;) {
      if (const std::size_t nl = pending_.find('\n'); nl != std::string::npos) {
        line.assign(pending_, 0, nl);
        pending_.erase(0, nl + 1);
        return Got::line;
      }
      if (end_) {
        if (pending_.empty()) return Got::end;
        line = std::exchange(pending_, {});  // a last line without its newline
        return Got::line;
      }
      if (!wait_readable()) return Got::interrupted;
      char buf[4096];
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n > 0) {
        pending_.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        end_ = true;  // end of input, or a read error: the chat ends as at Ctrl-D
      }
    }
  }

 private:
  // False once SIGINT came (now or before); true when stdin is readable (or in error).
  static bool wait_readable() {
    sigset_t sigint, old;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigint, &old);
    bool readable = false;
    while (g_interrupted == 0 && !readable) {
      pollfd p{STDIN_FILENO, POLLIN, 0};
#if defined(__linux__)
      const int rc = ::ppoll(&p, 1, nullptr, &old);  // SIGINT unblocked only while waiting
#else
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      const int rc = ::poll(&p, 1, 100);  // elsewhere: look at the flag every 100 ms
      pthread_sigmask(SIG_BLOCK, &sigint, nullptr);
#endif
      readable = rc > 0 || (rc < 0 && errno != EINTR);
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return g_interrupted == 0;
  }

  std::string pending_;  // bytes read past the last line returned
  bool end_ = false;
};

// Runs the prompt (or the chat on stdin) in `session`; returns the exit status.
int run(const Args& a, Session& session) {
  const auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "edgellm-generate: %s\n", msg.c_str());
    return 1;
  };
  const model::Tokenizer& tokenizer = *session.engine()->tokenizer();
  // With --prompt-cache FILE, the session starts from FILE's state (its tokens are "held").
  std::vector<std::int32_t> cached;
  if (!a.prompt_cache.empty() && fs::exists(a.prompt_cache)) {
    const auto t0 = std::chrono::steady_clock::now();
    auto held = session.load_prompt_cache(a.prompt_cache);
    // A prompt cache of ours that does not fit (another model, KV type or context; damaged) is
    // rebuilt with a warning, as the packed cache is; a file that is not ours stays fatal.
    if (!held) {
      if (auto ours = decode::check_prompt_cache_path(a.prompt_cache); !ours)
        return fail("--prompt-cache: " + held.error().message);
      std::fprintf(stderr, "edgellm-generate: warning: --prompt-cache: %s; rebuilding it\n",
                   held.error().message.c_str());
    } else {
      cached = std::move(*held);
      const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - t0;
      if (!a.quiet)
        std::fprintf(stderr, "prompt cache: %zu tokens from %s in %.1f ms\n", cached.size(),
                     a.prompt_cache.c_str(), took.count());
    }
  }

  GenerateOptions go;
  go.max_new_tokens = a.max_tokens;
  go.stop_strings = a.stops;
  go.ignore_eos = a.ignore_eos;
  // Each piece is flushed at once; a failed write (stdout closed or full) stops generating.
  bool lost_output = false;
  int lost_errno = 0;
  const auto stream = [&](std::string_view piece, std::int32_t) {
    if (std::fwrite(piece.data(), 1, piece.size(), stdout) != piece.size() ||
        std::fflush(stdout) != 0) {
      lost_errno = errno;
      lost_output = true;
    }
    return !lost_output;
  };
  const auto output_lost = [&] {
    return cli::finish_stdout("edgellm-generate", lost_output ? 1 : 0, lost_errno) != 0;
  };

  if (!a.chat) {
    const std::vector<std::int32_t>& prompt = a.prompt_tokens;  // check_before_load's
    // Refused before anything reaches stdout (the prompt is echoed first); check_before_load
    // did so already for the context the session was asked for.
    if (prompt.size() > session.context_size()) {
      return fail(fmt::format("--prompt: {} tokens do not fit the context of {} (raise --context)",
                              prompt.size(), session.context_size()));
    }
    std::unique_ptr<constrain::DocumentConstraint> constraint;
    if (a.constraint) {  // the stop ids: the model's eos ones (unless ignored)
      auto trie = constrain::TokenTrie::build(tokenizer, session.engine()->config().vocab_size);
      if (!trie) return fail(a.constraint_flag + ": " + trie.error().message);
      std::vector<std::int32_t> stops(session.engine()->eos_ids().begin(),
                                      session.engine()->eos_ids().end());
      if (a.ignore_eos || stops.empty())
        return fail(a.constraint_flag + ": needs the model's eos ids to end the document "
                    "(not with --ignore-eos)");
      auto c = a.constraint->start(std::move(*trie), std::move(stops), prompt.size(),
                                   a.max_tokens == kNoTokenLimit ? 0 : a.max_tokens);
      if (!c) return fail(a.constraint_flag + ": " + c.error().message);
      constraint = std::move(*c);
      go.logits_processor = constraint.get();
    }
    if (!a.print_ids && !a.have_prompt_ids && a.display_prompt) stream(a.prompt, -1);
    if (lost_output) return output_lost(), 1;
    auto out = session.generate(std::span<const std::int32_t>(prompt), go,
                                a.print_ids ? TokenCallback() : TokenCallback(stream));
    if (lost_output) return output_lost(), 1;
    if (!out) return fail(out.error().message);
    if (constraint) {
      // The document is whole when the generation ended at a stop id the constraint let by.
      const bool whole = out->stats.stop == decode::StopReason::eos;
      if (!whole)
        std::fprintf(stderr, "edgellm-generate: warning: %s: the output is not a whole document "
                     "(stop: %s)\n", a.constraint_flag.c_str(), decode::to_string(out->stats.stop));
      else if (constraint->forced() && !a.quiet)
        std::fprintf(stderr, "%s: the token budget overrode the model's choice to close the "
                     "document in time\n", a.constraint_flag.c_str());
    }
    if (!a.prompt_cache.empty() && cached != prompt) {
      // The answer was produced: a cache that cannot be saved is a warning (exit 0), as a
      // packed cache that cannot be written is.
      if (auto st = session.save_prompt_cache(a.prompt_cache); !st) {
        std::fprintf(stderr, "edgellm-generate: warning: --prompt-cache: %s; not saved\n",
                     st.error().message.c_str());
      } else if (!a.quiet) {
        std::fprintf(stderr, "prompt cache: saved %zu tokens to %s\n", prompt.size(),
                     a.prompt_cache.c_str());
      }
    }
    if (a.print_ids) {
      std::string json = "[";
      for (std::size_t i = 0; i < out->tokens.size(); ++i)
        json += fmt::format("{}{}", i ? ", " : "", out->tokens[i]);
      std::printf("%s]\n", json.c_str());
    } else {
      std::printf("\n");
    }
    if (output_lost()) return 1;
    if (!a.quiet) print_stats(out->stats);
    return 0;
  }

  // Chat: the whole conversation is re-encoded each turn; the session reuses the cached prefix.
  // The checkpoint's chat_template renders it (its bos_token is part of the text, so the
  // tokenizer adds none, as transformers' apply_chat_template); ChatML when there is none.
  auto found = model::ChatTemplate::find(a.model);
  if (!found) return fail("chat template: " + found.error().message);
  std::optional<model::ChatTemplate> chat_template = std::move(*found);
  if (!chat_template) {
    std::fprintf(stderr, "warning: %s has no chat_template in tokenizer_config.json; using ChatML\n",
                 a.model.c_str());
    auto chatml = model::ChatTemplate::chatml();
    if (!chatml) return fail("chat template: " + chatml.error().message);
    chat_template = std::move(*chatml);
  } else {
    go.add_special = false;
    if (const auto& eos = chat_template->eos_token())
      if (auto id = tokenizer.token_to_id(*eos)) go.stop_ids.push_back(*id);
  }
  std::vector<model::ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  if (auto im_end = tokenizer.token_to_id("<|im_end|>")) go.stop_ids.push_back(*im_end);
  go.parse_special = true;
  const std::size_t kept = messages.size();  // the system message, which /reset keeps
  const bool prompt_user = !a.quiet && ::isatty(STDIN_FILENO) == 1;  // not for piped input
  // The conversation as token ids, `reply` (an answer so far) after its generation prompt.
  const auto encode_chat = [&](const std::string& reply) -> result<std::vector<std::int32_t>> {
    auto text = chat_template->render(messages);
    if (!text) return text.error();
    return tokenizer.encode(*text + reply, {.add_special = go.add_special, .parse_special = true});
  };
  const std::size_t context = session.context_size();
  std::size_t answers = 0, line_no = 0;
  decode::GenerateStats totals;
  std::string line;
  StdinLines stdin_lines;
  catch_sigint();
  for (;;) {
    if (g_interrupted != 0) break;  // Ctrl-C between an answer and the prompt
    if (prompt_user) std::fprintf(stderr, "> ");
    const StdinLines::Got got = stdin_lines.next(line);
    if (got != StdinLines::Got::line) {  // end of input (Ctrl-D), or Ctrl-C
      if (got == StdinLines::Got::interrupted && prompt_user) std::fputc('\n', stderr);
      break;
    }
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (const std::size_t bad = edgellm::detail::unicode::find_invalid_utf8(line);
        bad != std::string::npos) {
      std::fprintf(stderr,
                   "edgellm-generate: input line %zu: not valid UTF-8 (byte %zu); skipped\n",
                   line_no, bad + 1);
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line == "/exit") break;
    if (line == "/reset") {
      if (auto st = session.reset(); !st) return fail("/reset: " + st.error().message);
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(kept), messages.end());
      if (!a.quiet) std::fprintf(stderr, "(conversation reset)\n");
      continue;
    }
    messages.push_back({"user", line});
    // One answer: generated in one call, or, when the context fills, continued after the oldest
    // turns are dropped (each time the whole conversation is re-rendered; the session keeps
    // the common prefix, at least the system message).
    std::string reply;
    decode::GenerateStats answer;
    bool started = false, done = false, skipped = false;
    while (!done) {
      const std::size_t budget =
          a.max_tokens == kNoTokenLimit ? kNoTokenLimit : a.max_tokens - answer.new_tokens;
      if (budget == 0) break;
      // Room for the answer: its budget, at most a quarter of the context.
      const std::size_t room = std::min(budget, std::max<std::size_t>(context / 4, 1));
      auto ids = encode_chat(reply);
      if (!ids) return fail(ids.error().message);
      std::size_t dropped = 0;
      // The oldest turn: its user message and the answer after it (never the current message).
      while ((started && dropped == 0) || ids->size() + room > context) {
        if (messages.size() <= kept + 1) break;
        auto first = messages.begin() + static_cast<std::ptrdiff_t>(kept);
        const bool with_answer = messages.size() > kept + 2 && first[1].role == "assistant";
        messages.erase(first, first + (with_answer ? 2 : 1));
        ++dropped;
        ids = encode_chat(reply);
        if (!ids) return fail(ids.error().message);
      }
      if (dropped > 0 && !a.quiet) {
        std::fprintf(stderr, "%scontext full: dropped the oldest %zu turn%s\n",
                     started ? "\n" : "", dropped, dropped == 1 ? "" : "s");
      }
      if (ids->size() >= context) {  // nothing left to drop
        if (started) break;          // the answer ends here, the next turn drops it
        std::fprintf(stderr,
                     "edgellm-generate: input line %zu: %zu tokens (in the chat template, with "
                     "any --system message) do not fit the context of %zu (raise --context); "
                     "skipped\n",
                     line_no, ids->size(), context);
        messages.pop_back();
        skipped = true;
        break;
      }
      GenerateOptions turn = go;
      turn.max_new_tokens = budget;
      auto out = session.generate(std::span<const std::int32_t>(*ids), turn,
                                  [&](std::string_view piece, std::int32_t token) {
                                    if (g_interrupted != 0) return false;  // Ctrl-C: stop here
                                    reply += piece;
                                    return stream(piece, token);
                                  });
      if (lost_output) return output_lost(), 1;
      if (!out) return fail(out.error().message);
      add_stats(answer, out->stats, !started);
      started = true;
      // A full context goes on after dropping turns, while there are any to drop.
      done = out->stats.stop != decode::StopReason::context_full || messages.size() <= kept + 1;
    }
    if (skipped) continue;
    std::printf("\n");
    if (output_lost()) return 1;
    ++answers;
    add_stats(totals, answer, answers == 1);
    if (!a.quiet) print_stats(answer);
    messages.push_back({"assistant", reply});  // an answer stopped by Ctrl-C too
    if (g_interrupted != 0) {  // stopped this answer: the next Ctrl-C ends the chat
      g_interrupted = 0;
      if (!a.quiet) std::fprintf(stderr, "(stopped; Ctrl-C at the prompt ends the chat)\n");
    }
  }
  if (!a.quiet) print_chat_totals(answers, totals);
  return 0;
}

// --tools: the reply to the conversation read_tools() rendered, its calls held to the tools'
// schemas from the moment one opens (--tool-choice auto) or from the first token (required,
// NAME), printed as one JSON line: the text and the calls apart. Returns the exit status.
int run_tools(const Args& a, Session& session) {
  const auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "edgellm-generate: --tools: %s\n", msg.c_str());
    return 1;
  };
  const model::Tokenizer& tokenizer = *session.engine()->tokenizer();
  // The template writes its bos_token itself, as --chat's does.
  auto prompt = tokenizer.encode(a.tools_prompt, {.add_special = false, .parse_special = true});
  if (!prompt) return fail(prompt.error().message);
  if (prompt->size() >= session.context_size())
    return fail(fmt::format("the conversation with its tools ({} tokens) does not fit the context "
                            "of {} (raise --context)", prompt->size(), session.context_size()));
  GenerateOptions go;
  go.max_new_tokens = a.max_tokens;
  go.stop_strings = a.stops;
  go.ignore_eos = a.ignore_eos;
  if (const auto& eos = a.tools_template->eos_token())
    if (auto id = tokenizer.token_to_id(*eos)) go.stop_ids.push_back(*id);
  if (auto im_end = tokenizer.token_to_id("<|im_end|>")) go.stop_ids.push_back(*im_end);
  std::unique_ptr<constrain::ToolCallConstraint> constraint;
  if (a.tools_grammar) {
    if (a.ignore_eos) return fail("needs the model's eos ids to end a call (not with --ignore-eos)");
    auto trie = constrain::tool_call_trie(tokenizer, session.engine()->config().vocab_size,
                                          a.tools_format);
    if (!trie) return fail(trie.error().message);
    std::vector<std::int32_t> stops(session.engine()->eos_ids().begin(),
                                    session.engine()->eos_ids().end());
    stops.insert(stops.end(), go.stop_ids.begin(), go.stop_ids.end());
    auto c = a.tools_grammar->start(std::move(*trie), std::move(stops), prompt->size(),
                                    a.max_tokens == kNoTokenLimit ? 0 : a.max_tokens);
    if (!c) return fail(c.error().message);
    constraint = std::move(*c);
    go.logits_processor = constraint.get();
  }
  auto out = session.generate(std::span<const std::int32_t>(*prompt), go);
  if (!out) return fail(out.error().message);
  // Markers that are special tokens ([TOOL_CALLS]) stay in the text that is parsed.
  const std::string reply = tokenizer.decode(out->tokens, false);
  constrain::ParsedReply parsed;
  if (a.tools_grammar)
    parsed = constrain::parse_tool_calls(reply, a.tools_format);
  else
    parsed.text = reply;  // --tool-choice none: all text
  if (a.tools_grammar && out->stats.stop != decode::StopReason::eos)
    std::fprintf(stderr, "edgellm-generate: warning: --tools: the reply was cut (stop: %s); a call "
                 "it opened is left in the text\n", decode::to_string(out->stats.stop));
  std::string line = "{\"text\": " + io::json::escape(parsed.text) + ", \"tool_calls\": [";
  for (std::size_t i = 0; i < parsed.calls.size(); ++i)
    line += fmt::format("{}{{\"name\": {}, \"arguments\": {}}}", i ? ", " : "",
                        io::json::escape(parsed.calls[i].name), parsed.calls[i].arguments);
  line += "]}\n";
  const bool written = std::fwrite(line.data(), 1, line.size(), stdout) == line.size();
  if (const int rc = cli::finish_stdout(kProg, 0, written ? 0 : errno); rc != 0) return rc;
  if (!a.quiet) print_stats(out->stats);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const auto rc = parse_args(argc, argv, a)) return *rc;
  const auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "edgellm-generate: %s\n", msg.c_str());
    return 1;
  };
  // A closed stdout (`>&-`) would lose every token, and its descriptor could be reused by a
  // file this program opens: refuse before loading anything.
  if (::fcntl(STDOUT_FILENO, F_GETFD) == -1) return fail("stdout is closed; nothing to write to");
  if (a.model.empty()) a.model = default_model_dir(argv[0]);
  if (!a.prompt_file.empty()) {  // before loading: a wrong path fails at once
    auto text = cli::read_prompt_file(a.prompt_file);
    if (!text) return fail("--file: " + text.error().message);
    a.prompt = std::move(*text);
  }
  // Before loading: a malformed generation_config.json fails at once.
  auto generation = model::load_generation_config(a.model);
  if (!generation) return fail(generation.error().message);
  if (const std::string line = apply_generation_config(*generation, a); !line.empty() && !a.quiet)
    std::fprintf(stderr, "%s\n", line.c_str());
  if (a.random_seed) {  // -s -1: printed, so that the text can be had again with -s N
    std::random_device rd;
    a.sampling.seed = (static_cast<std::uint64_t>(rd()) << 32) | rd();
    if (!a.quiet)
      std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(a.sampling.seed));
  }

  if (!a.constraint_flag.empty()) {  // compiled before anything is loaded: errors come at once
    if (auto st = compile_constraint(a); !st) return fail(st.error().message);
    if (a.print_grammar) {
      std::fputs(a.constraint->gbnf().c_str(), stdout);
      return cli::finish_stdout(kProg, 0, 0);
    }
  }
  if (!a.tools_file.empty() && fs::is_directory(a.model)) {  // read before anything is loaded
    if (auto st = read_tools(a); !st) return fail(st.error().message);
    if (a.print_grammar) {
      if (!a.tools_grammar) return fail("--print-grammar: --tool-choice none has no grammar");
      std::fputs(a.tools_grammar->gbnf().c_str(), stdout);
      return cli::finish_stdout(kProg, 0, 0);
    }
  }
  if (const int rc = check_before_load(a); rc != 0) return rc;

  EngineOptions eo;
  eo.load.fp32_reference = a.fp32_reference;
  eo.load.packed_cache = a.packed_cache;
  eo.load.packed_cache_overwrite = a.force;
  eo.load.allow_extra_tensors = a.allow_extra_tensors;
  const bool on_vulkan = a.backend == tools::BackendKind::vulkan;
  if (on_vulkan) {
    if (const std::string why = tools::vulkan_unavailable(); !why.empty()) return fail(why);
  }
  // The device runs an fp16 lm_head: as stored, unless --lm-head asks otherwise.
  eo.load.lm_head = on_vulkan && !a.lm_head_given ? model::LmHeadFormat::as_stored : a.lm_head;
  eo.lm_head_fallback = !a.lm_head_given;
  eo.threads = a.pin ? 1 : a.threads;
  if (a.memory_budget) {  // choose what no flag fixed, before anything is loaded
    auto bytes = resolve_budget(*a.memory_budget);
    if (!bytes) return fail("--memory-budget: " + bytes.error().message);
    SessionOptions planned;
    planned.kv_type = a.kv_type;
    planned.context_size = a.context;
    PlanOptions po = plan_options(eo, planned);
    if (a.draft == "lookup") {
      po.prompt_lookup = true;
    } else if (!a.draft.empty()) {
      po.draft_dir = a.draft;
      po.draft_load = EngineOptions::draft_of(eo).load;
    }
    po.draft_tokens = a.k;
    BudgetFreedom may;
    may.lm_head = !a.lm_head_given;
    may.kv_type = !a.was_given("--kv-type");
    may.context = !a.was_given("--context");
    auto chosen = choose_within_budget(a.model, po, *bytes, may);
    if (!chosen) return fail("--memory-budget: " + chosen.error().message);
    eo.load.lm_head = chosen->options.load.lm_head;
    a.kv_type = chosen->options.kv_type;
    a.context = chosen->plan.session.context_size;
    if (!a.quiet)
      std::fprintf(stderr, "memory budget: %s\n",
                   chosen->note.empty() ? ("fits as asked (" + mib(chosen->plan.peak_bytes()) +
                                           " of " + mib(*bytes) + ")").c_str()
                                        : chosen->note.c_str());
  }
  cli::ProgressBar progress(a.quiet);
  eo.load.progress = std::ref(progress);
  auto engine = Engine::load(a.model, eo);
  progress.finish();
  if (!engine) return fail(engine.error().message);
  const Engine& e = **engine;
  // A cache neither used nor written is a warning, which --quiet does not hide.
  if (e.packed_cache_failed()) {
    std::fprintf(stderr, "edgellm-generate: warning: packed cache: %s\n",
                 e.packed_cache_note().c_str());
  } else if (!e.packed_cache_note().empty() && !a.quiet) {
    std::fprintf(stderr, "packed cache: %s\n", e.packed_cache_note().c_str());
  }
  if (!a.quiet)
    std::fprintf(stderr, "loaded %s in %.2f s (%.1f MB of weights%s)\n", a.model.c_str(),
               e.load_seconds(), static_cast<double>(e.weights()->owned_bytes()) / 1e6,
               a.fp32_reference ? ", fp32 reference" : "");

  // --pin: this program owns a pool pinned to the performance cores (the calling thread too);
  // otherwise the Engine's pool of --threads threads serves the session.
  std::unique_ptr<ThreadPool> pool;
  if (a.pin) {
    ThreadPoolOptions pool_options;
    pool_options.pin_cpus = edgellm::detail::read_cpu_topology().performance;
    if (auto st = pin_current_thread(pool_options.pin_cpus); !st) return fail(st.error().message);
    auto p = ThreadPool::create(a.threads, pool_options);
    if (!p) return fail(p.error().message);
    pool = std::move(*p);
  }
  SessionOptions so;
  so.kv_type = a.kv_type;
  so.context_size = a.context;
  so.sampling = a.sampling;
  so.speculative.k = a.k;
  so.speculative.adaptive = a.adaptive;
  so.speculative.k_max = std::max<std::size_t>(a.k, so.speculative.k_max);
  if (a.draft == "lookup") {
    so.prompt_lookup = true;
  } else if (!a.draft.empty()) {
    auto draft = Engine::load(a.draft, EngineOptions::draft_of(eo));
    if (!draft) return fail("--draft: " + draft.error().message);
    so.draft = std::move(*draft);
  }
  so.pool = pool.get();  // null: the Engine's pool
  std::shared_ptr<void> vulkan_device;  // outlives the session
  result<Session> session = make_error(errc::unsupported, "edgellm-generate", "no backend");
  if (on_vulkan) {
#if EDGELLM_TOOLS_VULKAN
    tools::VulkanDeviceNote picked;
    session = tools::make_vulkan_session(*engine, so, a.device,
                                         a.vk_gemv.value_or(backend::vk::GemvChoice::automatic),
                                         vulkan_device, picked);
    if (vulkan_device) tools::print_vulkan_device("edgellm-generate", picked, a.quiet);
#endif
  } else {
    session = Session::create(*engine, so);
  }
  if (!session) return fail(session.error().message);
  const int rc = a.tools_file.empty() ? run(a, *session) : run_tools(a, *session);
  if (const decode::SpeculativeStats* st = session->speculative_stats(); st && !a.quiet) {
    const decode::SpeculativeOptions& sp = so.speculative;
    std::fprintf(stderr,
                 "speculative (%s, k %s%zu): %zu drafted, %zu accepted (%.0f%%), %.2f tokens per "
                 "target forward; %.2f s drafting, %.2f s verifying\n",
                 a.draft.c_str(), a.adaptive ? "adaptive up to " : "", sp.adaptive ? sp.k_max : sp.k,
                 st->drafted, st->accepted, 100.0 * st->acceptance_rate(), st->tokens_per_forward(),
                 st->draft_seconds, st->target_seconds);
  }
  return rc;
}
