// SPDX-License-Identifier: Apache-2.0
// guard_exceptions: the backstop that turns an exception escaping a public entry point into a
// result's error, so that no exception crosses the library's boundary.
#pragma once

#include "edgellm/result.hpp"

#include <exception>
#include <new>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>

namespace edgellm::detail {

/// Runs fn() (returning a result<T> or a status) and turns an exception that escapes it into an
/// error: std::bad_alloc / std::length_error into out_of_memory, a std::system_error (a thread
/// that could not start) into out_of_memory with its text, anything else into errc::internal.
/// The backstop of the public entry points (Engine::load, Session::create / generate,
/// model::load_weights, Tokenizer::load); the allocations sized by input are checked where they
/// happen, so the message can say what was being allocated.
template <class Fn>
auto guard_exceptions(std::string_view where, Fn&& fn) noexcept -> decltype(fn()) {
  const auto fail = [&](errc code, const char* what) noexcept -> error {
    try {
      return make_error(code, where, what);
    } catch (...) {
      return error{code, {}};
    }
  };
  try {
    return std::forward<Fn>(fn)();
  } catch (const std::bad_alloc&) {
    return fail(errc::out_of_memory, "out of memory");
  } catch (const std::length_error& e) {
    return fail(errc::out_of_memory, e.what());
  } catch (const std::system_error& e) {
    return fail(errc::out_of_memory, e.what());
  } catch (const std::exception& e) {
    return fail(errc::internal, e.what());
  } catch (...) {
    return fail(errc::internal, "unknown exception");
  }
}

}  // namespace edgellm::detail
