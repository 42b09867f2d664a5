// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/membw_probe.hpp: the probe reads every word (its XOR
// checksum matches the host's) and reports a positive rate.
#include "edgellm/backend/vulkan/membw_probe.hpp"

#include "backend/vulkan/test_device.hpp"
#include "support/prelude.hpp"

#include <cstdint>
#include <vector>

namespace test_backend_vulkan_membw_probe {

namespace vk = edgellm::backend::vk;

TEST_CASE("the bandwidth probe reads the whole buffer", "[vulkan][membw_probe]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    // Sizes: one vec4, not a multiple of the workgroup, and several loop trips per invocation.
    for (const std::size_t bytes : {std::size_t{16}, std::size_t{16 * 1001}, std::size_t{4} << 20}) {
      INFO("bytes " << bytes);
      const std::vector<std::uint32_t> fill = {0x01234567u, 0x89ABCDEFu, 0x0F1E2D3Cu,
                                               0xDEADBEEFu, 0x13579BDFu};  // 5: not 4-periodic
      std::uint32_t want = 0;
      for (std::size_t w = 0; w < bytes / 4; ++w) want ^= fill[w % fill.size()];
      auto probe = vk::MembwProbe::create(*dev, bytes, fill);
      REQUIRE(probe);
      auto r = probe->run(2);
      REQUIRE(r);
      CHECK(r->bytes == bytes);
      CHECK(r->checksum == want);
      CHECK(r->bytes_per_second > 0);
    }
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_membw_probe
