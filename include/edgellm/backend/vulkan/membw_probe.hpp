// SPDX-License-Identifier: Apache-2.0
// The Vulkan bandwidth probe: a plain read of a device-local buffer (shaders/vulkan/
// membw_probe.comp) on the same device as the ops, the ceiling a bandwidth-bound shader such as
// the int4 GEMV is reported against (pct_membw). Host-timed submit-to-fence, so the figure
// includes one submission's overhead: size the buffer well past the caches (hundreds of MiB on
// a GPU) for a bandwidth figure, small for a smoke test.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/handle.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/membw_probe.hpp"
#include "edgellm/result.hpp"

namespace edgellm::backend::vk {

struct ProbeResult {
  double bytes_per_second = 0;  ///< best of the repetitions
  std::size_t bytes = 0;        ///< read per repetition
  std::uint32_t checksum = 0;   ///< XOR of every 32-bit word read (proves the reads happened)
};

class MembwProbe {
 public:
  MembwProbe(MembwProbe&&) noexcept = default;
  MembwProbe& operator=(MembwProbe&& o) noexcept { return move_assign(*this, std::move(o)); }
  MembwProbe(const MembwProbe&) = delete;
  MembwProbe& operator=(const MembwProbe&) = delete;
  ~MembwProbe() { free_commands(); }

  /// A probe over `bytes` (rounded down to 16-byte units, at least 16) of device memory filled
  /// with `fill` (repeated; empty: a fixed pattern).
  static result<MembwProbe> create(Device& dev, std::size_t bytes,
                                   std::span<const std::uint32_t> fill = {}) {
    bytes = std::max<std::size_t>(bytes / 16 * 16, 16);
    if (bytes > dev.info().max_storage_buffer_range || bytes / 16 > 0xFFFFFFFFu) {
      return make_error(errc::invalid_argument, "vulkan membw_probe",
                        "bytes: " + std::to_string(bytes) + " exceed one storage binding");
    }
    MembwProbe p;
    p.dev_ = &dev;
    p.bytes_ = bytes;
    auto src = Buffer::create(dev, bytes, "membw_probe source");
    if (!src) return src.error();
    p.src_ = std::move(*src);
    // Fill in bounded pieces (no second host copy of a large buffer).
    std::vector<std::uint32_t> piece(std::min<std::size_t>(bytes / 4, std::size_t{1} << 20));
    for (std::size_t done = 0; done < bytes; done += piece.size() * 4) {
      const std::size_t words = std::min(piece.size(), (bytes - done) / 4);
      for (std::size_t i = 0; i < words; ++i) {
        const std::size_t w = done / 4 + i;
        piece[i] = fill.empty() ? static_cast<std::uint32_t>(w * 2654435761u + 12345u)
                                : fill[w % fill.size()];
      }
      if (auto st = p.src_.write(std::as_bytes(std::span(piece.data(), words)), done); !st)
        return st.error();
    }
    const std::uint32_t wg = choose_workgroup_size(dev.info(), 256, 4);
    // Enough workgroups to fill a large GPU, few enough that each invocation loops.
    const std::size_t vec4s = bytes / 16;
    p.groups_ = static_cast<std::uint32_t>(std::clamp<std::size_t>(
        vec4s / (wg * std::size_t{16}), 1, std::min<std::uint32_t>(4096, dev.info().max_workgroup_count[0])));
    auto dst = Buffer::create(dev, std::size_t{p.groups_} * 4, "membw_probe result",
                              {BufferKind::host_io});
    if (!dst) return dst.error();
    p.dst_ = std::move(*dst);
    auto pipe = ComputePipeline::create(dev, "membw_probe", spirv::kMembwProbeSpv, 2, 8, wg);
    if (!pipe) return pipe.error();
    p.pipeline_ = std::move(*pipe);
    const Buffer* bound[] = {&p.src_, &p.dst_};
    if (auto st = p.pipeline_.bind(bound); !st) return st.error();
    if (auto st = p.record(static_cast<std::uint32_t>(vec4s), wg); !st) return st.error();
    return p;
  }

  /// Runs the read `reps` times (>= 1) and reports the best rate.
  result<ProbeResult> run(int reps = 3) {
    ProbeResult out;
    out.bytes = bytes_;
    for (int i = 0; i < std::max(reps, 1); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (auto st = dev_->submit(cmd_, "membw_probe"); !st) return st.error();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      out.bytes_per_second = std::max(out.bytes_per_second, static_cast<double>(bytes_) / s);
    }
    std::vector<std::uint32_t> folded(groups_);
    if (auto st = dst_.read(std::as_writable_bytes(std::span(folded))); !st) return st.error();
    for (auto w : folded) out.checksum ^= w;
    return out;
  }

 private:
  MembwProbe() = default;

  void free_commands() noexcept {
    if (cmd_ && dev_)
      dev_->fn().vkFreeCommandBuffers(dev_->handle(), dev_->command_pool(), 1, cmd_.addressof());
    cmd_ = VK_NULL_HANDLE;
  }

  status record(std::uint32_t vec4s, std::uint32_t wg) {
    const auto& f = dev_->fn();
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = dev_->command_pool();
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    if (auto r = f.vkAllocateCommandBuffers(dev_->handle(), &ai, cmd_.addressof());
        r != VK_SUCCESS) {
      cmd_ = VK_NULL_HANDLE;
      return vk_error(r, "vulkan membw_probe", "vkAllocateCommandBuffers");
    }
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    if (auto r = f.vkBeginCommandBuffer(cmd_, &begin); r != VK_SUCCESS)
      return vk_error(r, "vulkan membw_probe", "vkBeginCommandBuffer");
    const std::uint32_t push[2] = {vec4s, groups_ * wg};
    pipeline_.record(cmd_, push, groups_);
    VkMemoryBarrier out{};
    out.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    out.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    out.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    f.vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                           0, 1, &out, 0, nullptr, 0, nullptr);
    if (auto r = f.vkEndCommandBuffer(cmd_); r != VK_SUCCESS)
      return vk_error(r, "vulkan membw_probe", "vkEndCommandBuffer");
    return {};
  }

  Handle<Device*> dev_;
  Buffer src_, dst_;  // src [bytes / 4] words, dst [groups_] folded words
  ComputePipeline pipeline_;
  Handle<VkCommandBuffer> cmd_;
  std::size_t bytes_ = 0;
  std::uint32_t groups_ = 1;
};

}  // namespace edgellm::backend::vk
