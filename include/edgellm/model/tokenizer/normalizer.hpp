// SPDX-License-Identifier: Apache-2.0
// The normalizer stage: NFC, NFD, Prepend, literal Replace and Strip, applied in file order to
// each stretch of text between added tokens (and to the contents of `normalized` added tokens).
#pragma once

#include "edgellm/detail/unicode.hpp"
#include "edgellm/model/tokenizer/text.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace edgellm::model::detail::tok {

/// One normalizer of a tokenizer.json `normalizer` (a Sequence is flattened into several).
struct NormalizerStep {
  enum class Kind : std::uint8_t { nfc, nfd, prepend, replace, strip };
  Kind kind = Kind::nfc;
  std::string pattern;  ///< replace: the literal; prepend: the prefix
  std::string content;  ///< replace: the replacement
  bool left = false;    ///< strip
  bool right = false;   ///< strip
};

/// `text` after every step of `steps`, in order.
inline std::string normalize(std::span<const NormalizerStep> steps, std::string_view text) {
  std::string s(text);
  for (const NormalizerStep& n : steps) {
    switch (n.kind) {
      case NormalizerStep::Kind::nfc:
        s = uni::nfc(s);
        break;
      case NormalizerStep::Kind::nfd:
        s = uni::nfd(s);
        break;
      case NormalizerStep::Kind::prepend:
        if (!s.empty()) s.insert(0, n.pattern);
        break;
      case NormalizerStep::Kind::replace:
        s = replace_all(s, n.pattern, n.content);
        break;
      case NormalizerStep::Kind::strip: {
        const std::size_t b = n.left ? whitespace_run_after(s, 0) : 0;
        const std::size_t e = n.right ? std::max(b, whitespace_run_before(s, s.size())) : s.size();
        s = s.substr(b, e - b);
        break;
      }
    }
  }
  return s;
}

}  // namespace edgellm::model::detail::tok
