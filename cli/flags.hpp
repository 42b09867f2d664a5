// SPDX-License-Identifier: Apache-2.0
// The flag table the edgellm-* command line programs (tools/ and bench/) parse with, and the one
// number parser behind it.
//
// A program declares its flags in a table of `flag`s (names, value name, help, target
// variable, parse function, made by the factories flag::boolean, number, real, list,
// real_list, threads, thread_count, string, strings, choice, parsed and custom, and adjusted
// by shows_default, non_empty, on_set and also_accepts); parse_flags fills the targets and
// names the flag as written and the value in what it rejects. Both `--flag value` and
// `--flag=value` work.
// The default shown in help is the target's value when the table is built, unless the flag
// says otherwise (shows_default), so help and behaviour cannot disagree. The edgellm-* tools
// parse through tools/flags.hpp, the benches through bench/flags.hpp.
//
//   std::size_t n = 64;
//   std::vector<cli::flag> flags{
//       cli::flag::number({"-n"}, "N", "generated tokens", n, 1, 1000000),
//   };
//   if (const std::string why = cli::parse_flags(argc, argv, {&flags}); !why.empty()) ...
#pragma once

#include <edgellm/detail/cpu_topology.hpp>
#include <edgellm/detail/split.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace edgellm::cli {

/// `s` as a number of type T if all of it is one: an integer (from_chars: no sign for unsigned
/// types, no spaces) or a finite floating-point number (from_chars, not strtod: no locale forms,
/// no "nan" or "inf"). The one number parser of the command lines.
template <class T>
  requires std::integral<T> || std::floating_point<T>
std::optional<T> parse_number(std::string_view s) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) return std::nullopt;
  }
  return v;
}

/// parse_number into `out` (left as it was when `s` is not a number); true if it was one.
template <class T>
  requires std::integral<T> || std::floating_point<T>
bool parse_number(std::string_view s, T& out) {
  const auto v = parse_number<T>(s);
  if (v) out = *v;
  return v.has_value();
}

/// The integer `s` if it is one, whole, and in [lo, hi] (no sign for unsigned types, whose
/// whole range is read: a 64-bit seed may exceed LLONG_MAX).
template <std::integral T>
std::optional<T> parse_integer(std::string_view s, T lo, T hi) {
  using Wide = std::conditional_t<std::is_unsigned_v<T>, unsigned long long, long long>;
  const auto v = parse_number<Wide>(s);
  if (!v) return std::nullopt;
  if (std::cmp_less(*v, lo) || std::cmp_greater(*v, hi)) return std::nullopt;
  return static_cast<T>(*v);
}

/// The finite number `s` if it is one, whole, and in [lo, hi].
inline std::optional<double> parse_real(std::string_view s, double lo,
                                        double hi = std::numeric_limits<double>::infinity()) {
  const auto v = parse_number<double>(s);
  if (!v || *v < lo || *v > hi) return std::nullopt;
  return v;
}

/// One command-line flag: its spellings, its value's name and help, and what it does with a value.
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

  /// Refuses an empty value ("-m ''"): "empty DIR", with `note` in parentheses when given.
  flag non_empty(std::string note = {}) && {
    parse = [parse = std::move(parse), what = metavar, note = std::move(note)](std::string_view v) {
      if (v.empty())
        return note.empty() ? "empty " + what : fmt::format("empty {} ({})", what, note);
      return parse(v);
    };
    return std::move(*this);
  }

  /// Also runs `action` after each value the flag accepts: marks it given, or sets a second
  /// variable (`--context` fixes the context a budget may otherwise shrink).
  flag on_set(std::function<void()> action) && {
    parse = [parse = std::move(parse), action = std::move(action)](std::string_view v) {
      std::string why = parse(v);
      if (why.empty()) action();
      return why;
    };
    return std::move(*this);
  }

  /// Also accepts the value `word` (llama.cpp's "-1": no limit, a random seed), running
  /// `action` for it instead of the parse; a rejected value's reason adds "(or WORD)".
  flag also_accepts(std::string word, std::function<void()> action) && {
    parse = [parse = std::move(parse), word = std::move(word),
             action = std::move(action)](std::string_view v) {
      if (v == word) {
        action();
        return std::string();
      }
      std::string why = parse(v);
      if (!why.empty()) why += fmt::format(" (or {})", word);
      return why;
    };
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
            integer_into(target, lo, hi)};
  }

  /// An integer in [lo, hi] into an optional, empty until the flag is given (the default is
  /// the program's to say: shows_default).
  template <std::integral T>
  static flag number(std::vector<std::string> names, std::string metavar, std::string help,
                     std::optional<T>& target, T lo, T hi) {
    return {std::move(names), std::move(metavar), std::move(help),
            target ? std::to_string(*target) : std::string(), integer_into(target, lo, hi)};
  }

  /// A finite number in [lo, hi] (float or double).
  template <std::floating_point T>
  static flag real(std::vector<std::string> names, std::string metavar, std::string help, T& target,
                   double lo, double hi = std::numeric_limits<double>::infinity()) {
    return {std::move(names), std::move(metavar), std::move(help), fmt::format("{}", target),
            [&target, lo, hi](std::string_view v) {
              const auto x = cli::parse_real(v, lo, hi);
              if (!x) {
                return std::isinf(hi) ? fmt::format("'{}' is not a number >= {}", v, lo)
                                      : fmt::format("'{}' is not a number in [{}, {}]", v, lo, hi);
              }
              target = static_cast<T>(*x);
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
                const auto n = cli::parse_integer<T>(item, lo, hi);
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
                const auto x = cli::parse_real(item, lo);
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
              const auto hw = static_cast<int>(hardware_threads_or_1());
              for (const std::string_view item : split_list(v)) {
                std::string why;
                const auto n = static_cast<int>(thread_count_of(item, 0, {}, why));
                if (!why.empty()) return "item " + why;
                parsed.push_back(n == 0 ? hw : n);
              }
              target = std::move(parsed);
              return std::string();
            }};
  }

  /// One thread count in [1, cap], the cap as threads() has it, with its warning above the
  /// hardware threads (after "`prog`: " when given).
  static flag thread_count(std::vector<std::string> names, std::string help, std::size_t& target,
                           std::string prog = {}) {
    return {std::move(names), "N", std::move(help), std::to_string(target),
            [&target, prog = std::move(prog)](std::string_view v) {
              std::string why;
              const std::size_t n = thread_count_of(v, 1, prog, why);
              if (why.empty()) target = n;
              return why;
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

  /// Any string into an optional, empty until the flag is given ("" is a value).
  static flag string(std::vector<std::string> names, std::string metavar, std::string help,
                     std::optional<std::string>& target) {
    return {std::move(names), std::move(metavar), std::move(help), target.value_or(""),
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

  /// A value `parse` turns into the target: it returns an edgellm::result (the library's
  /// parse_kv_type, parse_budget), whose error's message says why not. No default is shown.
  template <class T, class Parse>
  static flag parsed(std::vector<std::string> names, std::string metavar, std::string help,
                     T& target, Parse parse) {
    return {std::move(names), std::move(metavar), std::move(help), "",
            [&target, parse = std::move(parse)](std::string_view v) {
              auto r = parse(v);
              if (!r) return std::string(r.error().message);
              target = std::move(*r);
              return std::string();
            }};
  }

  /// A value parsed by `parse` (which returns "" or why the value is bad); with an empty
  /// metavar, a switch (`parse` gets "").
  static flag custom(std::vector<std::string> names, std::string metavar, std::string help,
                     parser parse) {
    return {std::move(names), std::move(metavar), std::move(help), "", std::move(parse)};
  }

  /// The one comma-list splitter (detail/split.hpp), for programs that split lists themselves.
  static std::vector<std::string_view> split_list(std::string_view s) {
    return edgellm::detail::split_list(s);
  }

 private:
  // Parses an integer in [lo, hi] into `target` (a T or an optional<T>).
  template <std::integral T, class Target>
  static parser integer_into(Target& target, T lo, T hi) {
    return [&target, lo, hi](std::string_view v) {
      const auto n = cli::parse_integer<T>(v, lo, hi);
      if (!n) return out_of_range(v, lo, hi);
      target = *n;
      return std::string();
    };
  }
  template <class T>
  static std::string out_of_range(std::string_view v, T lo, T hi) {
    if (hi == std::numeric_limits<T>::max() &&
        (std::is_unsigned_v<T> || lo != std::numeric_limits<T>::min()))
      return fmt::format("'{}' is not an integer >= {}", v, lo);
    return fmt::format("'{}' is not an integer in [{}, {}]", v, lo, hi);
  }
  static std::size_t hardware_threads_or_1() {
    return std::max<std::size_t>(1, edgellm::detail::hardware_threads());
  }
  // One thread count `v` in [lo, cap] (threads()); sets `why` when it is not one.
  static std::size_t thread_count_of(std::string_view v, std::size_t lo, std::string_view prog,
                                     std::string& why) {
    const std::size_t hw_count = edgellm::detail::hardware_threads(), hw = hardware_threads_or_1();
    const std::size_t cap = edgellm::detail::max_threads_flag(hw_count);
    const auto n = cli::parse_integer<std::size_t>(v, lo, cap);
    if (!n) {
      why = fmt::format("{} (at most 4 x the {} hardware threads, and 256)",
                        out_of_range(v, lo, cap), hw_count);
      return 0;
    }
    if (*n > hw) {
      fmt::print(stderr,
                 "{}{}warning: {} threads is more than the {} hardware threads; the extra threads "
                 "only wait for a core\n",
                 prog, prog.empty() ? "" : ": ", *n, hw);
    }
    return *n;
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

/// The flag of `tables` (searched in order) that `name` spells, or null.
inline const flag* find_flag(std::initializer_list<const std::vector<flag>*> tables,
                             std::string_view name) {
  for (const auto* table : tables)
    for (const flag& f : *table)
      if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) return &f;
  return nullptr;
}

/// Parses argv[1..argc) against `tables`: `--flag value`, `--flag=value`, switches without a
/// value. After each flag, `after(f)` (when given) may stop the parse by returning false (--help
/// and --version do). Returns "" or what is wrong, naming the flag as written and the value:
/// "unknown argument 'X'", "--x takes no value (got 'v')", "--x needs a value N",
/// "--x: <why the value is bad>".
inline std::string parse_flags(int argc, char** argv,
                               std::initializer_list<const std::vector<flag>*> tables,
                               const std::function<bool(const flag&)>& after = {}) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    std::string_view key = arg;
    std::optional<std::string_view> value;
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      key = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const flag* f = find_flag(tables, key);
    if (f == nullptr) return fmt::format("unknown argument '{}'", arg);
    if (f->is_switch()) {
      if (value) return fmt::format("{} takes no value (got '{}')", key, *value);
      value = std::string_view();
    } else if (!value) {
      if (i + 1 >= argc) return fmt::format("{} needs a value {}", key, f->metavar);
      value = argv[++i];
    }
    if (const std::string why = f->parse(*value); !why.empty())
      return fmt::format("{}: {}", key, why);
    if (after && !after(*f)) break;
  }
  return {};
}

/// The table's help lines: the spellings and value name in a column `width` wide, then the
/// help and "(default X)"; '\n' in a help continues it under the first line.
inline std::string flags_help(const std::vector<flag>& flags, std::size_t width) {
  std::string out;
  for (const flag& f : flags) {
    std::string left;
    for (const auto& n : f.names) {
      if (!left.empty()) left += ", ";
      left += n;
    }
    if (!f.is_switch()) {
      left += ' ';
      left += f.metavar;
    }
    std::string help = f.help;
    if (!f.default_text.empty()) help += fmt::format(" (default {})", f.default_text);
    // A long left column puts the help on the next line.
    out += left.size() > width ? fmt::format("  {}\n  {:<{}} ", left, "", width)
                               : fmt::format("  {:<{}} ", left, width);
    for (std::size_t start = 0;;) {  // continuation lines line up under the first
      const std::size_t nl = help.find('\n', start);
      out += help.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      if (nl == std::string::npos) break;
      out += fmt::format("\n  {:<{}} ", "", width);
      start = nl + 1;
    }
    out += '\n';
  }
  return out;
}

/// Writes flags_help to `to` (through stdio: a failed write is found by ferror, not thrown).
inline void print_flags(std::FILE* to, const std::vector<flag>& flags, std::size_t width) {
  const std::string text = flags_help(flags, width);
  std::fwrite(text.data(), 1, text.size(), to);
}

}  // namespace edgellm::cli
