// SPDX-License-Identifier: Apache-2.0
// A reply the app can parse: generation constrained to a JSON object (what OpenAI's
// response_format {"type": "json_object"} asks). Every token that would break the JSON is masked
// before sampling, and the end of text is allowed only once the object is whole.
//
//   edgellm-example-json-output [DIR] [PROMPT]     (DIR defaults to the bundled KJV model)
#include <edgellm/constrain/json_constraint.hpp>
#include <edgellm/io/json.hpp>
#include <edgellm/session.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "models/kjv-target-awq";
  const std::string prompt = argc > 2 ? argv[2] : "The record of Moses, as JSON:";

  auto engine = edgellm::Engine::load(dir);
  if (!engine) return std::fprintf(stderr, "%s\n", engine.error().message.c_str()), 1;
  auto session = edgellm::Session::create(*engine);
  if (!session) return std::fprintf(stderr, "%s\n", session.error().message.c_str()), 1;

  // The vocabulary as bytes, built once per model and shared by every constrained generation.
  auto trie = edgellm::constrain::TokenTrie::build(*(*engine)->tokenizer(),
                                                   (*engine)->config().vocab_size);
  if (!trie) return std::fprintf(stderr, "%s\n", trie.error().message.c_str()), 1;
  auto ids = (*engine)->tokenizer()->encode(prompt);
  if (!ids) return std::fprintf(stderr, "%s\n", ids.error().message.c_str()), 1;
  const std::vector<std::int32_t> stops((*engine)->eos_ids().begin(), (*engine)->eos_ids().end());
  auto json_only = edgellm::constrain::JsonConstraint::create(*trie, stops, ids->size());
  if (!json_only) return std::fprintf(stderr, "%s\n", json_only.error().message.c_str()), 1;

  edgellm::GenerateOptions options;
  options.max_new_tokens = 200;
  options.logits_processor = json_only->get();  // the call's only: later calls are free again
  std::string reply;
  auto out = session->generate(std::span<const std::int32_t>(*ids), options,
                               [&](std::string_view text, std::int32_t) {
                                 reply += text;
                                 return true;
                               });
  if (!out) return std::fprintf(stderr, "%s\n", out.error().message.c_str()), 1;
  std::printf("%s\n", reply.c_str());
  if (!(*json_only)->complete()) {  // the token budget ran out first: a prefix of an object
    std::fprintf(stderr, "the object was not closed within %zu tokens\n", options.max_new_tokens);
    return 0;
  }
  auto doc = edgellm::io::json::parse(reply, "reply");
  if (!doc) return std::fprintf(stderr, "%s\n", doc.error().message.c_str()), 1;
  std::fprintf(stderr, "a JSON object with %zu member(s)\n", doc->size());
  return 0;
}
