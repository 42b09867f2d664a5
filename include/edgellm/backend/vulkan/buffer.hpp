// SPDX-License-Identifier: Apache-2.0
// Vulkan storage buffers: device-local ones written through a bounded host-visible staging
// buffer (or directly, where device-local memory is also host-visible: phones, integrated GPUs,
// CPU implementations), and host-visible ones for small per-step inputs and outputs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/handle.hpp"
#include "edgellm/result.hpp"

namespace edgellm::backend::vk {

enum class BufferKind {
  device,   ///< device-local storage: weights, activations, the cache
  host_io,  ///< host-visible and coherent storage the host writes/reads every step (x, y)
};

struct BufferOptions {
  BufferKind kind = BufferKind::device;
  /// Device buffers only: write through the staging buffer even where device-local memory is
  /// host-visible (tests the staging path on unified-memory devices).
  bool force_staging = false;
  /// Staging chunk: at most this many bytes of host-visible memory per upload.
  std::size_t staging_chunk_bytes = std::size_t{16} << 20;
};

/// A VkBuffer with its own VkDeviceMemory (one allocation per buffer: weights are few and large).
/// Move-only; the Device must outlive it.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&& o) noexcept { return move_assign(*this, std::move(o)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  /// Creates a buffer of `bytes` (> 0). `name` is for messages ("gemv_q4 weights").
  /// Out of device memory, or more than the largest heap of the right kind: errc::out_of_memory.
  static result<Buffer> create(Device& dev, std::size_t bytes, std::string name,
                               const BufferOptions& options = {}) {
    const std::string where = "vulkan buffer " + name;
    if (bytes == 0) return make_error(errc::invalid_argument, where, "size: must be positive");
    Buffer b;
    b.dev_ = &dev;
    b.size_ = bytes;
    b.options_ = options;
    b.name_ = std::move(name);
    const auto& f = dev.fn();
    VkBufferCreateInfo bci{};
    bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bci.size = bytes;
    bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
    bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    if (auto r = f.vkCreateBuffer(dev.handle(), &bci, nullptr, b.buffer_.addressof());
        r != VK_SUCCESS) {
      b.buffer_ = VK_NULL_HANDLE;
      return vk_error(r, where,
                      "vkCreateBuffer of " + std::to_string(bytes) + " bytes on " +
                          dev.info().name + " (a smaller model, or --backend cpu)");
    }
    VkMemoryRequirements req;
    f.vkGetBufferMemoryRequirements(dev.handle(), b.buffer_, &req);

    const auto& mem = dev.info().memory;
    constexpr VkMemoryPropertyFlags kLocal = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    constexpr VkMemoryPropertyFlags kHost =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    std::optional<std::uint32_t> type;
    if (options.kind == BufferKind::host_io) {
      type = find_type(mem, req.memoryTypeBits, kHost | kLocal);
      if (!type) type = find_type(mem, req.memoryTypeBits, kHost);
    } else {
      if (!options.force_staging && dev.info().unified_memory())
        type = find_type(mem, req.memoryTypeBits, kLocal | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
      if (!type) type = find_type(mem, req.memoryTypeBits, kLocal);
      if (!type) type = find_type(mem, req.memoryTypeBits, 0);
    }
    if (!type) {
      return make_error(errc::unsupported, where, "no suitable memory type on " + dev.info().name);
    }
    const VkMemoryType& mt = mem.memoryTypes[*type];
    const VkDeviceSize heap = mem.memoryHeaps[mt.heapIndex].size;
    if (req.size > heap) {
      return make_error(errc::out_of_memory, where,
                        std::to_string(bytes) + " bytes do not fit in the device's memory heap " +
                            std::to_string(mt.heapIndex) + " of " + std::to_string(heap) +
                            " bytes on " + dev.info().name + " (a smaller model, or --backend cpu)");
    }
    VkMemoryAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = *type;
    if (auto r = f.vkAllocateMemory(dev.handle(), &ai, nullptr, b.memory_.addressof());
        r != VK_SUCCESS) {
      b.memory_ = VK_NULL_HANDLE;
      return vk_error(r, where,
                      "allocating " + std::to_string(bytes) + " bytes of " +
                          ((mt.propertyFlags & kLocal) ? "device" : "host-visible") +
                          " memory on " + dev.info().name + " (a smaller model, or --backend cpu)");
    }
    if (auto r = f.vkBindBufferMemory(dev.handle(), b.buffer_, b.memory_, 0); r != VK_SUCCESS)
      return vk_error(r, where, "vkBindBufferMemory");
    const bool map = options.kind == BufferKind::host_io || !options.force_staging;
    if (map && (mt.propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
      if (auto r =
              f.vkMapMemory(dev.handle(), b.memory_, 0, VK_WHOLE_SIZE, 0, b.mapped_.addressof());
          r != VK_SUCCESS) {
        b.mapped_ = nullptr;
        return vk_error(r, where, "vkMapMemory");
      }
      b.coherent_ = (mt.propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) != 0;
    }
    return b;
  }

  VkBuffer handle() const noexcept { return buffer_; }
  std::size_t size() const noexcept { return size_; }
  /// Whether the host writes this buffer directly (no staging copy).
  bool host_visible() const noexcept { return mapped_ != nullptr; }
  const std::string& name() const noexcept { return name_; }

  /// Copies `data` into the buffer at byte `offset`: directly when host-visible, else through a
  /// staging buffer of at most staging_chunk_bytes, one submission per chunk.
  status write(std::span<const std::byte> data, std::size_t offset = 0) {
    if (auto st = check_range(data.size(), offset, "write"); !st) return st;
    if (data.empty()) return {};
    if (mapped_) {
      std::memcpy(static_cast<std::byte*>(mapped_.get()) + offset, data.data(), data.size());
      return flush(offset, data.size());
    }
    return staged(data.size(), offset, [&](Buffer& staging, std::size_t done, std::size_t len) {
      std::memcpy(staging.mapped_, data.data() + done, len);
      return staging.flush(0, len);
    }, /*to_device=*/true);
  }

  /// Copies `out.size()` bytes at byte `offset` of the buffer into `out`.
  status read(std::span<std::byte> out, std::size_t offset = 0) const {
    if (auto st = check_range(out.size(), offset, "read"); !st) return st;
    if (out.empty()) return {};
    if (mapped_) {
      if (auto st = invalidate(offset, out.size()); !st) return st;
      std::memcpy(out.data(), static_cast<const std::byte*>(mapped_.get()) + offset, out.size());
      return {};
    }
    return staged(out.size(), offset, [&](Buffer& staging, std::size_t done, std::size_t len) {
      if (auto st = staging.invalidate(0, len); !st) return st;
      std::memcpy(out.data() + done, staging.mapped_, len);
      return status{};
    }, /*to_device=*/false);
  }

 private:
  static std::optional<std::uint32_t> find_type(const VkPhysicalDeviceMemoryProperties& mem,
                                                std::uint32_t bits, VkMemoryPropertyFlags want) {
    for (std::uint32_t i = 0; i < mem.memoryTypeCount; ++i)
      if ((bits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want) return i;
    return std::nullopt;
  }

  status check_range(std::size_t len, std::size_t offset, const char* what) const {
    if (!buffer_) return make_error(errc::invalid_argument, "vulkan buffer", "empty buffer");
    if (offset > size_ || len > size_ - offset) {
      return make_error(errc::out_of_range, "vulkan buffer " + name_,
                        std::string(what) + " of " + std::to_string(len) + " bytes at offset " +
                            std::to_string(offset) + " past its " + std::to_string(size_) +
                            " bytes");
    }
    return {};
  }

  // Non-coherent memory: flush/invalidate whole atoms around [offset, offset + len).
  VkMappedMemoryRange atom_range(std::size_t offset, std::size_t len) const {
    const VkDeviceSize atom = dev_->info().non_coherent_atom_size;
    VkMappedMemoryRange r{};
    r.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE;
    r.memory = memory_;
    r.offset = offset / atom * atom;
    const VkDeviceSize end = (offset + len + atom - 1) / atom * atom;
    r.size = end >= size_ ? VK_WHOLE_SIZE : end - r.offset;
    return r;
  }
  status flush(std::size_t offset, std::size_t len) {
    if (coherent_) return {};
    const auto r = atom_range(offset, len);
    if (auto e = dev_->fn().vkFlushMappedMemoryRanges(dev_->handle(), 1, &r); e != VK_SUCCESS)
      return vk_error(e, "vulkan buffer " + name_, "vkFlushMappedMemoryRanges");
    return {};
  }
  status invalidate(std::size_t offset, std::size_t len) const {
    if (coherent_) return {};
    const auto r = atom_range(offset, len);
    if (auto e = dev_->fn().vkInvalidateMappedMemoryRanges(dev_->handle(), 1, &r); e != VK_SUCCESS)
      return vk_error(e, "vulkan buffer " + name_, "vkInvalidateMappedMemoryRanges");
    return {};
  }

  template <class Host>
  status staged(std::size_t total, std::size_t offset, Host&& host, bool to_device) const {
    const std::size_t chunk = std::max<std::size_t>(
        std::min(options_.staging_chunk_bytes, total), 4);
    auto staging = Buffer::create(*dev_, chunk, name_ + " staging", {BufferKind::host_io});
    if (!staging) return staging.error();
    for (std::size_t done = 0; done < total; done += chunk) {
      const std::size_t len = std::min(chunk, total - done);
      if (to_device) {
        if (auto st = host(*staging, done, len); !st) return st;
      }
      VkBufferCopy copy{};
      copy.srcOffset = to_device ? 0 : offset + done;
      copy.dstOffset = to_device ? offset + done : 0;
      copy.size = len;
      VkBuffer src = to_device ? staging->buffer_ : buffer_;
      VkBuffer dst = to_device ? buffer_ : staging->buffer_;
      const auto& f = dev_->fn();
      auto st = dev_->submit_and_wait(
          [&](VkCommandBuffer cmd) {
            // Earlier shader writes/reads of this buffer finish before the copy...
            VkMemoryBarrier before{};
            before.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
            before.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
            before.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
            f.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                   VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &before, 0, nullptr, 0,
                                   nullptr);
            f.vkCmdCopyBuffer(cmd, src, dst, 1, &copy);
            // ...and the copy is visible to the host (read) before the fence signals.
            VkMemoryBarrier after{};
            after.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
            after.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
            after.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
            f.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                   VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &after, 0, nullptr, 0,
                                   nullptr);
          },
          "copy of " + name_);
      if (!st) return st;
      if (!to_device) {
        if (auto hst = host(*staging, done, len); !hst) return hst;
      }
    }
    return {};
  }

  void reset() noexcept {
    if (!dev_) return;
    const auto& f = dev_->fn();
    if (mapped_) f.vkUnmapMemory(dev_->handle(), memory_);
    if (buffer_) f.vkDestroyBuffer(dev_->handle(), buffer_, nullptr);
    if (memory_) f.vkFreeMemory(dev_->handle(), memory_, nullptr);
    mapped_ = nullptr;
    buffer_ = VK_NULL_HANDLE;
    memory_ = VK_NULL_HANDLE;
    dev_ = nullptr;
  }

  Handle<Device*> dev_;
  Handle<VkBuffer> buffer_;
  Handle<VkDeviceMemory> memory_;
  Handle<void*> mapped_;  // whole buffer, while it lives
  bool coherent_ = true;
  Handle<std::size_t> size_;
  BufferOptions options_{};
  std::string name_;
};

}  // namespace edgellm::backend::vk
