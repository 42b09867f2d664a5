// SPDX-License-Identifier: Apache-2.0
// Decoding constrained to JSON: the tokens whose bytes keep the output a prefix of a JSON text
// (JsonMatcher), and the stop ids only once the text is whole. OpenAI's response_format
// {"type": "json_object"} is this with JsonMatcher::Options::object_only. The mask walk, its
// cache, the history and the token budget are constrain/token_constraint.hpp's.
#pragma once

#include "edgellm/constrain/json_matcher.hpp"
#include "edgellm/constrain/token_constraint.hpp"

namespace edgellm::constrain {

using JsonMaskCache = MaskCache<JsonMatcher>;
using JsonConstraintOptions = TokenConstraintOptions<JsonMatcher>;
using JsonConstraint = TokenConstraint<JsonMatcher>;

}  // namespace edgellm::constrain
