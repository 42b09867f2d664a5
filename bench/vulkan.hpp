// SPDX-License-Identifier: Apache-2.0
// The benches' --backend vulkan plumbing, shared by edgellm-bench, edgellm-bench-kernels and
// edgellm-bench-attention: what a build without the backend says, opening the device (exit 77,
// ctest's skip, where the host has no Vulkan loader or device), the read-bandwidth probe the
// device's rows are measured against, and timing a recorded command sequence.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "harness.hpp"

#if EDGELLM_BENCH_VULKAN
#include <optional>

#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/membw_probe.hpp"
#endif

namespace edgellm::bench::vulkan {

/// What a bench built without the Vulkan backend says to --backend vulkan.
inline constexpr const char* kNotBuilt =
    "this build has no Vulkan backend (configure with -DEDGELLM_VULKAN=ON and the Vulkan "
    "headers); use --backend cpu";

#if EDGELLM_BENCH_VULKAN
/// Opens device `index` (< 0: the backend's rule). On failure: a note saying why, null, and
/// `exit_code` 77 where no loader or device exists (a skip), else 1.
inline std::unique_ptr<backend::vk::Device> open_device(int index, int& exit_code) {
  backend::vk::DeviceOptions o;
  if (index >= 0) o.device_index = static_cast<unsigned>(index);
  auto dev = backend::vk::Device::create(o);
  if (!dev) {
    note("[vulkan] {} (run with --backend cpu)", dev.error().message);
    exit_code = dev.error().message.find("no Vulkan") != std::string::npos ? 77 : 1;
    return nullptr;
  }
  exit_code = 0;
  return std::move(*dev);
}

/// The device's read bandwidth in GB/s: the probe shader over min(bytes, the largest storage
/// buffer) bytes, `reps` passes; 0 after a note when it cannot run.
inline double probe_gbps(backend::vk::Device& dev, std::size_t bytes, int reps = 3) {
  auto probe = backend::vk::MembwProbe::create(
      dev, std::min<std::size_t>(bytes, dev.info().max_storage_buffer_range));
  if (!probe) return note("[vulkan] probe: {}", probe.error().message), 0.0;
  auto r = probe->run(reps);
  if (!r) return note("[vulkan] probe: {}", r.error().message), 0.0;
  return r->bytes_per_second / 1e9;
}

/// Times `reps` submissions of the recorded `seq` (each waits for the device); null after a
/// note when a submission fails.
inline std::optional<timing> time_submits(backend::vk::CommandSequence& seq, int reps) {
  bool ok = true;
  const timing t = measure(
      [&] {
        if (auto st = seq.submit(); !st && ok) {
          note("[vulkan] {}", st.error().message);
          ok = false;
        }
      },
      reps);
  if (!ok) return std::nullopt;
  return t;
}
#endif

}  // namespace edgellm::bench::vulkan
