// SPDX-License-Identifier: Apache-2.0
// The one splitter for comma-separated command-line lists ("1,2,4", "f32,int8", "12,40,7"),
// shared by the benches and the tools so that every list flag reads the same way.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace edgellm::detail {

/// Splits `s` at every `sep`, keeping empty items: "a,,b" gives {"a", "", "b"}, "" gives {""}
/// and "a," gives {"a", ""}, so that a caller validating each item reports the empty one
/// instead of silently dropping it. The views point into `s`.
inline std::vector<std::string_view> split_list(std::string_view s, char sep = ',') {
  std::vector<std::string_view> items;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = s.find(sep, start);
    if (end == std::string_view::npos) {
      items.push_back(s.substr(start));
      return items;
    }
    items.push_back(s.substr(start, end - start));
    start = end + 1;
  }
}

}  // namespace edgellm::detail
