// SPDX-License-Identifier: Apache-2.0
// The packed-weight cache: every int4 matrix of a loaded model in kernels::Q4Matrix's tile layout
// (and an int8 lm_head in kernels::Q8Matrix's), written once beside the checkpoint and
// memory-mapped by later loads instead of importing and repacking the AutoAWQ tensors again (for
// a 7B checkpoint: mapping and checking its tiles instead of a minute or more of repacking;
// docs/performance.md).
#pragma once

#include "edgellm/detail/bytes.hpp"
#include "edgellm/io/atomic_file.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/q8_matrix.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <utility>
#include <vector>

namespace edgellm::model {

/// Where load_weights looks for and writes the packed cache of checkpoint `dir` when
/// LoadOptions::packed_cache is `auto`.
inline std::string default_packed_cache_path(const std::string& dir) {
  return dir + "/edgellm-packed-q4.bin";
}

namespace detail {

/// File layout (version 1; little-endian hosts only, like the tiles themselves):
///     0  char[16]  magic "EDGELLM Q4 PACK\0"
///    16  u64       version (1)
///    24  u64       source key: packed_source_key() of the checkpoint and load options
///    32  u64       number of entries E
///    40  u64       file size in bytes
///    48  u64       checksum of bytes [0, 48) and of the entry table
///    56  E x 128   entries: name (char[80], NUL-padded), n, k, group, offset, bytes, checksum
///   ...            tiles of each entry at its offset (a multiple of 4096), bytes long
/// Checksums are edgellm::detail::lane_checksum64 (fast enough for gigabytes of tiles). An
/// entry's checksum covers its tiles; every one is checked when the entry is used. An int8
/// matrix (Q8Matrix's bytes: codes, then scales) is the entry named packed_int8_name(name).
inline constexpr char kPackedMagic[16] = "EDGELLM Q4 PACK";
inline constexpr std::uint64_t kPackedVersion = 1;
inline constexpr std::size_t kPackedHeaderBytes = 56, kPackedEntryBytes = 128,
                             kPackedNameBytes = 80, kPackedAlign = 4096;

/// Feeds one field of the source key: its bytes, then a separator byte 0xFF.
inline void fnv_mix(std::uint64_t& h, std::string_view s) noexcept {
  h = edgellm::detail::fnv1a64(h, s);
  h = edgellm::detail::fnv1a64(h, std::string_view("\xFF", 1));
}

/// Identity of what a packed cache was built from: the tile format, every checkpoint file's
/// name, size and modification time, config.json's bytes, and `options` (the load options that
/// change the packed matrices, e.g. "lm_head=q4"). Any change makes an existing cache stale.
inline result<std::uint64_t> packed_source_key(const std::string& dir, const io::Checkpoint& ckpt,
                                               std::string_view options) {
  std::uint64_t h = edgellm::detail::kFnvOffset;
  fnv_mix(h, "edgellm q4 pack v1");
  fnv_mix(h, std::to_string(sizeof(kernels::Q4Tile<128>)));
  fnv_mix(h, options);
  std::vector<std::string> paths;
  for (const io::SafetensorsFile& f : ckpt.files()) paths.push_back(f.path());
  std::sort(paths.begin(), paths.end());
  for (const std::string& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      return make_error(errc::io_error, "packed cache", p + ": cannot stat the checkpoint file");
    }
    fnv_mix(h, p.substr(p.find_last_of('/') + 1));
    fnv_mix(h, std::to_string(st.st_size));
    fnv_mix(h, std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec));
  }
  auto cfg = io::MappedFile::open(dir + "/config.json", io::kMaxConfigJsonBytes);
  if (!cfg) return cfg.error();
  fnv_mix(h, std::string_view(reinterpret_cast<const char*>(cfg->data()), cfg->size()));
  return h;
}

/// The entry name of the int8 form of matrix `name` (an int8 lm_head: "lm_head:int8").
inline std::string packed_int8_name(std::string_view name) { return std::string(name) + ":int8"; }

/// Copies `src` into `dst` (as many bytes) in 1 MiB pieces, checksumming each piece while it is
/// cached and dropping each mapped piece once copied, so resident memory grows by the copy only
/// (otherwise the copied matrix is resident twice at the peak; docs/performance.md). Returns
/// whether the checksum is `checksum`.
inline bool copy_checked(std::span<const std::byte> src, std::byte* dst,
                         std::uint64_t checksum) noexcept {
  edgellm::detail::LaneChecksum64 c;
  constexpr std::size_t kPiece = std::size_t{1} << 20;
  for (std::size_t o = 0; o < src.size(); o += kPiece) {
    const std::size_t len = std::min(kPiece, src.size() - o);
    std::memcpy(dst + o, src.data() + o, len);
    c.update(dst + o, len);
    io::release_mapped_pages(src.subspan(o, len));
  }
  return c.finish() == checksum;
}

struct PackedEntry {
  std::string name;
  std::uint64_t n = 0, k = 0, group = 0, offset = 0, bytes = 0, checksum = 0;
};

/// A validated, mapped packed cache. take() hands out zero-copy views of its matrices.
class PackedCacheReader {
 public:
  /// Maps `path` and checks magic, version, source key, size, the entry table's checksum and
  /// every entry's bounds and alignment. The error says what is wrong (the caller then rebuilds
  /// the cache).
  static result<PackedCacheReader> open(const std::string& path, std::uint64_t key) {
    const std::string where = "packed cache " + path;
    if constexpr (std::endian::native != std::endian::little) {
      return make_error(errc::unsupported, where, "big-endian host");
    }
    auto f = io::MappedFile::open(path);
    if (!f) return f.error();
    PackedCacheReader r;
    const std::byte* p = f->data();
    const std::size_t size = f->size();
    const auto u64 = [&](std::size_t off) {
      std::uint64_t v;
      std::memcpy(&v, p + off, 8);
      return v;
    };
    if (size < kPackedHeaderBytes || std::memcmp(p, kPackedMagic, 16) != 0)
      return make_error(errc::format_error, where, "not a packed cache (bad magic or too short)");
    if (u64(16) != kPackedVersion)
      return make_error(errc::format_error, where, "version " + std::to_string(u64(16)));
    if (u64(24) != key)
      return make_error(errc::format_error, where,
                        "stale: built from another checkpoint, config or load options");
    const std::uint64_t count = u64(32);
    if (u64(40) != size)
      return make_error(errc::format_error, where,
                        "truncated or extended: header says " + std::to_string(u64(40)) +
                            " bytes, file has " + std::to_string(size));
    if (count > (size - kPackedHeaderBytes) / kPackedEntryBytes)
      return make_error(errc::format_error, where, "entry table past the end of the file");
    const std::size_t table = kPackedHeaderBytes + count * kPackedEntryBytes;
    std::vector<std::byte> head(p, p + table);
    std::memset(head.data() + 48, 0, 8);
    if (edgellm::detail::lane_checksum64(head) != u64(48))
      return make_error(errc::format_error, where, "header checksum mismatch");
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::byte* e = p + kPackedHeaderBytes + i * kPackedEntryBytes;
      PackedEntry en;
      const char* name = reinterpret_cast<const char*>(e);
      en.name.assign(name, strnlen(name, kPackedNameBytes));
      const std::size_t o = kPackedHeaderBytes + i * kPackedEntryBytes + kPackedNameBytes;
      en.n = u64(o);
      en.k = u64(o + 8);
      en.group = u64(o + 16);
      en.offset = u64(o + 24);
      en.bytes = u64(o + 32);
      en.checksum = u64(o + 40);
      if (en.offset % kPackedAlign != 0 || en.offset < table || en.offset > size ||
          en.bytes > size - en.offset)
        return make_error(errc::format_error, where,
                          en.name + ": tiles out of the file or misaligned");
      r.entries_.push_back(std::move(en));
    }
    r.file_ = std::move(*f);
    return r;
  }

  /// The matrix `name` with shape n x k and group size `group` as a view into the mapping, or
  /// with `copy` as an owned copy (Q4Matrix::allocate: 2 MiB pages where the kernel allows), after
  /// checking its tiles' checksum; nullopt when the cache has no such entry or it does not match
  /// (the caller then builds that matrix from the checkpoint).
  std::optional<kernels::Q4Matrix> take(std::string_view name, std::size_t n, std::size_t k,
                                        std::size_t group, bool copy = false) const {
    for (const PackedEntry& e : entries_) {
      if (e.name != name) continue;
      if (e.n != n || e.k != k || e.group != group) return std::nullopt;
      const std::span<const std::byte> tiles(file_.data() + e.offset, e.bytes);
      if (copy) {
        auto m = kernels::Q4Matrix::allocate(n, k, group, /*zero_fill=*/false);
        if (!m || m->byte_size() != e.bytes) return std::nullopt;
        if (!copy_checked(tiles, m->mutable_data(), e.checksum)) return std::nullopt;
        return std::move(*m);
      }
      if (edgellm::detail::lane_checksum64(tiles) != e.checksum) return std::nullopt;
      auto m = kernels::Q4Matrix::view(tiles.data(), tiles.size(), n, k, group);
      if (!m || m->byte_size() != e.bytes) return std::nullopt;
      return std::move(*m);
    }
    return std::nullopt;
  }

  /// The int8 matrix `name` [n][k] with group size `group` (the entry packed_int8_name(name)),
  /// copied into owned memory after checking its checksum; nullopt as take().
  std::optional<kernels::Q8Matrix> take_q8(std::string_view name, std::size_t n, std::size_t k,
                                           std::size_t group) const {
    const std::string key = packed_int8_name(name);
    for (const PackedEntry& e : entries_) {
      if (e.name != key) continue;
      if (e.n != n || e.k != k || e.group != group) return std::nullopt;
      auto m = kernels::Q8Matrix::allocate(n, k, group);
      if (!m || m->byte_size() != e.bytes) return std::nullopt;
      if (!copy_checked({file_.data() + e.offset, e.bytes}, m->mutable_data(), e.checksum))
        return std::nullopt;
      return std::move(*m);
    }
    return std::nullopt;
  }

  const io::MappedFile& file() const noexcept { return file_; }
  /// Moves the mapping out (moving keeps its address, so views taken stay valid).
  io::MappedFile release_file() noexcept { return std::move(file_); }
  std::size_t entries() const noexcept { return entries_.size(); }

 private:
  io::MappedFile file_;
  std::vector<PackedEntry> entries_;
};

/// Whether the packed cache at `path` may be rebuilt for source `key` without being told:
/// nothing is there, or an empty file, or a packed cache built from the same source (stale in
/// its version or damaged, so rebuilding repairs it). A packed cache of another checkpoint,
/// config or load options, or any other file, is refused with a message saying so (the caller
/// adds how to force it); a directory, device or FIFO is refused always (io::OutputRule).
inline status check_packed_cache_replaceable(const std::string& path, std::uint64_t key) {
  const std::string where = "packed cache " + path;
  if (auto st = io::check_output_path(path, {}, "packed cache"); !st) return st;
  auto head = io::read_file_head(path, 32, where);
  if (!head) return head.error();
  if (!*head || (*head)->empty()) return {};
  const std::vector<std::byte>& h = **head;
  if (h.size() < 32 || std::memcmp(h.data(), kPackedMagic, 16) != 0)
    return make_error(errc::io_error, where, "exists and is not an edgellm packed cache");
  std::uint64_t stored = 0;
  std::memcpy(&stored, h.data() + 24, 8);
  if (stored != key)
    return make_error(errc::io_error, where,
                      "belongs to another checkpoint, config or set of load options");
  return {};
}

/// One matrix to write into a packed cache: its entry name, shape, group size and bytes.
struct PackedMatrix {
  std::string name;
  std::uint64_t n = 0, k = 0, group = 0;
  std::span<const std::byte> bytes;

  static PackedMatrix of(std::string name, const kernels::Q4Matrix& m) {
    return {std::move(name), m.n(), m.k(), m.group_size(), {m.data(), m.byte_size()}};
  }
  /// Named packed_int8_name(name).
  static PackedMatrix of(std::string_view name, const kernels::Q8Matrix& m) {
    return {packed_int8_name(name), m.n(), m.k(), m.group_size(), {m.data(), m.byte_size()}};
  }
};

/// Writes `matrices` as a packed cache at `path` atomically (io::AtomicFileWriter), so readers
/// never see a half-written cache; a device, FIFO or directory at `path` is refused and
/// temporaries of killed writers beside it are removed (io/output_path.hpp).
inline status write_packed_cache(const std::string& path, std::uint64_t key,
                                 std::span<const PackedMatrix> matrices) {
  const std::string where = "packed cache " + path;
  if constexpr (std::endian::native != std::endian::little) {
    return make_error(errc::unsupported, where, "big-endian host");
  }
  const auto up = [](std::uint64_t b) {
    return (b + kPackedAlign - 1) / kPackedAlign * kPackedAlign;
  };
  const std::size_t count = matrices.size();
  std::vector<std::byte> head(kPackedHeaderBytes + count * kPackedEntryBytes);
  const auto put = [&](std::size_t off, std::uint64_t v) { std::memcpy(head.data() + off, &v, 8); };
  std::uint64_t offset = up(head.size());
  for (std::size_t i = 0; i < count; ++i) {
    const PackedMatrix& m = matrices[i];
    if (m.name.size() >= kPackedNameBytes)
      return make_error(errc::invalid_argument, where, "tensor name too long: " + m.name);
    const std::size_t e = kPackedHeaderBytes + i * kPackedEntryBytes;
    std::memcpy(head.data() + e, m.name.data(), m.name.size());
    const std::size_t o = e + kPackedNameBytes;
    put(o, m.n);
    put(o + 8, m.k);
    put(o + 16, m.group);
    put(o + 24, offset);
    put(o + 32, m.bytes.size());
    put(o + 40, edgellm::detail::lane_checksum64(m.bytes));
    offset = up(offset + m.bytes.size());
  }
  std::memcpy(head.data(), kPackedMagic, 16);
  put(16, kPackedVersion);
  put(24, key);
  put(32, count);
  put(40, offset);
  put(48, edgellm::detail::lane_checksum64(head));  // computed with this field still zero

  auto out = io::AtomicFileWriter::create(path, "write_packed_cache");
  if (!out) return out.error();
  static constexpr std::byte zeros[kPackedAlign] = {};
  if (auto st = out->write(head); !st) return st;
  std::uint64_t at = head.size();
  for (std::size_t i = 0; i < count; ++i) {
    const std::span<const std::byte> bytes = matrices[i].bytes;
    const std::uint64_t pad = up(at) - at;
    if (auto st = out->write({zeros, pad}); !st) return st;
    if (auto st = out->write(bytes); !st) return st;
    at += pad + bytes.size();
  }
  if (auto st = out->write({zeros, offset - at}); !st) return st;
  return out->commit();
}

}  // namespace detail
}  // namespace edgellm::model
