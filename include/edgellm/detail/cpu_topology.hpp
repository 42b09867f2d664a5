// SPDX-License-Identifier: Apache-2.0
// Which cores are the fast ones, from Linux sysfs: phones mix big and little cores, and a
// fork-join waits for its slowest thread, so a thread on a little core holds up every matmul.
#pragma once

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace edgellm::detail {

/// The online CPUs and the subset that a compute pool should use by default.
struct CpuTopology {
  std::vector<unsigned> online;       ///< logical CPU numbers, ascending
  std::vector<unsigned> performance;  ///< the big cores (all of `online` on a uniform machine)
  /// Where the core speeds came from: "cpu_capacity", "cpuinfo_max_freq", or "none" (neither
  /// readable for every online core).
  std::string source = "none";

  /// True when some online cores are markedly slower than others (a big.LITTLE phone).
  bool heterogeneous() const noexcept {
    return !performance.empty() && performance.size() < online.size();
  }
};

/// Logical CPUs of this machine (std::thread::hardware_concurrency), 0 when unknown.
inline std::size_t hardware_threads() noexcept { return std::thread::hardware_concurrency(); }

/// The most threads a command line accepts (`--threads`): 4 x the hardware threads, and never
/// more than 256 (256 when the count is unknown). Threads beyond the cores only wait for one,
/// and every fork-join waits for the slowest, so far beyond is a mistake, not a setting: the
/// CLIs refuse it (exit 2) and warn on stderr above `hardware` alone.
inline std::size_t max_threads_flag(std::size_t hardware = hardware_threads()) noexcept {
  constexpr std::size_t kCap = 256;
  return hardware == 0 ? kCap : std::min(kCap, 4 * hardware);
}

namespace topology_detail {
inline bool read_unsigned(const std::string& path, unsigned long long& out) {
  std::ifstream f(path);
  unsigned long long v = 0;
  if (!(f >> v)) return false;
  out = v;
  return true;
}

/// Parses a sysfs CPU list such as "0-3,6,8-9"; empty on a malformed list.
inline std::vector<unsigned> parse_cpu_list(std::string_view s) {
  std::vector<unsigned> cpus;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  std::size_t pos = 0;
  const auto number = [&](unsigned& v) {
    const std::size_t start = pos;
    unsigned long long acc = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9' && acc < 1000000)
      acc = acc * 10 + static_cast<unsigned>(s[pos++] - '0');
    v = static_cast<unsigned>(acc);
    return pos > start && acc < 1000000;
  };
  while (pos < s.size()) {
    unsigned a = 0, b = 0;
    if (!number(a)) return {};
    b = a;
    if (pos < s.size() && s[pos] == '-') {
      ++pos;
      if (!number(b) || b < a) return {};
    }
    for (unsigned c = a; c <= b; ++c) cpus.push_back(c);
    if (pos < s.size() && s[pos++] != ',') return {};
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}
}  // namespace topology_detail

/// The slowest cores are efficiency cores when they run below this fraction of the fastest
/// one. cpu_capacity already weighs in the work per clock: Cortex-A5x little cores have 150-450
/// of 1024. A max frequency does not, and a phone's little cluster often clocks within 80-90 %
/// of its big one (Cortex-A55 at 1.8-2.0 GHz next to a Cortex-A76 at 2.0-2.3), while cores of
/// one kind differ by a turbo bin or two (95 % and up).
inline constexpr double kLittleCapacityFraction = 0.75;
inline constexpr double kLittleFrequencyFraction = 0.9;

/// Reads the topology under `sysfs_cpu_root` (normally /sys/devices/system/cpu; tests pass a
/// recorded tree). Core speeds: cpuN/cpu_capacity (arm64 and RISC-V kernels publish it), else
/// cpuN/cpufreq/cpuinfo_max_freq. When the slowest cores run below kLittleCapacityFraction
/// (kLittleFrequencyFraction) of the fastest, they (the little cluster) are left out of
/// `performance`; every faster cluster, the mid cores of a three-cluster phone included, stays
/// in. Otherwise, and without sysfs, all online cores are performance cores.
inline CpuTopology read_cpu_topology(const std::string& sysfs_cpu_root = "/sys/devices/system/cpu") {
  CpuTopology t;
  {
    std::ifstream f(sysfs_cpu_root + "/online");
    std::string list;
    if (std::getline(f, list)) t.online = topology_detail::parse_cpu_list(list);
  }
  if (t.online.empty()) return t;
  t.performance = t.online;
  for (const char* source : {"cpu_capacity", "cpuinfo_max_freq"}) {
    const bool capacity = std::string_view(source) == "cpu_capacity";
    const std::string leaf = capacity ? "/cpu_capacity" : "/cpufreq/cpuinfo_max_freq";
    const double fraction = capacity ? kLittleCapacityFraction : kLittleFrequencyFraction;
    std::vector<unsigned long long> speed(t.online.size());
    bool all = true;
    for (std::size_t i = 0; i < t.online.size() && all; ++i)
      all = topology_detail::read_unsigned(
                sysfs_cpu_root + "/cpu" + std::to_string(t.online[i]) + leaf, speed[i]) &&
            speed[i] > 0;
    if (!all) continue;
    t.source = source;  // the first source that covers every core decides
    const auto [lo, hi] = std::minmax_element(speed.begin(), speed.end());
    if (static_cast<double>(*lo) < fraction * static_cast<double>(*hi)) {
      t.performance.clear();
      for (std::size_t i = 0; i < t.online.size(); ++i)
        if (speed[i] > *lo) t.performance.push_back(t.online[i]);
    }
    return t;
  }
  return t;
}

/// The size in bytes of the largest data or unified cache of cpu0 (the last-level cache), from
/// `sysfs_cpu_root`/cpu0/cache/index*/{level,type,size} (size as "32768K", "2M" or bytes); 0
/// when sysfs does not say (some VMs and containers hide it).
inline std::size_t last_level_cache_bytes(
    const std::string& sysfs_cpu_root = "/sys/devices/system/cpu") {
  std::size_t best = 0;
  unsigned long long best_level = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = sysfs_cpu_root + "/cpu0/cache/index" + std::to_string(i);
    unsigned long long level = 0;
    if (!topology_detail::read_unsigned(dir + "/level", level)) continue;
    std::string type, size;
    {
      std::ifstream f(dir + "/type");
      if (!(f >> type) || type == "Instruction") continue;
    }
    std::ifstream f(dir + "/size");
    if (!(f >> size) || size.empty()) continue;
    std::size_t scale = 1;
    if (size.back() == 'K') scale = std::size_t{1} << 10;
    if (size.back() == 'M') scale = std::size_t{1} << 20;
    if (size.back() == 'G') scale = std::size_t{1} << 30;
    if (scale != 1) size.pop_back();
    std::size_t n = 0;
    bool digits = !size.empty() && size.size() < 12;
    for (const char c : size) {
      if (c < '0' || c > '9') digits = false;
      if (digits) n = n * 10 + static_cast<std::size_t>(c - '0');
    }
    if (!digits || n == 0) continue;
    if (level > best_level || (level == best_level && n * scale > best)) {
      best_level = level;
      best = n * scale;
    }
  }
  return best;
}

/// The default number of compute threads: the performance cores on a big.LITTLE machine, else
/// `hardware_threads` (std::thread::hardware_concurrency()) unchanged.
inline std::size_t default_compute_threads(const CpuTopology& t,
                                           std::size_t hardware_threads) noexcept {
  if (t.heterogeneous()) return t.performance.size();
  return std::max<std::size_t>(1, hardware_threads);
}

}  // namespace edgellm::detail
