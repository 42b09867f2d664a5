// SPDX-License-Identifier: Apache-2.0
// Text in, text out: load a checkpoint directory once, open a session, stream a continuation.
//
//   edgellm-example-generate-text [DIR] [PROMPT]     (DIR defaults to the bundled KJV model)
#include <edgellm/session.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "models/kjv-target-awq";
  const std::string prompt = argc > 2 ? argv[2] : "And God said";

  edgellm::EngineOptions load;
  load.threads = 2;  // the engine owns a pool of two threads for its sessions
  auto engine = edgellm::Engine::load(dir, load);  // weights, tokenizer.json, eos ids
  if (!engine) return std::fprintf(stderr, "%s\n", engine.error().message.c_str()), 1;

  auto session = edgellm::Session::create(*engine);  // its own KV cache and sampler
  if (!session) return std::fprintf(stderr, "%s\n", session.error().message.c_str()), 1;

  edgellm::GenerateOptions options;
  options.max_new_tokens = 64;
  std::printf("%s", prompt.c_str());
  auto out = session->generate(prompt, options, [](std::string_view text, std::int32_t) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;  // false stops generation here
  });
  if (!out) return std::fprintf(stderr, "\n%s\n", out.error().message.c_str()), 1;
  std::printf("\n");
  std::fprintf(stderr, "%zu tokens, first after %.1f ms, then %.1f tok/s\n", out->stats.new_tokens,
               out->stats.time_to_first_token_s * 1e3, out->stats.decode_tok_s());
  return 0;
}
