// SPDX-License-Identifier: Apache-2.0
// A compute pipeline over embedded SPIR-V: shader module, one descriptor set layout of storage
// buffers (bindings 0..n-1), a push-constant block, and the workgroup size as specialization
// constant 0. Either one built-in set (bind() + record(cmd, ...)) or any number of sets made by
// make_set(), so one pipeline is recorded many times with different buffers.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/handle.hpp"
#include "edgellm/result.hpp"

namespace edgellm::backend::vk {

/// A 1D workgroup size from the device's limits: the largest power of two <= `preferred` that
/// fits maxComputeWorkGroupSize[0], maxComputeWorkGroupInvocations and, with
/// `shared_bytes_per_invocation` of shared memory each, maxComputeSharedMemorySize; at least
/// `minimum` (the Vulkan spec guarantees 128 invocations and 16 KiB).
inline std::uint32_t choose_workgroup_size(const DeviceInfo& info, std::uint32_t preferred,
                                           std::uint32_t shared_bytes_per_invocation,
                                           std::uint32_t minimum = 16) {
  std::uint32_t cap = std::min({preferred, info.max_workgroup_size[0],
                                info.max_workgroup_invocations});
  if (shared_bytes_per_invocation)
    cap = std::min(cap, info.shared_memory_bytes / shared_bytes_per_invocation);
  return std::max(std::bit_floor(std::max(cap, 1u)), minimum);
}

/// A descriptor set of one pipeline's layout pointing at fixed buffers (whole buffers), from its
/// own small pool. Move-only; the Device must outlive it, and the buffers must outlive every
/// submission of commands recorded with it.
class DescriptorSet {
 public:
  DescriptorSet() = default;
  DescriptorSet(DescriptorSet&&) noexcept = default;
  DescriptorSet& operator=(DescriptorSet&& o) noexcept { return move_assign(*this, std::move(o)); }
  DescriptorSet(const DescriptorSet&) = delete;
  DescriptorSet& operator=(const DescriptorSet&) = delete;
  ~DescriptorSet() { reset(); }

  VkDescriptorSet handle() const noexcept { return set_; }

 private:
  friend class ComputePipeline;
  void reset() noexcept {
    if (dev_ && pool_) dev_->fn().vkDestroyDescriptorPool(dev_->handle(), pool_, nullptr);
    dev_ = nullptr;
    pool_ = VK_NULL_HANDLE;
    set_ = VK_NULL_HANDLE;
  }
  Handle<Device*> dev_;
  Handle<VkDescriptorPool> pool_;  // destroying it frees set_
  Handle<VkDescriptorSet> set_;
};

class ComputePipeline {
 public:
  ComputePipeline() = default;
  ComputePipeline(ComputePipeline&&) noexcept = default;
  ComputePipeline& operator=(ComputePipeline&& o) noexcept {
    return move_assign(*this, std::move(o));
  }
  ComputePipeline(const ComputePipeline&) = delete;
  ComputePipeline& operator=(const ComputePipeline&) = delete;
  ~ComputePipeline() { reset(); }

  /// `name` is for messages; `bindings` storage buffers; `push_bytes` of push constants;
  /// `workgroup_size` is specialization constant 0 and `constants[i]` constant i + 1.
  static result<ComputePipeline> create(Device& dev, std::string_view name,
                                        std::span<const std::uint32_t> spirv,
                                        std::uint32_t bindings, std::uint32_t push_bytes,
                                        std::uint32_t workgroup_size,
                                        std::span<const std::uint32_t> constants = {}) {
    const std::string where = "vulkan pipeline " + std::string(name);
    if (push_bytes > dev.info().max_push_constants_bytes) {
      return make_error(errc::unsupported, where,
                        std::to_string(push_bytes) + " bytes of push constants: the device "
                        "allows " + std::to_string(dev.info().max_push_constants_bytes));
    }
    ComputePipeline p;
    p.dev_ = &dev;
    p.bindings_ = bindings;
    p.push_bytes_ = push_bytes;
    p.workgroup_size_ = workgroup_size;
    const auto& f = dev.fn();
    const VkDevice d = dev.handle();
    VkShaderModuleCreateInfo smci{};
    smci.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    smci.codeSize = spirv.size_bytes();
    smci.pCode = spirv.data();
    if (auto r = f.vkCreateShaderModule(d, &smci, nullptr, p.module_.addressof());
        r != VK_SUCCESS) {
      p.module_ = VK_NULL_HANDLE;
      return vk_error(r, where, "vkCreateShaderModule");
    }
    std::vector<VkDescriptorSetLayoutBinding> b(bindings);
    for (std::uint32_t i = 0; i < bindings; ++i) {
      b[i] = {};
      b[i].binding = i;
      b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      b[i].descriptorCount = 1;
      b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo dci{};
    dci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    dci.bindingCount = bindings;
    dci.pBindings = b.data();
    if (auto r = f.vkCreateDescriptorSetLayout(d, &dci, nullptr, p.set_layout_.addressof());
        r != VK_SUCCESS) {
      p.set_layout_ = VK_NULL_HANDLE;
      return vk_error(r, where, "vkCreateDescriptorSetLayout");
    }
    VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo lci{};
    lci.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    lci.setLayoutCount = 1;
    lci.pSetLayouts = p.set_layout_.addressof();
    lci.pushConstantRangeCount = push_bytes ? 1 : 0;
    lci.pPushConstantRanges = &pcr;
    if (auto r = f.vkCreatePipelineLayout(d, &lci, nullptr, p.layout_.addressof());
        r != VK_SUCCESS) {
      p.layout_ = VK_NULL_HANDLE;
      return vk_error(r, where, "vkCreatePipelineLayout");
    }
    std::vector<std::uint32_t> values{workgroup_size};
    values.insert(values.end(), constants.begin(), constants.end());
    std::vector<VkSpecializationMapEntry> entries(values.size());
    for (std::uint32_t i = 0; i < entries.size(); ++i)
      entries[i] = {i, i * std::uint32_t{sizeof(std::uint32_t)}, sizeof(std::uint32_t)};
    VkSpecializationInfo spec{static_cast<std::uint32_t>(entries.size()), entries.data(),
                              values.size() * sizeof(std::uint32_t), values.data()};
    VkComputePipelineCreateInfo cci{};
    cci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    cci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cci.stage.module = p.module_;
    cci.stage.pName = "main";
    cci.stage.pSpecializationInfo = &spec;
    cci.layout = p.layout_;
    if (auto r = f.vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &cci, nullptr,
                                            p.pipeline_.addressof());
        r != VK_SUCCESS) {
      p.pipeline_ = VK_NULL_HANDLE;
      return vk_error(r, where, "vkCreateComputePipelines");
    }
    if (auto st = p.allocate_set(p.pool_.value(), p.set_.value()); !st) return st.error();
    return p;
  }

  /// Points binding i of the built-in set at buffers[i] (whole buffer). Before recording a
  /// dispatch with record(cmd, push, ...); the set is shared by every such recording.
  status bind(std::span<const Buffer* const> buffers) {
    if (auto st = check_buffers(buffers, "bind"); !st) return st;
    write_set(set_, buffers);
    return {};
  }

  /// A new descriptor set with binding i at buffers[i] (whole buffer), for
  /// record(cmd, set, ...). Errors name the binding: a wrong count, a null or empty buffer, or one
  /// larger than the device's maxStorageBufferRange.
  result<DescriptorSet> make_set(std::span<const Buffer* const> buffers) const {
    if (auto st = check_buffers(buffers, "make_set"); !st) return st.error();
    DescriptorSet s;
    s.dev_ = dev_.get();
    if (auto st = allocate_set(s.pool_.value(), s.set_.value()); !st) return st.error();
    write_set(s.set_, buffers);
    return s;
  }

  /// Records bind + push constants + dispatch of (x, y, 1) workgroups into `cmd`.
  void record(VkCommandBuffer cmd, const void* push, std::uint32_t groups_x,
              std::uint32_t groups_y = 1) const {
    record_with(cmd, set_, push, groups_x, groups_y);
  }

  /// Records bind + push constants + dispatch of (x, y, 1) workgroups with `set` (made by this
  /// pipeline's make_set()) into `cmd`.
  void record(VkCommandBuffer cmd, const DescriptorSet& set, const void* push,
              std::uint32_t groups_x, std::uint32_t groups_y = 1) const {
    record_with(cmd, set.handle(), push, groups_x, groups_y);
  }

  std::uint32_t workgroup_size() const noexcept { return workgroup_size_; }
  std::uint32_t bindings() const noexcept { return bindings_; }
  std::uint32_t push_bytes() const noexcept { return push_bytes_; }
  Device* device() const noexcept { return dev_; }  ///< null for an empty pipeline

 private:
  void record_with(VkCommandBuffer cmd, VkDescriptorSet set, const void* push,
                   std::uint32_t groups_x, std::uint32_t groups_y) const {
    const auto& f = dev_->fn();
    f.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_);
    f.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, layout_, 0, 1, &set, 0, nullptr);
    if (push_bytes_)
      f.vkCmdPushConstants(cmd, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes_, push);
    f.vkCmdDispatch(cmd, groups_x, groups_y, 1);
  }

  status check_buffers(std::span<const Buffer* const> buffers, const char* what) const {
    if (!dev_) return make_error(errc::invalid_argument, "vulkan pipeline", "an empty pipeline");
    if (buffers.size() != bindings_) {
      return make_error(errc::invalid_argument, "vulkan pipeline",
                        std::string(what) + ": " + std::to_string(buffers.size()) +
                            " buffers for " + std::to_string(bindings_) + " bindings");
    }
    for (std::uint32_t i = 0; i < bindings_; ++i) {
      const Buffer* b = buffers[i];
      if (!b || !b->handle()) {
        return make_error(
            errc::invalid_argument, "vulkan pipeline",
            std::string(what) + ": binding " + std::to_string(i) + ": a null or empty buffer");
      }
      if (b->size() > dev_->info().max_storage_buffer_range) {
        return make_error(errc::unsupported, "vulkan pipeline",
                          std::string(what) + ": binding " + std::to_string(i) + " (" + b->name() +
                              "): " + std::to_string(b->size()) +
                              " bytes exceed the device's maxStorageBufferRange of " +
                              std::to_string(dev_->info().max_storage_buffer_range));
      }
    }
    return {};
  }

  // A pool holding exactly one set of this layout.
  status allocate_set(VkDescriptorPool& pool, VkDescriptorSet& set) const {
    const auto& f = dev_->fn();
    const VkDevice d = dev_->handle();
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, bindings_};
    VkDescriptorPoolCreateInfo pci{};
    pci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    pci.maxSets = 1;
    pci.poolSizeCount = 1;
    pci.pPoolSizes = &size;
    if (auto r = f.vkCreateDescriptorPool(d, &pci, nullptr, &pool); r != VK_SUCCESS) {
      pool = VK_NULL_HANDLE;
      return vk_error(r, "vulkan pipeline", "vkCreateDescriptorPool");
    }
    VkDescriptorSetAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
    ai.descriptorPool = pool;
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = set_layout_.addressof();
    if (auto r = f.vkAllocateDescriptorSets(d, &ai, &set); r != VK_SUCCESS) {
      set = VK_NULL_HANDLE;
      return vk_error(r, "vulkan pipeline", "vkAllocateDescriptorSets");
    }
    return {};
  }

  void write_set(VkDescriptorSet set, std::span<const Buffer* const> buffers) const {
    std::vector<VkDescriptorBufferInfo> info(bindings_);
    std::vector<VkWriteDescriptorSet> writes(bindings_);
    for (std::uint32_t i = 0; i < bindings_; ++i) {
      info[i] = {buffers[i]->handle(), 0, VK_WHOLE_SIZE};
      writes[i] = {};
      writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
      writes[i].dstSet = set;
      writes[i].dstBinding = i;
      writes[i].descriptorCount = 1;
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[i].pBufferInfo = &info[i];
    }
    dev_->fn().vkUpdateDescriptorSets(dev_->handle(), bindings_, writes.data(), 0, nullptr);
  }

  void reset() noexcept {
    if (!dev_) return;
    const auto& f = dev_->fn();
    const VkDevice d = dev_->handle();
    if (pool_) f.vkDestroyDescriptorPool(d, pool_, nullptr);  // frees set_
    if (pipeline_) f.vkDestroyPipeline(d, pipeline_, nullptr);
    if (layout_) f.vkDestroyPipelineLayout(d, layout_, nullptr);
    if (set_layout_) f.vkDestroyDescriptorSetLayout(d, set_layout_, nullptr);
    if (module_) f.vkDestroyShaderModule(d, module_, nullptr);
    dev_ = nullptr;
  }

  Handle<Device*> dev_;
  Handle<VkShaderModule> module_;
  Handle<VkDescriptorSetLayout> set_layout_;
  Handle<VkPipelineLayout> layout_;
  Handle<VkPipeline> pipeline_;
  Handle<VkDescriptorPool> pool_;
  Handle<VkDescriptorSet> set_;
  std::uint32_t bindings_ = 0, push_bytes_ = 0, workgroup_size_ = 0;
};

}  // namespace edgellm::backend::vk
