// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: model.safetensors.index.json (io::Checkpoint::open of a sharded directory).
// The input is the index; the directory (on tmpfs) holds the three shards, config.json and
// generation_config.json of tests/data/model/qwen2-fp16. A rejected index must get an error
// naming the index file; an accepted one must give a checkpoint whose every tensor is found, in
// bounds, in a shard it names. When it opens, the weights are loaded from it and one token is
// run (a missing or misplaced tensor must be an error, never a crash).
#include "edgellm/io/checkpoint.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"
#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace {

const edgellm::fuzz::ScratchDir& dir() {
  static const edgellm::fuzz::ScratchDir d("sharded-index");
  return d;
}

void setup() {
  namespace fs = std::filesystem;
  const fs::path src = edgellm::fuzz::data_path("model/qwen2-fp16");
  for (const char* f : {"config.json", "generation_config.json", "model-00001-of-00003.safetensors",
                        "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}) {
    std::error_code ec;
    fs::copy_file(src / f, dir().path() / f, fs::copy_options::overwrite_existing, ec);
    EDGELLM_FUZZ_CHECK(!ec);
  }
}

void check_checkpoint(const edgellm::io::Checkpoint& c) {
  const std::vector<std::string> names = c.names();
  EDGELLM_FUZZ_CHECK(names.size() == c.size());
  for (const std::string& n : names) {
    const auto* info = c.info(n);
    const auto* file = c.file_of(n);
    EDGELLM_FUZZ_CHECK(info != nullptr && file != nullptr && info->name == n);
    auto v = c.find(n);
    EDGELLM_FUZZ_CHECK(v.has_value());
    const auto bytes = v->bytes;
    if (!bytes.empty()) {
      volatile std::byte first = bytes.front(), last = bytes.back();  // ASan sees a bad range
      (void)first;
      (void)last;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setup();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string index = dir().file("model.safetensors.index.json");
  edgellm::fuzz::write_file(index, std::string_view(reinterpret_cast<const char*>(data), size));
  auto c = edgellm::io::Checkpoint::open(dir().path().string());
  if (!c) {
    EDGELLM_FUZZ_CHECK(c.error().message.find("model.safetensors.index.json") !=
                       std::string::npos);
    return 0;
  }
  check_checkpoint(*c);

  auto w = edgellm::model::load_weights(dir().path().string(), {});
  if (!w) return 0;
  auto t = edgellm::model::Transformer<>::create(*w, {.context_size = 4});
  EDGELLM_FUZZ_CHECK(t.has_value());
  std::vector<float> logits((*w)->config.vocab_size);
  const std::int32_t token = 1;
  EDGELLM_FUZZ_CHECK(t->forward({&token, 1}, edgellm::model::LogitsMode::last, logits).has_value());
  return 0;
}
