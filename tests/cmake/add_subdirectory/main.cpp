// SPDX-License-Identifier: Apache-2.0
// Consumer smoke test: the umbrella header compiles in a user's project and links.
#include <edgellm/edgellm.hpp>

#include <cstdio>
#include <string>

static edgellm::result<int> half(int x) {
  if (x % 2 != 0) {
    return edgellm::make_error(edgellm::errc::invalid_argument, "half", "odd input");
  }
  return x / 2;
}

int main() {
  const auto ok = half(42);
  const auto bad = half(3);
  if (!ok || *ok != 21 || bad || bad.error().message != "[half] odd input") {
    std::fprintf(stderr, "edgellm consumer: unexpected result\n");
    return 1;
  }
  std::printf("edgellm %d.%d.%d consumer ok\n", EDGELLM_VERSION_MAJOR, EDGELLM_VERSION_MINOR,
              EDGELLM_VERSION_PATCH);
  return 0;
}
