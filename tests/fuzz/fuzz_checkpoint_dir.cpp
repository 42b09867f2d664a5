// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: a whole checkpoint directory loaded end to end (Engine::load: config.json,
// generation_config.json, safetensors, tokenizer.json; then a Session generates two tokens).
// The input is split into files by the framing of fuzz_support.hpp (unframe: records
// `u8 file, u32 LE length, bytes`; `file` indexes kFiles), written to an emptied tmpfs
// directory. Properties: a load error names the directory or a file in it; a loaded engine makes
// a session and generates without crashing (a generation error is allowed: the tokenizer's text
// may not fit the context).
// Seeds: tools/make_fuzz_seeds.py frames tests/data/model/llama-awq-gemm with a 289-token
// tokenizer.
#include "edgellm/session.hpp"
#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

constexpr const char* kFiles[] = {"config.json",
                                  "generation_config.json",
                                  "model.safetensors",
                                  "tokenizer.json",
                                  "model.safetensors.index.json",
                                  "model-00001-of-00002.safetensors",
                                  "model-00002-of-00002.safetensors"};
constexpr std::size_t kFileCount = sizeof kFiles / sizeof kFiles[0];

const edgellm::fuzz::ScratchDir& dir() {
  static const edgellm::fuzz::ScratchDir d("checkpoint-dir");
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)dir();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dir().clear();
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  for (const auto& f : edgellm::fuzz::unframe(in, kFileCount))
    edgellm::fuzz::write_file(dir().path() / kFiles[f.name], f.bytes);

  const std::string d = dir().path().string();
  auto engine = edgellm::Engine::load(d);
  if (!engine) {
    EDGELLM_FUZZ_CHECK(engine.error().message.find(d) != std::string::npos);
    return 0;
  }
  edgellm::SessionOptions so;
  so.context_size = 8;
  so.sampling = edgellm::decode::SamplingOptions::greedy();
  auto session = edgellm::Session::create(*engine, so);
  if (!session) return 0;  // e.g. a config whose context the KV cache cannot hold
  edgellm::GenerateOptions go;
  go.max_new_tokens = 2;
  (void)session->generate("Hi there", go);
  return 0;
}
