// SPDX-License-Identifier: Apache-2.0
// A reply the app can parse: generation constrained by a JSON Schema (what OpenAI's
// response_format {"type": "json_schema"} asks). Every token that would leave the schema's
// language is masked before sampling, the end of text is allowed only once the document is
// whole, and with the token budget known the document is closed within it.
//
//   edgellm-example-json-output [DIR] [PROMPT]     (DIR defaults to the bundled KJV model)
#include <edgellm/constrain/constraint.hpp>
#include <edgellm/io/json.hpp>
#include <edgellm/session.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "models/kjv-target-awq";
  const std::string prompt = argc > 2 ? argv[2] : "The record of Moses, as JSON:";

  // Compiled once (before the model loads: a bad schema fails at once) and shareable by any
  // number of generations; kept masks make later generations cheaper.
  auto schema = edgellm::constrain::Constraint::compile({
      .kind = edgellm::constrain::ConstraintKind::json_schema,
      .source = R"({"type": "object",
                    "properties": {"name": {"type": "string", "maxLength": 20},
                                   "age": {"type": "integer", "minimum": 0, "maximum": 999},
                                   "sons": {"type": "array", "items": {"type": "string"},
                                            "maxItems": 3}},
                    "required": ["name", "age"], "additionalProperties": false})",
  });
  if (!schema) return std::fprintf(stderr, "%s\n", schema.error().message.c_str()), 1;

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

  edgellm::GenerateOptions options;
  options.max_new_tokens = 64;
  const std::vector<std::int32_t> stops((*engine)->eos_ids().begin(), (*engine)->eos_ids().end());
  auto constraint = (*schema)->start(*trie, stops, ids->size(), options.max_new_tokens);
  if (!constraint) return std::fprintf(stderr, "%s\n", constraint.error().message.c_str()), 1;
  options.logits_processor = constraint->get();  // the call's only: later calls are free again
  std::string reply;
  auto out = session->generate(std::span<const std::int32_t>(*ids), options,
                               [&](std::string_view text, std::int32_t) {
                                 reply += text;
                                 return true;
                               });
  if (!out) return std::fprintf(stderr, "%s\n", out.error().message.c_str()), 1;
  std::printf("%s\n", reply.c_str());
  if (out->stats.stop != edgellm::decode::StopReason::eos)  // e.g. a full context
    return std::fprintf(stderr, "the document was cut short\n"), 1;
  auto doc = edgellm::io::json::parse(reply, "reply");
  if (!doc) return std::fprintf(stderr, "%s\n", doc.error().message.c_str()), 1;
  std::fprintf(stderr, "a JSON object with %zu member(s)%s\n", doc->size(),
               (*constraint)->forced() ? " (closed early: the token budget ran short)" : "");
  return 0;
}
