// SPDX-License-Identifier: Apache-2.0
// One nn.Linear's weights in the form the kernels run: packed int4 (Q4Matrix), int8 (Q8Matrix)
// or a dense matrix, plus an optional bias. The products over it are a backend's
// (backend/cpu.hpp, backend/scalar.hpp).
#pragma once

#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/q8_matrix.hpp"

#include <cstddef>
#include <vector>

namespace edgellm::kernels {

/// Which member of a Linear holds its weights.
enum class LinearForm { dense, int4, int8 };

/// One nn.Linear, y = x W^T + bias with W [n][k]: packed int4 (q4 non-empty), int8 (q8
/// non-empty) or dense; at most one of them is set.
struct Linear {
  Q4Matrix q4;              ///< the weights when int4
  Q8Matrix q8;              ///< the weights when int8
  DenseMatrix dense;        ///< the weights otherwise
  std::vector<float> bias;  ///< [n], or empty

  LinearForm form() const noexcept {
    return !q4.empty() ? LinearForm::int4 : !q8.empty() ? LinearForm::int8 : LinearForm::dense;
  }
  bool int4() const noexcept { return !q4.empty(); }
  bool int8() const noexcept { return !q8.empty(); }
  /// int4 or int8 (not dense).
  bool quantized() const noexcept { return int4() || int8(); }
  std::size_t n() const noexcept { return int4() ? q4.n() : int8() ? q8.n() : dense.n(); }
  std::size_t k() const noexcept { return int4() ? q4.k() : int8() ? q8.k() : dense.k(); }
  /// Bytes of the weights a product reads (owned or a view of a mapped file), bias excluded.
  std::size_t weight_bytes() const noexcept {
    return int4()   ? q4.byte_size()
           : int8() ? q8.byte_size()
                    : dense.n() * dense.k() * dense.element_size();
  }
  /// Bytes of owned memory (packed or dense weights plus bias).
  std::size_t owned_bytes() const noexcept {
    return (int4() ? q4.byte_size() : int8() ? q8.byte_size() : dense.owned_bytes()) +
           bias.size() * sizeof(float);
  }
};

}  // namespace edgellm::kernels
