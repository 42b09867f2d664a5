// SPDX-License-Identifier: Apache-2.0
// The bundled KJV target model (models/kjv-target-awq), loaded once per test binary and shared
// by the tests that generate with it (the constrained-decoding tests).
#pragma once

#include "edgellm/session.hpp"
#include "support/prelude.hpp"
#include "support/test_env.hpp"

#include <memory>

namespace edgellm::test {

inline std::shared_ptr<const Engine> bundled_engine() {
  static const auto engine = [] {
    auto r = Engine::load(source_dir() + "/models/kjv-target-awq");
    REQUIRE(r);
    return *r;
  }();
  return engine;
}

}  // namespace edgellm::test
