// SPDX-License-Identifier: Apache-2.0
// Weights of a Llama / Qwen2 / Qwen3 / Mistral decoder loaded from a Hugging Face checkpoint
// directory (plain fp16/bf16/fp32 or AutoAWQ gemm/gemv), validated against config.json, in the form
// the transformer runs: packed int4 linears (or dense fp32 in reference mode), fp32 norms and
// biases, and embeddings / lm_head read in place from the memory-mapped files.
#pragma once

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/kernels/awq.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/linear.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/q4_arena.hpp"
#include "edgellm/kernels/q8_matrix.hpp"
#include "edgellm/kernels/quantize.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/model/layer_layout.hpp"
#include "edgellm/model/lm_head_format.hpp"
#include "edgellm/model/packed_cache.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#endif

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
  /// Owned int4 matrices (converted at load, or copied from a packed cache) that total at least
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
  /// nothing; tools/cli.hpp draws it. Not kept in TransformerWeights::options.
  std::function<void(std::string_view stage, std::uint64_t done, std::uint64_t total)> progress{};
};

// The weight formats live in kernels/ (backends run them); these names stay for users.
using kernels::DenseMatrix;
using kernels::DenseType;
using kernels::Linear;
using kernels::to_string;

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

namespace detail {

/// Gathers the owned int4 matrices of `w` into w.int4_arena (kernels::gather_q4_matrices), in
/// the order a decode step reads them: each layer's q, k, v, o, gate, up, down, then an int4
/// lm_head. Views of a mapped packed cache stay where they are.
inline void gather_int4_matrices(TransformerWeights& w, std::size_t min_bytes) noexcept {
  std::vector<kernels::Q4Matrix*> order;
  try {
    order.reserve(w.layers.size() * 7 + 1);
  } catch (const std::bad_alloc&) {
    return;  // not gathered: the matrices work from their own buffers
  }
  for (LayerWeights& l : w.layers)
    for (Linear* p : l.linears())
      if (p->int4()) order.push_back(&p->q4);
  if (w.lm_head.int4()) order.push_back(&w.lm_head.q4);
  w.int4_arena = kernels::gather_q4_matrices(order, min_bytes);
}

/// Loading state: the open checkpoint, the config and the messages' context.
class WeightLoader {
 public:
  WeightLoader(const io::Checkpoint& ckpt, const ModelConfig& cfg, const LoadOptions& opts,
               std::string dir)
      : ckpt_(ckpt), cfg_(cfg), opts_(opts), dir_(std::move(dir)) {}

  std::size_t released() const noexcept { return released_; }

  /// Matrices are taken from `cache` when it holds them (null: none).
  void use_packed_cache(const PackedCacheReader* cache) noexcept { packed_ = cache; }
  /// Int4 matrices asked of the packed cache that it did not hold.
  std::size_t packed_misses() const noexcept { return packed_misses_; }

  /// The int4 matrix `name` [n][k] from the packed cache, or nullopt (then counted as a miss).
  std::optional<kernels::Q4Matrix> from_packed_cache(std::string_view name, std::size_t n,
                                                     std::size_t k, std::size_t group) {
    if (packed_ == nullptr || opts_.fp32_reference) return std::nullopt;
    auto m = packed_->take(name, n, k, group, opts_.packed_cache_copy);
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

  /// A dense weight [n][k] converted to owned fp32 (reference mode).
  result<DenseMatrix> dense_f32(const std::string& name, std::size_t n, std::size_t k,
                                std::string_view why) {
    auto t = get(name, {io::dtype::f16, io::dtype::bf16, io::dtype::f32}, {n, k}, why);
    if (!t) return t.error();
    auto v = dense_matrix_view(*t);
    if (!v) return v.error();
    std::vector<float> values;
    if (auto st = edgellm::detail::try_resize(values, n * k, kWhere, name + " (as fp32)"); !st)
      return st.error();
    for (std::size_t r = 0; r < n; ++r) v->row(r, values.data() + r * k);
    auto m = DenseMatrix::from_f32(values, n, k);
    if (m) release(t->bytes);
    return m;
  }

  /// A dense weight [n][k] RTN-quantised to int4 with `group` and packed.
  result<kernels::Q4Matrix> dense_q4(const std::string& name, std::size_t n, std::size_t k,
                                     std::size_t group, std::string_view why) {
    auto t = get(name, {io::dtype::f16, io::dtype::bf16, io::dtype::f32}, {n, k}, why);
    if (!t) return t.error();
    result<kernels::UnpackedQ4> u = make_error(errc::unsupported, kWhere, "unreachable");
    const std::size_t count = n * k;
    if (t->type() == io::dtype::f32) {
      std::vector<float> copy;
      const float* p = reinterpret_cast<const float*>(t->bytes.data());
      if (!t->is_aligned()) {
        if (auto st = edgellm::detail::try_resize(copy, count, kWhere, name + " (aligned copy)");
            !st)
          return st.error();
        std::memcpy(copy.data(), t->bytes.data(), count * 4);
        p = copy.data();
      }
      u = kernels::quantize_rtn(std::span<const float>(p, count), n, k, group);
    } else {
      std::vector<std::uint16_t> copy;
      const auto* p = reinterpret_cast<const std::uint16_t*>(t->bytes.data());
      if (!t->is_aligned()) {
        if (auto st = edgellm::detail::try_resize(copy, count, kWhere, name + " (aligned copy)");
            !st)
          return st.error();
        std::memcpy(copy.data(), t->bytes.data(), count * 2);
        p = copy.data();
      }
      const std::span<const std::uint16_t> s(p, count);
      u = t->type() == io::dtype::f16 ? kernels::quantize_rtn_f16(s, n, k, group)
                                      : kernels::quantize_rtn_bf16(s, n, k, group);
    }
    if (!u) return tensor_error(u.error().code, name, u.error().message);
    auto packed = kernels::pack_q4(*u);
    if (!packed) return tensor_error(packed.error().code, name, packed.error().message);
    release(t->bytes);
    return packed;
  }

  /// A dense fp32 [n][k] matrix whose row r `row(r, out)` writes (reference mode's dequantised
  /// linears).
  template <class RowFn>
  result<DenseMatrix> dequantised(const std::string& prefix, std::size_t n, std::size_t k,
                                  RowFn row) const {
    std::vector<float> w;
    if (auto st = edgellm::detail::try_resize(w, n * k, kWhere, prefix + " (dequantised fp32)");
        !st)
      return st.error();
    for (std::size_t r = 0; r < n; ++r) row(r, w.data() + r * k);
    return DenseMatrix::from_f32(w, n, k);
  }

  /// An AutoAWQ linear `prefix` (qweight, qzeros, scales) with n outputs and k inputs, imported
  /// exactly; packed to int4, or dequantised to dense fp32 in reference mode.
  result<Linear> awq_linear(const std::string& prefix, std::size_t n, std::size_t k,
                            std::string_view n_why, std::string_view k_why) {
    const AwqConfig& awq = *cfg_.awq;
    const std::size_t g = awq.group_size;
    const bool gemm = awq.version == AwqVersion::gemm;
    const std::string dims = "N = " + std::string(n_why) + " = " + std::to_string(n) +
                             ", K = " + std::string(k_why) + " = " + std::to_string(k) +
                             ", G = group_size = " + std::to_string(g) + ", AWQ " +
                             to_string(awq.version);
    if (k % g != 0) {
      return make_error(errc::shape_mismatch, kWhere,
                        dir_ + ": " + prefix + ": K = " + std::string(k_why) + " = " +
                            std::to_string(k) + " is not a multiple of group_size " +
                            std::to_string(g));
    }
    if (n % 8 != 0 && gemm) {
      return make_error(errc::shape_mismatch, kWhere,
                        dir_ + ": " + prefix + ": N = " + std::string(n_why) + " = " +
                            std::to_string(n) + " is not a multiple of 8 (AWQ gemm packing)");
    }
    if (k % 8 != 0 && !gemm) {
      return make_error(errc::shape_mismatch, kWhere,
                        dir_ + ": " + prefix + ": K = " + std::string(k_why) + " = " +
                            std::to_string(k) + " is not a multiple of 8 (AWQ gemv packing)");
    }
    const std::size_t ng = k / g, zw = kernels::awq_gemv_zeros_width(k, g);
    auto qw = get(prefix + ".qweight", {io::dtype::i32},
                  gemm ? std::vector<std::size_t>{k, n / 8} : std::vector<std::size_t>{n, k / 8},
                  gemm ? "[K, N/8]; " + dims : "[N, K/8]; " + dims);
    if (!qw) return qw.error();
    auto qz = get(prefix + ".qzeros", {io::dtype::i32},
                  gemm ? std::vector<std::size_t>{ng, n / 8} : std::vector<std::size_t>{n, zw},
                  gemm ? "[K/G, N/8]; " + dims : "[N, zeros_width(K, G)]; " + dims);
    if (!qz) return qz.error();
    auto sc = get(prefix + ".scales", {io::dtype::f16},
                  gemm ? std::vector<std::size_t>{ng, n} : std::vector<std::size_t>{n, zw * 8},
                  gemm ? "[K/G, N]; " + dims : "[N, 8 * zeros_width(K, G)]; " + dims);
    if (!sc) return sc.error();
    const kernels::AwqLinearTensors tensors{{qw->bytes, qw->shape(), qw->name()},
                                            {qz->bytes, qz->shape(), qz->name()},
                                            {sc->bytes, sc->shape(), sc->name()}};
    auto u = gemm ? kernels::import_awq_gemm(tensors, g) : kernels::import_awq_gemv(tensors, g);
    if (!u) return tensor_error(u.error().code, prefix + ".qweight", u.error().message);
    Linear lin;
    if (opts_.fp32_reference) {
      // AutoAWQ's dequantisation: one rounding of (q - z) * s to fp16 (docs/formats.md 1.3).
      auto d = dequantised(prefix, n, k, [&](std::size_t r, float* out) {
        for (std::size_t c = 0; c < k; ++c)
          out[c] = kernels::f16_to_f32(kernels::f32_to_f16(u->weight(r, c)));
      });
      if (!d) return d.error();
      lin.dense = std::move(*d);
    } else {
      auto p = kernels::pack_q4(*u);
      if (!p) return tensor_error(p.error().code, prefix + ".qweight", p.error().message);
      lin.q4 = std::move(*p);
    }
    release(qw->bytes);
    release(qz->bytes);
    release(sc->bytes);
    return lin;
  }

  /// An int8 linear `prefix` in edgellm's extension of the AutoAWQ layout (AwqConfig::
  /// int8_modules: qweight I8 [n][k], scales F32 [n][k / G]) as a kernels::Q8Matrix, or
  /// dequantised to dense fp32 in reference mode.
  result<Linear> int8_linear(const std::string& prefix, std::size_t n, std::size_t k,
                             std::string_view n_why, std::string_view k_why) {
    const std::size_t g = cfg_.awq->group_size;
    const std::string dims = "N = " + std::string(n_why) + " = " + std::to_string(n) +
                             ", K = " + std::string(k_why) + " = " + std::to_string(k) +
                             ", G = group_size = " + std::to_string(g) + ", edgellm int8";
    if (k % g != 0) {
      return make_error(errc::shape_mismatch, kWhere,
                        dir_ + ": " + prefix + ": K = " + std::string(k_why) + " = " +
                            std::to_string(k) + " is not a multiple of group_size " +
                            std::to_string(g));
    }
    auto qw = get(prefix + ".qweight", {io::dtype::i8}, {n, k}, "[N, K]; " + dims);
    if (!qw) return qw.error();
    auto sc = get(prefix + ".scales", {io::dtype::f32}, {n, k / g}, "[N, K/G]; " + dims);
    if (!sc) return sc.error();
    auto m = kernels::Q8Matrix::allocate(n, k, g);
    if (!m) return tensor_error(m.error().code, prefix + ".qweight", m.error().message);
    const std::size_t ng = k / g;
    for (std::size_t r = 0; r < n; ++r) {
      std::memcpy(m->mutable_codes(r), qw->bytes.data() + r * k, k);
      std::memcpy(m->mutable_scales(r), sc->bytes.data() + r * ng * 4, ng * 4);
      for (std::size_t j = 0; j < ng; ++j) {
        const float v = m->scales(r)[j];
        if (!std::isfinite(v) || v < 0.0f)
          return tensor_error(errc::format_error, prefix + ".scales",
                              "scale " + std::to_string(v) + " at row " + std::to_string(r) +
                                  ", group " + std::to_string(j) +
                                  " (expected finite and non-negative)");
      }
      for (std::size_t c = 0; c < k; ++c)
        if (m->codes(r)[c] == -128)
          return tensor_error(errc::format_error, prefix + ".qweight",
                              "code -128 at row " + std::to_string(r) + ", column " +
                                  std::to_string(c) + " (symmetric codes are in [-127, 127])");
    }
    Linear lin;
    if (opts_.fp32_reference) {
      auto d = dequantised(prefix, n, k, [&](std::size_t r, float* out) { m->row(r, out); });
      if (!d) return d.error();
      lin.dense = std::move(*d);
    } else {
      lin.q8 = std::move(*m);
    }
    release(qw->bytes);
    release(sc->bytes);
    return lin;
  }

  /// Linear `model.layers.<i>.<module>` with n outputs and k inputs, in the form the options
  /// ask for, plus its bias when `has_bias`.
  result<Linear> linear(std::size_t layer, std::string_view module, std::size_t n, std::size_t k,
                        std::string_view n_why, std::string_view k_why, bool has_bias,
                        std::size_t rtn_group) {
    const std::string prefix = "model.layers." + std::to_string(layer) + "." + std::string(module);
    const std::string why = "[" + std::string(n_why) + ", " + std::string(k_why) + "]";
    Linear lin;
    const bool awq_module = cfg_.awq && cfg_.awq->is_quantized(module);
    const bool int8_module = cfg_.awq && cfg_.awq->is_int8(module);
    const bool int4 = !opts_.fp32_reference && !int8_module && (awq_module || !cfg_.awq);
    if (auto cached = int4 ? from_packed_cache(prefix, n, k, awq_module ? cfg_.awq->group_size
                                                                         : rtn_group)
                           : std::nullopt) {
      lin.q4 = std::move(*cached);
    } else if (int8_module) {
      auto a = int8_linear(prefix, n, k, n_why, k_why);
      if (!a) return a.error();
      lin = std::move(*a);
    } else if (awq_module) {
      auto a = awq_linear(prefix, n, k, n_why, k_why);
      if (!a) return a.error();
      lin = std::move(*a);
    } else if (opts_.fp32_reference) {
      auto d = dense_f32(prefix + ".weight", n, k, why);
      if (!d) return d.error();
      lin.dense = std::move(*d);
    } else if (cfg_.awq) {
      // modules_to_not_convert: AutoAWQ left this linear in fp16; it stays dense.
      auto d = dense_view(prefix + ".weight", n, k, why);
      if (!d) return d.error();
      lin.dense = std::move(*d);
    } else {
      auto q = dense_q4(prefix + ".weight", n, k, rtn_group, why);
      if (!q) return q.error();
      lin.q4 = std::move(*q);
    }
    if (has_bias) {
      auto b = vector_f32(prefix + ".bias", n, "[" + std::string(n_why) + "]");
      if (!b) return b.error();
      lin.bias = std::move(*b);
    }
    return lin;
  }

  void release(std::span<const std::byte> bytes) {
    if (opts_.release_source_pages) released_ += io::release_mapped_pages(bytes);
  }

  static constexpr std::string_view kWhere = "load_weights";

 private:
  const io::Checkpoint& ckpt_;
  const ModelConfig& cfg_;
  const LoadOptions& opts_;
  std::string dir_;
  std::size_t released_ = 0;
  const PackedCacheReader* packed_ = nullptr;
  std::size_t packed_misses_ = 0;
};

}  // namespace detail

/// The largest int4 kernel group size (128, 64, 32) dividing every width in `ks`, or 0: the RTN
/// group of an unquantised checkpoint ({hidden, intermediate, heads * head_dim}) and the int4
/// lm_head's ({hidden}).
inline std::size_t largest_group_dividing(std::initializer_list<std::size_t> ks) noexcept {
  for (std::size_t g : {std::size_t{128}, std::size_t{64}, std::size_t{32}}) {
    bool ok = true;
    for (std::size_t k : ks) ok = ok && k % g == 0;
    if (ok) return g;
  }
  return 0;
}

/// The tensors of `ckpt` that load_weights does not read for config `c`, sorted by name.
/// Read: model.embed_tokens.weight, model.norm.weight, lm_head.weight (unless the embeddings are
/// tied), and for each of the num_hidden_layers layers its two norms (four with
/// attention_qk_norm: self_attn.q_norm / k_norm) and seven linears (AWQ
/// qweight / qzeros / scales, or weight for unquantised and modules_to_not_convert linears), with
/// the biases the config asks for. Never counted: `*.rotary_emb.inv_freq` (a buffer old
/// transformers versions saved, recomputed from rope_theta) and a stored lm_head.weight of a
/// tied checkpoint (transformers ignores it as well).
inline std::vector<std::string> unused_tensors(const io::Checkpoint& ckpt, const ModelConfig& c) {
  std::vector<std::string> used = {"model.embed_tokens.weight", "model.norm.weight",
                                   "lm_head.weight"};
  for (std::size_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string pre = "model.layers." + std::to_string(i) + ".";
    for (const LayerNorm& n : kLayerNorms)
      if (n.present(c)) used.push_back(pre + std::string(n.name) + ".weight");
    for (const LayerLinear& l : kLayerLinears) {
      const std::string_view module = l.name;
      const bool bias = l.has_bias(c);
      const std::string m = pre + std::string(module);
      if (c.awq && c.awq->is_int8(module)) {
        for (const char* part : {".qweight", ".scales"}) used.push_back(m + part);
      } else if (c.awq && c.awq->is_quantized(module)) {
        for (const char* part : {".qweight", ".qzeros", ".scales"}) used.push_back(m + part);
      } else {
        used.push_back(m + ".weight");
      }
      if (bias) used.push_back(m + ".bias");
    }
  }
  std::sort(used.begin(), used.end());
  std::vector<std::string> unused;
  for (std::string& name : ckpt.names()) {
    if (std::binary_search(used.begin(), used.end(), name)) continue;
    if (name.ends_with(".rotary_emb.inv_freq")) continue;
    unused.push_back(std::move(name));
  }
  return unused;
}

/// Loads the decoder in checkpoint directory `dir`: config.json (see load_model_config; model types
/// llama, qwen2, qwen3, mistral), then every tensor, each checked for presence, dtype and shape
/// against the config (messages name the file and tensor, e.g. "[load_weights]
/// /m/model.safetensors: model.layers.3.mlp.down_proj.weight: shape [64, 100] but config says
/// [64, 192] ([hidden_size, intermediate_size])").
///
/// Per tensor:
/// - decoder linears of an AutoAWQ checkpoint (quantization_config; gemm or gemv; group size 32,
///   64 or 128): imported bit-exactly and repacked into kernels::Q4Matrix; linears matched by
///   modules_to_not_convert stay dense as stored. Unquantised checkpoints: RTN-quantised to int4
///   at load (options.rtn_group_size). With options.fp32_reference, all of them dense fp32.
/// - embed_tokens: kept as stored (F16/BF16/F32) in the mapping; rows converted on lookup.
/// - lm_head (embed_tokens when tie_word_embeddings): as stored, or int4 (options.lm_head).
/// - norms and biases: fp32 vectors.
/// Tensors the config does not use are an error naming the first few (unused_tensors), unless
/// options.allow_extra_tensors.
/// Memory: converted tensors' mapped pages are released as loading goes (see LoadOptions), so
/// peak resident memory is about the converted weights plus one tensor plus the as-stored
/// embedding / lm_head pages that get touched.
inline result<std::shared_ptr<const TransformerWeights>> load_weights_unguarded(
    const std::string& dir, const LoadOptions& options) {
  constexpr std::string_view where = detail::WeightLoader::kWhere;
  auto cfg = load_model_config(dir);
  if (!cfg) return cfg.error();
  auto ckpt = io::Checkpoint::open(dir);
  if (!ckpt) return ckpt.error();
  const ModelConfig& c = *cfg;

  auto w = std::make_shared<TransformerWeights>();
  w->dir = dir;
  w->config = c;
  w->options = options;
  w->options.progress = nullptr;  // it may point to the caller's stack
  const std::size_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const std::size_t q_dim = c.num_attention_heads * c.head_dim;

  if (c.awq && !kernels::is_supported_group_size(c.awq->group_size)) {
    return make_error(errc::unsupported, where,
                      dir + "/config.json: quantization_config.group_size " +
                          std::to_string(c.awq->group_size) +
                          " is not supported by the int4 kernels (32, 64 or 128)");
  }
  // RTN group size for linears that are quantised at load (unquantised checkpoints).
  if (!c.awq && !options.fp32_reference) {
    if (options.rtn_group_size == 0) {
      w->rtn_group_size = largest_group_dividing({H, I, q_dim});
      if (w->rtn_group_size == 0) {
        return make_error(errc::unsupported, where,
                          dir + ": no int4 group size (128, 64, 32) divides hidden_size " +
                              std::to_string(H) + ", intermediate_size " + std::to_string(I) +
                              " and heads * head_dim " + std::to_string(q_dim) +
                              "; load with fp32_reference");
      }
    } else {
      const std::size_t g = options.rtn_group_size;
      if (!kernels::is_supported_group_size(g)) {
        return make_error(errc::invalid_argument, where,
                          "options.rtn_group_size: " + std::to_string(g) +
                              " is not supported (32, 64, 128, or 0 for automatic)");
      }
      for (auto [k, name] : {std::pair{H, "hidden_size"}, std::pair{I, "intermediate_size"},
                             std::pair{q_dim, "num_attention_heads * head_dim"}}) {
        if (k % g != 0) {
          return make_error(errc::invalid_argument, where,
                            "options.rtn_group_size: " + std::to_string(g) + " does not divide " +
                                name + " = " + std::to_string(k) + " of " + dir);
        }
      }
      w->rtn_group_size = g;
    }
  }

  detail::WeightLoader ld(*ckpt, c, options, dir);
  // The packed cache, if asked for and valid for this checkpoint and these options.
  std::string packed_path;
  std::uint64_t packed_key = 0;
  std::optional<detail::PackedCacheReader> packed;
  bool packed_writable = true;  // false: the file there is not ours to replace
  if (!options.packed_cache.empty() && !options.fp32_reference) {
    packed_path =
        options.packed_cache == "auto" ? default_packed_cache_path(dir) : options.packed_cache;
    const std::string signature =
        // An int8 lm_head is not stored in the cache (quantised at load), so it shares the
        // as-stored signature.
        std::string("lm_head=") + (options.lm_head == LmHeadFormat::q4 ? "q4" : "as_stored") +
        ";rtn=" + std::to_string(w->rtn_group_size);
    // `auto` names a file of ours by construction; another path may hold someone else's.
    const bool ask_before_replacing =
        options.packed_cache != "auto" && !options.packed_cache_overwrite;
    auto key = detail::packed_source_key(dir, *ckpt, signature);
    if (!key) return key.error();
    packed_key = *key;
    if (::access(packed_path.c_str(), F_OK) != 0) {
      w->packed_cache_note = packed_path + " not found";
    } else if (auto r = detail::PackedCacheReader::open(packed_path, packed_key)) {
      packed.emplace(std::move(*r));
      ld.use_packed_cache(&*packed);
    } else if (auto mine = ask_before_replacing
                               ? detail::check_packed_cache_replaceable(packed_path, packed_key)
                               : io::check_output_path(packed_path, {}, "packed cache");
               !mine) {
      packed_writable = false;
      w->packed_cache_failed = true;
      // Forcing helps only where a regular file stands (io::OutputRule: never a device, FIFO
      // or directory); the refusal of those says so itself.
      const bool force_helps = ask_before_replacing &&
                               io::check_output_path(packed_path, {}, "packed cache").has_value();
      w->packed_cache_note = mine.error().message +
                             (force_helps ? "; not overwritten (LoadOptions::packed_cache_overwrite"
                                            ", or --force on the command line, replaces it)"
                                          : "");
    } else {
      w->packed_cache_note = r.error().message + "; rebuilding it";
    }
  }
  const std::string vec_why = "[hidden_size]";
  {
    auto e = ld.dense_view("model.embed_tokens.weight", V, H, "[vocab_size, hidden_size]");
    if (!e) return e.error();
    w->embed_tokens = std::move(*e);
  }
  {
    auto n = ld.vector_f32("model.norm.weight", H, vec_why);
    if (!n) return n.error();
    w->norm = std::move(*n);
  }

  // Never resized again: the pointers below stay valid. Sized by config.json's num_hidden_layers.
  if (auto st = edgellm::detail::try_resize(w->layers, c.num_hidden_layers, where,
                                            dir + ": layers (num_hidden_layers)");
      !st)
    return st.error();
  // Every int4 matrix with its cache name (the tensor prefix), for writing the packed cache.
  std::vector<std::pair<std::string, const kernels::Q4Matrix*>> int4;
  const bool q4_head = options.lm_head == LmHeadFormat::q4 && !options.fp32_reference;
  const bool q8_head = options.lm_head == LmHeadFormat::int8 && !options.fp32_reference;
  std::uint64_t layer_elements = 0;
  for (const LayerLinear& s : kLayerLinears) layer_elements += std::uint64_t{s.n(c)} * s.k(c);
  const std::uint64_t progress_total = std::uint64_t{c.num_hidden_layers} * layer_elements +
                                       (q4_head || q8_head ? std::uint64_t{V} * H : 0);
  const std::string_view stage = options.fp32_reference ? "loading fp32 reference"
                                 : packed                ? "reading packed cache"
                                 : c.awq                 ? "repacking int4"
                                                         : "quantizing to int4";
  std::uint64_t progress_done = 0;
  const auto advance = [&](std::uint64_t elements) {
    progress_done = std::min(progress_total, progress_done + elements);
    if (options.progress) options.progress(stage, progress_done, progress_total);
  };
  advance(0);
  for (std::size_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& L = w->layers[i];
    const std::string pre = "model.layers." + std::to_string(i) + ".";
    for (const LayerNorm& n : kLayerNorms) {
      if (!n.present(c)) continue;
      auto v = ld.vector_f32(pre + std::string(n.name) + ".weight", n.size(c),
                             "[" + std::string(dim_name(n.dim)) + "]");
      if (!v) return v.error();
      L.*n.member = std::move(*v);
    }
    for (const LayerLinear& s : kLayerLinears) {
      const std::size_t n = s.n(c), k = s.k(c);
      auto lin = ld.linear(i, s.name, n, k, dim_name(s.out), dim_name(s.in), s.has_bias(c),
                           w->rtn_group_size);
      if (!lin) return lin.error();
      Linear& out = L.*s.member;
      out = std::move(*lin);
      if (out.int4()) int4.emplace_back(pre + std::string(s.name), &out.q4);
      advance(std::uint64_t{n} * k);
    }
  }

  // lm_head: its own tensor, or the embedding when tied (HF ties even if lm_head.weight is
  // also stored).
  const std::string head_name =
      c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  const std::string head_why = "[vocab_size, hidden_size]";
  const std::size_t head_group = largest_group_dividing({H});
  if ((q4_head || q8_head) && head_group == 0) {
    return make_error(errc::unsupported, where,
                      dir + ": lm_head: no int4/int8 group size (128, 64, 32) divides "
                            "hidden_size " + std::to_string(H) + "; use LmHeadFormat::as_stored");
  }
  if (q8_head) {
    // Quantised from the mapped tensor at every load: the packed cache holds int4 matrices
    // only. The tensor's pages are not released (a tied embedding still needs them).
    auto d = ld.dense_view(head_name, V, H, head_why);
    if (!d) return d.error();
    auto q = kernels::quantize_q8(*d, head_group);
    if (!q) return make_error(q.error().code, where, dir + ": " + head_name + ": " + q.error().message);
    w->lm_head.q8 = std::move(*q);
  } else if (q4_head) {
    const std::size_t g = head_group;
    if (auto cached = ld.from_packed_cache("lm_head", V, H, g)) {
      w->lm_head.q4 = std::move(*cached);
    } else if (c.tie_word_embeddings) {
      // The embedding stays mapped for lookups: quantise without releasing its pages.
      LoadOptions keep = options;
      keep.release_source_pages = false;
      detail::WeightLoader tied(*ckpt, c, keep, dir);
      auto q = tied.dense_q4(head_name, V, H, g, head_why);
      if (!q) return q.error();
      w->lm_head.q4 = std::move(*q);
    } else {
      auto q = ld.dense_q4(head_name, V, H, g, head_why);
      if (!q) return q.error();
      w->lm_head.q4 = std::move(*q);
    }
  } else {
    auto d = options.packed_cache_copy ? ld.dense_copy(head_name, V, H, head_why)
                                       : ld.dense_view(head_name, V, H, head_why);
    if (!d) return d.error();
    w->lm_head.dense = std::move(*d);
  }
  advance(progress_total - progress_done);  // the lm_head's share; ends at done == total

  // Checked last, so that a missing or misshapen tensor is reported as such first.
  if (!options.allow_extra_tensors) {
    if (const std::vector<std::string> extra = unused_tensors(*ckpt, c); !extra.empty()) {
      std::string list;
      for (std::size_t i = 0; i < extra.size() && i < 5; ++i) list += (i ? ", " : "") + extra[i];
      if (extra.size() > 5) list += ", ...";
      return make_error(errc::format_error, where,
                        dir + ": " + std::to_string(extra.size()) +
                            " tensors of the checkpoint are not used by its config.json "
                            "(num_hidden_layers " +
                            std::to_string(c.num_hidden_layers) +
                            "; is it this checkpoint's config?): " + list +
                            " (LoadOptions::allow_extra_tensors or --allow-extra-tensors loads "
                            "it anyway)");
    }
  }
  w->released_source_bytes = ld.released();
  detail::gather_int4_matrices(*w, options.int4_arena_min_bytes);
#if defined(__GLIBC__)
  // The conversions' freed buffers (unpacked codes, tens of MB) may sit in glibc's heap below
  // live allocations, resident although free; hand their pages back so the loaded model's
  // resident memory is what it holds (the memory plan, plan.hpp, counts no allocator slack).
  (void)::malloc_trim(0);
#endif
  if (!packed_path.empty() && packed_writable) {
    if (packed && ld.packed_misses() == 0) {
      w->packed_cache_note = std::string(options.packed_cache_copy ? "int4 weights copied from "
                                                                    : "int4 weights mapped from ") +
                             packed_path;
    } else {
      if (w->lm_head.int4()) int4.emplace_back("lm_head", &w->lm_head.q4);
      const status st = detail::write_packed_cache(packed_path, packed_key, int4);
      if (!w->packed_cache_note.empty()) w->packed_cache_note += "; ";
      w->packed_cache_note += st ? "wrote " + packed_path : st.error().message;
      w->packed_cache_failed = !st;
    }
    // Views into the old mapping (a partial hit) stay valid: keep it even after a rewrite.
    // Copies need no mapping.
    if (packed && !options.packed_cache_copy) w->packed_cache_file.emplace(packed->release_file());
  }
  w->checkpoint.emplace(std::move(*ckpt));
  return std::shared_ptr<const TransformerWeights>(std::move(w));
}

/// The loader above, as applications call it: with the last-resort guard that turns an exception
/// escaping it (an allocation the loader does not check itself) into an error, never an abort.
inline result<std::shared_ptr<const TransformerWeights>> load_weights(
    const std::string& dir, const LoadOptions& options = {}) {
  return edgellm::detail::guard_exceptions(
      detail::WeightLoader::kWhere, [&] { return load_weights_unguarded(dir, options); });
}

}  // namespace edgellm::model
