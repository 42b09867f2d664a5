// SPDX-License-Identifier: Apache-2.0
// The dense weight format: a row-major fp32 / fp16 / bf16 matrix, either a view of stored bytes
// (a tensor in a mapped checkpoint) or owned, aligned memory, and dense_matmul, its checked
// product with the rows split over a thread pool (as gemm / gemv are for the int4 and int8
// formats). The row kernels are in kernels/dense_matmul.hpp; the loader (model/weights.hpp)
// builds the matrices from checkpoint tensors.
#pragma once

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/kernels/dense_matmul.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace edgellm::kernels {

inline const char* to_string(DenseType t) noexcept {
  switch (t) {
    case DenseType::f32:
      return "F32";
    case DenseType::f16:
      return "F16";
    case DenseType::bf16:
      return "BF16";
  }
  return "?";
}

/// A dense row-major matrix W[n][k] of fp32, fp16 or bf16 elements: either a view of stored
/// bytes (their owner must outlive the view; TransformerWeights keeps the checkpoint open) or
/// owned, 64-byte aligned memory. Read-only after construction, so it may be shared between
/// threads.
class DenseMatrix {
 public:
  DenseMatrix() = default;

  /// Wraps `bytes` (n * k elements of `type`, row-major) without copying. Bytes at an address
  /// that is not a multiple of the element size (tensors of old writers) are copied into owned
  /// memory. `what` names the matrix in errors.
  static result<DenseMatrix> view(DenseType type, std::size_t n, std::size_t k,
                                  std::span<const std::byte> bytes, const std::string& what) {
    DenseMatrix m;
    if (auto st = m.set_shape(type, n, k, bytes.size(), what); !st) return st.error();
    if (reinterpret_cast<std::uintptr_t>(bytes.data()) % dense_element_size(type) == 0) {
      m.data_ = bytes.data();
      return m;
    }
    m.owned_ = allocate(bytes.size(), false);
    if (!m.owned_) return no_memory("DenseMatrix::view", what, bytes.size());
    std::memcpy(m.owned_.get(), bytes.data(), bytes.size());
    m.data_ = m.owned_.get();
    return m;
  }

  /// An owned copy of `bytes` (see view()), for weights streamed every token: large copies sit
  /// on 2 MiB pages where the kernel allows (a file mapping uses 4 KiB pages, which stream
  /// slower).
  static result<DenseMatrix> copy_of(DenseType type, std::size_t n, std::size_t k,
                                     std::span<const std::byte> bytes, const std::string& what) {
    DenseMatrix m;
    if (auto st = m.set_shape(type, n, k, bytes.size(), what); !st) return st.error();
    m.owned_ = allocate(bytes.size(), true);
    if (!m.owned_) return no_memory("DenseMatrix::copy_of", what, bytes.size());
    std::memcpy(m.owned_.get(), bytes.data(), bytes.size());
    m.data_ = m.owned_.get();
    return m;
  }

  /// An owned fp32 matrix [n][k] from row-major values (values.size() == n * k).
  static result<DenseMatrix> from_f32(std::span<const float> values, std::size_t n, std::size_t k) {
    if (values.size() != n * k || n == 0 || k == 0) {
      return make_error(errc::shape_mismatch, "DenseMatrix::from_f32",
                        "values: size " + std::to_string(values.size()) +
                            " != n * k = " + std::to_string(n) + " * " + std::to_string(k));
    }
    DenseMatrix m;
    m.type_ = DenseType::f32;
    m.n_ = n;
    m.k_ = k;
    m.owned_ = allocate(n * k * sizeof(float), false);
    if (!m.owned_) return no_memory("DenseMatrix::from_f32", "values", n * k * sizeof(float));
    std::memcpy(m.owned_.get(), values.data(), n * k * sizeof(float));
    m.data_ = m.owned_.get();
    return m;
  }

  std::size_t n() const noexcept { return n_; }  ///< rows (outputs)
  std::size_t k() const noexcept { return k_; }  ///< columns (inputs)
  DenseType type() const noexcept { return type_; }
  bool empty() const noexcept { return data_ == nullptr; }
  std::size_t element_size() const noexcept { return dense_element_size(type_); }
  /// The stored elements, [n][k] row-major.
  const std::byte* data() const noexcept { return data_; }
  /// Bytes of owned memory (0 for a view of a mapped file).
  std::size_t owned_bytes() const noexcept { return owned_ ? n_ * k_ * element_size() : 0; }

  /// Elements [c0, c0 + count) of row r as fp32 (exact): a pointer into the matrix for fp32,
  /// else converted into `buf` (count floats) and `buf` returned.
  const float* row_chunk(std::size_t r, std::size_t c0, std::size_t count,
                         float* buf) const noexcept {
    const std::size_t at = r * k_ + c0;
    switch (type_) {
      case DenseType::f32:
        return reinterpret_cast<const float*>(data_) + at;
      case DenseType::f16: {
        const auto* p = reinterpret_cast<const std::uint16_t*>(data_) + at;
        std::size_t i = 0;  // fixed-length blocks: vectorised at -O2 too
        for (; i + 16 <= count; i += 16)
          for (std::size_t l = 0; l < 16; ++l) buf[i + l] = f16_to_f32_branchless(p[i + l]);
        for (; i < count; ++i) buf[i] = f16_to_f32_branchless(p[i]);
        return buf;
      }
      case DenseType::bf16: {
        const auto* p = reinterpret_cast<const std::uint16_t*>(data_) + at;
        std::size_t i = 0;
        for (; i + 16 <= count; i += 16)
          for (std::size_t l = 0; l < 16; ++l)
            buf[i + l] = std::bit_cast<float>(static_cast<std::uint32_t>(p[i + l]) << 16);
        for (; i < count; ++i)
          buf[i] = std::bit_cast<float>(static_cast<std::uint32_t>(p[i]) << 16);
        return buf;
      }
    }
    return buf;
  }

  /// Row r as fp32 into out[k] (an embedding lookup).
  void row(std::size_t r, float* out) const noexcept {
    const float* p = row_chunk(r, 0, k_, out);
    if (p != out) std::memcpy(out, p, k_ * sizeof(float));
  }

  /// Marks a view of a read-only file mapping (the loader's mapped embedding table) as read a
  /// row at a time, each row once per lookup: lookup() then drops the mapped pages the read made
  /// resident (io::release_mapped_window), so the table costs no resident memory beyond the row
  /// being read. Only for file mappings: on ordinary memory madvise would discard the data. A
  /// no-op on owned memory.
  void set_file_rows_read_once(bool on) noexcept { rows_read_once_ = on && !owned_ && data_; }
  bool file_rows_read_once() const noexcept { return rows_read_once_; }

  /// row(), then, for a table marked with set_file_rows_read_once, its pages released.
  void lookup(std::size_t r, float* out) const noexcept {
    row(r, out);
    if (!rows_read_once_) return;
    const std::size_t row_bytes = k_ * element_size();
    io::release_mapped_window({data_, n_ * row_bytes}, {data_ + r * row_bytes, row_bytes});
  }

 private:
  status set_shape(DenseType type, std::size_t n, std::size_t k, std::size_t bytes,
                   const std::string& what) {
    if (n == 0 || k == 0 || bytes != n * k * dense_element_size(type)) {
      return make_error(errc::shape_mismatch, "DenseMatrix",
                        what + ": " + std::to_string(bytes) + " bytes for [" + std::to_string(n) +
                            ", " + std::to_string(k) + "] " + to_string(type));
    }
    type_ = type;
    n_ = n;
    k_ = k;
    return {};
  }

  static edgellm::detail::AlignedBuffer allocate(std::size_t bytes, bool streamed) noexcept {
    return edgellm::detail::allocate_aligned(bytes, streamed ? edgellm::detail::MemoryUse::streamed
                                                             : edgellm::detail::MemoryUse::plain);
  }

  static error no_memory(std::string_view where, const std::string& what, std::size_t bytes) {
    return edgellm::detail::allocation_error(where, what, bytes);
  }

  DenseType type_ = DenseType::f32;
  std::size_t n_ = 0, k_ = 0;
  const std::byte* data_ = nullptr;
  edgellm::detail::AlignedBuffer owned_;
  bool rows_read_once_ = false;  // see set_file_rows_read_once
};

/// Y = X W^T (+ bias) for a dense matrix: X [m][w.k()], Y [m][w.n()], bias [n] or empty. Rows of
/// W are split over `pool` (null: the calling thread); bit-identical for any thread count.
inline status dense_matmul(const DenseMatrix& w, std::span<const float> x, std::size_t m,
                           std::span<float> y, std::span<const float> bias, ThreadPool* pool) {
  constexpr std::string_view where = "dense_matmul";
  if (w.empty() || m == 0)
    return make_error(errc::invalid_argument, where, "empty matrix or m = 0");
  if (x.size() < m * w.k() || y.size() < m * w.n()) {
    return make_error(errc::invalid_argument, where,
                      "x/y: sizes " + std::to_string(x.size()) + "/" + std::to_string(y.size()) +
                          ", need " + std::to_string(m * w.k()) + "/" + std::to_string(m * w.n()));
  }
  if (!bias.empty() && bias.size() != w.n()) {
    return make_error(
        errc::shape_mismatch, where,
        "bias: size " + std::to_string(bias.size()) + ", expected " + std::to_string(w.n()));
  }
  const float* b = bias.empty() ? nullptr : bias.data();
  // Rows in pieces of about 1/8 of a thread's share (a multiple of the kernel's 8-row block),
  // balanced at run time as the int4 products are (gemm).
  const std::size_t threads = pool ? pool->size() : 1;
  const std::size_t grain = std::max<std::size_t>(8, w.n() / (threads * 8) / 8 * 8);
  parallel_for_balanced(pool, w.n(), grain, [&](std::size_t r0, std::size_t r1) {
    std::unique_ptr<float[]> scratch;  // widens 16-bit rows once for many activation rows
    if (const std::size_t f = dense_scratch_floats(w.k());
        f > 0 && m > 1 && w.type() != DenseType::f32)
      scratch.reset(new (std::nothrow) float[f]);
    dense_matmul_rows(w.type(), w.data(), w.k(), x.data(), w.k(), m, b, y.data(), w.n(), r0, r1,
                      scratch.get());
  });
  return {};
}

}  // namespace edgellm::kernels
