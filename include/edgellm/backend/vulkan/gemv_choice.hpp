// SPDX-License-Identifier: Apache-2.0
// Which build a Vulkan model's int4 decode GEMVs run (vk::BackendOptions::gemv, backend.hpp),
// and its names as the CLIs' --vk-gemv spells them. Includes no Vulkan header, so that the
// tools and benches parse the flag in builds without the backend too.
#pragma once

#include <optional>
#include <string_view>

namespace edgellm::backend::vk {

/// The int4 GEMVs' activations (GemvActivations, gemv_q4.hpp) a Backend uploads its linears with.
enum class GemvChoice {
  automatic,  ///< int8_dot where it pays (path fast, hardware 4x8 dot products), else fp32
  fp32,       ///< fp32 activations: the CPU exact path's math
  int8,       ///< W4A8: integer dot products where the device has them, else int multiply-adds
  int8_dot,   ///< W4A8 on integer dot products only: refused without shaderIntegerDotProduct
};

/// --vk-gemv's spelling: auto, fp32, int8, int8-dot.
constexpr std::string_view gemv_choice_name(GemvChoice c) noexcept {
  switch (c) {
    case GemvChoice::automatic: return "auto";
    case GemvChoice::fp32: return "fp32";
    case GemvChoice::int8: return "int8";
    case GemvChoice::int8_dot: return "int8-dot";
  }
  return "auto";
}

/// Parses gemv_choice_name()'s spellings; nullopt for anything else.
constexpr std::optional<GemvChoice> parse_gemv_choice(std::string_view s) noexcept {
  for (const GemvChoice c :
       {GemvChoice::automatic, GemvChoice::fp32, GemvChoice::int8, GemvChoice::int8_dot})
    if (s == gemv_choice_name(c)) return c;
  return std::nullopt;
}

}  // namespace edgellm::backend::vk
