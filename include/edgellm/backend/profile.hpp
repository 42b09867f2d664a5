// SPDX-License-Identifier: Apache-2.0
// Where a backend's time goes: summed wall time, calls and pool fork-joins per op kind, filled
// by a backend whose backend::Options::profile points at a Profile (edgellm-bench --profile).
#pragma once

#include "edgellm/thread_pool.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace edgellm::backend {

/// The op kinds of a decoder step. The CPU backend tells the two linear() calls and the two
/// linear_group() calls of a layer apart by shape: a linear whose input has intermediate_size
/// columns is down, any other o_proj; a group whose first output has intermediate_size columns
/// is gate_up, any other qkv (so a model with heads * head_dim == intermediate_size would count
/// its o_proj as down).
enum class OpKind : std::uint8_t {
  embed,      ///< token embedding lookup
  rms_norm,   ///< input / post-attention / final norms, and Qwen3's per-head q/k norms
  qkv,        ///< linear_group of q_proj, k_proj, v_proj
  rope,       ///< RoPE of q and of k
  attention,  ///< KV append + causal attention
  o_proj,     ///< linear of the attention output
  gate_up,    ///< linear_group of gate_proj, up_proj
  silu_mul,   ///< silu(gate) * up
  down,       ///< linear of down_proj
  add,        ///< residual adds
  lm_head,    ///< logits (the lm_head product)
  other,      ///< begin / finish of a step, and anything not above
};

inline constexpr std::size_t kOpKinds = static_cast<std::size_t>(OpKind::other) + 1;

/// The kind's name, as edgellm-bench --profile prints it ("qkv", "lm_head", ...).
constexpr std::string_view op_kind_name(OpKind kind) noexcept {
  constexpr std::array<std::string_view, kOpKinds> names = {
      "embed",  "rms_norm", "qkv",  "rope", "attention", "o_proj",
      "gate_up", "silu_mul", "down", "add",  "lm_head",   "other"};
  const auto i = static_cast<std::size_t>(kind);
  return i < kOpKinds ? names[i] : std::string_view("?");
}

/// Totals of one op kind.
struct OpStats {
  std::uint64_t ns = 0;       ///< summed steady_clock time of its calls, nanoseconds
  std::uint64_t calls = 0;    ///< calls
  std::uint64_t regions = 0;  ///< pool fork-joins during its calls (ThreadPool::regions deltas)
};

/// Per-op-kind totals, summed over every op a backend runs while it points at this Profile.
/// Not thread-safe: one backend instance (one Transformer) per Profile at a time. The fork-join
/// counts are those of the whole pool, so another instance sharing the pool at the same time
/// adds its own.
class Profile {
 public:
  void add(OpKind kind, std::uint64_t ns, std::uint64_t regions) noexcept {
    OpStats& s = ops_[static_cast<std::size_t>(kind) % kOpKinds];
    s.ns += ns;
    s.calls += 1;
    s.regions += regions;
  }

  const OpStats& operator[](OpKind kind) const noexcept {
    return ops_[static_cast<std::size_t>(kind) % kOpKinds];
  }

  /// The sums over all kinds.
  OpStats total() const noexcept {
    OpStats t;
    for (const OpStats& s : ops_) {
      t.ns += s.ns;
      t.calls += s.calls;
      t.regions += s.regions;
    }
    return t;
  }

  void reset() noexcept { ops_ = {}; }

 private:
  std::array<OpStats, kOpKinds> ops_{};
};

/// Times one op from construction to destruction into `profile` (null: does nothing but test
/// the pointer, so an unprofiled backend pays one branch per op). `pool` may be null.
class ProfileScope {
 public:
  ProfileScope(Profile* profile, OpKind kind, const ThreadPool* pool) noexcept
      : profile_(profile), pool_(pool), kind_(kind) {
    if (profile_ == nullptr) return;
    regions0_ = pool_ ? pool_->regions() : 0;
    t0_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (profile_ == nullptr) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - t0_)
                        .count();
    profile_->add(kind_, static_cast<std::uint64_t>(ns),
                  pool_ ? pool_->regions() - regions0_ : 0);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  Profile* profile_;
  const ThreadPool* pool_;
  OpKind kind_;
  std::uint64_t regions0_ = 0;
  std::chrono::steady_clock::time_point t0_{};
};

}  // namespace edgellm::backend
