// SPDX-License-Identifier: Apache-2.0
// The compiled constraints edgellm-server keeps (schemas, grammars, tool sets), the most recent
// `capacity` by their source text: a compiled constraint keeps the masks it has computed, so
// requests that ask for the same one share them. Thread-safe.
#pragma once

#include <edgellm/result.hpp>

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace edgellm::server {

template <class T>
class CompiledCache {
 public:
  explicit CompiledCache(std::size_t capacity) : capacity_(capacity) {}

  /// The entry for `key`, or `compile()` (a result<std::shared_ptr<const T>>) kept under it.
  /// Compiling happens outside the lock (a large schema takes milliseconds); two requests for a
  /// new key at once may both compile it, and both results are right.
  template <class Compile>
  result<std::shared_ptr<const T>> get(const std::string& key, Compile&& compile) {
    {
      std::lock_guard lock(mu_);
      for (const auto& [k, v] : kept_)
        if (k == key) return v;
    }
    result<std::shared_ptr<const T>> made = compile();
    if (!made) return made.error();
    std::lock_guard lock(mu_);
    if (kept_.size() >= capacity_) kept_.pop_front();
    kept_.emplace_back(key, *made);
    return *made;
  }

 private:
  std::size_t capacity_;
  std::mutex mu_;
  std::deque<std::pair<std::string, std::shared_ptr<const T>>> kept_;
};

}  // namespace edgellm::server
