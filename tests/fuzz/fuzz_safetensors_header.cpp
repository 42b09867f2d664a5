// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the safetensors header parser, the JSON parser and the config.json reader on
// arbitrary bytes. Besides "no crash, no sanitizer report", it checks the parsers' promises:
// accepted safetensors headers tile the file exactly, and accepted JSON round-trips through dump.
#include "edgellm/io/json.hpp"
#include "edgellm/io/safetensors.hpp"
#include "edgellm/model/config_json.hpp"
#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace {

void check_safetensors(std::span<const std::byte> file) {
  auto h = edgellm::io::parse_safetensors_header(file, "fuzz.safetensors");
  if (!h) {
    EDGELLM_FUZZ_CHECK(h.error().message.find("fuzz.safetensors") != std::string::npos);
    return;
  }
  // Accepted: the tensors tile [8 + N, file end) in order, and each one is found by name.
  std::size_t pos = h->data_offset();
  for (const auto& t : h->tensors()) {
    EDGELLM_FUZZ_CHECK(t.offset == pos);
    EDGELLM_FUZZ_CHECK(t.nbytes <= file.size() - t.offset);
    EDGELLM_FUZZ_CHECK(h->find(t.name) == &t);
    const std::size_t bits = edgellm::io::dtype_bits(t.type);
    EDGELLM_FUZZ_CHECK(t.numel() * bits == t.nbytes * 8);
    pos = t.offset + t.nbytes;
    // Touch the first and last byte so ASan sees any out-of-bounds range.
    if (t.nbytes != 0) {
      volatile std::byte first = file[t.offset];
      volatile std::byte last = file[t.offset + t.nbytes - 1];
      (void)first;
      (void)last;
    }
  }
  EDGELLM_FUZZ_CHECK(pos == file.size());
  EDGELLM_FUZZ_CHECK(h->data_offset() + h->data_size() == file.size());
}

void check_json(std::string_view text) {
  auto v = edgellm::io::json::parse(text, "fuzz.json");
  if (!v) {
    EDGELLM_FUZZ_CHECK(v.error().message.find("fuzz.json: ") != std::string::npos);
    return;
  }
  const std::string once = edgellm::io::json::dump(*v);
  auto again = edgellm::io::json::parse(once, "fuzz-dump.json");
  EDGELLM_FUZZ_CHECK(again.has_value());
  EDGELLM_FUZZ_CHECK(edgellm::io::json::dump(*again) == once);
  (void)edgellm::io::json::describe(*v);

  // config.json / quantization_config readers on whatever object this is.
  auto cfg = edgellm::model::parse_model_config(*v, "config.json", v->find("generation"),
                                                "generation_config.json");
  if (cfg && cfg->head_dim <= 4096) {
    const auto inv = edgellm::model::rope_inv_freq(*cfg);
    EDGELLM_FUZZ_CHECK(inv.size() == cfg->head_dim / 2);
  }
  (void)edgellm::model::parse_awq_config(*v, "config.json", false);
  (void)edgellm::model::parse_awq_config(*v, "quant_config.json", true);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  check_safetensors(bytes);
  check_json(std::string_view(reinterpret_cast<const char*>(data), size));
  // Also read the bytes after the 8-byte length as JSON: the header of a seed file.
  if (size > 8) check_json(std::string_view(reinterpret_cast<const char*>(data) + 8, size - 8));
  return 0;
}
