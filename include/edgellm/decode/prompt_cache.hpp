// SPDX-License-Identifier: Apache-2.0
// Prompt (prefix) cache: the token ids of a prompt prefix together with the model's KV state
// after them, kept in memory or in a file, so a long system prompt is prefilled once and later
// requests that start with it only run their own tokens.
#pragma once

#include "edgellm/cache/prefix_blob.hpp"
#include "edgellm/detail/bytes.hpp"
#include "edgellm/io/atomic_file.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/result.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::decode {

/// A model whose KV state can be saved and restored (model::Transformer with any cache type).
template <class M>
concept PrefixModel = requires(M& m, const M& cm, std::size_t n, std::vector<std::byte>& out,
                               std::span<const std::byte> blob) {
  { cm.save_prefix(n, out) } -> std::same_as<status>;
  { m.load_prefix(blob) } -> std::same_as<status>;
  { cm.position() } -> std::same_as<std::size_t>;
};

/// The first tokens.size() tokens a model consumed and its KV state after them. The state is
/// tagged with the model's fingerprint and KV type, so restoring it into another model fails.
struct PromptCache {
  std::vector<std::int32_t> tokens;
  std::vector<std::byte> state;  ///< the model's save_prefix() blob
};

/// Saves the state of `model` after the first `tokens.size()` tokens it consumed; `tokens` must
/// be those tokens (the caller knows them: it fed them).
template <PrefixModel M>
status save_prompt_cache(const M& model, std::span<const std::int32_t> tokens, PromptCache& out) {
  if (tokens.size() > model.position()) {
    return make_error(errc::invalid_argument, "save_prompt_cache",
                      "tokens: " + std::to_string(tokens.size()) + " but the model holds only " +
                          std::to_string(model.position()));
  }
  PromptCache c;
  c.tokens.assign(tokens.begin(), tokens.end());
  if (auto st = model.save_prefix(tokens.size(), c.state); !st) return st;
  out = std::move(c);
  return {};
}

/// Restores `c` into `model` (position() becomes c.tokens.size()). On error the model is
/// unchanged; a state that holds another number of positions than c.tokens is refused.
template <PrefixModel M>
status restore_prompt_cache(M& model, const PromptCache& c) {
  if (auto held = cache::prefix_blob_length(c.state); held && *held != c.tokens.size()) {
    return make_error(errc::invalid_argument, "restore_prompt_cache",
                      "the state holds " + std::to_string(*held) + " positions but the cache has " +
                          std::to_string(c.tokens.size()) + " token ids");
  }
  return model.load_prefix(c.state);
}

namespace detail {

inline constexpr char kPromptCacheMagic[8] = {'E', 'L', 'L', 'M', 'P', 'C', 'T', '1'};

/// The checksum of the formats (edgellm::detail::checksum64) over the token ids.
inline std::uint64_t tokens_checksum(std::span<const std::int32_t> tokens) noexcept {
  return edgellm::detail::checksum64(std::as_bytes(tokens));
}

}  // namespace detail

/// Whether `path` may be (re)written as a prompt cache: nothing is there, an empty file, or a
/// prompt cache (of whatever model or context: a stale one is rebuilt). Any other file, a
/// directory or a device is refused with an error naming it (io::check_replaceable), so an
/// application can refuse the path before it loads a model.
inline status check_prompt_cache_path(const std::string& path,
                                      std::string_view where = "check_prompt_cache_path") {
  return io::check_replaceable(path, std::as_bytes(std::span(detail::kPromptCacheMagic)),
                               "an edgellm prompt cache", where);
}

/// File layout (little-endian): magic "ELLMPCT1", u64 token count n, n x i32 token ids, u64
/// checksum of the ids (tokens_checksum), then the state blob (which carries its own header and
/// checksum). Written atomically (io::AtomicFileWriter). An existing file at `path` is replaced
/// only when it is a prompt cache (or empty): any other file, a directory or a device is refused
/// (io::check_replaceable). Errors name the file.
inline status write_prompt_cache(const std::string& path, const PromptCache& c) {
  constexpr std::string_view where = "write_prompt_cache";
  if (auto st = io::check_replaceable(path, std::as_bytes(std::span(detail::kPromptCacheMagic)),
                                      "an edgellm prompt cache", where);
      !st) {
    return st;
  }
  std::vector<std::byte> out(8 + 8 + 4 * c.tokens.size() + 8);
  std::size_t at = 0;
  const auto put = [&](const void* p, std::size_t n) {
    std::memcpy(out.data() + at, p, n);
    at += n;
  };
  put(detail::kPromptCacheMagic, 8);
  edgellm::detail::store_le64(out.data() + at, c.tokens.size());
  at += 8;
  for (const std::int32_t id : c.tokens) {
    edgellm::detail::store_le32(out.data() + at, static_cast<std::uint32_t>(id));
    at += 4;
  }
  edgellm::detail::store_le64(out.data() + at, detail::tokens_checksum(c.tokens));
  out.insert(out.end(), c.state.begin(), c.state.end());
  return io::write_file_atomic(path, out, where);
}

/// Reads a file written by write_prompt_cache(). The path must be a regular file (a directory,
/// device or FIFO is refused before anything is read); it is mapped, and its header and token
/// ids are checked before the state is copied out. The state is checked when it is restored.
inline result<PromptCache> read_prompt_cache(const std::string& path) {
  auto file = io::MappedFile::open(path);
  if (!file) return file.error();
  const auto bad = [&](const std::string& what) {
    return make_error(errc::format_error, "read_prompt_cache", path + ": " + what);
  };
  const std::span<const std::byte> b = file->bytes();
  if (b.size() < 24 || std::memcmp(b.data(), detail::kPromptCacheMagic, 8) != 0)
    return bad("not an edgellm prompt cache (bad magic or too short)");
  const std::uint64_t n = edgellm::detail::load_le64(b.data() + 8);
  if (n > (b.size() - 24) / 4)
    return bad("token count " + std::to_string(n) + " exceeds the file size");
  PromptCache c;
  c.tokens.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    c.tokens[i] = static_cast<std::int32_t>(edgellm::detail::load_le32(b.data() + 16 + 4 * i));
  const std::uint64_t h = edgellm::detail::load_le64(b.data() + 16 + 4 * n);
  if (h != detail::tokens_checksum(c.tokens))
    return bad("token ids fail their checksum (corrupted file)");
  const std::span<const std::byte> state = b.subspan(24 + 4 * n);
  if (auto held = cache::prefix_blob_length(state); held && *held != n) {
    return bad("its state holds " + std::to_string(*held) + " positions but it has " +
               std::to_string(n) + " token ids");
  }
  c.state.assign(state.begin(), state.end());
  return c;
}

}  // namespace edgellm::decode
