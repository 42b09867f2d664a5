// SPDX-License-Identifier: Apache-2.0
// A small fork-join thread pool that the host application creates, sizes and owns.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/detail/cpu_topology.hpp"
#include "edgellm/result.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sched.h>
#endif

namespace edgellm {

namespace detail {
/// Tells the core that this is a spin-wait loop (frees resources for a sibling hyper-thread and
/// saves power); a no-op where there is no such hint.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Spins while pred() holds, for at most `budget`; returns whether pred() still holds (the
/// caller then sleeps). The clock is read every 64 relax hints only.
template <class Pred>
bool spin_while(Pred&& pred, std::chrono::microseconds budget) noexcept {
  const auto start = std::chrono::steady_clock::now();
  for (unsigned i = 1; pred(); ++i) {
    if (i % 64 == 0 && std::chrono::steady_clock::now() - start > budget) return pred();
    cpu_relax();
  }
  return false;
}
}  // namespace detail

/// The default compute thread count: the performance cores of a big.LITTLE machine (sysfs
/// cpu_capacity or cpufreq clusters, detail/cpu_topology.hpp), else all hardware threads. A
/// thread on a little core would make every fork-join wait for it.
inline std::size_t default_thread_count() {
  return detail::default_compute_threads(detail::read_cpu_topology(),
                                         std::thread::hardware_concurrency());
}

/// Restricts the calling thread to the logical CPUs `cpus` (sched_setaffinity). Linux only;
/// elsewhere, and for an empty list, it does nothing and succeeds.
inline status pin_current_thread(std::span<const unsigned> cpus) {
#if defined(__linux__)
  if (cpus.empty()) return {};
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned c : cpus) {
    if (c >= CPU_SETSIZE) {
      return make_error(errc::invalid_argument, "pin_current_thread",
                        "cpus: " + std::to_string(c) + " is beyond CPU_SETSIZE");
    }
    CPU_SET(c, &set);
  }
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return make_error(errc::invalid_argument, "pin_current_thread",
                      "cpus: sched_setaffinity refused the set (offline or not allowed)");
  }
#else
  (void)cpus;
#endif
  return {};
}

/// How ThreadPool::create places its workers.
struct ThreadPoolOptions {
  /// Logical CPUs the workers may run on, e.g. detail::read_cpu_topology().performance; empty
  /// (the default): wherever the OS puts them. The calling thread is the application's and is
  /// left alone: pin_current_thread() pins it. A failed pin leaves that worker unpinned.
  std::vector<unsigned> pin_cpus;
};

/// Fork-join pool of `size()` threads: the calling thread plus size() - 1 workers that live as
/// long as the pool. `run(fn)` calls fn(thread_index, size()) once on every thread and returns
/// when all calls have finished. Work is split statically by the callers (each kernel derives
/// its partition from thread_index only), so results never depend on timing.
///
/// Thread safety: run() may be called from several application threads; calls are serialised.
/// Calling run() from inside a task is not allowed (it would deadlock) and is asserted.
/// Idle workers spin for up to kSpinTime, then sleep on an atomic wait, so an idle pool costs
/// no CPU. The spin covers the gaps between a decode step's kernels (norms, activations,
/// attention bookkeeping): waking a sleeping thread costs more per fork-join than a small
/// model's matmul takes (docs/performance.md, Thread pool).
class ThreadPool {
 public:
  /// Creates a pool of n_threads threads in total (the caller counts as one).
  static result<std::unique_ptr<ThreadPool>> create(std::size_t n_threads,
                                                    ThreadPoolOptions options = {}) {
    if (n_threads == 0) {
      return make_error(errc::invalid_argument, "ThreadPool::create",
                        "n_threads: must be at least 1");
    }
    if (n_threads > 1024) {
      return make_error(errc::invalid_argument, "ThreadPool::create",
                        "n_threads: " + std::to_string(n_threads) + " is more than 1024");
    }
    constexpr std::string_view where = "ThreadPool::create";
    std::unique_ptr<ThreadPool> pool;
    try {
      pool.reset(new ThreadPool(n_threads, std::move(options.pin_cpus)));
    } catch (const std::bad_alloc&) {
      return detail::allocation_error(where, "the pool's state",
                                      sizeof(ThreadPool) + n_threads * sizeof(Range));
    }
    // Workers start one by one; when one cannot (no memory for its stack, a thread limit),
    // the pool's destructor stops and joins those already running.
    for (std::size_t i = 1; i < n_threads; ++i) {
      try {
        pool->workers_.emplace_back([p = pool.get(), i] { p->worker(i); });
      } catch (const std::system_error& e) {
        return make_error(errc::out_of_memory, where,
                          "cannot start thread " + std::to_string(i + 1) + " of " +
                              std::to_string(n_threads) + ": " + e.what());
      }
    }
    return pool;
  }

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  ~ThreadPool() {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    for (auto& t : workers_) t.join();
  }

  std::size_t size() const noexcept { return n_threads_; }

  /// Parallel regions (fork-joins) run so far: every run(), parallel_for() and
  /// parallel_for_balanced() on a pool of more than one thread counts one; on a pool of one
  /// thread nothing is forked and nothing is counted. The delta over a decode step is its
  /// synchronisation count (edgellm-bench --profile). Counts the regions of every caller.
  std::uint64_t regions() const noexcept { return regions_.load(std::memory_order_relaxed); }

  /// Runs fn(thread_index, n_threads) on all threads (index 0 is the caller) and waits.
  template <class Fn>
  void run(Fn&& fn) {
    std::lock_guard<std::mutex> lock(run_mutex_);
    run_locked(fn);
  }

  /// Splits [0, count) into size() contiguous chunks and calls fn(begin, end) for each
  /// non-empty chunk, chunk t on thread t. The partition depends only on count and size().
  template <class Fn>
  void parallel_for(std::size_t count, Fn&& fn) {
    run([&](std::size_t t, std::size_t nt) {
      const std::size_t b = count * t / nt, e = count * (t + 1) / nt;
      if (b < e) fn(b, e);
    });
  }

  /// fn(begin, end) over [0, count) in pieces of at most `grain`, balanced at run time: thread
  /// t starts on the t-th of size() equal ranges and walks it front to back (one stream through
  /// memory, as parallel_for); a thread whose range is done takes pieces from the back of the
  /// others' ranges. For work that one slow core (a busy host, a little core) would otherwise
  /// hold up. Every index is visited exactly once; which thread runs it varies from call to call.
  template <class Fn>
  void parallel_for_balanced(std::size_t count, std::size_t grain, Fn&& fn) {
    if (count >= (std::uint64_t{1} << 32)) {  // ranges are packed in 32-bit halves
      parallel_for(count, fn);
      return;
    }
    grain = grain == 0 ? 1 : grain;
    std::lock_guard<std::mutex> lock(run_mutex_);
    // Each range: front (low half) and back (high half) of what is left, in one atomic, so the
    // owner (taking from the front) and thieves (from the back) never overlap. Set before any
    // thread starts (run_locked publishes them with its release of the generation counter).
    const std::size_t nt = size();
    for (std::size_t t = 0; t < nt; ++t)
      ranges_[t].fb.store(pack(count * t / nt, count * (t + 1) / nt), std::memory_order_relaxed);
    auto body = [&](std::size_t t, std::size_t) {
      for (;;) {  // own range, front to back
        std::uint64_t v = ranges_[t].fb.load(std::memory_order_relaxed);
        const std::size_t f = front(v), b = back(v);
        if (f >= b) break;
        const std::size_t nf = std::min(f + grain, b);
        if (ranges_[t].fb.compare_exchange_weak(v, pack(nf, b), std::memory_order_relaxed))
          fn(f, nf);
      }
      for (std::size_t i = 1; i < nt; ++i) {  // then the others', from their backs
        Range& r = ranges_[(t + i) % nt];
        for (;;) {
          std::uint64_t v = r.fb.load(std::memory_order_relaxed);
          const std::size_t f = front(v), b = back(v);
          if (f >= b) break;
          const std::size_t nb = b - std::min(grain, b - f);
          if (r.fb.compare_exchange_weak(v, pack(f, nb), std::memory_order_relaxed)) fn(nb, b);
        }
      }
    };
    run_locked(body);
  }

 private:
  // run() with run_mutex_ held.
  template <class Fn>
  void run_locked(Fn& fn) {
    const std::size_t n = size();
    if (n == 1) {
      fn(std::size_t{0}, std::size_t{1});
      return;
    }
    Task task{&invoke<std::remove_reference_t<Fn>>, static_cast<void*>(&fn)};
    task_ = task;
    regions_.fetch_add(1, std::memory_order_relaxed);  // under run_mutex_: no contention
    pending_.store(n - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    fn(std::size_t{0}, n);
    // Wait for the workers: spin first (kernels are short), then sleep.
    const auto busy = [this] { return pending_.load(std::memory_order_acquire) != 0; };
    if (detail::spin_while(busy, kSpinTime)) {
      for (std::size_t p; (p = pending_.load(std::memory_order_acquire)) != 0;)
        pending_.wait(p, std::memory_order_acquire);
    }
  }

  struct Task {
    void (*call)(void*, std::size_t, std::size_t);
    void* ctx;
  };
  struct alignas(64) Range {  // parallel_for_balanced: what is left of one thread's range
    std::atomic<std::uint64_t> fb{0};
  };
  static std::uint64_t pack(std::size_t f, std::size_t b) noexcept {
    return static_cast<std::uint64_t>(f) | (static_cast<std::uint64_t>(b) << 32);
  }
  static std::size_t front(std::uint64_t v) noexcept { return static_cast<std::size_t>(v & 0xFFFFFFFFu); }
  static std::size_t back(std::uint64_t v) noexcept { return static_cast<std::size_t>(v >> 32); }

  template <class F>
  static void invoke(void* ctx, std::size_t t, std::size_t n) {
    (*static_cast<F*>(ctx))(t, n);
  }

  // The workers are started by create(), which can report a thread that does not start.
  ThreadPool(std::size_t n_threads, std::vector<unsigned> pin_cpus)
      : pin_cpus_(std::move(pin_cpus)), n_threads_(n_threads), ranges_(new Range[n_threads]) {
    workers_.reserve(n_threads - 1);
  }

  void worker(std::size_t index) {
    (void)pin_current_thread(pin_cpus_);
    std::uint64_t seen = 0;
    for (;;) {
      const auto idle = [&] { return generation_.load(std::memory_order_acquire) == seen; };
      if (detail::spin_while(idle, kSpinTime)) {
        while (idle()) generation_.wait(seen, std::memory_order_acquire);
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_acquire)) return;
      const Task task = task_;
      task.call(task.ctx, index, size());
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  static constexpr std::chrono::microseconds kSpinTime{250};
  std::vector<unsigned> pin_cpus_;  // set before the workers start, then read-only
  std::size_t n_threads_;           // the caller and the workers
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;
  Task task_{nullptr, nullptr};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::size_t> pending_{0};
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> regions_{0};  // regions(): written under run_mutex_, read anywhere
  std::unique_ptr<Range[]> ranges_;  // [size()] parallel_for_balanced ranges
};

/// Runs fn over [0, count) on the pool, or inline when pool is null.
template <class Fn>
void parallel_for(ThreadPool* pool, std::size_t count, Fn&& fn) {
  if (pool == nullptr || pool->size() == 1) {
    if (count) fn(std::size_t{0}, count);
  } else {
    pool->parallel_for(count, fn);
  }
}

/// pool->parallel_for_balanced(count, grain, fn), or fn(0, count) inline without a pool.
template <class Fn>
void parallel_for_balanced(ThreadPool* pool, std::size_t count, std::size_t grain, Fn&& fn) {
  if (pool == nullptr || pool->size() == 1) {
    if (count) fn(std::size_t{0}, count);
  } else {
    pool->parallel_for_balanced(count, grain, fn);
  }
}

}  // namespace edgellm
