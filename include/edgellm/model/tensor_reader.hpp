// SPDX-License-Identifier: Apache-2.0
// Reading a checkpoint's tensors for load_weights(): each checked for presence, dtype and shape
// against config.json (messages name the shard and tensor), as a view of the mapping, an owned
// copy or an fp32 vector, or an int4 matrix from the packed-weight cache; mapped source pages
// released once a tensor has been converted.
#pragma once

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/model/config.hpp"
#include "edgellm/model/layer_layout.hpp"
#include "edgellm/model/load_options.hpp"
#include "edgellm/model/packed_cache.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::model {

namespace detail {

/// The element type of a stored dense tensor. Errors: a dtype other than F16, BF16, F32.
inline result<DenseType> dense_type_of(const io::TensorView& t) {
  switch (t.type()) {
    case io::dtype::f32:
      return DenseType::f32;
    case io::dtype::f16:
      return DenseType::f16;
    case io::dtype::bf16:
      return DenseType::bf16;
    default:
      return make_error(errc::unsupported, "DenseMatrix::view",
                        t.name() + ": dtype " + std::string(io::dtype_name(t.type())) +
                            " (expected F16, BF16 or F32)");
  }
}

}  // namespace detail

/// A stored tensor of shape [n, k] (or [k] with n = 1) as a DenseMatrix, without copying (see
/// kernels::DenseMatrix::view; the checkpoint must outlive it).
inline result<DenseMatrix> dense_matrix_view(const io::TensorView& t) {
  auto type = detail::dense_type_of(t);
  if (!type) return type.error();
  const auto& s = t.shape();
  return DenseMatrix::view(*type, s.size() == 2 ? s[0] : 1, s.empty() ? 1 : s.back(), t.bytes,
                           t.name());
}

/// An owned copy of a stored tensor of shape [n, k] (kernels::DenseMatrix::copy_of).
inline result<DenseMatrix> dense_matrix_copy(const io::TensorView& t) {
  auto type = detail::dense_type_of(t);
  if (!type) return type.error();
  const auto& s = t.shape();
  return DenseMatrix::copy_of(*type, s.size() == 2 ? s[0] : 1, s.empty() ? 1 : s.back(), t.bytes,
                              t.name());
}

namespace detail {

/// Reading tensors for load_weights: the open checkpoint, the config, the options and the
/// messages' context; each tensor checked for presence, dtype and shape, as stored or copied.
/// The conversions (weight_conversion.hpp's WeightLoader) build on it.
class TensorReader {
 public:
  TensorReader(const io::Checkpoint& ckpt, const ModelConfig& cfg, const LoadOptions& opts,
               std::string dir)
      : ckpt_(ckpt), cfg_(cfg), opts_(opts), dir_(std::move(dir)) {}

  std::size_t released() const noexcept { return released_; }

  /// Matrices are taken from `cache` when it holds them (null: none).
  void use_packed_cache(const PackedCacheReader* cache) noexcept { packed_ = cache; }
  /// Matrices asked of the packed cache that it did not hold.
  std::size_t packed_misses() const noexcept { return packed_misses_; }

  /// The int4 matrix `name` [n][k] from the packed cache, or nullopt (then counted as a miss).
  std::optional<kernels::Q4Matrix> from_packed_cache(std::string_view name, std::size_t n,
                                                     std::size_t k, std::size_t group) {
    if (packed_ == nullptr || opts_.fp32_reference) return std::nullopt;
    auto m = packed_->take(name, n, k, group, opts_.packed_cache_copy);
    if (!m) ++packed_misses_;
    return m;
  }

  /// The int8 matrix `name` [n][k] copied from the packed cache, or nullopt (a miss, as above).
  std::optional<kernels::Q8Matrix> q8_from_packed_cache(std::string_view name, std::size_t n,
                                                        std::size_t k, std::size_t group) {
    if (packed_ == nullptr || opts_.fp32_reference) return std::nullopt;
    auto m = packed_->take_q8(name, n, k, group);
    if (!m) ++packed_misses_;
    return m;
  }

  /// "<file>: <tensor>: <what>", the file being the shard that holds the tensor.
  error tensor_error(errc code, std::string_view name, const std::string& what) const {
    const io::SafetensorsFile* f = ckpt_.file_of(name);
    return make_error(code, kWhere,
                      (f ? f->path() : dir_) + ": " + std::string(name) + ": " + what);
  }

  /// The tensor `name`, checked for presence, dtype (one of `dtypes`) and shape (`shape`,
  /// explained by `why` in the message, e.g. "[hidden_size, intermediate_size]").
  result<io::TensorView> get(const std::string& name, std::initializer_list<io::dtype> dtypes,
                             const std::vector<std::size_t>& shape, std::string_view why) const {
    auto t = ckpt_.find(name);
    if (!t) {
      return make_error(errc::format_error, kWhere,
                        dir_ + ": missing tensor '" + name + "' (expected shape " +
                            io::shape_to_string(shape) + " = " + std::string(why) + ")");
    }
    if (std::find(dtypes.begin(), dtypes.end(), t->type()) == dtypes.end()) {
      std::string allowed;
      for (io::dtype d : dtypes) {
        if (!allowed.empty()) allowed += " or ";
        allowed += io::dtype_name(d);
      }
      return tensor_error(
          errc::unsupported, name,
          "dtype " + std::string(io::dtype_name(t->type())) + ", expected " + allowed);
    }
    if (t->shape() != shape) {
      return tensor_error(errc::shape_mismatch, name,
                          "shape " + io::shape_to_string(t->shape()) + " but config says " +
                              io::shape_to_string(shape) + " (" + std::string(why) + ")");
    }
    return t;
  }

  /// A float vector [n] (norm weight, bias) as fp32.
  result<std::vector<float>> vector_f32(const std::string& name, std::size_t n,
                                        std::string_view why) const {
    auto t = get(name, {io::dtype::f16, io::dtype::bf16, io::dtype::f32}, {n}, why);
    if (!t) return t.error();
    auto m = dense_matrix_view(*t);
    if (!m) return m.error();
    std::vector<float> out;
    if (auto st = edgellm::detail::try_resize(out, n, kWhere, name); !st) return st.error();
    m->row(0, out.data());
    return out;
  }

  /// A dense weight [n][k] as stored (view).
  result<DenseMatrix> dense_view(const std::string& name, std::size_t n, std::size_t k,
                                 std::string_view why) const {
    auto t = get(name, {io::dtype::f16, io::dtype::bf16, io::dtype::f32}, {n, k}, why);
    if (!t) return t.error();
    return dense_matrix_view(*t);
  }

  /// The dense weight [n][k] copied into owned memory (DenseMatrix::copy_of); its mapped source
  /// pages are released afterwards (release_source_pages).
  result<DenseMatrix> dense_copy(const std::string& name, std::size_t n, std::size_t k,
                                 std::string_view why) {
    auto t = get(name, {io::dtype::f16, io::dtype::bf16, io::dtype::f32}, {n, k}, why);
    if (!t) return t.error();
    auto m = dense_matrix_copy(*t);
    if (m) release(t->bytes);
    return m;
  }

  void release(std::span<const std::byte> bytes) {
    if (opts_.release_source_pages) released_ += io::release_mapped_pages(bytes);
  }

  /// Releases bytes[0, end) as a conversion reads a tensor front to back, `cursor` the end of
  /// the previous call (0 at first): each call drops what is new, the page the previous end
  /// fell in included (only partly read then), so a whole tensor is released by the last call.
  void release_through(std::span<const std::byte> bytes, std::size_t& cursor, std::size_t end) {
    const std::size_t page = io::page_size();
    const auto base = reinterpret_cast<std::uintptr_t>(bytes.data());
    const std::uintptr_t from = std::max(base, (base + cursor) / page * page);
    release(std::span<const std::byte>(bytes.data() + (from - base), base + end - from));
    cursor = end;
  }

  static constexpr std::string_view kWhere = "load_weights";

 protected:
  const io::Checkpoint& ckpt_;
  const ModelConfig& cfg_;
  const LoadOptions& opts_;
  std::string dir_;
  std::size_t released_ = 0;
  const PackedCacheReader* packed_ = nullptr;
  std::size_t packed_misses_ = 0;
};

}  // namespace detail

}  // namespace edgellm::model
