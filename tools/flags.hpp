// SPDX-License-Identifier: Apache-2.0
// The command line of the edgellm-* tools: each lists its flags in cli::flag tables
// (cli/flags.hpp, as the benches do) and parse_command_line adds -h/--help and --version,
// prints --help generated from the tables, and reports a malformed command line (exit 2); and
// the flags several tools share.
//
// llama.cpp's spellings (llama-cli -m -p -f -n -t -c -s --temp, --ctx-size, --n-predict) are
// extra names of the flags that mean the same, listed in each table, so that --help shows them:
//
//   std::size_t threads = 1;
//   const std::vector<cli::flag> flags{tools::threads_flag(threads, kProg)};
//   if (const auto rc = tools::parse_command_line(kProg, argc, argv, {kHead, {{"", &flags}}}))
//     return *rc;  // --help, --version or a usage error
#pragma once

#include "../cli/common.hpp"
#include "../cli/flags.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/model/lm_head_format.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::tools {

using cli::flag;

/// The exit statuses most tools have, the last lines of their --help.
inline constexpr std::string_view kExitStatus =
    "Exit status: 0 on success, 1 on a runtime error, 2 on a usage error.\n";

/// A tool's --help around its flag tables: `head` (the usage lines and what the tool does,
/// ending in a blank line), each section's heading ("" for none) and flags, a blank line
/// between sections, -h/--help and --version after the last, then a blank line and `tail`.
/// `width`: the column of the flag names (cli::flags_help).
struct Help {
  std::string_view head;
  std::vector<std::pair<std::string_view, const std::vector<flag>*>> sections;
  std::string_view tail = kExitStatus;
  std::size_t width = 20;
};

/// The text of --help: `help`'s parts and `common` (-h/--help, --version).
inline std::string help_text(const Help& help, const std::vector<flag>& common) {
  std::string out(help.head);
  for (std::size_t i = 0; i < help.sections.size(); ++i) {
    const auto& [heading, flags] = help.sections[i];
    if (i != 0) out += '\n';
    if (!heading.empty()) out += fmt::format("{}\n", heading);
    out += cli::flags_help(*flags, help.width);
  }
  out += cli::flags_help(common, help.width);
  if (!help.tail.empty()) out += fmt::format("\n{}", help.tail);
  return out;
}

/// Parses argv against the tables of `help` and -h/--help, --version. Returns nullopt to go on,
/// or the status main() returns: 0 after --help (to stdout) or --version (cli::print_version),
/// 1 when stdout lost either, cli::kUsageExit after a usage error ("PROG: MSG" and the pointer
/// to --help on stderr, naming the flag as written and the value). Either of -h and --version
/// ends the parse: what follows is not read. `seen(f)`, when given, runs after each flag.
inline std::optional<int> parse_command_line(const char* prog, int argc, char** argv,
                                             const Help& help,
                                             const std::function<void(const flag&)>& seen = {}) {
  bool want_help = false, want_version = false;
  const std::vector<flag> common{
      flag::boolean({"-h", "--help"}, "this text", want_help),
      flag::boolean({"--version"},
                    "version, git commit, build flags and the int4 microkernel used here",
                    want_version),
  };
  std::vector<flag> all;  // copies: their targets are bound by reference
  for (const auto& section : help.sections) {
    all.insert(all.end(), section.second->begin(), section.second->end());
  }
  all.insert(all.end(), common.begin(), common.end());
  const std::string why = cli::parse_flags(argc, argv, {&all}, [&](const flag& f) {
    if (seen) seen(f);
    return !want_help && !want_version;
  });
  if (!why.empty()) return cli::usage_error(prog, why);
  if (want_version) return cli::print_version(prog);
  if (want_help) {
    const std::string text = help_text(help, common);
    errno = 0;  // stdio, not fmt::print (which throws): finish_stdout reports a failure
    const bool written = std::fwrite(text.data(), 1, text.size(), stdout) == text.size();
    return cli::finish_stdout(prog, 0, written ? 0 : errno);
  }
  return std::nullopt;
}

/// --lm-head F: f16 (the stored tensor as is), int8 or int4, quantised at load
/// (model::parse_lm_head_format: as_stored, stored and q4 are accepted too).
inline flag lm_head_flag(std::string help, model::LmHeadFormat& target) {
  return flag::custom({"--lm-head"}, "F", std::move(help),
                      [&target](std::string_view v) {
                        const auto f = model::parse_lm_head_format(v);
                        if (!f) return fmt::format("'{}' is not f16, int8 or int4", v);
                        target = *f;
                        return std::string();
                      })
      .shows_default(model::lm_head_format_name(target));
}

/// -t, --threads N: the threads a tool runs its matmuls and attention on, at most
/// cli::flag::thread_count's cap (a warning after "`prog`: " above the hardware threads).
inline flag threads_flag(std::size_t& target, std::string prog,
                         std::string help =
                             "threads for matmuls and attention; at most 4 x the\n"
                             "hardware threads, and 256") {
  return flag::thread_count({"-t", "--threads"}, std::move(help), target, std::move(prog));
}

/// A comma-separated list of token ids (any int32: the model's vocab_size is checked later);
/// replaces `target`.
inline flag token_ids_flag(std::vector<std::string> names, std::string help,
                           std::vector<std::int32_t>& target) {
  return flag::custom(std::move(names), "1,2,3", std::move(help), [&target](std::string_view v) {
    std::vector<std::int32_t> ids;
    for (const std::string_view item : flag::split_list(v)) {
      std::int32_t id = 0;
      if (!cli::parse_number(item, id))
        return fmt::format("'{}' (item {}) is not a token id", item, ids.size() + 1);
      ids.push_back(id);
    }
    target = std::move(ids);
    return std::string();
  });
}

/// --kv-type T: the KV cache's int8, int4, f16 or f32 (cache::parse_kv_type).
inline flag kv_type_flag(std::vector<std::string> names, std::string help, cache::KvType& target) {
  return flag::parsed(std::move(names), "T", std::move(help), target, cache::parse_kv_type)
      .shows_default(cache::kv_type_name(target));
}

}  // namespace edgellm::tools
