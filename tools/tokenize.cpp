// SPDX-License-Identifier: Apache-2.0
// edgellm-tokenize: encode text to token ids, or decode ids to text, with a tokenizer.json; or
// show the prompt a checkpoint's chat template makes of a conversation.
#include "flags.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/io/mapped_file.hpp"
#include "edgellm/model/chat_template.hpp"
#include "edgellm/model/tokenizer.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* kProg = "edgellm-tokenize";

constexpr const char* kHead =
    R"(usage: edgellm-tokenize --tokenizer PATH (--text STR | --corpus FILE | --decode IDS) [options]
       edgellm-tokenize --tokenizer DIR --chat MESSAGES.json [--add-generation-prompt]

Encodes text with a Hugging Face tokenizer.json (BPE: Qwen2, Llama-2/3, GPT-2 style) and prints
the token ids as JSON, or decodes ids back to text.

)";

constexpr const char* kTail =
    "Exit status: 0 on success, 1 when loading, encoding or decoding fails, 2 on a usage error.\n";

int usage_error(std::string_view why) { return edgellm::cli::usage_error(kProg, why); }

std::string ids_json(const std::vector<std::int32_t>& ids) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i != 0) out += ", ";
    out += std::to_string(ids[i]);
  }
  out += ']';
  return out;
}

/// "1,2,3", "1 2 3" or "[1, 2, 3]" -> ids; nullopt (with a message) on anything else.
std::optional<std::vector<std::int32_t>> parse_ids(std::string_view s, std::string& why) {
  std::vector<std::int32_t> ids;
  std::size_t i = 0;
  const auto skip = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',' || s[i] == '\t' || s[i] == '\n' ||
                            s[i] == '[' || s[i] == ']')) {
      ++i;
    }
  };
  skip();
  while (i < s.size()) {
    std::int32_t v = 0;
    const auto r = std::from_chars(s.data() + i, s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr == s.data() + i) {
      why = fmt::format("expected a token id at \"{}\"", s.substr(i, 20));
      return std::nullopt;
    }
    ids.push_back(v);
    i = static_cast<std::size_t>(r.ptr - s.data());
    if (i < s.size() && s[i] != ' ' && s[i] != ',' && s[i] != '\t' && s[i] != '\n' && s[i] != ']') {
      why = fmt::format("unexpected character '{}' after id {}", s[i], v);
      return std::nullopt;
    }
    skip();
  }
  return ids;
}

// stdout through stdio (fmt::print would throw on a failed write); errors are found at the end
// (edgellm::cli::finish_stdout).
void write_stdout(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

/// --chat: the rendered prompt as a JSON string. The template comes from tokenizer_config.json
/// beside the tokenizer; without one, ChatML (what edgellm-generate --chat falls back to).
int render_chat(const std::string& tokenizer_path, const std::string& messages_path, bool add_generation_prompt) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string dir =
      fs::is_directory(tokenizer_path, ec) ? tokenizer_path : fs::path(tokenizer_path).parent_path().string();
  const auto fail = [](const std::string& msg) {
    fmt::print(stderr, "edgellm-tokenize: {}\n", msg);
    return 1;
  };
  auto text = edgellm::io::read_text_file(messages_path, edgellm::io::kMaxConfigJsonBytes);
  if (!text) return fail(text.error().message);
  auto messages = edgellm::io::json::parse(*text, messages_path);
  if (!messages) return fail(messages.error().message);
  auto tmpl = edgellm::model::ChatTemplate::find(dir.empty() ? std::string(".") : dir);
  if (!tmpl) return fail(tmpl.error().message);
  edgellm::model::ChatRenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  std::string prompt;
  if (*tmpl) {
    auto out = (*tmpl)->render_json(*messages, options);
    if (!out) return fail(out.error().message);
    prompt = std::move(*out);
  } else {
    fmt::print(stderr, "edgellm-tokenize: warning: no chat_template in {}/tokenizer_config.json; using ChatML\n",
               dir.empty() ? "." : dir);
    auto chatml = edgellm::model::ChatTemplate::chatml();
    if (!chatml) return fail(chatml.error().message);
    auto out = chatml->render_json(*messages, options);
    if (!out) return fail(out.error().message);
    prompt = std::move(*out);
  }
  write_stdout(edgellm::io::json::escape(prompt) + "\n");
  return 0;
}

struct Args {
  std::optional<std::string> tokenizer_path, text, corpus_path, text_file, chat_path;
  std::optional<std::vector<std::int32_t>> decode_ids;
  bool no_special = false, add_generation_prompt = false;
};

// Parses argv into `a`: nullopt to go on, else the exit status (--help, --version, a usage error).
std::optional<int> parse_args(int argc, char** argv, Args& a) {
  using edgellm::cli::flag;
  const std::vector<flag> flags{
      flag::string({"-m", "--tokenizer", "--model"}, "PATH",
                   "a tokenizer.json file, or a directory that contains one", a.tokenizer_path),
      flag::string({"-p", "--text", "--prompt"}, "STR", "encode STR; prints a JSON list of ids",
                   a.text),
      flag::string({"-f", "--file"}, "FILE",
                   "encode the text of FILE (`-` = stdin); prints a JSON list of ids", a.text_file),
      flag::string({"--corpus"}, "FILE",
                   "encode every string of FILE, a JSON list of strings; prints a JSON list\n"
                   "of lists, one line per string",
                   a.corpus_path),
      flag::custom({"--decode"}, "IDS",
                   "decode IDS, ids separated by commas and/or spaces (\"1,2,3\", \"[1, 2, 3]\");\n"
                   "prints the text",
                   [&a](std::string_view v) {
                     std::string why;
                     a.decode_ids = parse_ids(v, why);
                     return why;
                   }),
      flag::string(
          {"--chat"}, "FILE",
          "render FILE, a JSON list of messages [{\"role\": ..., \"content\": ...}, ...],\n"
          "with the chat_template of DIR/tokenizer_config.json (ChatML, with a\n"
          "warning, when there is none); prints the prompt as one JSON string",
          a.chat_path),
      flag::boolean({"--add-generation-prompt"},
                    "--chat: end with the header of the assistant's turn", a.add_generation_prompt),
      flag::boolean({"--no-special"},
                    "encoding: add no BOS/EOS template tokens and treat special-token text\n"
                    "such as <|im_start|> as plain text; decoding: drop special tokens",
                    a.no_special),
  };
  if (const auto rc =
          edgellm::tools::parse_command_line(kProg, argc, argv, {kHead, {{"", &flags}}, kTail, 20}))
    return rc;  // --help, --version or a usage error
  if (!a.tokenizer_path) return usage_error("--tokenizer is required");
  const int modes =
      static_cast<int>(a.text.has_value()) + static_cast<int>(a.corpus_path.has_value()) +
      static_cast<int>(a.decode_ids.has_value()) + static_cast<int>(a.text_file.has_value()) +
      static_cast<int>(a.chat_path.has_value());
  if (modes != 1)
    return usage_error("give exactly one of --text, --file, --corpus, --decode and --chat");
  if (a.add_generation_prompt && !a.chat_path)
    return usage_error("--add-generation-prompt needs --chat");
  return std::nullopt;
}

int run(Args& a) {
  if (a.chat_path) return render_chat(*a.tokenizer_path, *a.chat_path, a.add_generation_prompt);
  if (a.text_file) {
    auto read = edgellm::cli::read_prompt_file(*a.text_file);
    if (!read) {
      fmt::print(stderr, "edgellm-tokenize: --file: {}\n", read.error().message);
      return 1;
    }
    a.text = std::move(*read);
  }

  auto tokenizer = edgellm::model::Tokenizer::load(*a.tokenizer_path);
  if (!tokenizer) {
    fmt::print(stderr, "edgellm-tokenize: {}\n", tokenizer.error().message);
    return 1;
  }
  const edgellm::model::EncodeOptions options{!a.no_special, !a.no_special};

  if (a.decode_ids) {
    for (const std::int32_t id : *a.decode_ids) {
      if (!tokenizer->id_to_token(id)) {
        fmt::print(stderr, "edgellm-tokenize: warning: id {} is not in the vocabulary (skipped)\n",
                   id);
      }
    }
    write_stdout(tokenizer->decode(*a.decode_ids, a.no_special) + "\n");
    return 0;
  }

  if (a.text) {
    auto ids = tokenizer->encode(*a.text, options);
    if (!ids) {
      fmt::print(stderr, "edgellm-tokenize: {}\n", ids.error().message);
      return 1;
    }
    write_stdout(ids_json(*ids) + "\n");
    return 0;
  }

  auto corpus_text = edgellm::io::read_text_file(*a.corpus_path);
  if (!corpus_text) {
    fmt::print(stderr, "edgellm-tokenize: {}\n", corpus_text.error().message);
    return 1;
  }
  auto corpus = edgellm::io::json::parse(*corpus_text, *a.corpus_path);
  if (!corpus) {
    fmt::print(stderr, "edgellm-tokenize: {}\n", corpus.error().message);
    return 1;
  }
  const edgellm::io::json::Array* list = corpus->get_array();
  if (list == nullptr) {
    fmt::print(stderr, "edgellm-tokenize: {}: expected a JSON list of strings, got {}\n",
               *a.corpus_path, edgellm::io::json::describe(*corpus));
    return 1;
  }
  std::string out = "[\n";
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string* s = (*list)[i].get_string();
    if (s == nullptr) {
      fmt::print(stderr, "edgellm-tokenize: {}: element {} is {}, not a string\n", *a.corpus_path,
                 i, edgellm::io::json::describe((*list)[i]));
      return 1;
    }
    auto ids = tokenizer->encode(*s, options);
    if (!ids) {
      fmt::print(stderr, "edgellm-tokenize: {}: element {}: {}\n", *a.corpus_path, i,
                 ids.error().message);
      return 1;
    }
    out += ids_json(*ids);
    out += i + 1 < list->size() ? ",\n" : "\n";
  }
  out += "]\n";
  write_stdout(out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const auto rc = parse_args(argc, argv, a)) return *rc;
  // Output lost on the way to stdout (closed, a full disk) is a failure, not a success.
  return edgellm::cli::finish_stdout(kProg, run(a));
}
