// SPDX-License-Identifier: Apache-2.0
// The Vulkan compute backend: backend::ComputeBackend over a vk::Device, with the KV cache on
// the device (vk::KVCache). Every op of a forward chunk is recorded into one CommandSequence
// between begin() and finish(); finish() submits it once, waits, and reads the logits back. So a
// decode step is one submission and one read-back of vocab floats per logits row.
//
//   auto dev = vk::Device::create({});
//   auto cache = vk::KVCache::create(**dev, vk::KvFormat::int8, layers, kv_heads, head_dim, ctx);
//   auto b = vk::Backend::create(**dev, model::Transformer<>::model_shape(config, max_batch));
//   auto t = model::Transformer<vk::KVCache, vk::Backend>::assemble(weights, options,
//                                                                   std::move(*cache), std::move(*b));
//
// What it runs: int4 linears in groups of 32, 64 or 128 (the AutoAWQ layout and RTN at load)
// and a dense fp16 lm_head or embedding; fp32, fp16 and bf16 embedding tables. int8 linears
// (the int8 lm_head, mixed-precision checkpoints) and dense bf16/fp32 linears are refused at
// upload with an error that names the linear's shape and says what to choose instead.
//
// int4 arithmetic: an int4 linear over one activation row (every linear of a decode step, and
// a chunk's lm_head row(s) read out one at a time) is a GemvQ4 whose activations
// BackendOptions::gemv chooses (GemvChoice, gemv_choice.hpp): fp32 (the CPU exact path's math)
// or int8 (W4A8, the CPU fast path's math: x quantised per group, exact integer group dots).
// automatic takes the W4A8 dot build where it pays, options.path fast on a device whose 4x8-bit
// packed dot products run in hardware (DeviceInfo::integer_dot_accelerated), and fp32
// elsewhere: lavapipe has the feature without the acceleration, so there nothing changes.
// Chunks of several rows (prefill) always run GemmQ4 with fp32 activations: there is no W4A8
// GEMM shader, so a W4A8 model's prompt goes in at the exact path's math and only its decode
// steps run W4A8 (the CPU fast path runs both W4A8). gemv_variant() names the build.
#pragma once

#include "edgellm/backend/backend.hpp"
#include "edgellm/backend/vulkan/attention.hpp"
#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/dense_buffer.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/elementwise.hpp"
#include "edgellm/backend/vulkan/embed.hpp"
#include "edgellm/backend/vulkan/gemm_q4.hpp"
#include "edgellm/backend/vulkan/gemv_choice.hpp"
#include "edgellm/backend/vulkan/gemv_f16.hpp"
#include "edgellm/backend/vulkan/gemv_q4.hpp"
#include "edgellm/backend/vulkan/kv_cache.hpp"
#include "edgellm/backend/vulkan/rms_norm.hpp"
#include "edgellm/backend/vulkan/rope.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/linear.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace edgellm::backend::vk {

/// A linear's weights on the device: int4 tiles (GEMV for one row, GEMM over the same buffer
/// for more) or dense fp16, and its fp32 bias.
struct DeviceLinear {
  std::optional<GemvQ4> q4;
  std::optional<GemmQ4> q4_gemm;  // shares q4's weights buffer
  std::optional<Buffer> f16;      // [n][k] fp16 (upload_dense)
  std::optional<Buffer> bias;     // [n] fp32
  std::size_t n = 0, k = 0;
};

/// An embedding table on the device.
struct DeviceTable {
  Buffer data;
  EmbedTable shape;
};

/// What the Vulkan backend takes beyond backend::Options.
struct BackendOptions {
  /// The int4 decode GEMVs' activations (see the top of this file); automatic: the W4A8 dot
  /// build where options.path is fast and the device accelerates 4x8-bit dot products, else fp32.
  GemvChoice gemv = GemvChoice::automatic;
};

class Backend {
 public:
  /// An activation [max_batch][cols] fp32 in a device buffer the backend owns.
  struct Tensor {
    const Buffer* buffer = nullptr;
    std::size_t cols = 0;
  };
  using Matrix = std::shared_ptr<const DeviceLinear>;
  using Vector = std::shared_ptr<const Buffer>;
  using Table = std::shared_ptr<const DeviceTable>;

  /// The ops' pipelines and the chunk's fixed buffers (token ids, RoPE frequencies, logits) on
  /// `dev`, which must outlive the backend. options.path feeds vk_options.gemv's automatic
  /// choice; options.pool/isa/profile do not apply to the device. Errors: a bad shape, and
  /// GemvChoice::int8_dot on a device without shaderIntegerDotProduct (named, with the way out).
  static result<Backend> create(Device& dev, const ModelShape& shape, const Options& options = {},
                                const BackendOptions& vk_options = {}) {
    constexpr std::string_view where = "vulkan Backend::create";
    if (shape.max_batch == 0 || shape.vocab == 0 || shape.head_dim == 0 ||
        shape.rope_inv_freq.size() * 2 != shape.head_dim) {
      return make_error(errc::invalid_argument, where,
                        "shape: max_batch, vocab and head_dim must be positive, with head_dim / 2 "
                        "RoPE frequencies");
    }
    auto activations = resolve_gemv(dev.info(), options, vk_options);
    if (!activations) return activations.error();
    Backend b;
    b.dev_ = &dev;
    b.shape_ = shape;
    b.gemv_ = *activations;
    auto st = b.make_ops();
    if (!st) return st.error();
    auto ids = Buffer::create(dev, shape.max_batch * 4, "token ids", {BufferKind::host_io});
    if (!ids) return ids.error();
    b.ids_ = std::make_unique<Buffer>(std::move(*ids));
    auto freq = Buffer::create(dev, shape.rope_inv_freq.size() * 4, "rope inv_freq");
    if (!freq) return freq.error();
    if (auto w = freq->write(std::as_bytes(std::span(shape.rope_inv_freq))); !w) return w.error();
    b.inv_freq_ = std::make_unique<Buffer>(std::move(*freq));
    auto logits = Buffer::create(dev, shape.max_batch * shape.vocab * 4, "logits",
                                 {BufferKind::host_io});
    if (!logits) return logits.error();
    b.logits_ = std::make_unique<Buffer>(std::move(*logits));
    auto seq = CommandSequence::create(dev, "forward");
    if (!seq) return seq.error();
    b.seq_ = std::make_unique<CommandSequence>(std::move(*seq));
    return b;
  }

  /// The activations vk_options.gemv resolves to on a device with `info` under `options`:
  /// automatic is int8_dot where options.path is fast and the device both has
  /// shaderIntegerDotProduct and accelerates 4x8-bit packed dot products, fp32 otherwise; the
  /// others are themselves. errc::unsupported for int8_dot where the feature is missing.
  static result<GemvActivations> resolve_gemv(const DeviceInfo& info, const Options& options,
                                              const BackendOptions& vk_options) {
    switch (vk_options.gemv) {
      case GemvChoice::automatic:
        return options.path == kernels::MatmulPath::fast && info.integer_dot_product &&
                       info.integer_dot_accelerated
                   ? GemvActivations::int8_dot
                   : GemvActivations::fp32;
      case GemvChoice::fp32: return GemvActivations::fp32;
      case GemvChoice::int8: return GemvActivations::int8;
      case GemvChoice::int8_dot: break;
    }
    GemvQ4Options o;
    o.activations = GemvActivations::int8_dot;
    if (!GemvQ4::supports(info, o)) {
      return make_error(errc::unsupported, "vulkan Backend::create",
                        "gemv int8_dot (--vk-gemv int8-dot): the device '" + info.name +
                            "' lacks shaderIntegerDotProduct (Vulkan 1.3 or "
                            "VK_KHR_shader_integer_dot_product); choose int8 (--vk-gemv int8: "
                            "the same W4A8 math with plain int multiply-adds) or automatic");
    }
    return GemvActivations::int8_dot;
  }

  Backend(Backend&&) noexcept = default;
  Backend& operator=(Backend&&) noexcept = default;

  result<Tensor> activation(std::size_t cols) {
    auto buf = Buffer::create(*dev_, shape_.max_batch * cols * 4,
                              "activation [" + std::to_string(shape_.max_batch) + "][" +
                                  std::to_string(cols) + "]");
    if (!buf) return buf.error();
    activations_.push_back(std::make_unique<Buffer>(std::move(*buf)));
    return Tensor{activations_.back().get(), cols};
  }

  result<Matrix> upload(const kernels::Linear& w) {
    constexpr std::string_view where = "vulkan Backend::upload";
    auto d = std::make_shared<DeviceLinear>();
    d->n = w.n();
    d->k = w.k();
    const std::string shape = "[" + std::to_string(w.n()) + ", " + std::to_string(w.k()) + "]";
    if (w.int4()) {
      GemvQ4Options o;
      o.activations = gemv_;
      auto op = GemvQ4::create(*dev_, w.q4, o);
      if (!op) return op.error();
      gemv_variant_ = op->variant();
      d->q4.emplace(std::move(*op));
      if (shape_.max_batch > 1) {
        auto gemm = GemmQ4::for_shape(*dev_, w.q4.n(), w.q4.k(), w.q4.group_size(),
                                      shape_.max_batch);
        if (!gemm) return gemm.error();
        d->q4_gemm.emplace(std::move(*gemm));
      }
    } else if (w.int8()) {
      return make_error(errc::unsupported, where,
                        "linear " + shape + ": int8 weights (an int8 lm_head or an int8 module of "
                        "a mixed checkpoint) have no Vulkan shader yet; choose --lm-head f16 or "
                        "int4, or run --backend cpu");
    } else if (w.dense.type() == kernels::DenseType::f16) {
      auto buf = upload_dense(*dev_, w.dense, "linear " + shape + " fp16");
      if (!buf) return buf.error();
      d->f16.emplace(std::move(*buf));
    } else {
      return make_error(errc::unsupported, where,
                        "linear " + shape + ": dense " + kernels::to_string(w.dense.type()) +
                            " weights have no Vulkan shader (fp16 and int4 have); choose "
                            "--lm-head int4, or run --backend cpu");
    }
    if (!w.bias.empty()) {
      auto bias = Buffer::create(*dev_, w.bias.size() * 4, "bias " + shape);
      if (!bias) return bias.error();
      if (auto st = bias->write(std::as_bytes(std::span(w.bias))); !st) return st.error();
      d->bias.emplace(std::move(*bias));
    }
    return Matrix(std::move(d));
  }

  result<Vector> upload(std::span<const float> v) {
    auto buf = Buffer::create(*dev_, std::max<std::size_t>(v.size(), 1) * 4, "norm weight");
    if (!buf) return buf.error();
    if (!v.empty())
      if (auto st = buf->write(std::as_bytes(v)); !st) return st.error();
    return std::make_shared<const Buffer>(std::move(*buf));
  }

  result<Table> upload(const kernels::DenseMatrix& t) {
    auto buf = upload_dense(*dev_, t, "embedding table");
    if (!buf) return buf.error();
    auto table = std::make_shared<DeviceTable>();
    table->data = std::move(*buf);
    table->shape = EmbedTable{t.type(), t.n(), t.k()};
    return Table(std::move(table));
  }

  /// Starts recording a chunk of `rows` tokens at first_pos.
  status begin(std::size_t first_pos, std::size_t rows) {
    first_pos_ = first_pos;
    rows_ = rows;
    pending_ = {};
    logits_out_ = {};
    return seq_->reset();
  }

  status embed(const Table& table, std::span<const std::int32_t> ids, Tensor x) {
    if (ids.size() > shape_.max_batch) {
      return make_error(errc::invalid_argument, "vulkan Backend::embed",
                        "ids: " + std::to_string(ids.size()) + " tokens exceed max_batch " +
                            std::to_string(shape_.max_batch));
    }
    if (auto st = Embed::check_ids(ids, table->shape.n_rows); !st) return st;
    if (auto st = ids_->write(std::as_bytes(ids)); !st) return st;
    return ops_->embed.record(*seq_, table->data, table->shape, *ids_, *x.buffer, ids.size());
  }

  void rms_norm(Tensor x, const Vector& w, Tensor out, std::size_t r0, std::size_t r1) {
    defer(ops_->rms_norm.record(*seq_, *x.buffer, *w, *out.buffer, x.cols, r0, r1,
                                shape_.rms_norm_eps));
  }

  void head_rms_norm(Tensor t, const Vector& w, std::size_t rows) {
    const std::size_t hd = shape_.head_dim;
    defer(ops_->rms_norm.record(*seq_, *t.buffer, *w, *t.buffer, hd, 0, rows * (t.cols / hd),
                                shape_.rms_norm_eps));
  }

  status linear(const Matrix& m, Tensor x, Tensor y, std::size_t rows) {
    return record_linear(*m, *x.buffer, 0, *y.buffer, rows);
  }

  status linear_group(std::span<const LinearTarget<Backend>> targets, Tensor x, std::size_t rows) {
    for (const auto& t : targets)
      if (auto st = record_linear(*t.w, *x.buffer, 0, *t.y.buffer, rows); !st) return st;
    return {};
  }

  void rope(Tensor t, std::size_t rows) {
    const std::size_t hd = shape_.head_dim;
    defer(ops_->rope.record(*seq_, *t.buffer, *inv_freq_, rows, t.cols / hd, hd, first_pos_));
  }

  status attention(KVCache& cache, std::size_t layer, std::size_t first_pos, std::size_t rows,
                   Tensor q, Tensor k, Tensor v, Tensor out) {
    if (auto st = ops_->kv_append.record(*seq_, cache, *k.buffer, *v.buffer, layer, first_pos, rows);
        !st)
      return st;
    return ops_->attention.record(*seq_, cache, *q.buffer, *out.buffer, shape_.heads, layer,
                                  first_pos, rows);
  }

  void silu_mul(Tensor g, Tensor u, std::size_t rows) {
    defer(ops_->silu_mul.record(*seq_, *g.buffer, *u.buffer, rows * g.cols));
  }

  void add(Tensor x, Tensor y, std::size_t rows) {
    defer(ops_->add.record(*seq_, *x.buffer, *y.buffer, rows * x.cols));
  }

  /// Records the lm_head of rows [first_row, first_row + rows) of x into the logits buffer;
  /// finish() copies them to `out` ([rows][vocab]).
  status logits(const Matrix& m, Tensor x, std::size_t first_row, std::size_t rows,
                std::span<float> out) {
    if (out.size() < rows * m->n) {
      return make_error(errc::invalid_argument, "vulkan Backend::logits",
                        "out: size " + std::to_string(out.size()) + ", need " +
                            std::to_string(rows * m->n));
    }
    if (auto st = record_linear(*m, *x.buffer, first_row, *logits_, rows); !st) return st;
    logits_out_ = out.first(rows * m->n);
    return {};
  }

  /// Submits the chunk (one vkQueueSubmit), waits, and copies the logits to the host. The first
  /// error of a deferred op is reported here, with nothing submitted.
  status finish() {
    if (!pending_) return pending_;
    if (auto st = seq_->submit(); !st) return st;
    if (!logits_out_.empty())
      if (auto st = logits_->read(std::as_writable_bytes(logits_out_)); !st) return st;
    logits_out_ = {};
    return {};
  }

  /// Device bytes of the activations and the chunk's buffers (not the weights, not the cache).
  std::size_t bytes() const noexcept {
    std::size_t n = (ids_ ? ids_->size() : 0) + (inv_freq_ ? inv_freq_->size() : 0) +
                    (logits_ ? logits_->size() : 0);
    for (const auto& a : activations_) n += a->size();
    return n;
  }

  /// Queue submissions so far (one per forward chunk).
  std::size_t submits() const noexcept { return seq_ ? seq_->submits() : 0; }
  Device& device() const noexcept { return *dev_; }
  /// The activations the int4 decode GEMVs were uploaded with (BackendOptions::gemv resolved).
  GemvActivations gemv_activations() const noexcept { return gemv_; }
  /// The shader build of the int4 decode GEMVs (GemvQ4::variant(): "subgroup" or "portable" for
  /// fp32 activations, "int8-dot" or "int8-portable" for W4A8); "" until an int4 linear is
  /// uploaded (a model without int4 linears has none).
  const char* gemv_variant() const noexcept { return gemv_variant_; }

 private:
  struct Ops {
    Embed embed;
    RmsNorm rms_norm;
    Rope rope;
    SiluMul silu_mul;
    Add add;
    AddBias add_bias;
    GemvF16 gemv_f16;
    KvAppend kv_append;
    Attention attention;
  };

  Backend() = default;

  status make_ops() {
    auto embed = Embed::create(*dev_);
    if (!embed) return embed.error();
    auto norm = RmsNorm::create(*dev_);
    if (!norm) return norm.error();
    auto rope = Rope::create(*dev_);
    if (!rope) return rope.error();
    auto silu = SiluMul::create(*dev_);
    if (!silu) return silu.error();
    auto add = Add::create(*dev_);
    if (!add) return add.error();
    auto bias = AddBias::create(*dev_);
    if (!bias) return bias.error();
    auto f16 = GemvF16::create(*dev_);
    if (!f16) return f16.error();
    auto append = KvAppend::create(*dev_);
    if (!append) return append.error();
    auto attn = Attention::create(*dev_);
    if (!attn) return attn.error();
    ops_ = std::make_unique<Ops>(Ops{std::move(*embed), std::move(*norm), std::move(*rope),
                                     std::move(*silu), std::move(*add), std::move(*bias),
                                     std::move(*f16), std::move(*append), std::move(*attn)});
    return {};
  }

  // Rows [x_row, x_row + rows) of x times m^T into rows [0, rows) of y, plus the bias.
  status record_linear(const DeviceLinear& m, const Buffer& x, std::size_t x_row, const Buffer& y,
                       std::size_t rows) {
    if (m.q4) {
      if (rows == 1) {
        if (auto st = m.q4->record(*seq_, x, y, x_row, 0); !st) return st;
      } else if (m.q4_gemm && x_row == 0) {
        if (auto st = m.q4_gemm->record(*seq_, m.q4->weights(), x, y, rows); !st) return st;
      } else {
        for (std::size_t r = 0; r < rows; ++r)
          if (auto st = m.q4->record(*seq_, x, y, x_row + r, r); !st) return st;
      }
    } else {
      GemvF16Shape s;
      s.n = m.n;
      s.k = m.k;
      s.m = rows;
      s.x_row = x_row;
      if (auto st = ops_->gemv_f16.record(*seq_, *m.f16, x, y, s); !st) return st;
    }
    if (m.bias) return ops_->add_bias.record(*seq_, y, *m.bias, rows, m.n);
    return {};
  }

  // An op of the concept that returns nothing: its recording error is reported by finish().
  void defer(status st) {
    if (!st && pending_) pending_ = std::move(st);
  }

  Device* dev_ = nullptr;
  ModelShape shape_;
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<CommandSequence> seq_;
  std::unique_ptr<Buffer> ids_, inv_freq_, logits_;  // [max_batch] int32, [head_dim / 2], [max_batch][vocab]
  std::vector<std::unique_ptr<Buffer>> activations_;  // stable addresses behind Tensor handles
  std::size_t first_pos_ = 0, rows_ = 0;
  GemvActivations gemv_ = GemvActivations::fp32;
  const char* gemv_variant_ = "";  // a GemvQ4::variant() literal
  status pending_;
  std::span<float> logits_out_;
};

static_assert(ComputeBackend<Backend, KVCache>);

}  // namespace edgellm::backend::vk
