// SPDX-License-Identifier: Apache-2.0
// A loaded model's weights (TransformerWeights): config, options, embeddings, lm_head, final
// norm and the layers (layer_layout.hpp), with the checkpoint and packed cache their views map
// and the int4 arena (weights_arena.hpp) the int4 matrices live in.
#pragma once

#include "edgellm/io/checkpoint.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/linear.hpp"
#include "edgellm/kernels/q4_arena.hpp"
#include "edgellm/model/config.hpp"
#include "edgellm/model/layer_layout.hpp"
#include "edgellm/model/load_options.hpp"

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace edgellm::model {

/// Everything a transformer needs, loaded by load_weights(). Immutable once loaded: share one
/// object (std::shared_ptr<const TransformerWeights>) between any number of Transformers and
/// threads. Views into the mapped checkpoint (embeddings, an as-stored lm_head, dense
/// modules_to_not_convert) stay valid because the checkpoint is kept open here.
struct TransformerWeights {
  std::string dir;                 ///< the checkpoint directory
  ModelConfig config;              ///< its config.json (+ generation_config.json)
  LoadOptions options;             ///< how it was loaded
  std::size_t rtn_group_size = 0;  ///< group size used for RTN at load (0: none was needed)
  std::optional<io::Checkpoint> checkpoint;  ///< the open files the views point into
  DenseMatrix embed_tokens;                  ///< [vocab][hidden], as stored
  Linear lm_head;                            ///< [vocab][hidden]; the embedding when tied
  std::vector<float> norm;                   ///< final RMSNorm weight [hidden]
  std::vector<LayerWeights> layers;          ///< [num_hidden_layers]
  std::size_t released_source_bytes = 0;     ///< mapped bytes dropped after conversion
  std::optional<io::MappedFile> packed_cache_file;  ///< the packed cache the int4 views map
  std::string packed_cache_note;  ///< what happened with options.packed_cache (empty: unused)
  /// The packed cache was neither used nor written (a file not ours left alone, a failed
  /// write): packed_cache_note is then a warning, which a quiet application still shows.
  bool packed_cache_failed = false;
  /// The owned int4 matrices, end to end in the order a decode step reads them (the int4 Linear
  /// members view it; LoadOptions::int4_arena_min_bytes). Empty when they are views of a mapped
  /// packed cache, fewer bytes than that threshold, or could not be gathered.
  kernels::Q4Arena int4_arena;

  /// The quantized weights a decode step streams, as memory ranges for mlock or madvise: the
  /// int4 arena as one range (Q4Arena::pages), then every int4 or int8 matrix outside it.
  std::vector<std::span<const std::byte>> streamed_ranges() const {
    std::vector<std::span<const std::byte>> r;
    if (!int4_arena.empty()) r.push_back(int4_arena.pages());
    const auto add = [&](const Linear& l) {
      if (l.int4() && !int4_arena.contains(l.q4.data()))
        r.emplace_back(l.q4.data(), l.q4.byte_size());
      if (l.int8()) r.emplace_back(l.q8.data(), l.q8.byte_size());
    };
    for (const LayerWeights& l : layers)
      for (const Linear* p : l.linears())
        add(*p);
    add(lm_head);
    return r;
  }

  /// Bytes of memory owned by the weights (packed/dense matrices, norms, biases); the mapped
  /// views (embeddings, as-stored lm_head) are not counted.
  std::size_t owned_bytes() const noexcept {
    std::size_t b = embed_tokens.owned_bytes() + lm_head.owned_bytes() + norm.size() * 4;
    for (const LayerWeights& l : layers) {
      for (const LayerNorm& n : kLayerNorms) b += (l.*n.member).size() * 4;
      for (const Linear* p : l.linears())
        b += p->owned_bytes();
    }
    return b;
  }
};

}  // namespace edgellm::model
