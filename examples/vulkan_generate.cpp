// SPDX-License-Identifier: Apache-2.0
// Text generation on the GPU, with the CPU as the fallback an app needs: load a checkpoint once,
// open a Session on a Vulkan device (weights, activations and KV cache in device memory, one
// submission per token); where there is no loader, no device or not enough device memory, say
// why and open the same Session on the CPU instead.
//
//   edgellm-example-vulkan-generate [DIR] [PROMPT]   (DIR defaults to the bundled KJV model)
#include <edgellm/session.hpp>
#include <edgellm/session/vulkan.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "models/kjv-target-awq";
  const std::string prompt = argc > 2 ? argv[2] : "And God said";

  // The device runs an fp16 lm_head: load it as the checkpoint stores it (the Engine's default).
  auto engine = edgellm::Engine::load(dir);
  if (!engine) return std::fprintf(stderr, "%s\n", engine.error().message.c_str()), 1;

  edgellm::SessionOptions options;
  options.kv_type = edgellm::cache::KvType::f16;  // the device caches hold int8 or f16
  auto session = edgellm::create_vulkan_session(*engine, options);
  if (!session) {
    std::fprintf(stderr, "Vulkan: %s\nfalling back to the CPU\n",
                 session.error().message.c_str());
    session = edgellm::Session::create(*engine, options);
    if (!session) return std::fprintf(stderr, "%s\n", session.error().message.c_str()), 1;
  }
  std::fprintf(stderr, "running on: %s\n", session->backend_name());

  edgellm::GenerateOptions generate;
  generate.max_new_tokens = 48;
  std::printf("%s", prompt.c_str());
  auto out = session->generate(prompt, generate, [](std::string_view text, std::int32_t) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  if (!out) return std::fprintf(stderr, "\n%s\n", out.error().message.c_str()), 1;
  std::printf("\n");
  std::fprintf(stderr, "%zu tokens, first after %.1f ms, then %.1f tok/s\n", out->stats.new_tokens,
               out->stats.time_to_first_token_s * 1e3, out->stats.decode_tok_s());
  return 0;
}
