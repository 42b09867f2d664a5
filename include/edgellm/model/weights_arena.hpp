// SPDX-License-Identifier: Apache-2.0
// The int4 arena of loaded weights: their owned int4 matrices gathered into one allocation in
// the order a decode step reads them (kernels/q4_arena.hpp; LoadOptions::int4_arena_min_bytes).
#pragma once

#include "edgellm/kernels/q4_arena.hpp"
#include "edgellm/model/layer_layout.hpp"
#include "edgellm/model/transformer_weights.hpp"

#include <cstddef>
#include <new>
#include <vector>

namespace edgellm::model {

namespace detail {

/// Gathers the owned int4 matrices of `w` into w.int4_arena (kernels::gather_q4_matrices), in
/// the order a decode step reads them: each layer's q, k, v, o, gate, up, down. Views of a
/// mapped packed cache stay where they are. An int4 lm_head stays in its own allocation (as an
/// int8 one does): tens to hundreds of MB, on 2 MiB pages by itself, whose copy would be the
/// largest transient of a load.
inline void gather_int4_matrices(TransformerWeights& w, std::size_t min_bytes) noexcept {
  std::vector<kernels::Q4Matrix*> order;
  try {
    order.reserve(w.layers.size() * 7);
  } catch (const std::bad_alloc&) {
    return;  // not gathered: the matrices work from their own buffers
  }
  for (LayerWeights& l : w.layers)
    for (Linear* p : l.linears())
      if (p->int4()) order.push_back(&p->q4);
  w.int4_arena = kernels::gather_q4_matrices(order, min_bytes);
}

}  // namespace detail

}  // namespace edgellm::model
