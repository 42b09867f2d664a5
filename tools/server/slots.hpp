// SPDX-License-Identifier: Apache-2.0
// edgellm-server's slots: a Session each over the one Engine, handed to one request at a time in
// the order the requests arrived, each to the free slot whose cached tokens share the longest
// prefix with its prompt.
#pragma once

#include <edgellm/session.hpp>
#include <edgellm/thread_pool.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace edgellm::server {

struct Slot {
  std::unique_ptr<ThreadPool> pool;  // this slot's threads (declared first: outlives session)
  std::optional<Session> session;
  std::vector<std::int32_t> held;  // tokens the cache holds after the last request (approx.)
  bool busy = false;
  std::uint64_t last_used = 0;
};

class Scheduler {
 public:
  explicit Scheduler(std::size_t max_queue) : max_queue_(max_queue) {}

  std::vector<Slot>& slots() { return slots_; }

  /// A place in the queue, or nothing when it is full or the server is stopping.
  std::optional<std::uint64_t> enqueue() {
    std::lock_guard lock(mu_);
    if (stopping_ || waiting_.size() >= max_queue_ + free_slots_locked()) return std::nullopt;
    const std::uint64_t ticket = next_ticket_++;
    waiting_.push_back(ticket);
    return ticket;
  }

  /// Waits until `ticket` is first in line and a slot is free; takes the free slot sharing the
  /// longest prefix with `prompt`. Null when `give_up()` says so while waiting (polled).
  Slot* acquire(std::uint64_t ticket, std::span<const std::int32_t> prompt,
                const std::function<bool()>& give_up) {
    std::unique_lock lock(mu_);
    for (;;) {
      if (waiting_.front() == ticket && free_slots_locked() > 0) break;
      if (give_up()) {
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), ticket));
        cv_.notify_all();
        return nullptr;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
    waiting_.pop_front();
    Slot* best = nullptr;
    std::size_t best_common = 0;
    for (Slot& s : slots_) {
      if (s.busy) continue;
      const auto common = static_cast<std::size_t>(
          std::mismatch(s.held.begin(), s.held.end(), prompt.begin(), prompt.end()).first -
          s.held.begin());
      if (best == nullptr || common > best_common ||
          (common == best_common && s.last_used < best->last_used)) {
        best = &s;
        best_common = common;
      }
    }
    best->busy = true;
    best->last_used = ++uses_;
    ++active_;
    cv_.notify_all();
    return best;
  }

  /// Leaves the queue if `ticket` is still in it (a streamed request whose client left before
  /// its reply started); otherwise nothing.
  void forget(std::uint64_t ticket) {
    std::lock_guard lock(mu_);
    if (const auto it = std::find(waiting_.begin(), waiting_.end(), ticket); it != waiting_.end()) {
      waiting_.erase(it);
      cv_.notify_all();
    }
  }

  void release(Slot& s) {
    std::lock_guard lock(mu_);
    s.busy = false;
    --active_;
    cv_.notify_all();
  }

  std::size_t queue_length() {
    std::lock_guard lock(mu_);
    return waiting_.size();
  }
  std::size_t active() {
    std::lock_guard lock(mu_);
    return active_;
  }
  bool stopping() {
    std::lock_guard lock(mu_);
    return stopping_;
  }
  void stop_accepting() {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }

 private:
  std::size_t free_slots_locked() const { return slots_.size() - active_; }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::deque<std::uint64_t> waiting_;
  std::uint64_t next_ticket_ = 0, uses_ = 0;
  std::size_t active_ = 0, max_queue_;
  bool stopping_ = false;
};

}  // namespace edgellm::server
