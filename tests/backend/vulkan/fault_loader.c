/* SPDX-License-Identifier: Apache-2.0
 * A Vulkan "loader" for the [vulkan] fault tests: a shared library that exports
 * vkGetInstanceProcAddr like libvulkan.so.1 and forwards everything to the real loader, except
 * two calls it can make fail, as a driver does:
 *   vkAllocateMemory  VK_ERROR_OUT_OF_DEVICE_MEMORY once the device memory allocated through it
 *                     would exceed a limit (a model too big for a small GPU);
 *   vkQueueSubmit     VK_ERROR_DEVICE_LOST after a number of successful submissions (a GPU
 *                     reset, a driver crash).
 * A test opens a vk::Device with DeviceOptions::loader_library set to this file, and steers it
 * through edgellm_fault_set(), found with dlsym on the same library.
 * Not thread-safe: the tests drive one device from one thread. */
#include <vulkan/vulkan.h>

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static void* real_lib;
static PFN_vkGetInstanceProcAddr real_gipa;
static PFN_vkGetDeviceProcAddr real_gdpa;
static PFN_vkAllocateMemory real_alloc;
static PFN_vkFreeMemory real_free;
static PFN_vkQueueSubmit real_submit;

static uint64_t alloc_limit;   /* 0: no limit */
static uint64_t allocated;     /* bytes allocated through vkAllocateMemory, not yet freed */
static int64_t submits_left = -1;  /* < 0: never fail */

/* Sets the faults: allocations beyond `limit_bytes` in total fail (0: none fail), and every
 * submission after the next `ok_submits` fails (< 0: none fails). */
EXPORT void edgellm_fault_set(uint64_t limit_bytes, int64_t ok_submits) {
  alloc_limit = limit_bytes;
  submits_left = ok_submits;
}

/* Bytes of device memory allocated through the shim and not freed (a leak check). */
EXPORT uint64_t edgellm_fault_allocated(void) { return allocated; }

/* One record per live allocation, to subtract its size when freed. */
#define MAX_ALLOCS 4096
static VkDeviceMemory live_mem[MAX_ALLOCS];
static uint64_t live_size[MAX_ALLOCS];

static VKAPI_ATTR VkResult VKAPI_CALL shim_alloc(VkDevice device, const VkMemoryAllocateInfo* info,
                                                 const VkAllocationCallbacks* cb,
                                                 VkDeviceMemory* mem) {
  if (alloc_limit != 0 && allocated + info->allocationSize > alloc_limit)
    return VK_ERROR_OUT_OF_DEVICE_MEMORY;
  VkResult r = real_alloc(device, info, cb, mem);
  if (r != VK_SUCCESS) return r;
  for (int i = 0; i < MAX_ALLOCS; ++i) {
    if (live_mem[i] == VK_NULL_HANDLE) {
      live_mem[i] = *mem;
      live_size[i] = info->allocationSize;
      allocated += info->allocationSize;
      break;
    }
  }
  return r;
}

static VKAPI_ATTR void VKAPI_CALL shim_free(VkDevice device, VkDeviceMemory mem,
                                           const VkAllocationCallbacks* cb) {
  for (int i = 0; mem != VK_NULL_HANDLE && i < MAX_ALLOCS; ++i) {
    if (live_mem[i] == mem) {
      allocated -= live_size[i];
      live_mem[i] = VK_NULL_HANDLE;
      break;
    }
  }
  real_free(device, mem, cb);
}

static VKAPI_ATTR VkResult VKAPI_CALL shim_submit(VkQueue queue, uint32_t count,
                                                  const VkSubmitInfo* submits, VkFence fence) {
  if (submits_left == 0) return VK_ERROR_DEVICE_LOST;
  if (submits_left > 0) --submits_left;
  return real_submit(queue, count, submits, fence);
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL shim_gdpa(VkDevice device, const char* name) {
  PFN_vkVoidFunction f = real_gdpa(device, name);
  if (f == NULL) return NULL;
  if (strcmp(name, "vkAllocateMemory") == 0) {
    real_alloc = (PFN_vkAllocateMemory)f;
    return (PFN_vkVoidFunction)shim_alloc;
  }
  if (strcmp(name, "vkFreeMemory") == 0) {
    real_free = (PFN_vkFreeMemory)f;
    return (PFN_vkVoidFunction)shim_free;
  }
  if (strcmp(name, "vkQueueSubmit") == 0) {
    real_submit = (PFN_vkQueueSubmit)f;
    return (PFN_vkVoidFunction)shim_submit;
  }
  return f;
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkGetInstanceProcAddr(VkInstance instance,
                                                                      const char* name) {
  if (real_gipa == NULL) {
    real_lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (real_lib == NULL) return NULL;
    real_gipa = (PFN_vkGetInstanceProcAddr)dlsym(real_lib, "vkGetInstanceProcAddr");
    if (real_gipa == NULL) return NULL;
  }
  if (strcmp(name, "vkGetInstanceProcAddr") == 0) return (PFN_vkVoidFunction)vkGetInstanceProcAddr;
  PFN_vkVoidFunction f = real_gipa(instance, name);
  if (f != NULL && strcmp(name, "vkGetDeviceProcAddr") == 0) {
    real_gdpa = (PFN_vkGetDeviceProcAddr)f;
    return (PFN_vkVoidFunction)shim_gdpa;
  }
  return f;
}
