// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/gemv_choice.hpp: every GemvChoice's --vk-gemv spelling
// parses back to it, and nothing else parses. (What each choice runs: backend_test.cpp.)
#include "edgellm/backend/vulkan/gemv_choice.hpp"

#include "support/prelude.hpp"

namespace test_backend_vulkan_gemv_choice {

namespace vk = edgellm::backend::vk;

TEST_CASE("--vk-gemv's spellings parse to their GemvChoice", "[vulkan][gemv_choice]") {
  STATIC_REQUIRE(vk::gemv_choice_name(vk::GemvChoice::automatic) == "auto");
  STATIC_REQUIRE(vk::gemv_choice_name(vk::GemvChoice::int8_dot) == "int8-dot");
  for (const auto g : {vk::GemvChoice::automatic, vk::GemvChoice::fp32, vk::GemvChoice::int8,
                       vk::GemvChoice::int8_dot})
    CHECK(vk::parse_gemv_choice(vk::gemv_choice_name(g)) == g);
  STATIC_REQUIRE(vk::parse_gemv_choice("fp32") == vk::GemvChoice::fp32);
  // The enum's own spelling, other cases and near misses are not names.
  for (const char* bad : {"int8_dot", "automatic", "AUTO", "Int8", "fp16", "", " int8"})
    CHECK_FALSE(vk::parse_gemv_choice(bad));
}

}  // namespace test_backend_vulkan_gemv_choice
