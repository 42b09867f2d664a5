// SPDX-License-Identifier: Apache-2.0
// The command line of the edgellm-bench-* programs (included by harness.hpp): the common
// options and the declarative flag table every bench lists its own flags in.
#pragma once

#include <edgellm/detail/cpu_topology.hpp>
#include <edgellm/detail/split.hpp>

#include "../cli/common.hpp"  // --version, as every edgellm-* program prints it
#include "../cli/flags.hpp"   // the flag table
#include "output.hpp"        // output_format

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace edgellm::bench {

// Command line: each bench lists its own flags in a cli::flag table (cli/flags.hpp);
// parse_options adds the common flags below, fills the targets, prints --help generated from the
// tables and rejects a malformed command line naming the flag and the value (exit 2).
//
//   std::size_t n = 64;
//   bench::options opts;
//   bench::parse_options(argc, argv, opts, {
//       bench::flag::number({"-n"}, "N", "generated tokens", n, 1, 1000000),
//   });

using cli::flag;

/// Options every bench understands:
///   -o, --output, --format tsv|json|jsonl|md|csv   output (default tsv; output.hpp)
///   --quick                small sizes and few reps: CI smoke run
///   -t, --threads 1,2,4    thread counts to run (0 = all hardware threads)
///   --reps N               timed repetitions per row
///   --filter REGEX         run only rows whose name matches (std::regex, search semantics)
struct options {
  output_format format = output_format::tsv;
  bool quick = false;
  std::vector<int> threads;  ///< empty: the bench's default
  int reps = 0;              ///< 0: the bench's default
  std::string filter;        ///< empty: every row
  std::optional<std::regex> filter_re;
  std::vector<std::string> given;  ///< the first name of every flag on the command line

  /// True when the row `name` passes --filter.
  bool selected(std::string_view name) const {
    return !filter_re || std::regex_search(name.begin(), name.end(), *filter_re);
  }
  int reps_or(int fallback) const { return reps > 0 ? reps : fallback; }
  std::vector<int> threads_or(std::vector<int> fallback) const {
    return threads.empty() ? std::move(fallback) : threads;
  }
  /// True when the flag whose first name is `name` was on the command line.
  bool was_given(std::string_view name) const {
    return std::find(given.begin(), given.end(), name) != given.end();
  }
};

/// One command-line flag: its spellings, help and how its value lands in a variable. The
/// factories bind the target by reference: it must outlive parse_options.
namespace detail {

// Usage to stderr (stdout carries results only).
inline void print_usage(const char* argv0, std::string_view about, const std::vector<flag>& own,
                        const std::vector<flag>& common) {
  fmt::print(stderr, "usage: {} [flags]\n", argv0);
  if (!about.empty()) fmt::print(stderr, "{}\n", about);
  constexpr std::size_t width = 26;
  if (!own.empty()) {
    fmt::print(stderr, "flags:\n");
    cli::print_flags(stderr, own, width);
  }
  fmt::print(stderr, "common flags:\n");
  cli::print_flags(stderr, common, width);
}

// At exit: results that did not reach stdout (closed, a full disk) make the exit status 1.
inline void check_stdout_at_exit() {
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    const int err = errno;
    std::fprintf(stderr, "error writing the results to stdout: %s\n",
                 err != 0 ? std::strerror(err) : "write failed");
    std::_Exit(1);
  }
}

[[noreturn]] inline void usage_error(const char* argv0, const std::string& why) {
  fmt::print(stderr, "{}: {}\n{}: --help lists the flags\n", argv0, why, argv0);
  std::exit(2);
}

}  // namespace detail

/// Parses the command line into `o` (the common options) and the targets of `flags` (the
/// bench's own; none may reuse a common flag's name, except -t: a bench may list its own -t to
/// show its default). --help prints the flags with their defaults to stderr and exits 0;
/// --version prints what every edgellm-* tool prints (cli/common.hpp) to stdout and exits 0; an
/// unknown flag, a missing value or a bad one prints what is wrong, naming the flag and the
/// value, and exits 2. `about` is one line for --help.
inline void parse_options(int argc, char** argv, options& o, std::vector<flag> flags,
                          std::string_view about = {}) {
  const char* argv0 = argc > 0 ? argv[0] : "bench";
  std::atexit(detail::check_stdout_at_exit);
  bool help = false, version = false;
  const auto bench_has = [&flags](std::string_view name) {
    for (const flag& f : flags)
      if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) return true;
    return false;
  };
  std::vector<flag> common;
  common.push_back(flag::choice({"-o", "--output", "--format"},
                                "output: tsv, json (one array), jsonl (an object a line), md, csv",
                                o.format,
                                {{"tsv", output_format::tsv},
                                 {"json", output_format::json},
                                 {"jsonl", output_format::jsonl},
                                 {"md", output_format::md},
                                 {"csv", output_format::csv}}));
  common.push_back(flag::boolean({"--quick"}, "small sizes and few reps: CI smoke run", o.quick));
  common.push_back(flag::threads(bench_has("-t") ? std::vector<std::string>{"--threads"}
                                                : std::vector<std::string>{"-t", "--threads"},
                                 "thread counts (0 = all hardware threads)", o.threads));
  common.push_back(flag::number({"--reps"}, "N", "timed repetitions per row", o.reps, 1, 1000000)
                       .shows_default(""));
  common.push_back(flag::custom(
      {"--filter"}, "REGEX", "run only rows whose name matches (std::regex search)",
      [&o](std::string_view v) {
        o.filter = std::string(v);
        // std::regex reports a bad pattern by throwing; this is the one place we catch.
        try {
          o.filter_re.emplace(o.filter, std::regex::ECMAScript | std::regex::optimize);
        } catch (const std::regex_error& e) {
          return fmt::format("'{}' is not a regex: {}", v, e.what());
        }
        return std::string();
      }));
  common.push_back(flag::boolean({"-h", "--help"}, "print this help and exit", help));
  common.push_back(flag::boolean({"--version"},
                                 "print the version, git commit, build flags and int4 microkernel",
                                 version));

  const std::string why = cli::parse_flags(argc, argv, {&flags, &common}, [&](const flag& f) {
    if (help) {
      detail::print_usage(argv0, about, flags, common);
      std::exit(0);
    }
    if (version) {
      const std::string_view name(argv0);
      const std::string text = cli::version_text(name.substr(name.rfind('/') + 1));
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::exit(0);  // check_stdout_at_exit makes a lost write exit 1
    }
    if (!o.was_given(f.names.front())) o.given.push_back(f.names.front());
    return true;
  });
  if (!why.empty()) detail::usage_error(argv0, why);
}

/// parse_options for a bench with only the common flags.
inline options parse_options(int argc, char** argv, std::string_view about = {}) {
  options o;
  parse_options(argc, argv, o, {}, about);
  return o;
}


}  // namespace edgellm::bench
