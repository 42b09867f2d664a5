// SPDX-License-Identifier: Apache-2.0
// The hook through which something outside the sampler changes next-token scores before a
// token is drawn: a grammar or a JSON constraint (constrain/) sets the tokens it does not allow
// to -inf. The Sampler calls it, when one is set, on its own copy of the logits.
#pragma once

#include "edgellm/result.hpp"

#include <cstdint>
#include <span>

namespace edgellm::decode {

/// Changes the scores of the next token. `history` is every token before it (the prompt
/// included). A sampler may ask for any position, repeatedly and out of order (speculative
/// decoding scores several positions, then rolls back), so an implementation keys what it keeps
/// on `history`, not on the order of the calls. An error (e.g. a history the constraint cannot
/// have produced) ends the generation with that error.
class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  /// logits: [vocab] scores, changed in place.
  virtual status apply(std::span<float> logits, std::span<const std::int32_t> history) = 0;
};

}  // namespace edgellm::decode
