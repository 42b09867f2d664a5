// SPDX-License-Identifier: Apache-2.0
#include "edgellm/thread_pool.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "support/limited_child.hpp"

namespace test_thread_pool {

using namespace edgellm;

TEST_CASE("ThreadPool::create rejects a thread count of 0", "[thread_pool]") {
  auto p = ThreadPool::create(0);
  REQUIRE_FALSE(p);
  REQUIRE(p.error().code == errc::invalid_argument);
  REQUIRE_THAT(p.error().message, Catch::Contains("n_threads"));
}

TEST_CASE("ThreadPool runs every index once, on distinct threads", "[thread_pool]") {
  for (std::size_t n : {1, 2, 3, 5}) {
    auto pool = ThreadPool::create(n);
    REQUIRE(pool);
    REQUIRE((*pool)->size() == n);
    for (int round = 0; round < 200; ++round) {
      std::vector<std::atomic<int>> hits(n);
      std::vector<std::thread::id> ids(n);
      std::atomic<int> wrong_nt{0};  // Catch's assertions are not for worker threads
      (*pool)->run([&](std::size_t t, std::size_t nt) {
        if (nt != n) wrong_nt.fetch_add(1);
        hits[t].fetch_add(1);
        ids[t] = std::this_thread::get_id();
      });
      REQUIRE(wrong_nt.load() == 0);
      for (std::size_t t = 0; t < n; ++t) REQUIRE(hits[t].load() == 1);
      REQUIRE(ids[0] == std::this_thread::get_id());
      for (std::size_t a = 0; a < n; ++a)
        for (std::size_t b = a + 1; b < n; ++b) REQUIRE(ids[a] != ids[b]);
    }
  }
}

TEST_CASE("parallel_for covers [0, count) exactly once with a fixed partition",
          "[thread_pool]") {
  auto pool = ThreadPool::create(3);
  REQUIRE(pool);
  for (std::size_t count : {0, 1, 2, 3, 10, 1000}) {
    std::vector<int> seen(count, 0);
    std::vector<std::pair<std::size_t, std::size_t>> chunks;
    std::mutex m;
    (*pool)->parallel_for(count, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) seen[i]++;
      std::lock_guard<std::mutex> lock(m);
      chunks.emplace_back(b, e);
    });
    for (int s : seen) REQUIRE(s == 1);
    for (auto [b, e] : chunks) REQUIRE(b < e);
  }
}

TEST_CASE("parallel_for_balanced covers [0, count) exactly once, and idle threads take over",
          "[thread_pool]") {
  for (std::size_t n : {1, 2, 3, 5}) {
    auto pool = ThreadPool::create(n);
    REQUIRE(pool);
    for (std::size_t count : {0, 1, 2, 7, 64, 1000, 4099}) {
      for (std::size_t grain : {0, 1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> seen(count);
        std::atomic<bool> bad_piece{false};
        (*pool)->parallel_for_balanced(count, grain, [&](std::size_t b, std::size_t e) {
          if (!(b < e && e <= count && e - b <= std::max<std::size_t>(grain, 1)))
            bad_piece = true;
          for (std::size_t i = b; i < e; ++i) seen[i].fetch_add(1);
        });
        INFO("threads " << n << ", count " << count << ", grain " << grain);
        CHECK_FALSE(bad_piece.load());
        for (std::size_t i = 0; i < count; ++i) REQUIRE(seen[i].load() == 1);
      }
    }
  }
  // The caller stalls on the first piece it runs: the worker must run most of the range. Which
  // piece that is depends on scheduling (under emulation the worker may reach the caller's
  // half, index 0 included, before the caller starts), so the stall follows the thread, not an
  // index.
  auto pool = ThreadPool::create(2);
  REQUIRE(pool);
  const std::size_t count = 64;
  std::vector<std::thread::id> owner(count);
  const auto caller = std::this_thread::get_id();
  bool caller_stalled = false;  // touched by the caller only
  (*pool)->parallel_for_balanced(count, 1, [&](std::size_t b, std::size_t e) {
    if (std::this_thread::get_id() == caller && !caller_stalled) {
      caller_stalled = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (std::size_t i = b; i < e; ++i) owner[i] = std::this_thread::get_id();
  });
  std::size_t by_caller = 0;
  for (const auto& id : owner) by_caller += id == caller ? 1 : 0;
  // The caller owns [0, 32); while it sleeps in its first piece the worker finishes its own
  // half and takes pieces from the back of the caller's.
  CHECK(by_caller < count / 2);
}

TEST_CASE("ThreadPool::run may be called from several application threads", "[thread_pool]") {
  auto pool = ThreadPool::create(2);
  REQUIRE(pool);
  std::atomic<long> total{0};
  std::vector<std::thread> apps;
  for (int a = 0; a < 3; ++a)
    apps.emplace_back([&] {
      for (int i = 0; i < 300; ++i)
        (*pool)->parallel_for(10, [&](std::size_t b, std::size_t e) {
          total.fetch_add(static_cast<long>(e - b));
        });
    });
  for (auto& t : apps) t.join();
  REQUIRE(total.load() == 3 * 300 * 10);
}

TEST_CASE("ThreadPool::regions counts one fork-join per parallel region", "[thread_pool]") {
  auto pool = ThreadPool::create(3);
  REQUIRE(pool);
  ThreadPool& p = **pool;
  REQUIRE(p.regions() == 0);
  p.run([](std::size_t, std::size_t) {});
  CHECK(p.regions() == 1);
  p.parallel_for(100, [](std::size_t, std::size_t) {});
  CHECK(p.regions() == 2);
  p.parallel_for_balanced(1000, 7, [](std::size_t, std::size_t) {});
  CHECK(p.regions() == 3);
  parallel_for(&p, 10, [](std::size_t, std::size_t) {});  // the free function forks too
  CHECK(p.regions() == 4);
  // Several application threads: every region is counted once.
  std::vector<std::thread> apps;
  for (int a = 0; a < 3; ++a)
    apps.emplace_back([&] {
      for (int i = 0; i < 50; ++i) p.parallel_for(4, [](std::size_t, std::size_t) {});
    });
  for (auto& t : apps) t.join();
  CHECK(p.regions() == 4 + 3 * 50);

  // One thread forks nothing: no regions.
  auto single = ThreadPool::create(1);
  REQUIRE(single);
  (*single)->run([](std::size_t, std::size_t) {});
  (*single)->parallel_for_balanced(100, 3, [](std::size_t, std::size_t) {});
  parallel_for(single->get(), 10, [](std::size_t, std::size_t) {});
  CHECK((*single)->regions() == 0);
}

TEST_CASE("ThreadPool pins its workers when asked, and the caller only by pin_current_thread",
          "[thread_pool]") {
  REQUIRE(pin_current_thread({}));  // an empty set: nothing to do
  REQUIRE(default_thread_count() >= 1);
#if defined(__linux__)
  cpu_set_t before;
  REQUIRE(sched_getaffinity(0, sizeof(before), &before) == 0);
  unsigned first = 0;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &before)) ++first;
  REQUIRE(first < CPU_SETSIZE);
  auto pool = ThreadPool::create(3, ThreadPoolOptions{{first}});
  REQUIRE(pool);
  std::vector<int> pinned(3, -1);
  (*pool)->run([&](std::size_t t, std::size_t) {
    cpu_set_t s;
    if (sched_getaffinity(0, sizeof(s), &s) == 0)
      pinned[t] = CPU_COUNT(&s) == 1 && CPU_ISSET(first, &s) ? 1 : 0;
  });
  REQUIRE(pinned[1] == 1);
  REQUIRE(pinned[2] == 1);
  cpu_set_t after;
  REQUIRE(sched_getaffinity(0, sizeof(after), &after) == 0);
  REQUIRE(CPU_EQUAL(&before, &after));  // the calling thread is the application's
  const unsigned too_big = CPU_SETSIZE;
  REQUIRE_FALSE(pin_current_thread(std::span<const unsigned>(&too_big, 1)));
#endif
}

TEST_CASE("ThreadPool::create: a thread that cannot start is an error, not std::system_error",
          "[thread_pool]") {
  // In a child with an address-space limit just above what it uses, the workers' stacks
  // (8 MiB each by default) cannot be mapped; create() must report it and join those started.
  const auto child = test::run_limited(test::vm_bytes() + (std::size_t{48} << 20), [] {
    auto pool = ThreadPool::create(64);
    if (pool) return std::string("created");  // the limit did not bite: fails below
    return std::string(edgellm::to_string(pool.error().code)) + ": " + pool.error().message;
  });
  if (!child.supported) {
    WARN("skipped: RLIMIT_AS does not apply here (" + child.why_unsupported() + ")");
    return;
  }
  INFO(child.describe());
  REQUIRE(child.exited);
  using Catch::Matchers::Contains;
  CHECK_THAT(child.output, Contains("out of memory") && Contains("cannot start thread") &&
                               Contains("[ThreadPool::create]"));
}

}  // namespace test_thread_pool
