// SPDX-License-Identifier: Apache-2.0
// The prefix blob: the saved KV state of a prompt prefix (PrefixKVCache::export_prefix), its
// header, its checksum, and its files.
#pragma once

#include "edgellm/detail/bytes.hpp"
#include "edgellm/io/atomic_file.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::cache {

// Layout: an 80-byte header, the payload, an 8-byte checksum; integers little-endian.
//   0  magic "EDGELKV\x1a"        8 bytes
//   8  version (1)                u32
//  12  header bytes (80)          u32
//  16  KV type name               16 bytes, zero padded (e.g. "KVCacheQ8")
//  32  layers, kv_heads, head_dim, length (positions), model fingerprint, payload bytes   u64 each
//  80  payload: per layer, per kv head: keys [length][head_dim] elements, key scales [length]
//      fp32 (scaled types only), values [length][head_dim], value scales [length]; elements
//      little-endian (int8 codes, fp16 bits, fp32 bits)
//  80 + payload: edgellm::detail::checksum64 of every byte before it

inline constexpr char kPrefixMagic[8] = {'E', 'D', 'G', 'E', 'L', 'K', 'V', '\x1a'};
inline constexpr std::uint32_t kPrefixVersion = 1;
inline constexpr std::size_t kPrefixHeaderBytes = 80;
/// Bytes of the KV type name field (names are shorter).
inline constexpr std::size_t kPrefixTypeBytes = 16;

/// The header fields of a prefix blob.
struct PrefixBlobHeader {
  std::string_view type;  ///< KV type name ("KVCacheQ8"); from parse: a view into the blob
  std::uint64_t layers = 0, kv_heads = 0, head_dim = 0;
  std::uint64_t length = 0;         ///< positions held
  std::uint64_t fingerprint = 0;    ///< the model's (PrefixKVCache's model_fingerprint)
  std::uint64_t payload_bytes = 0;  ///< bytes between header and checksum
};

/// Bytes of a whole blob with `payload_bytes` of payload: header + payload + checksum.
inline constexpr std::size_t prefix_blob_bytes(std::size_t payload_bytes) noexcept {
  return kPrefixHeaderBytes + payload_bytes + 8;
}

/// Writes the header `h` into the first kPrefixHeaderBytes of `p` (type truncated to 16 bytes).
inline void store_prefix_header(std::byte* p, const PrefixBlobHeader& h) noexcept {
  std::memset(p, 0, kPrefixHeaderBytes);
  std::memcpy(p, kPrefixMagic, 8);
  edgellm::detail::store_le32(p + 8, kPrefixVersion);
  edgellm::detail::store_le32(p + 12, static_cast<std::uint32_t>(kPrefixHeaderBytes));
  std::memcpy(p + 16, h.type.data(), std::min(h.type.size(), kPrefixTypeBytes));
  const std::uint64_t fields[6] = {h.layers, h.kv_heads,    h.head_dim,
                                   h.length, h.fingerprint, h.payload_bytes};
  for (std::size_t i = 0; i < 6; ++i) edgellm::detail::store_le64(p + 32 + 8 * i, fields[i]);
}

/// Writes the checksum into the last 8 bytes of a complete blob (header and payload written).
inline void seal_prefix_blob(std::span<std::byte> blob) noexcept {
  const std::size_t body = blob.size() - 8;
  edgellm::detail::store_le64(blob.data() + body, edgellm::detail::checksum64(blob.first(body)));
}

/// Checks a blob's framing, in order, each a clear error (prefixed by `where`): size, magic,
/// version (format_error / unsupported), payload size against the blob size, checksum
/// (format_error: corrupted or truncated); and returns its header. What the header says (type,
/// fingerprint, shape) is for the importing cache to check.
inline result<PrefixBlobHeader> parse_prefix_blob(std::span<const std::byte> blob,
                                                  std::string_view where) {
  constexpr std::size_t hb = kPrefixHeaderBytes;
  if (blob.size() < hb + 8) {
    return make_error(errc::format_error, where,
                      "blob of " + std::to_string(blob.size()) + " bytes is shorter than the " +
                          std::to_string(hb + 8) + " bytes of header and checksum (truncated?)");
  }
  const std::byte* p = blob.data();
  if (std::memcmp(p, kPrefixMagic, 8) != 0) {
    return make_error(errc::format_error, where, "not a KV prefix blob (bad magic)");
  }
  const std::uint32_t version = edgellm::detail::load_le32(p + 8),
                      header = edgellm::detail::load_le32(p + 12);
  if (version != kPrefixVersion || header != hb) {
    return make_error(errc::unsupported, where,
                      "format version " + std::to_string(version) + " with a " +
                          std::to_string(header) + "-byte header; this build reads version " +
                          std::to_string(kPrefixVersion) + " (" + std::to_string(hb) + ")");
  }
  PrefixBlobHeader h;
  h.layers = edgellm::detail::load_le64(p + 32);
  h.kv_heads = edgellm::detail::load_le64(p + 40);
  h.head_dim = edgellm::detail::load_le64(p + 48);
  h.length = edgellm::detail::load_le64(p + 56);
  h.fingerprint = edgellm::detail::load_le64(p + 64);
  h.payload_bytes = edgellm::detail::load_le64(p + 72);
  if (h.payload_bytes != blob.size() - hb - 8) {
    return make_error(
        errc::format_error, where,
        "blob of " + std::to_string(blob.size()) + " bytes but its header describes " +
            (h.payload_bytes > blob.size() ? std::string("more")
                                           : std::to_string(h.payload_bytes + hb + 8)) +
            " (truncated or corrupted)");
  }
  const std::uint64_t stored = edgellm::detail::load_le64(p + hb + h.payload_bytes);
  const std::uint64_t computed = edgellm::detail::checksum64(blob.first(hb + h.payload_bytes));
  if (stored != computed) {
    return make_error(errc::format_error, where,
                      "checksum mismatch (stored " + edgellm::detail::hex64(stored) +
                          ", computed " + edgellm::detail::hex64(computed) +
                          "): the blob is corrupted");
  }
  const char* name = reinterpret_cast<const char*>(p + 16);
  h.type = std::string_view(
      name, static_cast<std::size_t>(std::find(name, name + kPrefixTypeBytes, '\0') - name));
  return h;
}

/// The number of positions a prefix blob says it holds (its header's length field), without
/// checking the rest: callers that pair a blob with other data (a prompt cache's token ids)
/// compare before import_prefix() checks everything else. Error if too short or bad magic.
inline result<std::uint64_t> prefix_blob_length(std::span<const std::byte> blob) {
  if (blob.size() < kPrefixHeaderBytes || std::memcmp(blob.data(), kPrefixMagic, 8) != 0) {
    return make_error(errc::format_error, "prefix_blob_length",
                      "not a KV prefix blob (bad magic or shorter than its " +
                          std::to_string(kPrefixHeaderBytes) + "-byte header)");
  }
  return edgellm::detail::load_le64(blob.data() + 56);
}

/// Writes a prefix blob (export_prefix's output, or any bytes) to `path` atomically
/// (io::AtomicFileWriter: a failed or interrupted write never leaves a partial file there). An
/// existing file at `path` is replaced only when it is a prefix blob (or empty); anything else
/// is refused (io::check_replaceable). Errors name the file and the OS reason.
inline status write_prefix_file(const std::string& path, std::span<const std::byte> blob) {
  constexpr std::string_view where = "write_prefix_file";
  if (auto st = io::check_replaceable(path, std::as_bytes(std::span(kPrefixMagic)),
                                      "an edgellm KV prefix file", where);
      !st) {
    return st;
  }
  return io::write_file_atomic(path, blob, where);
}

/// Reads a whole prefix file (at most max_bytes; io::read_file_bytes). Errors name the file.
inline result<std::vector<std::byte>> read_prefix_file(const std::string& path,
                                                       std::size_t max_bytes = std::size_t{1}
                                                                               << 40) {
  return io::read_file_bytes(path, max_bytes);
}

}  // namespace edgellm::cache
