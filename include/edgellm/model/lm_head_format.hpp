// SPDX-License-Identifier: Apache-2.0
// The form the lm_head (or the tied embedding used as lm_head) is multiplied in, and its CLI names.
#pragma once

#include <optional>
#include <string_view>

namespace edgellm::model {

/// How lm_head (or the tied embedding used as lm_head) is multiplied.
enum class LmHeadFormat {
  as_stored,  ///< the fp16/bf16/fp32 tensor in place (mmapped), converted on the fly: exact
              ///< weights, no extra memory, 2 bytes per weight read per token ("f16")
  int8,       ///< RTN-quantised to symmetric int8 at load (group 128, or 64 / 32 when
              ///< hidden_size needs it) and run by the int8 kernels: ~1.03 bytes per weight
  q4,         ///< RTN-quantised to int4 at load (group 128, or 64 / 32 when hidden_size needs
              ///< it) and run by the int4 kernels: ~0.53 bytes per weight, quantisation error
};

/// The CLI name of a format: "f16" (as stored, whatever its dtype), "int8", "int4".
inline const char* lm_head_format_name(LmHeadFormat f) noexcept {
  return f == LmHeadFormat::int8 ? "int8" : f == LmHeadFormat::q4 ? "int4" : "f16";
}

/// Parses a CLI value: f16 | int8 | int4, with as_stored / stored and q4 accepted as aliases.
inline std::optional<LmHeadFormat> parse_lm_head_format(std::string_view s) noexcept {
  if (s == "f16" || s == "as_stored" || s == "stored") return LmHeadFormat::as_stored;
  if (s == "int8") return LmHeadFormat::int8;
  if (s == "int4" || s == "q4") return LmHeadFormat::q4;
  return std::nullopt;
}

}  // namespace edgellm::model
