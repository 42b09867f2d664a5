// SPDX-License-Identifier: Apache-2.0
// A chain of compute dispatches recorded into one command buffer and run with one submission:
// the unit of offload is a whole step (embed -> layers -> lm_head -> argmax), not one op.
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/handle.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::backend::vk {

/// A dispatch grid of (x, y) workgroups covering at least `groups` workgroups.
struct Grid {
  std::uint32_t x = 1, y = 1;
};

/// The 2D grid for `groups` workgroups in a row-major order (group = y * x_count + x, which
/// shaders read as gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; the last row may
/// be partial, so shaders check their bound). Errors when the device's maxComputeWorkGroupCount
/// cannot hold it; `what` names the dimension in the message.
inline result<Grid> grid_for(const DeviceInfo& info, std::uint64_t groups, std::string_view where,
                             std::string_view what) {
  if (groups == 0) return make_error(errc::invalid_argument, where, std::string(what) + ": 0");
  Grid g;
  g.x = static_cast<std::uint32_t>(std::min<std::uint64_t>(groups, info.max_workgroup_count[0]));
  const std::uint64_t y = (groups + g.x - 1) / g.x;
  if (y > info.max_workgroup_count[1]) {
    return make_error(errc::unsupported, where,
                      std::string(what) + ": " + std::to_string(groups) +
                          " workgroups exceed the device's maxComputeWorkGroupCount");
  }
  g.y = static_cast<std::uint32_t>(y);
  return g;
}

/// An op's buffer check: argument `arg` (a buffer) must hold at least `bytes` (`what`, e.g.
/// "[3][37] fp32"), and they must fit one storage binding. Errors name the argument and buffer.
inline status require_bytes(const Buffer& buffer, std::uint64_t bytes, std::string_view where,
                            std::string_view arg, std::string_view what, const DeviceInfo& info) {
  if (!buffer.handle())
    return make_error(errc::invalid_argument, where, std::string(arg) + ": an empty buffer");
  if (buffer.size() < bytes) {
    return make_error(errc::shape_mismatch, where,
                      std::string(arg) + ": buffer '" + buffer.name() + "' holds " +
                          std::to_string(buffer.size()) + " bytes; " + std::string(what) +
                          " needs " + std::to_string(bytes));
  }
  if (bytes > info.max_storage_buffer_range) {
    return make_error(errc::unsupported, where,
                      std::string(arg) + ": " + std::string(what) + " (" + std::to_string(bytes) +
                          " bytes) exceeds the device's maxStorageBufferRange");
  }
  return {};
}

/// Records dispatches of any pipelines into one command buffer of the Device's pool, then
/// submit() runs them all with one vkQueueSubmit and waits.
///
/// Ordering: a host-write / transfer-write -> shader barrier before the first dispatch, a full
/// compute -> compute memory barrier after every dispatch (so each dispatch sees all earlier
/// ones' writes: correct for any chain, at the cost of no overlap between independent
/// dispatches), and a shader-write -> host-read / transfer-read barrier at the end. The recorded
/// buffer may be submitted again (the same dispatches on the buffers' current contents) until
/// reset() starts a new recording.
///
/// The Device and every buffer passed to dispatch() must outlive the last submit(). Not
/// thread-safe; one sequence per thread.
class CommandSequence {
 public:
  CommandSequence(CommandSequence&&) noexcept = default;
  CommandSequence& operator=(CommandSequence&& o) noexcept {
    return move_assign(*this, std::move(o));
  }
  CommandSequence(const CommandSequence&) = delete;
  CommandSequence& operator=(const CommandSequence&) = delete;
  ~CommandSequence() { free_commands(); }

  /// Allocates the command buffer and starts recording. `name` is for messages.
  static result<CommandSequence> create(Device& dev, std::string name) {
    CommandSequence s;
    s.dev_ = &dev;
    s.name_ = std::move(name);
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = dev.command_pool();
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    if (auto r = dev.fn().vkAllocateCommandBuffers(dev.handle(), &ai, s.cmd_.addressof());
        r != VK_SUCCESS) {
      s.cmd_ = VK_NULL_HANDLE;
      return vk_error(r, s.where(), "vkAllocateCommandBuffers");
    }
    if (auto st = s.reset(); !st) return st.error();
    return s;
  }

  /// Drops what was recorded (and its descriptor sets), submitted or not, and starts a new
  /// recording. The Device's pool lets vkBeginCommandBuffer reset the buffer.
  status reset() {
    const auto& f = dev_->fn();
    // A recording in progress (dropped unsubmitted, e.g. after an op's error) is ended first:
    // vkBeginCommandBuffer must not meet a buffer in the recording state. Before its sets go.
    if (recording_) f.vkEndCommandBuffer(cmd_);
    sets_.clear();
    dispatches_ = 0;
    recording_ = false;
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    if (auto r = f.vkBeginCommandBuffer(cmd_, &begin); r != VK_SUCCESS)
      return vk_error(r, where(), "vkBeginCommandBuffer");
    recording_ = true;
    // Host writes (Buffer::write) and staged uploads before the first shader reads.
    barrier(VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_HOST_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
            VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    return {};
  }

  /// Records `pipeline` over `buffers` (binding i = buffers[i], whole buffers) with `push`
  /// (pipeline.push_bytes() bytes) on a (groups_x, groups_y) grid, then a compute -> compute
  /// barrier. Errors (nothing recorded): after submit() without reset(), a null `push`, a wrong
  /// buffer count or an oversized buffer (see ComputePipeline::make_set), a grid beyond the
  /// device's limits.
  status dispatch(const ComputePipeline& pipeline, std::span<const Buffer* const> buffers,
                  const void* push, std::uint32_t groups_x, std::uint32_t groups_y = 1) {
    if (!recording_) {
      return make_error(errc::invalid_argument, where(),
                        "dispatch after submit(): call reset() to record a new sequence");
    }
    if (pipeline.device() != dev_) {
      return make_error(errc::invalid_argument, where(),
                        "pipeline: empty, or made on another Device");
    }
    if (pipeline.push_bytes() != 0 && push == nullptr) {
      return make_error(
          errc::invalid_argument, where(),
          "push: null for " + std::to_string(pipeline.push_bytes()) + " bytes of push constants");
    }
    const auto& info = dev_->info();
    if (groups_x == 0 || groups_y == 0 || groups_x > info.max_workgroup_count[0] ||
        groups_y > info.max_workgroup_count[1]) {
      return make_error(errc::invalid_argument, where(),
                        "grid: " + std::to_string(groups_x) + " x " + std::to_string(groups_y) +
                            " workgroups (each in 1 .. maxComputeWorkGroupCount)");
    }
    auto set = pipeline.make_set(buffers);
    if (!set) return set.error();
    pipeline.record(cmd_, *set, push, groups_x, groups_y);
    barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
            VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    sets_.push_back(std::move(*set));
    ++dispatches_;
    return {};
  }

  /// Ends the recording (the first time), submits it once and waits for the device: every
  /// dispatch's writes are then visible to Buffer::read().
  status submit() {
    if (recording_) {
      // The last dispatches' writes before host reads and staged read-back copies.
      barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
              VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
              VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT);
      recording_ = false;
      if (auto r = dev_->fn().vkEndCommandBuffer(cmd_); r != VK_SUCCESS)
        return vk_error(r, where(), "vkEndCommandBuffer");
    }
    if (auto st = dev_->submit(cmd_, where()); !st) return st;
    ++submits_;
    return {};
  }

  /// Queue submissions made by this sequence (a chain of ops run by one submit() counts 1).
  std::size_t submits() const noexcept { return submits_; }
  /// Dispatches recorded since the last reset().
  std::size_t dispatches() const noexcept { return dispatches_; }
  bool recording() const noexcept { return recording_; }
  Device& device() const noexcept { return *dev_; }

 private:
  CommandSequence() = default;

  std::string where() const { return "vulkan sequence " + name_; }

  void barrier(VkPipelineStageFlags src_stage, VkAccessFlags src, VkPipelineStageFlags dst_stage,
               VkAccessFlags dst) {
    VkMemoryBarrier b{};
    b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    b.srcAccessMask = src;
    b.dstAccessMask = dst;
    dev_->fn().vkCmdPipelineBarrier(cmd_, src_stage, dst_stage, 0, 1, &b, 0, nullptr, 0, nullptr);
  }

  void free_commands() noexcept {
    if (!dev_ || !cmd_) return;
    // Freeing a buffer in the recording state is valid; ending it first would use buffers the
    // caller may already have destroyed.
    dev_->fn().vkFreeCommandBuffers(dev_->handle(), dev_->command_pool(), 1, cmd_.addressof());
    cmd_ = VK_NULL_HANDLE;
    sets_.clear();
  }

  Handle<Device*> dev_;
  Handle<VkCommandBuffer> cmd_;
  std::vector<DescriptorSet> sets_;  // one per recorded dispatch, alive while it may run
  std::string name_;
  Handle<bool> recording_;
  std::size_t submits_ = 0, dispatches_ = 0;
};

}  // namespace edgellm::backend::vk
