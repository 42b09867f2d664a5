// SPDX-License-Identifier: Apache-2.0
// The command line of the edgellm-bench-* programs (included by harness.hpp): the common
// options and the declarative flag table every bench lists its own flags in.
#pragma once

#include <edgellm/detail/cpu_topology.hpp>
#include <edgellm/detail/split.hpp>

#include "../tools/cli.hpp"  // --version, as every edgellm-* tool prints it
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

// ---------------------------------------------------------------------------------------------
// Command line
//
// Each bench declares its flags in a table of `flag`s (names, value name, help, target
// variable, parse function, made by the factories flag::boolean, number, real, list,
// real_list, threads, string, strings, choice and custom); parse_options adds the common flags
// below, fills the targets, prints --help generated from the table and rejects a malformed
// command line naming the flag and the value (exit 2). Both `--flag value` and `--flag=value`
// work. The default shown in --help is the target's value when the table is built, unless the
// flag says otherwise (shows_default), so help and behaviour cannot disagree.
//
//   std::size_t n = 64;
//   bench::options opts;
//   bench::parse_options(argc, argv, opts, {
//       bench::flag::number({"-n"}, "N", "generated tokens", n, 1, 1000000),
//   });

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
struct flag {
  /// Stores `value` into the target (a switch gets ""); returns "" or why the value is bad.
  using parser = std::function<std::string(std::string_view value)>;

  std::vector<std::string> names;  ///< every spelling, e.g. {"-m", "--model"}; the first is the key
  std::string metavar;             ///< the value's name in --help ("N", "DIR"); empty: a switch
  std::string help;                ///< one line; '\n' continues it on an indented line
  std::string default_text;        ///< shown as "(default X)" in --help; empty: nothing shown
  parser parse;

  bool is_switch() const { return metavar.empty(); }

  /// Replaces the default shown in --help (one that depends on other flags; "" shows none).
  flag shows_default(std::string text) && {
    default_text = std::move(text);
    return std::move(*this);
  }

  /// A switch: sets `target = value` (so `--no-lock` can clear a `lock` that defaults to true).
  static flag boolean(std::vector<std::string> names, std::string help, bool& target,
                      bool value = true) {
    return {std::move(names), "", std::move(help), "", [&target, value](std::string_view) {
              target = value;
              return std::string();
            }};
  }

  /// An integer in [lo, hi].
  template <std::integral T>
  static flag number(std::vector<std::string> names, std::string metavar, std::string help,
                     T& target, T lo, T hi) {
    return {std::move(names), std::move(metavar), std::move(help), std::to_string(target),
            [&target, lo, hi](std::string_view v) {
              const auto n = parse_integer<T>(v, lo, hi);
              if (!n) return out_of_range(v, lo, hi);
              target = *n;
              return std::string();
            }};
  }

  /// A finite number >= lo.
  static flag real(std::vector<std::string> names, std::string metavar, std::string help,
                   double& target, double lo) {
    return {std::move(names), std::move(metavar), std::move(help), fmt::format("{}", target),
            [&target, lo](std::string_view v) {
              const auto x = parse_real(v, lo);
              if (!x) return fmt::format("'{}' is not a number >= {}", v, lo);
              target = *x;
              return std::string();
            }};
  }

  /// A comma list of integers in [lo, hi]; replaces the default list.
  template <std::integral T>
  static flag list(std::vector<std::string> names, std::string metavar, std::string help,
                   std::vector<T>& target, T lo, T hi) {
    return {std::move(names), std::move(metavar), std::move(help), join(target),
            [&target, lo, hi](std::string_view v) {
              std::vector<T> parsed;
              for (const std::string_view item : split_list(v)) {
                const auto n = parse_integer<T>(item, lo, hi);
                if (!n) return fmt::format("item {}", out_of_range(item, lo, hi));
                parsed.push_back(*n);
              }
              target = std::move(parsed);
              return std::string();
            }};
  }

  /// A comma list of finite numbers >= lo; replaces the default list.
  static flag real_list(std::vector<std::string> names, std::string metavar, std::string help,
                        std::vector<double>& target, double lo) {
    return {std::move(names), std::move(metavar), std::move(help), join(target),
            [&target, lo](std::string_view v) {
              std::vector<double> parsed;
              for (const std::string_view item : split_list(v)) {
                const auto x = parse_real(item, lo);
                if (!x) return fmt::format("item '{}' is not a number >= {}", item, lo);
                parsed.push_back(*x);
              }
              target = std::move(parsed);
              return std::string();
            }};
  }

  /// Thread counts, a comma list in [0, cap] where 0 means every hardware thread and the cap is
  /// edgellm::detail::max_threads_flag() (4 x the hardware threads, at most 256): more threads
  /// than cores only measure waiting. Counts above the hardware threads get a warning.
  static flag threads(std::vector<std::string> names, std::string help,
                      std::vector<int>& target) {
    return {std::move(names), "N[,N...]", std::move(help), join(target),
            [&target](std::string_view v) {
              std::vector<int> parsed;
              const auto hw_count = edgellm::detail::hardware_threads();
              const auto hw = static_cast<int>(std::max<std::size_t>(1, hw_count));
              const auto cap = static_cast<int>(edgellm::detail::max_threads_flag(hw_count));
              for (const std::string_view item : split_list(v)) {
                const auto n = parse_integer<int>(item, 0, cap);
                if (!n) {
                  return fmt::format("item {} (at most 4 x the {} hardware threads, and 256)",
                                     out_of_range(item, 0, cap), hw_count);
                }
                if (*n > hw) {
                  fmt::print(stderr,
                             "warning: {} threads is more than the {} hardware threads; the extra "
                             "threads only wait for a core\n",
                             *n, hw);
                }
                parsed.push_back(*n == 0 ? hw : *n);
              }
              target = std::move(parsed);
              return std::string();
            }};
  }

  /// Any string, stored as given.
  static flag string(std::vector<std::string> names, std::string metavar, std::string help,
                     std::string& target) {
    return {std::move(names), std::move(metavar), std::move(help), target,
            [&target](std::string_view v) {
              target = std::string(v);
              return std::string();
            }};
  }

  /// Appends the value to `target` at every occurrence (a repeatable flag); with `comma_list`
  /// the value is split at commas first ("--draft a,b" = "--draft a --draft b").
  static flag strings(std::vector<std::string> names, std::string metavar, std::string help,
                      std::vector<std::string>& target, bool comma_list = false) {
    return {std::move(names), std::move(metavar), std::move(help), join(target),
            [&target, comma_list](std::string_view v) {
              if (!comma_list) {
                target.emplace_back(v);
              } else {
                for (const std::string_view item : split_list(v)) target.emplace_back(item);
              }
              return std::string();
            }};
  }

  /// One of a fixed set of words, each naming a value of T (an enum); the metavar lists them.
  template <class T>
  static flag choice(std::vector<std::string> names, std::string help, T& target,
                     std::vector<std::pair<std::string, T>> choices) {
    std::string metavar, shown;
    for (const auto& [word, value] : choices) {
      if (!metavar.empty()) metavar += '|';
      metavar += word;
      if (value == target && shown.empty()) shown = word;
    }
    return {std::move(names), std::move(metavar), std::move(help), std::move(shown),
            [&target, choices = std::move(choices)](std::string_view v) {
              for (const auto& [word, value] : choices) {
                if (v == word) {
                  target = value;
                  return std::string();
                }
              }
              std::string words;
              for (const auto& c : choices) {
                words += words.empty() ? "'" : ", '";
                words += c.first;
                words += '\'';
              }
              return fmt::format("'{}' is not one of {}", v, words);
            }};
  }

  /// A value parsed by `parse` (which returns "" or why the value is bad).
  static flag custom(std::vector<std::string> names, std::string metavar, std::string help,
                     parser parse) {
    return {std::move(names), std::move(metavar), std::move(help), "", std::move(parse)};
  }

  /// The one comma-list splitter (detail/split.hpp), for benches that split lists themselves.
  static std::vector<std::string_view> split_list(std::string_view s) {
    return edgellm::detail::split_list(s);
  }

  /// The integer `s` if it is one, whole, and in [lo, hi].
  template <std::integral T>
  static std::optional<T> parse_integer(std::string_view s, T lo, T hi) {
    long long v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    if constexpr (std::is_unsigned_v<T>) {
      if (v < 0) return std::nullopt;
    }
    if (std::cmp_less(v, lo) || std::cmp_greater(v, hi)) return std::nullopt;
    return static_cast<T>(v);
  }

  /// The finite number `s` if it is one, whole, and >= lo.
  static std::optional<double> parse_real(std::string_view s, double lo) {
    const std::string copy(s);
    char* end = nullptr;
    const double v = std::strtod(copy.c_str(), &end);
    if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(v) || v < lo)
      return std::nullopt;
    return v;
  }

 private:
  template <class T>
  static std::string out_of_range(std::string_view v, T lo, T hi) {
    return fmt::format("'{}' is not an integer in [{}, {}]", v, lo, hi);
  }
  template <class T>
  static std::string join(const std::vector<T>& v) {
    std::string out;
    for (const auto& x : v) {  // appended piecewise: `"," + string` trips GCC 12's -Wrestrict
      if (!out.empty()) out += ',';
      out += fmt::format("{}", x);
    }
    return out;
  }
};

namespace detail {

inline std::string flag_spelling(const flag& f) {
  std::string s;
  for (const auto& n : f.names) {
    if (!s.empty()) s += ", ";
    s += n;
  }
  if (!f.is_switch()) {
    s += ' ';
    s += f.metavar;
  }
  return s;
}

inline void print_flags(std::FILE* to, const std::vector<flag>& flags, std::size_t width) {
  for (const flag& f : flags) {
    const std::string left = flag_spelling(f);
    std::string help = f.help;
    if (!f.default_text.empty()) help += fmt::format(" (default {})", f.default_text);
    std::string line = fmt::format("  {:<{}} ", left, width);
    if (left.size() > width) line = fmt::format("  {}\n  {:<{}} ", left, "", width);
    for (std::size_t start = 0;;) {  // continuation lines line up under the first
      const std::size_t nl = help.find('\n', start);
      line += help.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      if (nl == std::string::npos) break;
      line += fmt::format("\n  {:<{}} ", "", width);
      start = nl + 1;
    }
    fmt::print(to, "{}\n", line);
  }
}

// Usage to stderr (stdout carries results only).
inline void print_usage(const char* argv0, std::string_view about, const std::vector<flag>& own,
                        const std::vector<flag>& common) {
  fmt::print(stderr, "usage: {} [flags]\n", argv0);
  if (!about.empty()) fmt::print(stderr, "{}\n", about);
  constexpr std::size_t width = 26;
  if (!own.empty()) {
    fmt::print(stderr, "flags:\n");
    print_flags(stderr, own, width);
  }
  fmt::print(stderr, "common flags:\n");
  print_flags(stderr, common, width);
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
/// --version prints what every edgellm-* tool prints (tools/cli.hpp) to stdout and exits 0; an
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

  auto find = [&](std::string_view name) -> const flag* {
    for (const auto* table : {&flags, &common})
      for (const flag& f : *table)
        if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) return &f;
    return nullptr;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    std::string_view key = arg;
    std::optional<std::string_view> value;
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      key = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const flag* f = find(key);
    if (f == nullptr) detail::usage_error(argv0, fmt::format("unknown argument '{}'", arg));
    if (f->is_switch()) {
      if (value) detail::usage_error(argv0, fmt::format("{} takes no value (got '{}')", key, *value));
      value = std::string_view();
    } else if (!value) {
      if (i + 1 >= argc) detail::usage_error(argv0, fmt::format("{} needs a value {}", key, f->metavar));
      value = argv[++i];
    }
    if (const std::string why = f->parse(*value); !why.empty())
      detail::usage_error(argv0, fmt::format("{}: {}", key, why));
    if (help) {
      detail::print_usage(argv0, about, flags, common);
      std::exit(0);
    }
    if (version) {
      const std::string_view name(argv0);
      const std::string text = edgellm::tools::version_text(name.substr(name.rfind('/') + 1));
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::exit(0);  // check_stdout_at_exit makes a lost write exit 1
    }
    if (!o.was_given(f->names.front())) o.given.push_back(f->names.front());
  }
}

/// parse_options for a bench with only the common flags.
inline options parse_options(int argc, char** argv, std::string_view about = {}) {
  options o;
  parse_options(argc, argv, o, {}, about);
  return o;
}


}  // namespace edgellm::bench
