// SPDX-License-Identifier: Apache-2.0
// A Hugging Face checkpoint's generation_config.json: the sampling defaults its authors chose
// (temperature, top_k, top_p, min_p, repetition_penalty, do_sample) and its stop ids. Only the
// keys the file sets are set here: an application applies them to its sampling options where
// the user did not choose otherwise (decode::SamplingOptions lives a layer above).
#pragma once

#include "edgellm/io/json.hpp"
#include "edgellm/io/json_write.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/result.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace edgellm::model {

/// The keys of generation_config.json that edgellm uses; each unset when the file does not set
/// it (or sets it to null). Other keys (max_length, pad_token_id, ...) are ignored.
struct GenerationConfig {
  std::string source;                       ///< the file read; empty: there was none
  std::optional<bool> do_sample;            ///< false: greedy whatever the temperature says
  std::optional<float> temperature;         ///< >= 0
  std::optional<std::size_t> top_k;         ///< 0 = off
  std::optional<float> top_p;               ///< in (0, 1]
  std::optional<float> min_p;               ///< in [0, 1)
  std::optional<float> repetition_penalty;  ///< > 0
  std::vector<std::int32_t> eos_token_ids;  ///< int or list in the file; stop ids

  /// True when the file sets none of the keys above.
  bool empty() const noexcept {
    return !do_sample && !temperature && !top_k && !top_p && !min_p && !repetition_penalty &&
           eos_token_ids.empty();
  }
};

/// Parses a generation_config.json object; `source` names it in messages ("<source>: key
/// 'top_p': ..."). A key of the wrong type or out of range is errc::format_error; unknown keys
/// are ignored.
inline result<GenerationConfig> parse_generation_config(const io::json::Value& json,
                                                        std::string_view source) {
  constexpr std::string_view where = "parse_generation_config";
  if (!json.is_object()) {
    return make_error(errc::format_error, where,
                      std::string(source) + ": must be a JSON object, not " +
                          io::json::describe(json));
  }
  const detail::Reader r(json, where, source);
  GenerationConfig g;
  g.source = source;

  if (const io::json::Value* v = r.get_non_null("do_sample")) {
    const auto b = v->get_bool();
    if (!b) return r.fail_type("do_sample", "true or false", *v);
    g.do_sample = *b;
  }
  // A finite number in `range` (its text: "[0, 1)"), as a float.
  const auto number = [&r](std::string_view key, std::string_view range, auto in_range,
                           std::optional<float>& out) -> status {
    const io::json::Value* v = r.get_non_null(key);
    if (v == nullptr) return {};
    const auto d = v->get_double();
    if (!d) return r.fail_type(key, "a number", *v);
    if (!std::isfinite(*d) || !in_range(*d))
      return r.fail(key, "must be in " + std::string(range) + ", got " + io::json::describe(*v));
    // The sampler reads a float: 1e308 would become inf, 0.99999999 would become 1.
    const auto f = static_cast<float>(*d);
    if (!std::isfinite(f) || !in_range(static_cast<double>(f)))
      return r.fail(key, "must be in " + std::string(range) + " as a 32-bit float, got " +
                             io::json::describe(*v));
    out = f;
    return {};
  };
  if (auto st = number("temperature", "[0, inf)", [](double x) { return x >= 0.0; },
                       g.temperature);
      !st)
    return st.error();
  if (auto st = number("top_p", "(0, 1]", [](double x) { return x > 0.0 && x <= 1.0; }, g.top_p);
      !st)
    return st.error();
  if (auto st = number("min_p", "[0, 1)", [](double x) { return x >= 0.0 && x < 1.0; }, g.min_p);
      !st)
    return st.error();
  if (auto st = number("repetition_penalty", "(0, inf)", [](double x) { return x > 0.0; },
                       g.repetition_penalty);
      !st)
    return st.error();
  if (const io::json::Value* v = r.get_non_null("top_k")) {
    const auto k = detail::Reader::integer_of(*v);
    if (!k) return r.fail_type("top_k", "an integer", *v);
    if (*k < 0 || *k > static_cast<std::int64_t>(detail::kMaxDim))
      return r.fail("top_k", "must be in [0, " + std::to_string(detail::kMaxDim) + "], got " +
                                 std::to_string(*k));
    g.top_k = static_cast<std::size_t>(*k);
  }
  auto eos = detail::token_ids(r, "eos_token_id");
  if (!eos) return eos.error();
  for (const std::int64_t id : *eos) {
    if (id < 0 || id > static_cast<std::int64_t>(detail::kMaxDim))
      return r.fail("eos_token_id", "token id " + std::to_string(id) + " is out of range");
    g.eos_token_ids.push_back(static_cast<std::int32_t>(id));
  }
  return g;
}

/// Reads `dir`/generation_config.json. A directory without one gives an empty GenerationConfig
/// (no defaults, empty source); an unreadable or malformed file is an error naming it.
inline result<GenerationConfig> load_generation_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return GenerationConfig{};
  auto json = detail::read_json_file(path);
  if (!json) return json.error();
  return parse_generation_config(*json, path);
}

/// One line for a log: "temperature 0.7, top_k 20, ..., eos 151645,151643" (the keys set).
inline std::string describe(const GenerationConfig& g) {
  std::string s;
  const auto add = [&s](std::string_view key, const std::string& value) {
    if (!s.empty()) s += ", ";
    s += key;
    s += ' ';
    s += value;
  };
  const auto real = [](float x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", static_cast<double>(x));
    return std::string(buf);
  };
  if (g.do_sample) add("do_sample", *g.do_sample ? "true" : "false");
  if (g.temperature) add("temperature", real(*g.temperature));
  if (g.top_k) add("top_k", std::to_string(*g.top_k));
  if (g.top_p) add("top_p", real(*g.top_p));
  if (g.min_p) add("min_p", real(*g.min_p));
  if (g.repetition_penalty) add("repetition_penalty", real(*g.repetition_penalty));
  if (!g.eos_token_ids.empty()) {
    std::string ids;
    for (const std::int32_t id : g.eos_token_ids) {
      if (!ids.empty()) ids += ',';
      ids += std::to_string(id);
    }
    add("eos", ids);
  }
  return s;
}

}  // namespace edgellm::model
