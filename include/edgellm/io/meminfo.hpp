// SPDX-License-Identifier: Apache-2.0
// The system's memory figures from /proc/meminfo (Linux, Android): total, free and available
// bytes, for memory budgets given as a fraction of what the device has available. Also this
// process's resident set (VmRSS) and its peak (VmHWM) from /proc/self/status, the one reader
// the tools and benches report peak memory with.
#pragma once

#include "edgellm/io/mapped_file.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace edgellm::io {

/// Bytes from /proc/meminfo (its kB are KiB, 1024 bytes).
struct MemInfo {
  std::uint64_t total = 0;      ///< MemTotal
  std::uint64_t free = 0;       ///< MemFree
  /// MemAvailable: what new allocations may take without swapping (the kernel's estimate,
  /// page cache and reclaimable slab included). Kernels before 3.14 lack it: then MemFree +
  /// Cached (a cruder estimate), and available_estimated is true.
  std::uint64_t available = 0;
  bool available_estimated = false;
};

/// Parses the text of /proc/meminfo ("MemTotal:  16318412 kB" lines; unknown lines ignored).
/// Errors: no MemTotal line, or neither MemAvailable nor MemFree (`what` names the source in
/// the message), a value that is not a number.
inline result<MemInfo> parse_meminfo(std::string_view text, std::string_view what = "meminfo") {
  constexpr std::string_view where = "parse_meminfo";
  std::optional<std::uint64_t> total, free, available, cached;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    std::optional<std::uint64_t>* slot = key == "MemTotal"       ? &total
                                         : key == "MemFree"      ? &free
                                         : key == "MemAvailable" ? &available
                                         : key == "Cached"       ? &cached
                                                                 : nullptr;
    if (slot == nullptr) continue;
    std::string_view v = line.substr(colon + 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    std::uint64_t n = 0;
    std::size_t digits = 0;
    for (; digits < v.size() && v[digits] >= '0' && v[digits] <= '9'; ++digits) {
      if (n > (UINT64_MAX - 9) / 10) {
        return make_error(errc::format_error, where,
                          std::string(what) + ": " + std::string(key) + ": value too large");
      }
      n = n * 10 + static_cast<std::uint64_t>(v[digits] - '0');
    }
    std::string_view unit = v.substr(digits);
    while (!unit.empty() && (unit.front() == ' ' || unit.back() == '\r' || unit.back() == ' ')) {
      if (unit.front() == ' ') unit.remove_prefix(1); else unit.remove_suffix(1);
    }
    if (digits == 0 || !(unit.empty() || unit == "kB")) {
      return make_error(errc::format_error, where,
                        std::string(what) + ": " + std::string(key) + ": '" +
                            std::string(line.substr(colon + 1)) + "' is not a number of kB");
    }
    if (n > UINT64_MAX / 1024) {
      return make_error(errc::format_error, where,
                        std::string(what) + ": " + std::string(key) + ": value too large");
    }
    *slot = unit.empty() ? n : n * 1024;
  }
  if (!total) return make_error(errc::format_error, where, std::string(what) + ": no MemTotal line");
  if (!available && !free) {
    return make_error(errc::format_error, where,
                      std::string(what) + ": neither MemAvailable nor MemFree");
  }
  MemInfo m;
  m.total = *total;
  m.free = free.value_or(0);
  if (available) {
    m.available = *available;
  } else {
    m.available = m.free + cached.value_or(0);
    m.available_estimated = true;
  }
  return m;
}

/// Reads and parses `path` (default /proc/meminfo). Errors name the path.
inline result<MemInfo> read_meminfo(const std::string& path = "/proc/meminfo") {
  auto text = read_text_file(path, std::size_t{1} << 20);
  if (!text) return text.error();
  return parse_meminfo(*text, path);
}

/// The value of the "Key:   1234 kB" line `key` (e.g. "VmHWM") of a /proc/<pid>/status text,
/// in bytes; 0 when the line is absent or does not start with a number.
inline std::uint64_t proc_status_bytes(std::string_view status_text, std::string_view key) {
  while (!status_text.empty()) {
    const std::size_t eol = status_text.find('\n');
    std::string_view line = status_text.substr(0, eol);
    status_text = eol == std::string_view::npos ? std::string_view{} : status_text.substr(eol + 1);
    if (line.size() <= key.size() || !line.starts_with(key) || line[key.size()] != ':') continue;
    line.remove_prefix(key.size() + 1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    std::uint64_t kb = 0;
    std::size_t digits = 0;
    for (; digits < line.size() && line[digits] >= '0' && line[digits] <= '9'; ++digits) {
      if (kb > UINT64_MAX / 10240) return 0;  // also keeps kb * 1024 in range
      kb = kb * 10 + static_cast<std::uint64_t>(line[digits] - '0');
    }
    return kb * 1024;
  }
  return 0;
}

/// proc_status_bytes of this process (/proc/self/status); 0 where /proc is unavailable.
inline std::uint64_t self_status_bytes(std::string_view key) {
  auto text = read_text_file("/proc/self/status", std::size_t{1} << 20);
  return text ? proc_status_bytes(*text, key) : 0;
}

/// This process's peak resident set size (VmHWM), in bytes; 0 where /proc is unavailable.
inline std::uint64_t peak_rss_bytes() { return self_status_bytes("VmHWM"); }

/// This process's current resident set size (VmRSS), in bytes; 0 where /proc is unavailable.
inline std::uint64_t current_rss_bytes() { return self_status_bytes("VmRSS"); }

}  // namespace edgellm::io
