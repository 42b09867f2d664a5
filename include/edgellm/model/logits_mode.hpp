// SPDX-License-Identifier: Apache-2.0
// Which logits a forward() call writes, and how many floats that is (used by the Transformer and
// by decode::Model, which re-exports both names).
#pragma once

#include <cstddef>

namespace edgellm::model {

/// Which logits a forward() call writes.
enum class LogitsMode {
  last,  ///< only the last new token's: logits[vocab_size()]
  all,   ///< every new token's, in order: logits[tokens.size()][vocab_size()]
};

/// Number of floats forward() writes for `n_tokens` new tokens in `mode`.
inline constexpr std::size_t logits_count(LogitsMode mode, std::size_t n_tokens,
                                          std::size_t vocab_size) noexcept {
  return (mode == LogitsMode::all ? n_tokens : 1) * vocab_size;
}

}  // namespace edgellm::model
