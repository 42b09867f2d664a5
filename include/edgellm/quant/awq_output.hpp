// SPDX-License-Identifier: Apache-2.0
// Writes what quant/awq_model.hpp produces as a checkpoint directory: AutoAWQ's `gemm` layout
// (qweight / qzeros / scales per linear, kernels/awq.hpp export_awq_gemm) with config.json's
// quantization_config, or with fake_quant every linear dequantised to fp16. Norms are written
// as folded (fp16), embeddings / lm_head and other non-layer tensors copied as stored, and the
// tokenizer and generation files copied. The directory is built under a temporary name beside
// the target and renamed at the end, and model.safetensors is streamed layer by layer
// (io/safetensors_write.hpp), so a failed run never leaves an output that looks complete.
// Every output carries the marker file kQuantizeMarker; the output path follows io::OutputRule
// (io/output_path.hpp): only a directory with the marker is ever replaced, and only with force.
//
// Mixed precision (QuantizeOptions::modules_bits): linears kept at 16 bits are written as fp16
// `weight` and listed in modules_to_not_convert (AutoAWQ's own convention). Linears at 8 bits
// use edgellm's extension of the layout, which AutoAWQ does not read: their layer-relative
// names are listed in quantization_config.edgellm_int8_modules, and each is stored as
//   <linear>.qweight  I8  [n][k]       symmetric codes in [-127, 127], nn.Linear orientation
//   <linear>.scales   F32 [n][k / G]   w[r][c] = qweight[r][c] * scales[r][c / G]
// (kernels::Q8Matrix's values; model/weights.hpp loads them into it).
#pragma once

#include "edgellm/io/atomic_file.hpp"
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/io/json_write.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/io/safetensors_write.hpp"
#include "edgellm/kernels/awq.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/model/layer_layout.hpp"
#include "edgellm/quant/awq_model.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#if EDGELLM_IO_POSIX
#include <unistd.h>
#endif

namespace edgellm::quant {

/// The file in every output directory of write_quantized_model: a directory without it is never
/// replaced, even with force (it is not ours), and stale temporaries are recognised by it.
inline constexpr std::string_view kQuantizeMarker = ".edgellm-quantize";

/// Options of write_quantized_model.
struct OutputOptions {
  /// Write every linear dequantised to fp16 (any bit width); else AutoAWQ gemm (4 bits only).
  bool fake_quant = false;
  /// Replace an existing output directory of ours (carrying kQuantizeMarker); else refused.
  bool force = false;
  /// Other paths the caller read (the calibration text): the output may not be one of them or
  /// contain one (the model directory is always checked).
  std::vector<std::string> inputs;
  /// Called with the temporary directory's path just before it is made (a tool registers it
  /// for removal on SIGINT / SIGTERM: tools/cleanup.hpp), and with "" once it is renamed.
  std::function<void(const std::string&)> on_temp;
};

/// The rule for write_quantized_model's output (io::OutputRule); `inputs` must outlive it.
inline io::OutputRule quantize_output_rule(std::span<const std::string> inputs, bool force) {
  io::OutputRule r;
  r.kind = io::OutputKind::directory;
  r.replace = force;
  r.marker = kQuantizeMarker;
  r.replace_hint = "--force / OutputOptions::force";
  r.inputs = inputs;
  return r;
}

/// Whether `out_dir` may receive the output of quantising `model_dir` (io::check_output_path
/// under quantize_output_rule): write_quantized_model's first check, for a tool to make before
/// its slow steps. Errors name out_dir and what is there.
inline status check_quantize_output(const std::string& model_dir, const std::string& out_dir,
                                    const OutputOptions& out_opt = {}) {
  std::vector<std::string> inputs = out_opt.inputs;
  inputs.push_back(model_dir);
  return io::check_output_path(out_dir, quantize_output_rule(inputs, out_opt.force),
                               "write_quantized_model");
}

namespace detail {

inline std::vector<std::byte> f16_bytes(std::span<const float> v) {
  std::vector<std::byte> out(v.size() * 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint16_t h = kernels::f32_to_f16(v[i]);
    out[2 * i] = static_cast<std::byte>(h & 0xFF);
    out[2 * i + 1] = static_cast<std::byte>(h >> 8);
  }
  return out;
}
template <class T>
std::span<const std::byte> raw_bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

/// The output tensors of one layer in write order (must match write_layer).
inline void declare_layer(std::vector<io::TensorDecl>& out, const model::ModelConfig& c,
                          std::size_t li, std::span<const QuantSpec, 7> specs, bool fake) {
  const std::string pre = "model.layers." + std::to_string(li) + ".";
  using io::dtype;
  for (const model::LayerNorm& n : kLayerNorms)
    if (n.present(c))
      out.push_back({pre + std::string(n.name) + ".weight", dtype::f16, {n.size(c)}});
  const LinearShapes shapes = linear_shapes(c);
  const std::size_t* ns = shapes.n;
  const std::size_t* ks = shapes.k;
  const bool* bias = shapes.bias;
  for (int i = 0; i < 7; ++i) {
    const std::string p = pre + std::string(kLayerLinears[static_cast<std::size_t>(i)].name);
    const QuantSpec& spec = specs[static_cast<std::size_t>(i)];
    if (fake || spec.kept()) {
      out.push_back({p + ".weight", dtype::f16, {ns[i], ks[i]}});
    } else if (spec.bits == 8) {  // edgellm's int8 extension (see the file comment)
      out.push_back({p + ".qweight", dtype::i8, {ns[i], ks[i]}});
      out.push_back({p + ".scales", dtype::f32, {ns[i], ks[i] / spec.group}});
    } else {
      out.push_back({p + ".qweight", dtype::i32, {ks[i], ns[i] / 8}});
      out.push_back({p + ".qzeros", dtype::i32, {ks[i] / spec.group, ns[i] / 8}});
      out.push_back({p + ".scales", dtype::f16, {ks[i] / spec.group, ns[i]}});
    }
    if (bias[i]) out.push_back({p + ".bias", dtype::f16, {ns[i]}});
  }
}

inline status write_layer(io::SafetensorsWriter& w, const QuantLayer& layer, bool fake) {
  const std::string pre = "model.layers." + std::to_string(layer.index) + ".";
  // QuantLayer's norms in kLayerNorms' order; absent ones (q/k_norm but for Qwen3) are empty.
  const std::vector<float>* norms[] = {&layer.input_norm, &layer.post_norm, &layer.q_norm,
                                       &layer.k_norm};
  static_assert(std::size(norms) == kLayerNorms.size());
  for (std::size_t i = 0; i < kLayerNorms.size(); ++i)
    if (!norms[i]->empty())
      if (auto st = w.write(pre + std::string(kLayerNorms[i].name) + ".weight",
                            f16_bytes(*norms[i]));
          !st)
        return st;
  for (const QuantLinear& ql : layer.linears) {
    const std::string p = pre + ql.name;
    if (fake || ql.spec.kept()) {
      if (auto st = w.write(p + ".weight", f16_bytes(ql.weight)); !st) return st;
    } else if (ql.q8) {
      const kernels::Q8Matrix& m = *ql.q8;
      const auto* codes = reinterpret_cast<const std::byte*>(m.codes(0));
      if (auto st = w.write(p + ".qweight", std::span(codes, m.n() * m.k())); !st) return st;
      const auto* sc = reinterpret_cast<const std::byte*>(m.scales(0));
      if (auto st = w.write(p + ".scales", std::span(sc, m.n() * m.n_groups() * 4)); !st)
        return st;
    } else {
      auto a = kernels::export_awq_gemm(*ql.q4);
      if (!a) {
        error e = a.error();
        e.message = p + ": " + e.message;
        return e;
      }
      if (auto st = w.write(p + ".qweight", raw_bytes(a->qweight)); !st) return st;
      if (auto st = w.write(p + ".qzeros", raw_bytes(a->qzeros)); !st) return st;
      if (auto st = w.write(p + ".scales", raw_bytes(a->scales)); !st) return st;
    }
    if (!ql.bias.empty())
      if (auto st = w.write(p + ".bias", f16_bytes(ql.bias)); !st) return st;
  }
  return {};
}

/// Whether a layer tensor is one the pipeline rewrites (others are copied as stored).
inline bool rewritten(std::string_view name, const model::ModelConfig& c) {
  constexpr std::string_view pre = "model.layers.";
  if (name.substr(0, pre.size()) != pre) return false;
  const std::size_t dot = name.find('.', pre.size());
  if (dot == std::string_view::npos) return false;
  const std::string_view rest = name.substr(dot + 1);
  for (const model::LayerNorm& n : kLayerNorms)
    if (n.present(c) && rest.substr(0, n.name.size()) == n.name &&
        rest.substr(n.name.size()) == ".weight")
      return true;
  for (const model::LayerLinear& l : kLayerLinears) {
    const std::string_view lv = l.name;
    if (rest.substr(0, lv.size()) == lv &&
        (rest.substr(lv.size()) == ".weight" || rest.substr(lv.size()) == ".bias"))
      return true;
  }
  return false;
}

/// config.json with quantization_config set (gemm) and torch_dtype float16: the kept linears'
/// names in modules_to_not_convert, the int8 ones' in edgellm_int8_modules.
inline result<std::string> awq_config_json(const std::string& path, const QuantSpec& spec,
                                           std::span<const QuantSpec, 7> specs) {
  auto text = io::read_text_file(path, io::kMaxConfigJsonBytes);
  if (!text) return text.error();
  auto root = io::json::parse(*text, path);
  if (!root) return root.error();
  if (!root->is_object())
    return make_error(errc::format_error, "write_quantized_model", path + ": not a JSON object");
  io::json::Object o;
  for (const io::json::Member& m : root->as_object()) {
    if (m.key == "quantization_config") continue;
    if (m.key == "torch_dtype") {
      o.append(m.key, io::json::Value("float16"));
      continue;
    }
    o.append(m.key, m.value);
  }
  io::json::Object q;
  q.append("quant_method", io::json::Value("awq"));
  q.append("bits", io::json::Value(std::int64_t{static_cast<std::int64_t>(spec.bits)}));
  q.append("group_size", io::json::Value(std::int64_t{static_cast<std::int64_t>(spec.group)}));
  q.append("zero_point", io::json::Value(true));
  q.append("version", io::json::Value("gemm"));
  io::json::Array kept, int8;
  for (std::size_t i = 0; i < 7; ++i) {
    const std::string name(kLayerLinears[i].name);
    if (specs[i].kept()) kept.push_back(io::json::Value(name));
    if (specs[i].bits == 8) int8.push_back(io::json::Value(name));
  }
  q.append("modules_to_not_convert",
           kept.empty() ? io::json::Value(nullptr) : io::json::Value(std::move(kept)));
  if (!int8.empty()) q.append("edgellm_int8_modules", io::json::Value(std::move(int8)));
  o.append("quantization_config", io::json::Value(std::move(q)));
  return io::json::dump(io::json::Value(std::move(o)));
}

/// Removes the temporary directory unless released.
struct TempDirGuard {
  std::filesystem::path path;
  ~TempDirGuard() {
    if (!path.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  }
};

}  // namespace detail

/// Quantises `model_dir` (quantize_model) and writes the result to `out_dir` (see the file
/// comment). Errors: an out_dir check_quantize_output refuses (an existing one without force),
/// bits other than 4 without fake_quant, widths that are not multiples of 8 (gemm),
/// quantize_model's, and I/O errors naming the file; on any error the output directory is left
/// as it was (absent, or the old one). If something appears at out_dir during the run, it is
/// left alone and the error names where the finished output was kept (io::commit_output).
inline result<QuantizeResult> write_quantized_model(const std::string& model_dir,
                                                    const std::string& out_dir,
                                                    std::span<const std::int32_t> calib_tokens,
                                                    const QuantizeOptions& opt,
                                                    const OutputOptions& out_opt = {},
                                                    const ProgressFn& progress = {}) {
  namespace fs = std::filesystem;
  constexpr std::string_view where = "write_quantized_model";
  std::error_code ec;
  std::vector<std::string> inputs = out_opt.inputs;
  inputs.push_back(model_dir);
  const io::OutputRule rule = quantize_output_rule(inputs, out_opt.force);
  if (auto st = io::check_output_path(out_dir, rule, where); !st) return st.error();
  auto cfg = model::load_model_config(model_dir);
  if (!cfg) return cfg.error();
  const model::ModelConfig& c = *cfg;
  if (c.awq)  // before any tensor is declared: its packed names would clash with ours
    return make_error(errc::unsupported, where,
                      model_dir +
                          ": already quantised (config.json has an AWQ "
                          "quantization_config); quantize the fp16/bf16/fp32 original");
  const bool fake = out_opt.fake_quant;
  auto specs_r = detail::linear_specs(opt.spec, opt.modules_bits);
  if (!specs_r) return specs_r.error();
  const std::array<QuantSpec, 7>& specs = *specs_r;
  if (!fake) {
    if (opt.spec.bits != 4)
      return make_error(
          errc::unsupported, where,
          "bits " + std::to_string(opt.spec.bits) +
              ": the AutoAWQ gemm layout is 4-bit only (use fake_quant / --fake-quant)");
    for (std::size_t i = 0; i < 7; ++i)
      if (specs[i].bits != 4 && specs[i].bits != 8 && !specs[i].kept())
        return make_error(errc::unsupported, where,
                          std::string(detail::kLayerLinears[i].name) + ": " + std::to_string(specs[i].bits) +
                              " bits has no packed layout (4, 8 and 16 do; use fake_quant / "
                              "--fake-quant)");
    for (const std::size_t n : {c.q_dim(), c.kv_dim(), c.hidden_size, c.intermediate_size})
      if (n % 8 != 0)
        return make_error(errc::unsupported, where,
                          model_dir + ": a linear with " + std::to_string(n) +
                              " outputs (AutoAWQ gemm needs a multiple of 8)");
  }
  auto ckpt = io::Checkpoint::open(model_dir);
  if (!ckpt) return ckpt.error();

  // The temporary directory beside the target (io::temp_stem + n), marked as ours first.
  io::remove_stale_temps(out_dir, rule);
  fs::path tmp;
  for (unsigned n = 0;; ++n) {
    tmp = io::temp_stem(out_dir) + std::to_string(n);
    // Registered before it exists: a name with our pid is ours whether made yet or not.
    if (out_opt.on_temp) out_opt.on_temp(tmp.string());
    if (fs::create_directory(tmp, ec)) break;
    if ((ec && ec != std::errc::file_exists) || n == 1000)
      return make_error(errc::io_error, where,
                        "cannot create '" + tmp.string() + "': " +
                            (ec ? ec.message() : std::string("exists")));
  }
  detail::TempDirGuard guard{tmp};
  if (auto st = io::write_file_atomic(
          (tmp / std::string(kQuantizeMarker)).string(),
          std::as_bytes(std::span(std::string_view(
              "written by edgellm-quantize: with --force, a later run may replace this "
              "directory\n"))),
          where);
      !st)
    return st.error();

  std::vector<io::TensorDecl> decls;
  for (std::size_t li = 0; li < c.num_hidden_layers; ++li)
    detail::declare_layer(decls, c, li, specs, fake);
  std::vector<std::string> copied;
  for (const std::string& name : ckpt->names()) {
    if (detail::rewritten(name, c)) continue;
    const io::TensorInfo* info = ckpt->info(name);
    decls.push_back({name, info->type, info->shape});
    copied.push_back(name);
  }
  auto writer = io::SafetensorsWriter::create((tmp / "model.safetensors").string(), decls);
  if (!writer) return writer.error();
  const LayerSink sink = [&](QuantLayer&& layer) {
    return detail::write_layer(*writer, layer, fake);
  };
  auto res = quantize_model(model_dir, calib_tokens, opt, progress, sink);
  if (!res) return res.error();
  for (const std::string& name : copied) {
    auto t = ckpt->find(name);
    if (!t) return t.error();
    if (auto st = writer->write(name, t->bytes); !st) return st.error();
  }
  if (auto st = writer->commit(); !st) return st.error();

  // config.json, then every other file but the weights (tokenizer, generation config, ...).
  const fs::path src(model_dir);
  if (fake) {
    auto bytes = io::read_file_bytes((src / "config.json").string());
    if (!bytes) return bytes.error();
    if (auto st = io::write_file_atomic((tmp / "config.json").string(), *bytes, where); !st)
      return st.error();
  } else {
    auto text = detail::awq_config_json((src / "config.json").string(), opt.spec, specs);
    if (!text) return text.error();
    if (auto st = io::write_file_atomic((tmp / "config.json").string(),
                                        std::as_bytes(std::span(*text)), where);
        !st)
      return st.error();
  }
  for (fs::directory_iterator it(src, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string fname = it->path().filename().string();
    if (!it->is_regular_file(ec) || fname == "config.json" || fname == "quant_config.json" ||
        fname == "model.safetensors.index.json" || it->path().extension() == ".safetensors")
      continue;
    auto bytes = io::read_file_bytes(it->path().string());
    if (!bytes) return bytes.error();
    if (auto st = io::write_file_atomic((tmp / fname).string(), *bytes, where); !st)
      return st.error();
  }
  if (ec)
    return make_error(errc::io_error, where, "cannot list '" + model_dir + "': " + ec.message());

  // Into place: the old output (with force) goes only once the new one is complete, and
  // nothing that appeared at out_dir meanwhile is replaced.
  bool kept = false;
  const status moved = io::commit_output(tmp.string(), out_dir, rule, where, &kept);
  if (moved || kept) guard.path.clear();
  if (out_opt.on_temp) out_opt.on_temp("");
  if (!moved) return moved.error();
  return res;
}

}  // namespace edgellm::quant
