// SPDX-License-Identifier: Apache-2.0
// Shared by the edgellm-bench-* programs: the flag table, timing, result rows, machine probes.
//
// Output contract (style §12): stdout is for machines only. TSV (default) starts with
// `# key=value` metadata lines, then one header line, then one line per row; `--format json`
// prints one JSON object per row and nothing else (metadata goes to stderr as `# key=value`);
// `--format md` prints a Markdown table for PR descriptions. Chatter goes to stderr.
//
// Unlike include/edgellm, this is application code: it may start threads, lock memory and
// read /proc.
#pragma once

#include <edgellm/config.hpp>
#include <edgellm/detail/cpu_topology.hpp>
#include <edgellm/io/json_write.hpp>

#include <fmt/format.h>
#include <xsimd/xsimd.hpp>

#include "flags.hpp"

#include <algorithm>
#include <barrier>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <sys/resource.h>
#endif

namespace edgellm::bench {

// ---------------------------------------------------------------------------------------------
// Chatter

/// Prints a line to stderr (progress, warnings); never to stdout, which carries results only.
template <class... Args>
void note(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "{}\n", fmt::format(format, std::forward<Args>(args)...));
}

// ---------------------------------------------------------------------------------------------
// Timing

/// Keeps `value` (and whatever it points to) alive as far as the optimiser can tell.
template <class T>
inline void do_not_optimize(const T& value) {
#if defined(__GNUC__) || defined(__clang__)
  asm volatile("" : : "r,m"(value) : "memory");
#else
  static_cast<void>(*static_cast<const volatile char*>(static_cast<const void*>(&value)));
#endif
}

/// Summary of repeated calls, in microseconds per call.
struct timing {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double min_us = 0;
  int reps = 0;
};

/// The q-quantile (0..1) of sorted samples, interpolating linearly between neighbours.
inline double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

/// The median of samples (the mean of the middle two for an even count); 0 when empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, 0.5);
}

/// Calls `fn()` `warmup` times untimed (default: reps/5, at least 1), then `reps` times, each
/// timed alone with steady_clock, and returns median, p10, p90 and min in microseconds.
/// `fn` should feed its result to do_not_optimize so the work is not elided.
template <std::invocable F>
timing measure(F&& fn, int reps, int warmup = -1) {
  reps = std::max(reps, 1);
  if (warmup < 0) warmup = std::max(1, reps / 5);
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> us(static_cast<std::size_t>(reps));
  for (auto& sample : us) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    sample = std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  std::sort(us.begin(), us.end());
  return timing{quantile_sorted(us, 0.5), quantile_sorted(us, 0.1), quantile_sorted(us, 0.9),
                us.front(), reps};
}

// ---------------------------------------------------------------------------------------------
// Machine probes

/// CPU name: "model name" from /proc/cpuinfo (x86), else the device-tree model (arm64 boards),
/// else the arm64 implementer/part ids, else "unknown".
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::string implementer;
  std::string part;
  auto value_of = [](const std::string& l) {
    const auto colon = l.find(':');
    std::string v = colon == std::string::npos ? std::string() : l.substr(colon + 1);
    const auto first = v.find_first_not_of(" \t");
    return first == std::string::npos ? std::string() : v.substr(first);
  };
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) return value_of(line);
    if (line.starts_with("CPU implementer") && implementer.empty()) implementer = value_of(line);
    if (line.starts_with("CPU part") && part.empty()) part = value_of(line);
  }
  std::ifstream dt("/sys/firmware/devicetree/base/model");
  std::string model;
  if (std::getline(dt, model, '\0') && !model.empty()) return model;
  if (!implementer.empty()) return fmt::format("arm implementer {} part {}", implementer, part);
  return "unknown";
}

namespace detail {
// Reads a "Key:   1234 kB" line of /proc/self/status, in bytes; 0 when unavailable.
inline std::size_t proc_status_kb(std::string_view key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ':') {
      return static_cast<std::size_t>(std::strtoull(line.c_str() + key.size() + 1, nullptr, 10)) *
             1024;
    }
  }
  return 0;
}
}  // namespace detail

/// Peak resident set size of this process (VmHWM), in bytes; 0 when /proc is unavailable.
inline std::size_t peak_rss_bytes() { return detail::proc_status_kb("VmHWM"); }

/// Resets the peak (VmHWM) to the current resident set (Linux: /proc/self/clear_refs "5"), so
/// that a bench's own scratch, such as the bandwidth buffers, does not count as the model's
/// peak. Returns false where unsupported.
inline bool reset_peak_rss() {
#if defined(__linux__)
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return (std::fclose(f) == 0) && ok;
#else
  return false;
#endif
}

/// Current resident set size (VmRSS), in bytes; 0 when /proc is unavailable.
inline std::size_t current_rss_bytes() { return detail::proc_status_kb("VmRSS"); }

/// Locks [p, p + bytes) into RAM (mlock) so that page-outs do not disturb timings. Returns
/// false and says why on stderr when it fails: usually RLIMIT_MEMLOCK (`ulimit -l`) is below
/// the size, which is not fatal for a bench.
inline bool lock_memory(const void* p, std::size_t bytes, std::string_view what = "buffer") {
#if defined(__linux__)
  if (::mlock(p, bytes) == 0) return true;
  const int err = errno;
  rlimit lim{};
  ::getrlimit(RLIMIT_MEMLOCK, &lim);
  note("[harness] mlock({}, {:.1f} MiB) failed: {}; RLIMIT_MEMLOCK = {}", what,
       static_cast<double>(bytes) / (1 << 20), std::strerror(err),
       lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                     : fmt::format("{} KiB", lim.rlim_cur / 1024));
  return false;
#else
  static_cast<void>(p);
  static_cast<void>(bytes);
  note("[harness] mlock({}) unsupported on this platform", what);
  return false;
#endif
}

/// Undoes lock_memory.
inline void unlock_memory(const void* p, std::size_t bytes) {
#if defined(__linux__)
  ::munlock(p, bytes);
#else
  static_cast<void>(p);
  static_cast<void>(bytes);
#endif
}

/// The machine's memory read bandwidth in GB/s (1e9 bytes/s): the roofline for GEMV.
///
/// Each of `threads` std::threads allocates its own `bytes_per_thread` buffer (default: 1 GiB
/// split across the threads, far beyond any cache) and first-touches it, so on NUMA systems it
/// sits next to the thread that reads it. A rep starts all threads at a barrier; each streams
/// its buffer through an 8-way unrolled uint64 sum (independent accumulators, which the
/// compiler vectorises) and the rep ends when the last one finishes. Returns the best of
/// `reps` (bandwidth is capped from above, so noise only lowers it), or 0 when allocation fails.
/// Resets the process's peak RSS afterwards (reset_peak_rss), so its buffers do not count in
/// peak_rss_bytes() readings taken later.
inline double measure_read_bandwidth_gbps(int threads, std::size_t bytes_per_thread = 0,
                                          int reps = 5) {
  threads = std::max(threads, 1);
  reps = std::max(reps, 1);
  if (bytes_per_thread == 0) bytes_per_thread = (std::size_t{1} << 30) / threads;
  constexpr std::size_t unroll = 8;
  constexpr std::size_t align = std::size_t{2} << 20;  // 2 MiB: allows transparent huge pages
  const std::size_t words =
      std::max(bytes_per_thread / sizeof(std::uint64_t) / unroll, std::size_t{1}) * unroll;
  const std::size_t bytes = (words * sizeof(std::uint64_t) + align - 1) / align * align;
  // The sum of 0..words-1 modulo 2^64: checks that every word was read.
  const std::uint64_t expected =
      words % 2 == 0 ? (words / 2) * (words - 1) : words * ((words - 1) / 2);

  std::vector<double> seconds;
  std::chrono::steady_clock::time_point t0;
  int phase = 0;  // 0: buffers ready, then per rep: 1 = start, 2 = end
  std::barrier sync(threads, [&]() noexcept {
    const auto now = std::chrono::steady_clock::now();
    if (phase == 1) t0 = now;
    if (phase == 2) seconds.push_back(std::chrono::duration<double>(now - t0).count());
    phase = phase == 1 ? 2 : 1;
  });
  std::vector<int> ok(static_cast<std::size_t>(threads), 1);

  auto worker = [&](std::size_t t) {
    auto* p = static_cast<std::uint64_t*>(std::aligned_alloc(align, bytes));
    if (p != nullptr) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
      ::madvise(p, bytes, MADV_HUGEPAGE);
#endif
      for (std::size_t i = 0; i < words; ++i) p[i] = i;  // first touch by the reading thread
    } else {
      ok[t] = 0;
    }
    sync.arrive_and_wait();
    for (int r = 0; r < reps; ++r) {
      sync.arrive_and_wait();  // start
      std::uint64_t s[unroll] = {};
      if (p != nullptr) {
        for (std::size_t i = 0; i < words; i += unroll) {
          for (std::size_t j = 0; j < unroll; ++j) s[j] += p[i + j];
        }
      }
      std::uint64_t sum = 0;
      for (std::uint64_t v : s) sum += v;
      do_not_optimize(sum);
      sync.arrive_and_wait();  // end
      if (p != nullptr && sum != expected) ok[t] = 0;
    }
    std::free(p);
  };

  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, static_cast<std::size_t>(t));
  worker(0);
  for (auto& th : pool) th.join();

  if (std::find(ok.begin(), ok.end(), 0) != ok.end() || seconds.empty()) {
    note("[harness] read bandwidth: allocation of {} x {} MiB failed or the checksum was wrong",
         threads, bytes >> 20);
    return 0;
  }
  const double best = *std::min_element(seconds.begin(), seconds.end());
  reset_peak_rss();  // the buffers are freed: keep them out of the caller's peak RSS
  return static_cast<double>(words * sizeof(std::uint64_t)) * threads / best / 1e9;
}

// ---------------------------------------------------------------------------------------------
// Metadata and rows

/// Build and machine facts printed before the rows as `# key=value`.
inline std::vector<std::pair<std::string, std::string>> default_metadata() {
  std::string compiler =
#if defined(__clang__)
      fmt::format("clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
      fmt::format("gcc {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
      "unknown";
#endif
  std::string features;
  [[maybe_unused]] auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!features.empty()) features += ',';
    features += name;
  };
#if defined(__AVX2__)
  add(true, "avx2");
#endif
#if defined(__FMA__)
  add(true, "fma");
#endif
#if defined(__AVX512F__)
  add(true, "avx512f");
#endif
#if defined(__AVX512VNNI__)
  add(true, "avx512vnni");
#endif
#if defined(__AVXVNNI__)
  add(true, "avxvnni");
#endif
#if defined(__ARM_NEON)
  add(true, "neon");
#endif
#if defined(__ARM_FEATURE_DOTPROD)
  add(true, "dotprod");
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
  add(true, "i8mm");
#endif
#if defined(__ARM_FEATURE_SVE)
  add(true, "sve");
#endif
  char date[32] = "unknown";
  const std::time_t now = std::time(nullptr);
  if (std::tm tm{}; gmtime_r(&now, &tm) != nullptr) {
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
  }
  return {
      {"edgellm", fmt::format("{}.{}.{}", EDGELLM_VERSION_MAJOR, EDGELLM_VERSION_MINOR,
                              EDGELLM_VERSION_PATCH)},
      {"git_sha", EDGELLM_GIT_SHA},
      {"compiler", std::move(compiler)},
      {"build_type", EDGELLM_BUILD_TYPE},
      {"flags", EDGELLM_BUILD_FLAGS},
      {"isa", xsimd::default_arch::name()},
      {"features", features.empty() ? std::string("none") : features},
      {"cpu", cpu_model()},
      {"hardware_threads", std::to_string(std::thread::hardware_concurrency())},
      {"performance_cores", [] {  // big.LITTLE: the default thread count (thread_pool.hpp)
         const auto t = edgellm::detail::read_cpu_topology();
         return fmt::format("{} of {} online ({}{})", t.performance.size(), t.online.size(),
                            t.source, t.heterogeneous() ? ", big.LITTLE" : "");
       }()},
      {"date", date},
  };
}

/// One cell of a row: an integer, a floating-point number or a string.
struct value {
  std::variant<long long, double, std::string> v;

  template <std::integral T>  // bool is integral too, but the exact value(bool) wins
  value(T x) : v(static_cast<long long>(x)) {}  // NOLINT(implicit)
  template <std::floating_point T>
  value(T x) : v(static_cast<double>(x)) {}                // NOLINT(implicit)
  value(bool x) : v(std::string(x ? "true" : "false")) {}  // NOLINT(implicit)
  value(std::string s) : v(std::move(s)) {}                // NOLINT(implicit)
  value(std::string_view s) : v(std::string(s)) {}         // NOLINT(implicit)
  value(const char* s) : v(std::string(s)) {}              // NOLINT(implicit)
};

namespace detail {
// Numbers print with 6 significant digits; non-finite ones as nan/inf (null in JSON). Strings
// lose the characters that would break their line: tabs and newlines, and '|' in Markdown.
inline std::string render(const value& x, output_format format) {
  const bool json = format == output_format::json;
  if (const auto* i = std::get_if<long long>(&x.v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&x.v)) {
    if (!std::isfinite(*d)) return json ? "null" : fmt::format("{}", *d);
    return fmt::format("{:.6g}", *d);
  }
  const auto& s = std::get<std::string>(x.v);
  if (json) return io::json::escape(s);
  std::string clean = s;
  std::replace(clean.begin(), clean.end(), '\t', ' ');
  std::replace(clean.begin(), clean.end(), '\n', ' ');
  if (format == output_format::md) std::replace(clean.begin(), clean.end(), '|', '/');
  return clean;
}
}  // namespace detail

/// Prints result rows with a fixed column schema (append-only, style §12). The first row
/// also prints the metadata and the header (TSV, Markdown).
///
///   bench::table out(opts, {"name", "isa", "m", "n", "k", "median_us"});
///   out.add_metadata("model", "qwen2-0.5b");
///   out.row({name, isa, m, n, k, t.median_us});
class table {
 public:
  table(const options& opts, std::vector<std::string> columns)
      : format_(opts.format), columns_(std::move(columns)), metadata_(default_metadata()) {}

  /// Adds a `# key=value` line; call before the first row.
  void add_metadata(std::string key, std::string val) {
    metadata_.emplace_back(std::move(key), std::move(val));
  }

  /// Prints one row; `cells` must have one entry per column, in order.
  void row(std::initializer_list<value> cells) { row(std::vector<value>(cells)); }

  void row(const std::vector<value>& cells) {
    if (cells.size() != columns_.size()) {
      note("[harness] row has {} cells, the table has {} columns", cells.size(), columns_.size());
      std::abort();
    }
    start();
    std::string line;
    switch (format_) {
      case output_format::tsv:
        for (std::size_t i = 0; i < cells.size(); ++i) {
          if (i != 0) line += '\t';
          line += detail::render(cells[i], format_);
        }
        break;
      case output_format::md:
        line = "|";
        for (const auto& c : cells) {  // appended piecewise: `" " + string` trips GCC 12's -Wrestrict at -O3
          line += ' ';
          line += detail::render(c, format_);
          line += " |";
        }
        break;
      case output_format::json:
        line = "{";
        for (std::size_t i = 0; i < cells.size(); ++i) {
          if (i != 0) line += ", ";
          line += io::json::escape(columns_[i]) + ": " + detail::render(cells[i], format_);
        }
        line += "}";
        break;
    }
    fmt::print(stdout, "{}\n", line);
    std::fflush(stdout);  // rows appear as they are measured, also through a pipe
  }

  const std::vector<std::string>& columns() const { return columns_; }

 private:
  void start() {
    if (started_) return;
    started_ = true;
    std::FILE* meta = format_ == output_format::json ? stderr : stdout;
    for (const auto& [k, v] : metadata_) fmt::print(meta, "# {}={}\n", k, v);
    if (format_ == output_format::tsv) {
      std::string header;
      for (const auto& c : columns_) header += (header.empty() ? "" : "\t") + c;
      fmt::print(stdout, "{}\n", header);
    } else if (format_ == output_format::md) {
      std::string header = "|";
      std::string rule = "|";
      for (const auto& c : columns_) {
        header += " " + c + " |";
        rule += " --- |";
      }
      fmt::print(stdout, "\n{}\n{}\n", header, rule);
    }
  }

  output_format format_;
  std::vector<std::string> columns_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  bool started_ = false;
};

}  // namespace edgellm::bench
