// SPDX-License-Identifier: Apache-2.0
// One nn.Linear's weights in the form the kernels run: packed int4 (Q4Matrix) or a dense matrix,
// plus an optional bias. The products over it are a backend's (backend/cpu.hpp, backend/scalar.hpp).
#pragma once

#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/formats.hpp"

#include <cstddef>
#include <vector>

namespace edgellm::kernels {

/// One nn.Linear, y = x W^T + bias with W [n][k]: packed int4 (q4 non-empty) or dense.
struct Linear {
  Q4Matrix q4;              ///< the weights when quantised
  DenseMatrix dense;        ///< the weights otherwise
  std::vector<float> bias;  ///< [n], or empty

  bool quantized() const noexcept { return !q4.empty(); }
  std::size_t n() const noexcept { return quantized() ? q4.n() : dense.n(); }
  std::size_t k() const noexcept { return quantized() ? q4.k() : dense.k(); }
  /// Bytes of owned memory (packed or dense weights plus bias).
  std::size_t owned_bytes() const noexcept {
    return (quantized() ? q4.byte_size() : dense.owned_bytes()) + bias.size() * sizeof(float);
  }
};

}  // namespace edgellm::kernels
