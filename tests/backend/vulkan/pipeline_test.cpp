// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/pipeline.hpp: workgroup sizes from device limits, the
// pipeline's argument errors, and descriptor sets made per recording.
#include "edgellm/backend/vulkan/pipeline.hpp"

#include "backend/vulkan/test_device.hpp"
#include "edgellm/backend/vulkan/spirv/membw_probe.hpp"
#include "support/prelude.hpp"

namespace test_backend_vulkan_pipeline {

namespace vk = edgellm::backend::vk;

TEST_CASE("workgroup sizes follow the device's limits", "[vulkan][pipeline]") {
  vk::DeviceInfo info;
  info.max_workgroup_size[0] = 1024;
  info.max_workgroup_invocations = 1024;
  info.shared_memory_bytes = 32768;
  CHECK(vk::choose_workgroup_size(info, 256, 4) == 256);
  CHECK(vk::choose_workgroup_size(info, 200, 4) == 128);  // a power of two
  info.max_workgroup_invocations = 128;                    // the spec's minimum
  CHECK(vk::choose_workgroup_size(info, 256, 4) == 128);
  info.max_workgroup_invocations = 1024;
  info.shared_memory_bytes = 16384;  // 16 KiB at 128 bytes each: 128
  CHECK(vk::choose_workgroup_size(info, 1024, 128) == 128);
  info.max_workgroup_size[0] = 96;
  CHECK(vk::choose_workgroup_size(info, 256, 4) == 64);
  CHECK(vk::choose_workgroup_size(info, 8, 4) == 16);  // never below the minimum
  CHECK(vk::choose_workgroup_size(info, 0, 0) == 16);
}

TEST_CASE("pipeline arguments are checked", "[vulkan][pipeline]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    auto big = vk::ComputePipeline::create(*dev, "probe", vk::spirv::kMembwProbeSpv, 2,
                                           dev->info().max_push_constants_bytes + 4, 64);
    REQUIRE_FALSE(big);
    CHECK(big.error().code == errc::unsupported);
    CHECK_THAT(big.error().message, Contains("push constants"));
    auto p = vk::ComputePipeline::create(*dev, "probe", vk::spirv::kMembwProbeSpv, 2, 8, 64);
    REQUIRE(p);
    CHECK(p->workgroup_size() == 64);
    auto buf = vk::Buffer::create(*dev, 64, "b");
    REQUIRE(buf);
    const vk::Buffer* one[] = {&*buf};
    auto st = p->bind(one);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == errc::invalid_argument);
    const vk::Buffer* two[] = {&*buf, &*buf};
    REQUIRE(p->bind(two));
    vk::ComputePipeline moved = std::move(*p);
    CHECK(moved.workgroup_size() == 64);
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("a pipeline makes one descriptor set per set of buffers", "[vulkan][pipeline]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    vk::ComputePipeline empty;
    auto buf = vk::Buffer::create(*dev, 64, "b");
    REQUIRE(buf);
    const vk::Buffer* two[] = {&*buf, &*buf};
    auto none = empty.make_set(two);
    REQUIRE_FALSE(none);
    CHECK_THAT(none.error().message, Contains("an empty pipeline"));
    auto p = vk::ComputePipeline::create(*dev, "probe", vk::spirv::kMembwProbeSpv, 2, 8, 64);
    REQUIRE(p);
    CHECK(p->bindings() == 2);
    CHECK(p->push_bytes() == 8);
    CHECK(p->device() == dev.get());
    const vk::Buffer* one[] = {&*buf};
    auto bad = p->make_set(one);
    REQUIRE_FALSE(bad);
    CHECK(bad.error().code == errc::invalid_argument);
    CHECK_THAT(bad.error().message, Contains("make_set: 1 buffers for 2 bindings"));
    const vk::Buffer* with_null[] = {&*buf, nullptr};
    auto null_set = p->make_set(with_null);
    REQUIRE_FALSE(null_set);
    CHECK_THAT(null_set.error().message, Contains("binding 1: a null or empty buffer"));
    auto a = p->make_set(two);
    auto b = p->make_set(two);
    REQUIRE((a && b));
    CHECK(a->handle() != b->handle());  // independent sets of one layout
    vk::DescriptorSet moved = std::move(*a);
    CHECK(moved.handle() != VK_NULL_HANDLE);
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_pipeline
