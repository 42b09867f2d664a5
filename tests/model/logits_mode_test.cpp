// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/model/logits_mode.hpp (and its re-export in decode/model.hpp).
#include "edgellm/model/logits_mode.hpp"

#include "edgellm/decode/model.hpp"

#include <catch2/catch.hpp>

#include <type_traits>

namespace test_model_logits_mode {

TEST_CASE("logits_count: one row for last, one per token for all", "[model]") {
  using edgellm::model::LogitsMode;
  STATIC_REQUIRE(edgellm::model::logits_count(LogitsMode::last, 7, 100) == 100);
  STATIC_REQUIRE(edgellm::model::logits_count(LogitsMode::all, 7, 100) == 700);
  STATIC_REQUIRE(std::is_same_v<edgellm::decode::LogitsMode, LogitsMode>);
  STATIC_REQUIRE(edgellm::decode::logits_count(edgellm::decode::LogitsMode::all, 2, 3) == 6);
}

}  // namespace test_model_logits_mode
