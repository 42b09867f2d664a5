// SPDX-License-Identifier: Apache-2.0
// Shared by the edgellm-bench-* programs: the flag table, timing, result rows, machine probes.
//
// Output contract (style §12): stdout is for machines only, in the format of -o/--format
// (output.hpp: tsv by default with `# key=value` metadata lines; json, jsonl and csv carry the
// metadata in every row; md). Chatter goes to stderr.
//
// Unlike include/edgellm, this is application code: it may start threads, lock memory and
// read /proc.
#pragma once

#include <edgellm/config.hpp>
#include <edgellm/detail/cpu_topology.hpp>
#include <edgellm/io/json_write.hpp>
#include <edgellm/io/meminfo.hpp>
#include <edgellm/kernels/matmul.hpp>  // best_isa: the family the GEMM runs (compute probe)

#include <fmt/format.h>
#include <xsimd/xsimd.hpp>

#include "build_info.hpp"
#include "flags.hpp"
#include "output.hpp"

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
#include <unistd.h>
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

/// Summary of samples (any unit): median, mean, sample standard deviation (NaN, printed as
/// null, for fewer than two samples), p10, p90 and min.
struct stats {
  double median = 0;
  double mean = 0;
  double stddev = std::nan("");
  double p10 = 0;
  double p90 = 0;
  double min = 0;
  int n = 0;
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

/// The stats of `samples` (all zero but stddev when empty).
inline stats summarize(std::vector<double> samples) {
  stats s;
  s.n = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (const double x : samples) sum += x;
  s.mean = sum / static_cast<double>(samples.size());
  if (samples.size() > 1) {
    double ss = 0;
    for (const double x : samples) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / static_cast<double>(samples.size() - 1));
  }
  s.median = quantile_sorted(samples, 0.5);
  s.p10 = quantile_sorted(samples, 0.1);
  s.p90 = quantile_sorted(samples, 0.9);
  s.min = samples.front();
  return s;
}

/// Summary of repeated calls, in microseconds per call.
struct timing {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double min_us = 0;
  int reps = 0;
  double mean_us = 0;
  double stddev_us = std::nan("");  ///< NaN (null) for one rep
  std::vector<double> samples_us;   ///< every rep, in call order
};

/// The median of samples (the mean of the middle two for an even count); 0 when empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, 0.5);
}

/// Calls `fn()` `warmup` times untimed (default: reps/5, at least 1), then `reps` times, each
/// timed alone with steady_clock, and returns median, p10, p90, min, mean and standard
/// deviation in microseconds.
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
  const stats st = summarize(us);
  return timing{st.median, st.p10, st.p90, st.min, reps, st.mean, st.stddev, std::move(us)};
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

/// Peak resident set size of this process (VmHWM), in bytes; 0 when /proc is unavailable.
using edgellm::io::peak_rss_bytes;

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
using edgellm::io::current_rss_bytes;

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
// Compute probe: the peak int8 multiply-add rate of the fast path's GEMM instruction

namespace probe_detail {

// Each kernel runs `iters` steps of `chains` independent accumulator chains of one instruction
// (or of the fixed sequence the microkernel uses in its place) and returns a checksum;
// `macs`: int8 multiply-adds per chain step. The chains cover the instruction's latency times
// its issue rate on the cores we know. The operands pass through an empty asm each step, so
// the compiler can neither hoist a product that does not depend on the accumulator out of the
// loop nor share it between chains. The chains are named variables bound by an empty asm each
// step, not an array: GCC 12 keeps an array of vectors on the stack here, and the probe would
// time its loads and stores. Target attributes as in kernels/arch/: with_dot calls one only for
// a family kernels::isa_supported() says the CPU has.
#define EDGELLM_PROBE_X6(S) S(0) S(1) S(2) S(3) S(4) S(5)
#define EDGELLM_PROBE_X8(S) EDGELLM_PROBE_X6(S) S(6) S(7)
#define EDGELLM_PROBE_X12(S) EDGELLM_PROBE_X8(S) S(8) S(9) S(10) S(11)
#define EDGELLM_PROBE_X16(S) EDGELLM_PROBE_X12(S) S(12) S(13) S(14) S(15)

#if EDGELLM_X86_MICROKERNELS
struct DotAvx512Vnni {  // vpdpbusd zmm: 16 int32 lanes x 4 u8*s8 products
  static constexpr const char* name = "vpdpbusd zmm";
  static constexpr std::size_t macs = 64, chains = 12;
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static std::int64_t run(
      std::size_t iters, std::int32_t seed) noexcept {
    __m512i w = _mm512_set1_epi32(seed), x = _mm512_set1_epi32(seed ^ 0x01020304);
#define EDGELLM_INIT(i) __m512i a##i = _mm512_set1_epi32(i);
#define EDGELLM_STEP(i)                       \
  a##i = _mm512_dpbusd_epi32(a##i, w, x);     \
  __asm__("" : "+v"(a##i));
#define EDGELLM_SUM(i) a0 = _mm512_add_epi32(a0, a##i);
    EDGELLM_PROBE_X12(EDGELLM_INIT)
    std::size_t n = 0;
    do {
      __asm__("" : "+v"(w), "+v"(x));
      EDGELLM_PROBE_X12(EDGELLM_STEP)
    } while (++n < iters);
    EDGELLM_PROBE_X12(EDGELLM_SUM)
#undef EDGELLM_INIT
#undef EDGELLM_STEP
#undef EDGELLM_SUM
    std::int32_t lanes[16];
    _mm512_storeu_si512(lanes, a0);
    return lanes[0];
  }
};

struct DotAvxVnni {  // vpdpbusd ymm (VEX): 8 int32 lanes x 4
  static constexpr const char* name = "vpdpbusd ymm";
  static constexpr std::size_t macs = 32, chains = 12;  // + 2 operands: 14 of 16 registers
  __attribute__((target("avxvnni,avx2"))) static std::int64_t run(std::size_t iters,
                                                                   std::int32_t seed) noexcept {
    __m256i w = _mm256_set1_epi32(seed), x = _mm256_set1_epi32(seed ^ 0x01020304);
#define EDGELLM_INIT(i) __m256i a##i = _mm256_set1_epi32(i);
#define EDGELLM_STEP(i)                         \
  a##i = _mm256_dpbusd_avx_epi32(a##i, w, x);   \
  __asm__("" : "+x"(a##i));
#define EDGELLM_SUM(i) a0 = _mm256_add_epi32(a0, a##i);
    EDGELLM_PROBE_X12(EDGELLM_INIT)
    std::size_t n = 0;
    do {
      __asm__("" : "+x"(w), "+x"(x));
      EDGELLM_PROBE_X12(EDGELLM_STEP)
    } while (++n < iters);
    EDGELLM_PROBE_X12(EDGELLM_SUM)
#undef EDGELLM_INIT
#undef EDGELLM_STEP
#undef EDGELLM_SUM
    return _mm256_extract_epi32(a0, 0);
  }
};

// vpmaddubsw + vpmaddwd + vpaddd: 32 u8*s8 products into 8 int32, the AVX2 kernel's dot. The
// products do not depend on the accumulator: each chain has its own opaque operand.
struct DotAvx2 {
  static constexpr const char* name = "vpmaddubsw+vpmaddwd ymm";
  static constexpr std::size_t macs = 32, chains = 6;  // 2 * 6 + 2 of 16 registers
  __attribute__((target("avx2"))) static std::int64_t run(std::size_t iters,
                                                          std::int32_t seed) noexcept {
    __m256i x = _mm256_set1_epi32(seed ^ 0x01020304);
    const __m256i ones = _mm256_set1_epi16(1);
#define EDGELLM_INIT(i) __m256i a##i = _mm256_set1_epi32(i), w##i = _mm256_set1_epi32(seed + i);
#define EDGELLM_STEP(i)                                                                     \
  __asm__("" : "+x"(w##i));                                                                 \
  a##i = _mm256_add_epi32(a##i, _mm256_madd_epi16(_mm256_maddubs_epi16(w##i, x), ones));    \
  __asm__("" : "+x"(a##i));
#define EDGELLM_SUM(i) a0 = _mm256_add_epi32(a0, a##i);
    EDGELLM_PROBE_X6(EDGELLM_INIT)
    std::size_t n = 0;
    do {
      __asm__("" : "+x"(x));
      EDGELLM_PROBE_X6(EDGELLM_STEP)
    } while (++n < iters);
    EDGELLM_PROBE_X6(EDGELLM_SUM)
#undef EDGELLM_INIT
#undef EDGELLM_STEP
#undef EDGELLM_SUM
    return _mm256_extract_epi32(a0, 0);
  }
};
#endif  // EDGELLM_X86_MICROKERNELS

#if EDGELLM_NEON_MICROKERNELS
// Accumulating instructions (smmla, sdot) with shared opaque operands.
#define EDGELLM_PROBE_NEON_ACC(TARGET)                                               \
  TARGET static std::int64_t run(std::size_t iters, std::int32_t seed) noexcept {    \
    int8x16_t w = vreinterpretq_s8_s32(vdupq_n_s32(seed));                           \
    int8x16_t x = vreinterpretq_s8_s32(vdupq_n_s32(seed ^ 0x01020304));              \
    EDGELLM_PROBE_X16(EDGELLM_INIT)                                                  \
    std::size_t n = 0;                                                               \
    do {                                                                             \
      __asm__("" : "+w"(w), "+w"(x));                                                \
      EDGELLM_PROBE_X16(EDGELLM_STEP)                                                \
    } while (++n < iters);                                                           \
    EDGELLM_PROBE_X16(EDGELLM_SUM)                                                   \
    return vaddvq_s32(a0);                                                           \
  }
#define EDGELLM_INIT(i) int32x4_t a##i = vdupq_n_s32(i);
#define EDGELLM_SUM(i) a0 = vaddq_s32(a0, a##i);

struct DotNeonI8mm {  // smmla: a 2x8 by 8x2 int8 product into 2x2 int32
  static constexpr const char* name = "smmla";
  static constexpr std::size_t macs = 32, chains = 16;
#define EDGELLM_STEP(i)                 \
  a##i = vmmlaq_s32(a##i, w, x);        \
  __asm__("" : "+w"(a##i));
  EDGELLM_PROBE_NEON_ACC(EDGELLM_TARGET_I8MM)
#undef EDGELLM_STEP
};

struct DotNeonDot {  // sdot (vector form): 4 int32 lanes x 4 products
  static constexpr const char* name = "sdot";
  static constexpr std::size_t macs = 16, chains = 16;
#define EDGELLM_STEP(i)                 \
  a##i = vdotq_s32(a##i, w, x);         \
  __asm__("" : "+w"(a##i));
  EDGELLM_PROBE_NEON_ACC(EDGELLM_TARGET_DOTPROD)
#undef EDGELLM_STEP
};
#undef EDGELLM_INIT
#undef EDGELLM_PROBE_NEON_ACC

// smull + smlal (8 + 8 widening int8 products into int16) + sadalp into int32: the Armv8.0
// kernel's sequence. As for AVX2, each chain has its own opaque operand.
struct DotNeon {
  static constexpr const char* name = "smull+smlal+sadalp";
  static constexpr std::size_t macs = 16, chains = 8;
  static std::int64_t run(std::size_t iters, std::int32_t seed) noexcept {
    int8x8_t x0 = vreinterpret_s8_s32(vdup_n_s32(seed ^ 0x01020304));
    int8x8_t x1 = vreinterpret_s8_s32(vdup_n_s32(seed ^ 0x05060708));
#define EDGELLM_INIT(i) \
  int32x4_t a##i = vdupq_n_s32(i); \
  int8x8_t w##i = vreinterpret_s8_s32(vdup_n_s32(seed + i));
#define EDGELLM_STEP(i)                                                \
  __asm__("" : "+w"(w##i));                                            \
  a##i = vpadalq_s16(a##i, vmlal_s8(vmull_s8(w##i, x0), w##i, x1));    \
  __asm__("" : "+w"(a##i));
    EDGELLM_PROBE_X8(EDGELLM_INIT)
    std::size_t n = 0;
    do {
      __asm__("" : "+w"(x0), "+w"(x1));
      EDGELLM_PROBE_X8(EDGELLM_STEP)
    } while (++n < iters);
    EDGELLM_PROBE_X8(EDGELLM_SUM)
#undef EDGELLM_INIT
#undef EDGELLM_STEP
    return vaddvq_s32(a0);
  }
};
#undef EDGELLM_SUM
#endif  // EDGELLM_NEON_MICROKERNELS

#undef EDGELLM_PROBE_X6
#undef EDGELLM_PROBE_X8
#undef EDGELLM_PROBE_X12
#undef EDGELLM_PROBE_X16

// MACs per second of Dot on `threads` std::threads at once: a calibration run on this thread
// (which also brings the core to the clock the instruction runs at) sizes a rep to
// ~`rep_seconds`; each rep starts all threads at a barrier and ends when the last finishes;
// the best of `reps` (a shared host only slows a rep down).
template <class Dot>
double dot_macs_per_s(int threads, double rep_seconds, int reps) {
  std::size_t iters = 1 << 14;
  for (;;) {  // grow until the calibration run is long enough to time
    const auto t0 = std::chrono::steady_clock::now();
    do_not_optimize(Dot::run(iters, 1));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= 2e-3 || iters >= (std::size_t{1} << 34)) {
      iters = std::max<std::size_t>(
          1, static_cast<std::size_t>(static_cast<double>(iters) * rep_seconds / s));
      break;
    }
    iters *= 4;
  }
  std::vector<double> seconds;
  std::chrono::steady_clock::time_point t0;
  int phase = 1;  // 1: start of a rep, 2: its end
  std::barrier sync(threads, [&]() noexcept {
    const auto now = std::chrono::steady_clock::now();
    if (phase == 1) t0 = now;
    if (phase == 2) seconds.push_back(std::chrono::duration<double>(now - t0).count());
    phase = phase == 1 ? 2 : 1;
  });
  auto worker = [&](int t) {
    for (int r = 0; r < reps; ++r) {
      sync.arrive_and_wait();
      do_not_optimize(Dot::run(iters, t + 1));
      sync.arrive_and_wait();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& th : pool) th.join();
  const double best = *std::min_element(seconds.begin(), seconds.end());
  return static_cast<double>(iters * Dot::chains * Dot::macs) * threads / best;
}

// Calls fn(std::type_identity<Dot>{}) with the probe kernel of the family `isa`, or returns
// `none` for the generic kernel (no int8 dot instruction) and families this build lacks.
template <class R, class Fn>
R with_dot(edgellm::kernels::Isa isa, R none, Fn&& fn) {
  using edgellm::kernels::Isa;
  switch (isa) {
#if EDGELLM_X86_MICROKERNELS
    case Isa::avx512_vnni: return fn(std::type_identity<DotAvx512Vnni>{});
    case Isa::avx_vnni: return fn(std::type_identity<DotAvxVnni>{});
    case Isa::avx2: return fn(std::type_identity<DotAvx2>{});
#endif
#if EDGELLM_NEON_MICROKERNELS
    case Isa::neon_i8mm: return fn(std::type_identity<DotNeonI8mm>{});
    case Isa::neon_dotprod: return fn(std::type_identity<DotNeonDot>{});
    case Isa::neon: return fn(std::type_identity<DotNeon>{});
#endif
    default: return none;
  }
}

}  // namespace probe_detail

/// The int8 multiply-add instruction of the fast path's prefill GEMM on this CPU and, once
/// measured, its peak rate.
struct int8_peak {
  /// The microkernel family the GEMM dispatches to (kernels::best_isa(): run-time detection).
  edgellm::kernels::Isa isa = edgellm::kernels::Isa::generic;
  /// "vpdpbusd zmm", "vpdpbusd ymm", "vpmaddubsw+vpmaddwd ymm", "smmla", "sdot",
  /// "smull+smlal+sadalp"; "none": the generic kernel, which has no int8 dot instruction.
  std::string instruction = "none";
  /// int8 multiply-adds (MACs) per second on the probed thread count; 0 for "none".
  double macs_per_s = 0;
};

/// The instruction of int8_peak for `isa` (default: the family the GEMM dispatches to), not
/// measured.
inline int8_peak int8_gemm_instruction(edgellm::kernels::Isa isa = edgellm::kernels::best_isa()) {
  int8_peak p;
  p.isa = isa;
  if (!edgellm::kernels::isa_supported(isa)) return p;
  p.instruction = probe_detail::with_dot(isa, std::string("none"), [](auto tag) {
    return std::string(decltype(tag)::type::name);
  });
  return p;
}

/// The peak int8 MAC rate of the GEMM's instruction (int8_gemm_instruction) on `threads`
/// threads at once: per thread a loop of independent accumulator chains of that instruction
/// (probe_detail), best of `reps` reps of ~`rep_seconds`. macs_per_s stays 0 where the
/// instruction is "none".
inline int8_peak measure_int8_peak(int threads, double rep_seconds = 0.05, int reps = 3) {
  int8_peak p = int8_gemm_instruction();
  if (p.instruction == "none") return p;
  p.macs_per_s = probe_detail::with_dot(p.isa, 0.0, [&](auto tag) {
    return probe_detail::dot_macs_per_s<typename decltype(tag)::type>(
        std::max(threads, 1), rep_seconds, std::max(reps, 1));
  });
  return p;
}

// ---------------------------------------------------------------------------------------------
// Metadata and rows

/// The size in bytes of the last-level cache: from sysfs (detail/cpu_topology.hpp), else what
/// the C library knows (glibc's sysconf, from cpuid on x86); 0 when unknown.
inline std::size_t last_level_cache_bytes() {
  if (const std::size_t b = edgellm::detail::last_level_cache_bytes(); b != 0) return b;
#if defined(_SC_LEVEL4_CACHE_SIZE) && defined(_SC_LEVEL3_CACHE_SIZE) && \
    defined(_SC_LEVEL2_CACHE_SIZE)
  for (const int name : {_SC_LEVEL4_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    if (const long b = ::sysconf(name); b > 0) return static_cast<std::size_t>(b);
  }
#endif
  return 0;
}

/// Build and machine facts, the fields llama-bench puts in every row: tsv and md print them
/// before the rows as `# key=value`, json, jsonl and csv in every row.
inline std::vector<field> default_metadata() {
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
  const auto topology = edgellm::detail::read_cpu_topology();
  const std::size_t llc = last_level_cache_bytes();
  return {
      {"edgellm", fmt::format("{}.{}.{}", EDGELLM_VERSION_MAJOR, EDGELLM_VERSION_MINOR,
                              EDGELLM_VERSION_PATCH)},
      {"git_sha", edgellm::build_info::git_sha()},
      {"compiler", std::move(compiler)},
      {"build_type", edgellm::build_info::build_type()},
      {"flags", edgellm::build_info::flags()},
      {"simd", xsimd::default_arch::name()},  // the exact path's, fixed at compile time
      {"microkernel", edgellm::kernels::isa_name(edgellm::kernels::best_isa())},
      {"features", features.empty() ? std::string("none") : features},
      {"cpu", cpu_model()},
      {"hardware_threads", std::thread::hardware_concurrency()},
      // big.LITTLE: the default thread count (thread_pool.hpp)
      {"performance_cores",
       fmt::format("{} of {} online ({}{})", topology.performance.size(), topology.online.size(),
                   topology.source, topology.heterogeneous() ? ", big.LITTLE" : "")},
      {"llc_bytes", llc == 0 ? value(null) : value(llc)},
      {"date", date},
  };
}

/// Prints result rows with a fixed column schema (append-only, style §12) in the format of
/// -o/--format (output.hpp). The first row also prints what precedes the rows (metadata,
/// header); the destructor closes a json array (an empty one when no row was printed).
///
///   bench::table out(opts, {"name", "isa", "m", "n", "k", "median_us"});
///   out.add_metadata("model", "qwen2-0.5b");
///   out.row({name, isa, m, n, k, t.median_us});
class table {
 public:
  table(const options& opts, std::vector<std::string> columns)
      : format_(opts.format), columns_(std::move(columns)), metadata_(default_metadata()) {}
  table(const table&) = delete;
  table& operator=(const table&) = delete;
  ~table() {
    if (format_ != output_format::json) return;
    start();
    fmt::print(stdout, "{}", format_end(format_));
    std::fflush(stdout);
  }

  /// Adds a metadata field (a row field in json/jsonl/csv); call before the first row. The key
  /// must differ from every column's name.
  void add_metadata(std::string key, value val) {
    metadata_.emplace_back(std::move(key), std::move(val));
  }

  /// Prints one row; `cells` must have one entry per column, in order (bench::null where the
  /// column does not apply to the row).
  void row(std::initializer_list<value> cells) { row(std::vector<value>(cells)); }

  void row(const std::vector<value>& cells) {
    if (cells.size() != columns_.size()) {
      note("[harness] row has {} cells, the table has {} columns", cells.size(), columns_.size());
      std::abort();
    }
    start();
    fmt::print(stdout, "{}", format_row(format_, columns_, metadata_, cells, rows_++));
    std::fflush(stdout);  // rows appear as they are measured, also through a pipe
  }

  const std::vector<std::string>& columns() const { return columns_; }

 private:
  void start() {
    if (started_) return;
    started_ = true;
    for (const auto& [k, v] : metadata_) {
      if (std::find(columns_.begin(), columns_.end(), k) != columns_.end()) {
        note("[harness] metadata key '{}' is also a column", k);
        std::abort();
      }
    }
    // json, jsonl and csv carry the metadata in their rows; stderr keeps the familiar lines.
    if (format_ != output_format::tsv && format_ != output_format::md) {
      for (const auto& [k, v] : metadata_)
        fmt::print(stderr, "# {}={}\n", k, render_cell(v, output_format::tsv));
    }
    fmt::print(stdout, "{}", format_begin(format_, columns_, metadata_));
  }

  output_format format_;
  std::vector<std::string> columns_;
  std::vector<field> metadata_;
  std::size_t rows_ = 0;
  bool started_ = false;
};

}  // namespace edgellm::bench
