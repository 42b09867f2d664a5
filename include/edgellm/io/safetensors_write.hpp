// SPDX-License-Identifier: Apache-2.0
// Writing safetensors files, streamed: every tensor is declared up front (name, dtype, shape),
// so the header with all offsets is written first and each tensor's bytes follow in declaration
// order as the caller produces them; nothing beyond one tensor needs to be in memory. The file
// goes through io/atomic_file.hpp, so a failed or abandoned write leaves no file behind.
#pragma once

#include "edgellm/io/atomic_file.hpp"
#include "edgellm/io/json_write.hpp"
#include "edgellm/io/safetensors.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::io {

/// One tensor of a file to write.
struct TensorDecl {
  std::string name;
  dtype type = dtype::f16;
  std::vector<std::size_t> shape;

  /// numel x element size (sub-byte dtypes are not supported by the writer).
  std::size_t nbytes() const noexcept {
    std::size_t n = dtype_size(type);
    for (const std::size_t d : shape) n *= d;
    return n;
  }
};

/// Streams one safetensors file: create() writes the header (tensors laid out back to back in
/// declaration order, header padded with spaces to a multiple of 8 bytes so every tensor is
/// 8-byte aligned when its offset is), write() appends the next declared tensor's bytes, and
/// commit() checks that all were written and renames the file into place. Errors name the file
/// and the tensor. Move-only.
class SafetensorsWriter {
 public:
  /// Errors: an empty or duplicate name, a sub-byte dtype, a file that cannot be created.
  static result<SafetensorsWriter> create(
      const std::string& path, std::vector<TensorDecl> tensors,
      const std::vector<std::pair<std::string, std::string>>& metadata = {{"format", "pt"}}) {
    constexpr std::string_view where = "SafetensorsWriter";
    SafetensorsWriter w;
    std::string header = "{";
    if (!metadata.empty()) {
      header += "\"__metadata__\":{";
      for (std::size_t i = 0; i < metadata.size(); ++i) {
        if (i) header += ',';
        json::append_escaped(header, metadata[i].first);
        header += ':';
        json::append_escaped(header, metadata[i].second);
      }
      header += '}';
    }
    std::vector<std::string_view> seen;
    std::size_t offset = 0;
    for (const TensorDecl& t : tensors) {
      if (t.name.empty() || t.name == "__metadata__" || dtype_size(t.type) == 0)
        return make_error(errc::invalid_argument, where,
                          path + ": tensor '" + t.name + "': empty or reserved name, or dtype " +
                              std::string(dtype_name(t.type)) + " (not byte-sized)");
      for (const std::string_view s : seen)
        if (s == t.name)
          return make_error(errc::invalid_argument, where,
                            path + ": tensor '" + t.name + "' declared twice");
      seen.push_back(t.name);
      if (header.size() > 1) header += ',';
      json::append_escaped(header, t.name);
      header += ":{\"dtype\":\"";
      header += dtype_name(t.type);
      header += "\",\"shape\":[";
      for (std::size_t i = 0; i < t.shape.size(); ++i) {
        if (i) header += ',';
        header += std::to_string(t.shape[i]);
      }
      header += "],\"data_offsets\":[" + std::to_string(offset) + ',' +
                std::to_string(offset + t.nbytes()) + "]}";
      offset += t.nbytes();
    }
    header += '}';
    while ((header.size() + 8) % 8 != 0) header += ' ';
    auto f = AtomicFileWriter::create(path, where);
    if (!f) return f.error();
    w.file_ = std::move(*f);
    w.tensors_ = std::move(tensors);
    std::byte len[8];
    std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
    if (auto st = w.file_.write(len); !st) return st.error();
    if (auto st = w.file_.write(std::as_bytes(std::span(header))); !st) return st.error();
    return w;
  }

  /// The next tensor to write (declaration order), or nullptr when all were written.
  const TensorDecl* next() const noexcept {
    return next_ < tensors_.size() ? &tensors_[next_] : nullptr;
  }

  /// Appends the bytes of tensor `name`, which must be the next declared one and exactly its
  /// size (little-endian element bytes).
  status write(std::string_view name, std::span<const std::byte> bytes) {
    constexpr std::string_view where = "SafetensorsWriter::write";
    if (next_ >= tensors_.size() || tensors_[next_].name != name)
      return make_error(errc::invalid_argument, where,
                        file_.path() + ": tensor '" + std::string(name) +
                            "' written out of order (expected " +
                            (next_ < tensors_.size() ? "'" + tensors_[next_].name + "'"
                                                     : std::string("no more tensors")) +
                            ")");
    if (bytes.size() != tensors_[next_].nbytes())
      return make_error(errc::shape_mismatch, where,
                        file_.path() + ": tensor '" + std::string(name) +
                            "': " + std::to_string(bytes.size()) + " bytes, declared " +
                            std::to_string(tensors_[next_].nbytes()));
    if (auto st = file_.write(bytes); !st) return st;
    ++next_;
    return {};
  }

  /// Flushes and renames the file into place. Errors: tensors not written (the file is then
  /// discarded), the OS's.
  status commit() {
    if (next_ != tensors_.size()) {
      const std::string missing = tensors_[next_].name;
      file_ = AtomicFileWriter();
      return make_error(errc::invalid_argument, "SafetensorsWriter::commit",
                        "tensor '" + missing + "' and " +
                            std::to_string(tensors_.size() - next_ - 1) +
                            " more were never written; file discarded");
    }
    return file_.commit();
  }

 private:
  SafetensorsWriter() = default;
  AtomicFileWriter file_;
  std::vector<TensorDecl> tensors_;
  std::size_t next_ = 0;
};

}  // namespace edgellm::io
