// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: chat templates (model::ChatTemplate::parse + render) on arbitrary Jinja
// source. Byte 0 picks the options (add_generation_prompt, which conversation); the rest is the
// template. A rejected template must get an error naming it; an accepted one must render the
// same text twice (no hidden state), within the output limit, or fail with a message. Tight
// limits keep each run short: a template that loops or builds huge values must hit a limit,
// not time out or exhaust memory.
// Seeds: the templates of tests/data/chat_templates (corpus/chat_template/).
#include "edgellm/model/chat_template.hpp"
#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view kName = "fuzz-chat_template";

const std::vector<edgellm::model::ChatMessage> kConversations[] = {
    {{"user", "Hello"}},
    {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}},
    {{"user", "a"}, {"user", "b"}, {"assistant", ""}, {"tool", "{\"x\": 1}"}},
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  const std::string_view source(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto tmpl = edgellm::model::ChatTemplate::parse(source, kName);
  if (!tmpl) {
    EDGELLM_FUZZ_CHECK(tmpl.error().message.find(kName) != std::string::npos);
    return 0;
  }
  edgellm::model::ChatRenderOptions options;
  options.add_generation_prompt = (flags & 1) != 0;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.now = 1733300000;  // strftime_now is deterministic
  options.max_output_bytes = std::size_t{64} << 10;
  options.max_loop_iterations = 4096;
  const auto& messages = kConversations[(flags >> 1) % std::size(kConversations)];
  auto first = tmpl->render(messages, options);
  auto second = tmpl->render(messages, options);
  EDGELLM_FUZZ_CHECK(first.has_value() == second.has_value());
  if (first) {
    EDGELLM_FUZZ_CHECK(*first == *second);
    EDGELLM_FUZZ_CHECK(first->size() <= options.max_output_bytes);
  } else {
    EDGELLM_FUZZ_CHECK(!first.error().message.empty());
    EDGELLM_FUZZ_CHECK(first.error().message == second.error().message);
  }
  return 0;
}
