// SPDX-License-Identifier: Apache-2.0
// Helpers for the model tests: the committed fixtures under tests/data/model (see
// tools/make_test_fixtures.sh), their expected logits, and scratch copies to break on purpose.
#pragma once

#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include "support/temp_dir.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace edgellm::test {

/// tests/data/model/<name>.
inline std::string model_fixture(const std::string& name) {
  return source_dir() + "/tests/data/model/" + name;
}

/// The fixtures and what they are (see tools/make_test_fixtures.sh).
struct FixtureInfo {
  const char* name;
  bool awq;  ///< AutoAWQ checkpoint: the reference ran on the dequantised int4 weights
};
inline constexpr FixtureInfo kFixtures[] = {
    {"llama-fp16", false},    {"llama-bf16", false},    {"llama-awq-gemm", true},
    {"llama-awq-gemv", true}, {"qwen2-fp16", false},    {"qwen2-awq-gemm", true},
    {"qwen3-fp16", false},    {"qwen3-awq-gemm", true}, {"smollm3-fp16", false},
    {"smollm3-awq-gemm", true},
};

/// tools/reference_forward.py's output: logits of every prompt position and the greedy ids.
struct Expected {
  std::vector<std::int32_t> ids;
  std::size_t vocab_size = 0;
  std::vector<std::vector<float>> logits;  ///< [ids.size()][vocab_size]
  std::vector<std::int32_t> greedy;
};

inline Expected load_expected(const std::string& dir) {
  namespace json = edgellm::io::json;
  const std::string path = dir + "/expected.json";
  auto text = edgellm::io::read_text_file(path);
  REQUIRE(text.has_value());
  auto root = json::parse(*text, path);
  INFO((root ? std::string() : root.error().message));
  REQUIRE(root.has_value());
  Expected e;
  const auto ints = [](const json::Value* v) {
    std::vector<std::int32_t> out;
    REQUIRE(v != nullptr);
    for (const json::Value& x : v->as_array()) out.push_back(static_cast<std::int32_t>(x.as_int()));
    return out;
  };
  e.ids = ints(root->find("ids"));
  e.greedy = ints(root->find("greedy"));
  e.vocab_size = static_cast<std::size_t>(root->find("vocab_size")->as_int());
  for (const json::Value& row : root->find("logits")->as_array()) {
    std::vector<float> r;
    for (const json::Value& x : row.as_array()) r.push_back(static_cast<float>(x.as_double()));
    REQUIRE(r.size() == e.vocab_size);
    e.logits.push_back(std::move(r));
  }
  REQUIRE(e.logits.size() == e.ids.size());
  return e;
}

/// max - min of a row of logits: the scale tolerances are stated against.
inline float logit_range(const std::vector<float>& row) {
  const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
  return *hi - *lo;
}

inline float max_abs_diff(const float* a, const float* b, std::size_t n) {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

inline std::int32_t argmax(const float* v, std::size_t n) {
  return static_cast<std::int32_t>(std::max_element(v, v + n) - v);
}

using edgellm::test::TempDir;

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  REQUIRE(f.good());
  f << bytes;
  REQUIRE(f.good());
}

/// Copies fixture `name` into `dir` (files only) and returns dir.
inline std::string copy_fixture(const std::string& name, const TempDir& dir) {
  for (const auto& e : std::filesystem::directory_iterator(model_fixture(name)))
    std::filesystem::copy_file(e.path(), dir.file(e.path().filename().string()));
  return dir.str();
}

/// Replaces the first occurrence of `from` in the file by `to`.
inline void replace_in_file(const std::string& path, const std::string& from,
                            const std::string& to) {
  std::string s = read_file(path);
  const auto at = s.find(from);
  INFO(path << ": '" << from << "' not found");
  REQUIRE(at != std::string::npos);
  s.replace(at, from.size(), to);
  write_file(path, s);
}

/// Edits the JSON header of a safetensors file in place: within the entry of tensor `tensor`,
/// replaces the first `from` by `to` (same length, so offsets and the header size stay valid).
/// With from == "\"" + tensor + "\"", renames the tensor.
inline void edit_tensor_header(const std::string& path, const std::string& tensor,
                               const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  std::string s = read_file(path);
  REQUIRE(s.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(s[static_cast<std::size_t>(i)]);
  const std::string key = "\"" + tensor + "\"";
  const auto at = s.find(key, 8);
  INFO(path << ": tensor " << tensor << " not in the header");
  REQUIRE((at != std::string::npos && at < 8 + n));
  const auto hit = s.find(from, at);
  REQUIRE((hit != std::string::npos && hit + from.size() <= 8 + n));
  s.replace(hit, from.size(), to);
  write_file(path, s);
}

/// One tensor to write with write_safetensors().
struct TensorOut {
  std::string name;
  std::string dtype;  ///< "F16", "I32", ...
  std::vector<std::size_t> shape;
  std::string bytes;  ///< little-endian data, numel * element size bytes
};

/// Writes a safetensors file (header padded with spaces to a multiple of 8, tensors in order).
inline void write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::size_t offset = 0;
  for (const TensorOut& t : tensors) {
    header += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i) header += ',';
      header += std::to_string(t.shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  out += header;
  for (const TensorOut& t : tensors) out += t.bytes;
  write_file(path, out);
}

}  // namespace edgellm::test
