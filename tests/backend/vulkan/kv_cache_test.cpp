// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/vulkan/kv_cache.hpp: rows stored on the device (int8 codes + fp32
// scales, fp16) equal the CPU caches' (KVCacheQ8, KVCacheF16) bit for bit, for random rows and
// for the edge cases of the format (all-zero rows, ties, inf/NaN, huge and tiny rows whose scale
// is subnormal, fp16 overflow and subnormals), appended in chunks into the second of two
// layers; truncate then append equals a fresh append; bad arguments are named. Validation on.
#include "edgellm/backend/vulkan/kv_cache.hpp"

#include "backend/vulkan/kv_harness.hpp"
#include "backend/vulkan/test_device.hpp"
#include "support/prelude.hpp"

#include "edgellm/cache/prefix_blob.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace test_backend_vulkan_kv_cache {

namespace vk = edgellm::backend::vk;
namespace cache = edgellm::cache;

namespace {

// Rows [rows][kv_heads][head_dim]: random N(0, 1) times a per-row magnitude spanning 10^-30 ..
// 10^30 (every exponent path of the integer divisions), plus the special rows below.
std::vector<float> edge_rows(std::mt19937_64& rng, std::size_t rows, std::size_t row_len,
                             std::size_t head_dim, bool f16) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<float> x(rows * row_len);
  for (std::size_t r = 0; r < rows * row_len / head_dim; ++r) {
    float* row = x.data() + r * head_dim;
    const float mag = f16 ? 1.0f : std::pow(10.0f, static_cast<float>(exponent(rng)));
    for (std::size_t c = 0; c < head_dim; ++c) row[c] = dist(rng) * mag;
    switch (r % 11) {
      case 1:  // all zero (scale 0), with a negative zero
        std::fill(row, row + head_dim, 0.0f);
        row[3] = -0.0f;
        break;
      case 2:  // amax 127: x * 127 / amax = x exactly, so halves are ties (to even)
        for (std::size_t c = 0; c < head_dim; ++c) row[c] = static_cast<float>(c % 9) - 4.5f;
        row[0] = 127.0f;
        break;
      case 3:  // inf and NaN rows: scale NaN, codes 0 (fp16: inf / quiet NaN)
        row[5] = std::numeric_limits<float>::infinity();
        break;
      case 4:
        row[head_dim - 1] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 5:  // int8: amax / 127 below 2^-126, a subnormal scale (normal inputs: a device may
               // flush subnormal ones); fp16: subnormal results and zeros
        for (std::size_t c = 0; c < head_dim; ++c) {
          const float u = 0.5f + 0.5f * static_cast<float>(c % 17) / 16.0f;
          row[c] = (c % 2 ? -u : u) * (f16 ? 1e-6f * dist(rng) : 1e-36f);
        }
        break;
      case 6:  // fp16 overflow (beyond 65520: inf) and the largest finite
        if (f16) {
          row[1] = 70000.0f;
          row[2] = -65519.0f;
          row[3] = 65520.0f;
        }
        break;
      default:
        break;
    }
  }
  return x;
}

template <class Cache>
void check_rows_match(vk::Device& dev, vk::KvFormat format, std::size_t head_dim) {
  auto rng = test::make_rng(40 + head_dim);
  test::KvShape s;
  s.format = format;
  s.layers = 2;
  s.kv_heads = 2;
  s.heads = 2;
  s.head_dim = head_dim;
  s.capacity = 40;
  s.max_rows = 13;
  auto d = test::DeviceKv::create(dev, s);
  auto cpu = test::cpu_cache<Cache>(s);
  const std::size_t row_len = s.kv_heads * head_dim;
  // Layer 0 holds other rows, so that a layer offset error shows.
  const auto other = edge_rows(rng, 3, row_len, head_dim, format == vk::KvFormat::f16);
  REQUIRE(d->step(0, 0, 3, other, other));
  REQUIRE(cpu.append(0, 0, 3, other, other));
  std::size_t pos = 0;
  for (std::size_t rows : {13, 1, 1, 5, 13, 7}) {  // a prefill chunk, decode rows, more chunks
    INFO("chunk of " << rows << " rows at " << pos);
    const auto k = edge_rows(rng, rows, row_len, head_dim, format == vk::KvFormat::f16);
    const auto v = edge_rows(rng, rows, row_len, head_dim, format == vk::KvFormat::f16);
    auto st = d->step(1, pos, rows, k, v);
    INFO((st ? std::string() : st.error().message));
    REQUIRE(st);
    REQUIRE(cpu.append(1, pos, rows, k, v));
    pos += rows;
  }
  CHECK(d->cache.layer_length(1) == pos);
  CHECK(d->cache.layer_length(0) == 3);
  CHECK(d->cache.length() == 3);
  test::require_same_rows(*d, cpu, 1, pos);

  // Rollback: truncate, then append other rows over the old positions.
  REQUIRE(d->cache.truncate(2));
  REQUIRE(cpu.truncate(2));
  CHECK(d->cache.layer_length(1) == 2);
  CHECK(d->cache.layer_length(0) == 2);
  const auto k = edge_rows(rng, 9, row_len, head_dim, format == vk::KvFormat::f16);
  const auto v = edge_rows(rng, 9, row_len, head_dim, format == vk::KvFormat::f16);
  REQUIRE(d->step(1, 2, 9, k, v));
  REQUIRE(cpu.append(1, 2, 9, k, v));
  test::require_same_rows(*d, cpu, 1, 11);
  test::require_same_rows(*d, cpu, 0, 2);

  // The prefix blob: the device's payload is the CPU cache's, byte for byte (only the type
  // name in the header differs), and it restores into a fresh device cache.
  REQUIRE(d->step(0, 2, 9, k, v));
  REQUIRE(cpu.append(0, 2, 9, k, v));
  constexpr std::uint64_t fingerprint = 0x1234'5678'9abc'def0ull;
  std::vector<std::byte> blob, cpu_blob;
  REQUIRE(d->cache.export_prefix(10, fingerprint, blob));
  REQUIRE(cpu.export_prefix(10, fingerprint, cpu_blob));
  REQUIRE(blob.size() == cpu_blob.size());
  const std::size_t body = cache::kPrefixHeaderBytes;
  CHECK(std::equal(blob.begin() + body, blob.end() - 8, cpu_blob.begin() + body));
  auto header = cache::parse_prefix_blob(blob, "test");
  REQUIRE(header);
  CHECK(header->type == d->cache.type_name());
  CHECK(header->length == 10);
  auto fresh = test::DeviceKv::create(dev, s);
  REQUIRE(fresh->cache.import_prefix(blob, fingerprint));
  CHECK(fresh->cache.length() == 10);
  CHECK(fresh->cache.layer_length(0) == 10);
  test::require_same_rows(*fresh, cpu, 0, 10);
  test::require_same_rows(*fresh, cpu, 1, 10);
  // Appending after the restored prefix goes on as in the cache that saved it.
  const auto k1 = std::span(k).first(row_len), v1 = std::span(v).first(row_len);
  REQUIRE(fresh->step(1, 10, 1, k1, v1));
  REQUIRE(cpu.truncate(10));
  REQUIRE(cpu.append(1, 10, 1, k1, v1));
  test::require_same_rows(*fresh, cpu, 1, 11);
}

}  // namespace

TEST_CASE("the Vulkan KV cache stores rows as the CPU caches do, bit for bit",
          "[vulkan][vk_kv_cache]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    for (const std::size_t head_dim : {64, 128}) {
      INFO("head_dim " << head_dim);
      check_rows_match<cache::KVCacheQ8>(*dev, vk::KvFormat::int8, head_dim);
      check_rows_match<cache::KVCacheF16>(*dev, vk::KvFormat::f16, head_dim);
    }
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan KV cache names the bad argument", "[vulkan][vk_kv_cache]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    const auto fails = [](const auto& r, errc code, const char* text) {
      REQUIRE_FALSE(r);
      CHECK(r.error().code == code);
      CHECK_THAT(r.error().message, Contains(text));
    };
    fails(vk::KVCache::create(*dev, vk::KvFormat::int8, 0, 1, 64, 8), errc::invalid_argument,
          "layers: must be positive");
    fails(vk::KVCache::create(*dev, vk::KvFormat::int8, 1, 1, 64, 0), errc::invalid_argument,
          "capacity: must be positive");
    fails(vk::KVCache::create(*dev, vk::KvFormat::int8, 1, 1, 66, 8), errc::unsupported,
          "head_dim: 66");
    fails(vk::KVCache::create(*dev, vk::KvFormat::f16, 1, 1, 512, 8), errc::unsupported,
          "head_dim: 512");
    fails(vk::KVCache::create(*dev, vk::KvFormat::f16, 64, 8, 128, std::size_t{1} << 40),
          errc::capacity_exceeded, "capacity:");

    test::KvShape s;
    s.layers = 2;
    s.capacity = 10;
    s.max_rows = 4;
    auto d = test::DeviceKv::create(*dev, s);
    const std::vector<float> rows(4 * 64, 1.0f);
    fails(d->step(2, 0, 1, rows, rows), errc::out_of_range, "layer: 2 >= layers 2");
    fails(d->step(0, 0, 5, rows, rows), errc::shape_mismatch,
          "k: buffer 'test k' holds 1024 bytes; [5][1][64] fp32 needs 1280");
    fails(d->step(0, 0, 0, rows, rows), errc::invalid_argument, "rows: must be positive");
    fails(d->step(0, 1, 1, rows, rows), errc::invalid_argument, "first_pos: 1 but layer 0 holds 0");
    REQUIRE(d->step(0, 0, 4, rows, rows));
    REQUIRE(d->step(0, 4, 4, rows, rows));
    fails(d->step(0, 8, 3, rows, rows), errc::capacity_exceeded,
          "first_pos + rows: 8 + 3 exceed the capacity 10");
    CHECK(d->cache.layer_length(0) == 8);  // nothing recorded on error
    fails(d->cache.truncate(1), errc::out_of_range, "n: 1 is greater than the cached length 0");
    fails(d->cache.read(0, 6, 3), errc::out_of_range, "positions 6 + 3");

    // A v buffer short of the rows; one op serves two caches.
    auto small = vk::Buffer::create(*dev, 64 * 4, "small", {vk::BufferKind::host_io});
    REQUIRE(small);
    fails(d->run([&](vk::CommandSequence& seq) {
      return d->append.record(seq, d->cache, d->k, *small, 0, 8, 2);
    }),
          errc::shape_mismatch, "v: buffer 'small' holds 256 bytes");
    CHECK(d->cache.layer_length(0) == 8);
    auto other = vk::KVCache::create(*dev, vk::KvFormat::int8, 2, 1, 64, 10);
    REQUIRE(other);
    REQUIRE(d->run([&](vk::CommandSequence& seq) {
      return d->append.record(seq, *other, d->k, d->v, 1, 0, 3);
    }));
    CHECK(other->layer_length(1) == 3);
    CHECK(d->cache.layer_length(1) == 0);
  }
  test::require_no_validation_messages(*log);
}

TEST_CASE("the Vulkan KV cache refuses a prefix blob it cannot hold, unchanged",
          "[vulkan][vk_kv_cache]") {
  std::shared_ptr<const vk::ValidationLog> log;
  {
    auto dev = test::vulkan_test_device();
    if (!dev) return;
    log = dev->validation_log();
    test::KvShape s;
    s.layers = 2;
    s.capacity = 8;
    s.max_rows = 4;
    auto d = test::DeviceKv::create(*dev, s);
    const std::vector<float> rows(4 * 64, 0.5f);
    REQUIRE(d->step(0, 0, 4, rows, rows));
    REQUIRE(d->step(1, 0, 4, rows, rows));
    std::vector<std::byte> blob;
    REQUIRE(d->cache.export_prefix(3, 7, blob));
    const auto refused = [&](vk::KVCache& c, std::span<const std::byte> b, std::uint64_t fp,
                             errc code, const char* text) {
      const std::size_t before = c.length();
      const auto st = c.import_prefix(b, fp);
      REQUIRE_FALSE(st);
      CHECK(st.error().code == code);
      CHECK_THAT(st.error().message, Contains("vulkan KVCache::import_prefix") && Contains(text));
      CHECK(c.length() == before);
    };
    CHECK_FALSE(d->cache.export_prefix(5, 7, blob));  // more than it holds
    refused(d->cache, blob, 8, errc::invalid_argument, "saved by another model");
    auto corrupt = blob;
    corrupt[cache::kPrefixHeaderBytes + 1] ^= std::byte{1};
    refused(d->cache, corrupt, 7, errc::format_error, "checksum");
    auto f16 = vk::KVCache::create(*dev, vk::KvFormat::f16, 2, 1, 64, 8);
    REQUIRE(f16);
    refused(*f16, blob, 7, errc::invalid_argument,
            "KV type VulkanKVCacheQ8, this cache is VulkanKVCacheF16");
    auto other_shape = vk::KVCache::create(*dev, vk::KvFormat::int8, 3, 1, 64, 8);
    REQUIRE(other_shape);
    refused(*other_shape, blob, 7, errc::invalid_argument, "2 x 1 x 64, this cache 3 x 1 x 64");
    auto small = vk::KVCache::create(*dev, vk::KvFormat::int8, 2, 1, 64, 2);
    REQUIRE(small);
    refused(*small, blob, 7, errc::capacity_exceeded, "3 positions, more than the capacity 2");
    // A CPU cache's blob names its own type.
    auto cpu = test::cpu_cache<cache::KVCacheQ8>(s);
    REQUIRE(cpu.append(0, 0, 4, rows, rows));
    REQUIRE(cpu.append(1, 0, 4, rows, rows));
    std::vector<std::byte> cpu_blob;
    REQUIRE(cpu.export_prefix(3, 7, cpu_blob));
    refused(d->cache, cpu_blob, 7, errc::invalid_argument, "KV type KVCacheQ8");
    // The refused imports left the cache usable.
    REQUIRE(d->cache.import_prefix(blob, 7));
    CHECK(d->cache.length() == 3);
  }
  test::require_no_validation_messages(*log);
}

}  // namespace test_backend_vulkan_kv_cache
