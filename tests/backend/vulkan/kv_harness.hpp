// SPDX-License-Identifier: Apache-2.0
// A device KV cache with its append and attention ops over host-visible input/output buffers,
// next to the CPU cache of the same format, for the [vulkan] KV tests: each step appends the
// same rows to both and (optionally) attends on the device.
#pragma once

#include "edgellm/backend/vulkan/attention.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/kv_cache.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"

#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace edgellm::test {

struct KvShape {
  backend::vk::KvFormat format = backend::vk::KvFormat::int8;
  std::size_t layers = 1, heads = 1, kv_heads = 1, head_dim = 64, capacity = 16, max_rows = 8;
  backend::vk::AttentionOptions attention;  ///< which attention build (tests run each)
};

/// The device side: cache, ops, and fp32 buffers k, v [max_rows][kv_heads][head_dim] and q, out
/// [max_rows][heads][head_dim].
struct DeviceKv {
  backend::vk::Device* dev;
  KvShape shape;
  backend::vk::KVCache cache;
  backend::vk::Buffer k, v, q, out;
  backend::vk::KvAppend append;
  backend::vk::Attention attention;

  static std::unique_ptr<DeviceKv> create(backend::vk::Device& dev, const KvShape& s) {
    namespace vk = backend::vk;
    auto cache = vk::KVCache::create(dev, s.format, s.layers, s.kv_heads, s.head_dim, s.capacity);
    INFO((cache ? std::string() : cache.error().message));
    REQUIRE(cache);
    const std::size_t kv_bytes = s.max_rows * s.kv_heads * s.head_dim * 4;
    const std::size_t q_bytes = s.max_rows * s.heads * s.head_dim * 4;
    auto k = vk::Buffer::create(dev, kv_bytes, "test k", {vk::BufferKind::host_io});
    auto v = vk::Buffer::create(dev, kv_bytes, "test v", {vk::BufferKind::host_io});
    auto q = vk::Buffer::create(dev, q_bytes, "test q", {vk::BufferKind::host_io});
    auto out = vk::Buffer::create(dev, q_bytes, "test out", {vk::BufferKind::host_io});
    REQUIRE((k && v && q && out));
    auto app = vk::KvAppend::create(dev);
    INFO((app ? std::string() : app.error().message));
    REQUIRE(app);
    auto att = vk::Attention::create(dev, s.attention);
    INFO((att ? std::string() : att.error().message));
    REQUIRE(att);
    return std::unique_ptr<DeviceKv>(new DeviceKv{&dev, s, std::move(*cache), std::move(*k),
                                                  std::move(*v), std::move(*q), std::move(*out),
                                                  std::move(*app), std::move(*att)});
  }

  /// Runs `record(seq)` in a new CommandSequence and submits it when it succeeds.
  template <class Record>
  status run(Record&& record) {
    auto seq = backend::vk::CommandSequence::create(*dev, "kv test");
    if (!seq) return seq.error();
    if (auto st = record(*seq); !st) return st;
    return seq->submit();
  }

  /// Appends rows k_rows / v_rows ([rows][kv_heads][head_dim]) at first_pos of `layer` and, when
  /// q_rows is not empty, attends with it ([n_q][heads][head_dim], n_q <= rows: the queries of
  /// the chunk's last n_q positions) into out_rows; one submission.
  status step(std::size_t layer, std::size_t first_pos, std::size_t rows,
              std::span<const float> k_rows, std::span<const float> v_rows,
              std::span<const float> q_rows = {}, std::span<float> out_rows = {}) {
    if (auto st = k.write(std::as_bytes(k_rows)); !st) return st;
    if (auto st = v.write(std::as_bytes(v_rows)); !st) return st;
    if (!q_rows.empty())
      if (auto st = q.write(std::as_bytes(q_rows)); !st) return st;
    const std::size_t n_q = q_rows.size() / (shape.heads * shape.head_dim);
    auto st = run([&](backend::vk::CommandSequence& seq) -> status {
      if (auto a = append.record(seq, cache, k, v, layer, first_pos, rows); !a) return a;
      if (q_rows.empty()) return {};
      return attention.record(seq, cache, q, out, shape.heads, layer, first_pos + rows - n_q, n_q);
    });
    if (!st || q_rows.empty()) return st;
    return out.read(std::as_writable_bytes(out_rows));
  }
};

/// The CPU cache of the same format (KVCacheQ8 or KVCacheF16) and shape.
template <class Cache>
Cache cpu_cache(const KvShape& s) {
  auto c = Cache::create(s.layers, s.kv_heads, s.head_dim, s.capacity);
  REQUIRE(c);
  return std::move(*c);
}

/// Checks that the device holds the CPU cache's codes and scales, bit for bit, for positions
/// [0, n) of `layer`.
template <class Cache>
void require_same_rows(DeviceKv& d, const Cache& cpu, std::size_t layer, std::size_t n) {
  using T = typename Cache::element;
  auto rows = d.cache.read(layer, 0, n);
  INFO((rows ? std::string() : rows.error().message));
  REQUIRE(rows);
  const auto view = cpu.layer_view(layer);
  const std::size_t hd = view.head_dim, kvh = view.kv_heads;
  std::size_t bad = 0;
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t g = 0; g < kvh; ++g) {
      const std::size_t r = j * kvh + g;
      for (std::size_t c = 0; c < hd; ++c) {
        T dk, dv;
        std::memcpy(&dk, rows->k.data() + (r * hd + c) * sizeof(T), sizeof(T));
        std::memcpy(&dv, rows->v.data() + (r * hd + c) * sizeof(T), sizeof(T));
        const T ck = view.k_head(g)[kernels::KvLayerView<T>::k_index(j, c, hd)];
        const T cv = view.v_head(g)[j * hd + c];
        if (dk != ck || dv != cv) {
          if (++bad <= 5) {
            UNSCOPED_INFO("position " << j << ", kv head " << g << ", coordinate " << c
                                      << ": device k " << +dk << " v " << +dv << ", CPU k " << +ck
                                      << " v " << +cv);
          }
        }
      }
      if constexpr (Cache::scaled) {
        const auto bits = [](float f) { return std::bit_cast<std::uint32_t>(f); };
        if (bits(rows->k_scale[r]) != bits(view.k_scale_head(g)[j]) ||
            bits(rows->v_scale[r]) != bits(view.v_scale_head(g)[j])) {
          if (++bad <= 5) {
            UNSCOPED_INFO("position " << j << ", kv head " << g << ": device scales "
                                      << rows->k_scale[r] << "/" << rows->v_scale[r] << ", CPU "
                                      << view.k_scale_head(g)[j] << "/" << view.v_scale_head(g)[j]);
          }
        }
      }
    }
  }
  REQUIRE(bad == 0);
}

}  // namespace edgellm::test
