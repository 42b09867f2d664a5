// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/cache/prefix_blob.hpp: the header layout (byte for byte against a blob
// written before the format moved to this header), framing errors, prefix_blob_length, and
// prefix files (atomic writes, errors naming the file). Round trips through every cache type:
// quantized_kv_cache_test.cpp.
#include "edgellm/cache/prefix_blob.hpp"

#include "edgellm/cache/dense_kv_cache.hpp"
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace test_cache_prefix_blob {

namespace {

using Catch::Matchers::Contains;
using edgellm::errc;
namespace cache = edgellm::cache;

// export_prefix(3, 0x1234567890abcdef) of a KVCacheF16 of 2 layers x 1 kv head x head_dim 4
// filled by small_cache(), as the format's first implementation wrote it.
constexpr std::string_view kGoldenHex =
    "454447454c4b561a01000000500000004b5643616368654631360000000000000200000000000000010000000000"
    "000004000000000000000300000000000000efcdab90785634126000000000000000000000340038003a00340038"
    "003a003c0038003a003c003d0000003e0042804400bc00380040004300c000b8003c004100bc00ba00b800b400ba"
    "00b800b4000000b800b400000034003c0041004480450000003e0042804400bc0038004000437cb70133213a698f";

std::vector<std::byte> from_hex(std::string_view hex) {
  std::vector<std::byte> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::byte>(std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  return out;
}

cache::KVCacheF16 small_cache() {
  auto c = cache::KVCacheF16::create(2, 1, 4, 8);
  REQUIRE(c);
  std::vector<float> k(4), v(4);
  for (std::size_t l = 0; l < 2; ++l) {
    for (std::size_t p = 0; p < 3; ++p) {
      for (std::size_t i = 0; i < 4; ++i) {
        k[i] = 0.25f * static_cast<float>(i + p) - static_cast<float>(l);
        v[i] = 1.5f * static_cast<float>(i) - static_cast<float>(p) + static_cast<float>(l);
      }
      REQUIRE(c->append(l, p, 1, k, v));
    }
  }
  return std::move(*c);
}

}  // namespace

TEST_CASE("prefix blobs keep their byte layout", "[cache]") {
  const auto golden = from_hex(kGoldenHex);
  const cache::KVCacheF16 c = small_cache();
  std::vector<std::byte> blob;
  REQUIRE(c.export_prefix(3, 0x1234567890abcdefull, blob));
  CHECK(blob == golden);

  auto h = cache::parse_prefix_blob(golden, "test");
  REQUIRE(h);
  CHECK(h->type == "KVCacheF16");
  CHECK(h->layers == 2);
  CHECK(h->kv_heads == 1);
  CHECK(h->head_dim == 4);
  CHECK(h->length == 3);
  CHECK(h->fingerprint == 0x1234567890abcdefull);
  CHECK(h->payload_bytes == golden.size() - cache::kPrefixHeaderBytes - 8);
  CHECK(cache::prefix_blob_bytes(h->payload_bytes) == golden.size());
  auto n = cache::prefix_blob_length(golden);
  REQUIRE(n);
  CHECK(*n == 3);

  // The header and seal functions rebuild the same bytes around the same payload.
  std::vector<std::byte> again(golden.size());
  std::copy(golden.begin() + cache::kPrefixHeaderBytes, golden.end() - 8,
            again.begin() + cache::kPrefixHeaderBytes);
  cache::store_prefix_header(again.data(), *h);
  cache::seal_prefix_blob(again);
  CHECK(again == golden);
}

TEST_CASE("parse_prefix_blob refuses bad framing with a clear error", "[cache]") {
  const auto golden = from_hex(kGoldenHex);
  const auto refused = [](const std::vector<std::byte>& b, errc code, const std::string& what) {
    auto r = cache::parse_prefix_blob(b, "where");
    REQUIRE_FALSE(r);
    CHECK(r.error().code == code);
    CHECK_THAT(r.error().message, Contains("[where] " + what));
  };
  refused(std::vector<std::byte>(golden.begin(), golden.begin() + 87), errc::format_error,
          "blob of 87 bytes is shorter than the 88 bytes");
  auto bad = golden;
  bad[3] = std::byte{'X'};
  refused(bad, errc::format_error, "not a KV prefix blob (bad magic)");
  bad = golden;
  bad[8] = std::byte{2};
  refused(bad, errc::unsupported, "format version 2 with a 80-byte header");
  refused(std::vector<std::byte>(golden.begin(), golden.end() - 1), errc::format_error,
          "blob of 183 bytes but its header describes 184 (truncated or corrupted)");
  bad = golden;
  bad[100] ^= std::byte{1};
  refused(bad, errc::format_error, "checksum mismatch (stored 0x");

  CHECK_FALSE(
      cache::prefix_blob_length(std::vector<std::byte>(golden.begin(), golden.begin() + 79)));
  bad = golden;
  bad[0] = std::byte{0};
  auto n = cache::prefix_blob_length(bad);
  REQUIRE_FALSE(n);
  CHECK_THAT(n.error().message, Contains("[prefix_blob_length] not a KV prefix blob"));
}

TEST_CASE("prefix files are written atomically and read back whole", "[cache]") {
  const auto blob = from_hex(kGoldenHex);
  edgellm::test::TempDir dir;
  const std::string path = dir.file("prefix.kv");
  REQUIRE(cache::write_prefix_file(path, blob));
  auto back = cache::read_prefix_file(path);
  REQUIRE(back);
  CHECK(*back == blob);
  // Only the file itself: no temporary file is left behind.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  CHECK(files == 1);

  auto missing = cache::read_prefix_file(dir.file("nope.kv"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == errc::io_error);
  CHECK_THAT(missing.error().message, Contains("'" + dir.file("nope.kv") + "': cannot open"));
  CHECK_THAT(missing.error().message, Contains("No such file or directory"));

  auto too_big = cache::read_prefix_file(path, 100);
  REQUIRE_FALSE(too_big);
  CHECK_THAT(too_big.error().message, Contains("larger than the 100-byte limit"));

  const std::string bad = dir.file("no/such/dir/p.kv");
  auto unwritable = cache::write_prefix_file(bad, blob);
  REQUIRE_FALSE(unwritable);
  CHECK(unwritable.error().code == errc::io_error);
  CHECK_THAT(unwritable.error().message,
             Contains("[write_prefix_file] '" + bad + "': cannot create the temporary file"));
  CHECK_THAT(unwritable.error().message, Contains("No such file or directory"));
}

TEST_CASE("write_prefix_file replaces prefix files only, never other files", "[cache]") {
  const auto blob = from_hex(kGoldenHex);
  edgellm::test::TempDir dir;
  const std::string path = dir.file("prefix.kv");
  REQUIRE(cache::write_prefix_file(path, blob));
  REQUIRE(cache::write_prefix_file(path, blob));  // one of ours: replaced
  const std::string notes = dir.write("notes.txt", "not a KV prefix");
  auto st = cache::write_prefix_file(notes, blob);
  REQUIRE_FALSE(st);
  CHECK(st.error().code == errc::io_error);
  CHECK_THAT(st.error().message,
             Contains("'" + notes + "': exists and is not an edgellm KV prefix file"));
  auto back = edgellm::io::read_text_file(notes);
  REQUIRE(back);
  CHECK(*back == "not a KV prefix");
}

}  // namespace test_cache_prefix_blob
