// SPDX-License-Identifier: Apache-2.0
// How load_weights() (weights.hpp) builds a model's weights: reference mode, the lm_head's
// format, RTN group size, the packed-weight cache, the int4 arena, progress.
#pragma once

#include "edgellm/model/lm_head_format.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace edgellm::model {

/// Options of load_weights().
struct LoadOptions {
  /// Reference mode: every decoder linear becomes a dense fp32 matrix (AWQ linears dequantised
  /// to fp16((q - z) * s), AutoAWQ's own dequantisation, then widened), multiplied by plain fp32
  /// loops. Slow and 4-8x the memory; for checking against other implementations. `lm_head` is
  /// ignored (the stored tensor is used as is, which is exact).
  bool fp32_reference = false;
  LmHeadFormat lm_head = LmHeadFormat::as_stored;
  /// Group size for quantising unquantised (fp16/bf16/fp32) checkpoints to int4 by RTN at load:
  /// 32, 64 or 128, dividing every linear's input width; 0 picks the largest that does.
  std::size_t rtn_group_size = 0;
  /// After a tensor has been converted into owned memory (AWQ repacking, RTN, fp32 widening), ask
  /// the kernel to drop its mapped source pages (madvise MADV_DONTNEED on the page-aligned
  /// interior of the tensor), so resident memory stays near the converted weights plus one
  /// tensor instead of growing by the whole file. The pages refault from the file if touched.
  /// Embedding rows looked up from the mapping are released the same way after each lookup.
  bool release_source_pages = true;
  /// Packed-weight cache (model/packed_cache.hpp): empty for none, "auto" for
  /// default_packed_cache_path(dir), or a file path. When the file exists and was built from this
  /// checkpoint, config and options, the int4 matrices are mapped from it (no import, no
  /// repacking, no owned copy); otherwise they are built as usual and the file is (re)written for
  /// the next load. A cache that cannot be read or written is not an error: the weights load
  /// from the checkpoint and TransformerWeights::packed_cache_note says why. Ignored in
  /// fp32_reference mode. An explicit path is only (re)written when the file there is missing,
  /// empty or a packed cache of this same source (damaged or of an older version): a packed
  /// cache of another checkpoint, config or options, or any other file, is left alone unless
  /// packed_cache_overwrite is set (the note says so). `auto` paths are always rewritten.
  std::string packed_cache;
  /// With an explicit packed_cache path: replace whatever file is there (`--force` on the CLIs).
  bool packed_cache_overwrite = false;
  /// Load a checkpoint that holds tensors the config does not use (as PyTorch's
  /// load_state_dict(strict=False)). By default they are an error naming the first few: they
  /// usually mean config.json does not describe the checkpoint (say 5 layers for a 6-layer
  /// one), which would otherwise run a different model without a word. Tensors every loader
  /// ignores are never counted (unused_tensors). `--allow-extra-tensors` on the CLIs.
  bool allow_extra_tensors = false;
  /// With packed_cache: copy the int4 matrices out of the mapped file into owned memory (2 MiB
  /// pages where the kernel allows) instead of using them in place, and an unquantised lm_head
  /// out of the checkpoint likewise. Loading reads and writes them once more (most of it the
  /// kernel's first touch of fresh pages), and the weights count as owned memory; decoding may
  /// then stream them faster where a file mapping's 4 KiB pages cost TLB misses (measured in
  /// docs/performance.md, "Loading").
  bool packed_cache_copy = false;
  /// Owned int4 decoder matrices (converted at load, or copied from a packed cache; an int4
  /// lm_head keeps its own allocation) that total at least
  /// this many bytes are moved into one allocation, in the order a decode step reads them
  /// (TransformerWeights::int4_arena): on 2 MiB pages as a whole, where a small model's
  /// separately allocated 0.3-6 MB matrices mostly are not (docs/performance.md, "Decode at the
  /// roofline: weights in one arena"). Below the threshold (the default
  /// 32 MiB: a model that small runs from the last-level cache) or with SIZE_MAX, they stay
  /// where they were made. Loading copies them once more; resident memory grows by one matrix.
  std::size_t int4_arena_min_bytes = std::size_t{32} << 20;
  /// Called as loading goes: `stage` names the work ("repacking int4", "quantizing to int4",
  /// "reading packed cache", "loading fp32 reference"), `done` of `total` counts the weights
  /// (matrix elements) of the linears and an int4 lm_head handled so far: (0, total) first, then
  /// after each matrix, done never decreasing, ending at done == total. The library prints
  /// nothing; cli/common.hpp draws it. Not kept in TransformerWeights::options.
  std::function<void(std::string_view stage, std::uint64_t done, std::uint64_t total)> progress{};
};

/// Rows of a dense tensor with `row_bytes` per row that load_weights() converts (RTN int4,
/// int8) between two releases of its source pages: 16 MiB of source, in whole 16-row tiles. A
/// conversion then holds one block of the mapped tensor (and of int4 codes before packing).
constexpr std::size_t conversion_block_rows(std::size_t row_bytes) noexcept {
  constexpr std::size_t kBlockBytes = std::size_t{16} << 20;
  const std::size_t rows = kBlockBytes / (row_bytes ? row_bytes : 1) / 16 * 16;
  return rows < 16 ? 16 : rows;
}

}  // namespace edgellm::model
