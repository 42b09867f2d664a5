// SPDX-License-Identifier: Apache-2.0
// The move-only wrappers' moves, written once: Handle<T>, a member that a move takes and leaves
// null, and move_assign, a move assignment that frees what the target held first.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace edgellm::backend::vk {

/// A Vulkan handle, a Device*, a dlopen handle or mapped pointer (or a flag or count that goes
/// with them) that a move takes, leaving T{} behind, so that a moved-from wrapper's destructor
/// finds nothing to destroy. It destroys nothing itself: the wrapper's destructor does, in the
/// order Vulkan requires. A wrapper whose owning members are all Handles (or move-only
/// wrappers) gets its move constructor from `= default` and its move assignment from
/// move_assign.
template <class T>
class Handle {
 public:
  Handle() = default;
  Handle(T v) noexcept : v_(v) {}  // NOLINT: implicit, as the raw member it replaces
  Handle(Handle&& o) noexcept : v_(std::exchange(o.v_, T{})) {}
  Handle& operator=(Handle&& o) noexcept {
    v_ = std::exchange(o.v_, T{});
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  operator T() const noexcept { return v_; }  // NOLINT: reads as the raw member
  T get() const noexcept { return v_; }
  T& value() noexcept { return v_; }
  const T& value() const noexcept { return v_; }
  /// Where a vkCreate* / vkAllocate* call writes the handle, or a pointer to one handle.
  T* addressof() noexcept { return &v_; }
  const T* addressof() const noexcept { return &v_; }
  /// The pointee's members (T a pointer to a class), or the held struct's (T a class).
  T operator->() const noexcept
    requires(std::is_pointer_v<T> && std::is_class_v<std::remove_pointer_t<T>>)
  {
    return v_;
  }
  T* operator->() noexcept
    requires std::is_class_v<T>
  {
    return &v_;
  }
  const T* operator->() const noexcept
    requires std::is_class_v<T>
  {
    return &v_;
  }

 private:
  T v_{};
};

/// Move assignment of a move-only wrapper whose move constructor is the defaulted one over
/// Handle members: runs self's destructor (freeing what it holds, in its order), then takes
/// over `other`'s objects. Self-assignment does nothing.
template <class W>
W& move_assign(W& self, W&& other) noexcept {
  static_assert(std::is_nothrow_move_constructible_v<W>);
  if (&self != &other) {
    std::destroy_at(&self);
    std::construct_at(&self, std::move(other));
  }
  return self;
}

}  // namespace edgellm::backend::vk
