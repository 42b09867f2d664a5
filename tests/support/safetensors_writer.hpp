// SPDX-License-Identifier: Apache-2.0
// Writing safetensors files byte for byte in tests: valid ones with given tensors, and raw ones
// from a given header, for the reader (io/safetensors.hpp) and checkpoint (io/checkpoint.hpp)
// tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace edgellm::test {

/// `n` as 8 little-endian bytes.
inline std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

/// 8-byte length + header + data, exactly as given.
inline std::string raw_file(const std::string& header, const std::string& data = {}) {
  return le64(header.size()) + header + data;
}

/// One tensor of a file build_file() writes: its bytes are given as they are.
struct TensorSpec {
  std::string name;
  std::string type;
  std::vector<std::size_t> shape;
  std::string data;  // bytes
};

inline std::string shape_json(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

/// A well-formed file: tensors laid out in the given order, header padded with spaces to a
/// multiple of 8 when `pad8` (as the reference writer does).
inline std::string build_file(const std::vector<TensorSpec>& ts, bool pad8 = true,
                              const std::string& metadata = R"("__metadata__":{"format":"pt"})") {
  std::string header = "{";
  if (!metadata.empty()) header += metadata;
  std::string data;
  for (const TensorSpec& t : ts) {
    if (header.size() > 1) header += ",";
    header += "\"" + t.name + "\":{\"dtype\":\"" + t.type + "\",\"shape\":" + shape_json(t.shape) +
              ",\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + t.data.size()) + "]}";
    data += t.data;
  }
  header += "}";
  if (pad8) header.append((8 - header.size() % 8) % 8, ' ');
  return raw_file(header, data);
}

/// `n` bytes of a pattern that depends on `seed`.
inline std::string bytes_of(std::size_t n, int seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>((i * 31 + static_cast<std::size_t>(seed)) & 0xFF);
  return s;
}

}  // namespace edgellm::test
