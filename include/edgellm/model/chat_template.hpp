// SPDX-License-Identifier: Apache-2.0
// A checkpoint's own chat template (the `chat_template` of tokenizer_config.json) rendered as
// Hugging Face transformers renders it: Jinja with trim_blocks and lstrip_blocks, the variables
// messages, add_generation_prompt, bos_token and eos_token, and the globals raise_exception and
// strftime_now. The engine under model/chat_template/ implements the subset of Jinja that the
// templates of Qwen2/2.5/3, Llama 2/3/3.x, Mistral, Gemma 3, DeepSeek V3 and Phi-3 use (see
// filters.hpp and parser.hpp for the list); anything else is errc::unsupported naming the
// construct and its line:column, checked when the template is parsed where possible.
#pragma once

#include "edgellm/detail/guard_exceptions.hpp"
#include "edgellm/io/json.hpp"
#include "edgellm/model/chat_message.hpp"
#include "edgellm/model/chat_template/evaluator.hpp"
#include "edgellm/model/chat_template/lexer.hpp"
#include "edgellm/model/chat_template/parser.hpp"
#include "edgellm/model/chat_template/value.hpp"
#include "edgellm/model/config_json.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace edgellm::model {

/// ChatML, Qwen2's format and the fallback for checkpoints without a chat_template (see
/// ChatTemplate::chatml): "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then, with
/// add_generation_prompt, "<|im_start|>assistant\n". Encode the rendering with parse_special so
/// the markers become their special tokens; generation stops at <|im_end|>.
inline constexpr std::string_view kChatMLTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// What ChatTemplate::render passes to the template besides the messages.
struct ChatRenderOptions {
  /// Ends the prompt with the header of an assistant turn (e.g. "<|im_start|>assistant\n").
  bool add_generation_prompt = true;
  /// Override the template's bos_token / eos_token (from tokenizer_config.json).
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  /// Further template variables, e.g. {"enable_thinking", false} for Qwen3, {"date_string", ...}
  /// for Llama 3.x. A name given here replaces the standard one.
  std::vector<std::pair<std::string, io::json::Value>> variables;
  /// The time strftime_now() formats (local time); empty: the current time.
  std::optional<std::time_t> now;
  /// Longest rendering, in bytes; longer is errc::capacity_exceeded.
  std::size_t max_output_bytes = std::size_t{16} << 20;
  /// Most loop iterations (all loops together, and the longest range()); more is
  /// errc::capacity_exceeded, so a hostile template cannot spin.
  std::size_t max_loop_iterations = std::size_t{1} << 20;
};

class ChatTemplate {
 public:
  /// Parses Jinja `source`; `name` names it in messages. Unsupported constructs are
  /// errc::unsupported and malformed templates errc::format_error, both with line:column.
  static result<ChatTemplate> parse(std::string_view source, std::string_view name = "chat_template");

  /// The chat template of a tokenizer_config.json, given the file or its directory: a string,
  /// or the list form [{"name": "default", "template": ...}, ...] (the "default" entry). Also
  /// reads bos_token and eos_token (a string or an {"content": ...} object). Errors when the
  /// file is missing, malformed or has no template; see find() to tell those apart.
  static result<ChatTemplate> load(const std::string& dir_or_tokenizer_config_json);

  /// As load(), but an absent tokenizer_config.json or one without a chat_template is an empty
  /// optional rather than an error (the caller falls back to a default format).
  static result<std::optional<ChatTemplate>> find(const std::string& dir_or_tokenizer_config_json);

  /// kChatMLTemplate, parsed: what a checkpoint without a chat_template is rendered with.
  static result<ChatTemplate> chatml() { return parse(kChatMLTemplate, "ChatML"); }

  /// Renders `messages` (each a dict with "role" and "content").
  result<std::string> render(std::span<const ChatMessage> messages, const ChatRenderOptions& options = {}) const;

  /// Renders messages given as a JSON array of objects, which may carry more fields than role
  /// and content (tool_calls, reasoning_content, ...).
  result<std::string> render_json(const io::json::Value& messages, const ChatRenderOptions& options = {}) const;

  const std::string& source() const noexcept { return *source_; }
  const std::string& name() const noexcept { return name_; }
  /// bos_token / eos_token from tokenizer_config.json, when it named them.
  const std::optional<std::string>& bos_token() const noexcept { return bos_; }
  const std::optional<std::string>& eos_token() const noexcept { return eos_; }

 private:
  result<std::string> render_value(detail::jinja::Value messages, const ChatRenderOptions& options) const;

  // Shared so that a ChatTemplate copies cheaply; the tree keeps byte offsets into *source_.
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const detail::jinja::Body> body_;
  std::string name_;
  std::optional<std::string> bos_;
  std::optional<std::string> eos_;
};

inline result<ChatTemplate> ChatTemplate::parse(std::string_view source, std::string_view name) {
  return edgellm::detail::guard_exceptions("ChatTemplate::parse", [&]() -> result<ChatTemplate> {
    ChatTemplate t;
    t.source_ = std::make_shared<const std::string>(source);
    t.name_ = std::string(name);
    auto tokens = detail::jinja::tokenize(*t.source_, t.name_);
    if (!tokens) return tokens.error();
    auto body = detail::jinja::Parser(std::move(*tokens), *t.source_, t.name_).run();
    if (!body) return body.error();
    t.body_ = std::make_shared<const detail::jinja::Body>(std::move(*body));
    return t;
  });
}

inline result<std::optional<ChatTemplate>> ChatTemplate::find(const std::string& path) {
  return edgellm::detail::guard_exceptions("ChatTemplate::load", [&]() -> result<std::optional<ChatTemplate>> {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string file = path;
    if (fs::is_directory(path, ec)) {
      file = (fs::path(path) / "tokenizer_config.json").string();
      if (!fs::exists(file, ec)) return std::optional<ChatTemplate>{};
    }
    auto doc = detail::read_json_file(file);
    if (!doc) return doc.error();
    const io::json::Object* root = doc->get_object();
    if (root == nullptr)
      return make_error(errc::format_error, "ChatTemplate::load", file + ": the top level is not an object");
    const io::json::Value* tv = root->find("chat_template");
    if (tv == nullptr || tv->is_null()) return std::optional<ChatTemplate>{};
    const std::string* source = tv->get_string();
    if (const io::json::Array* list = tv->get_array()) {
      for (const io::json::Value& entry : *list) {
        const io::json::Object* o = entry.get_object();
        const io::json::Value* n = o ? o->find("name") : nullptr;
        const io::json::Value* t = o ? o->find("template") : nullptr;
        if (n && t && n->get_string() && *n->get_string() == "default") source = t->get_string();
      }
      if (source == nullptr)
        return make_error(errc::format_error, "ChatTemplate::load",
                          file + ": chat_template is a list without a \"default\" entry holding a string template");
    }
    if (source == nullptr)
      return make_error(errc::format_error, "ChatTemplate::load",
                        file + ": chat_template is " + io::json::describe(*tv) + ", not a string or a list");
    auto t = parse(*source, file);
    if (!t) return t.error();
    const auto token = [&](std::string_view key) -> std::optional<std::string> {
      const io::json::Value* v = root->find(key);
      if (v == nullptr) return std::nullopt;
      if (const std::string* s = v->get_string()) return *s;
      if (const io::json::Object* o = v->get_object())
        if (const io::json::Value* c = o->find("content"))
          if (const std::string* s = c->get_string()) return *s;
      return std::nullopt;
    };
    t->bos_ = token("bos_token");
    t->eos_ = token("eos_token");
    return std::optional<ChatTemplate>(std::move(*t));
  });
}

inline result<ChatTemplate> ChatTemplate::load(const std::string& path) {
  auto t = find(path);
  if (!t) return t.error();
  if (!*t)
    return make_error(errc::io_error, "ChatTemplate::load",
                      path + ": no tokenizer_config.json with a chat_template there");
  return std::move(**t);
}

inline result<std::string> ChatTemplate::render(std::span<const ChatMessage> messages,
                                                const ChatRenderOptions& options) const {
  return edgellm::detail::guard_exceptions("ChatTemplate::render", [&]() -> result<std::string> {
    detail::jinja::List list;
    for (const ChatMessage& m : messages) {
      detail::jinja::Dict d;
      d.set("role", detail::jinja::Value::string(m.role));
      d.set("content", detail::jinja::Value::string(m.content));
      list.push_back(detail::jinja::Value::dict(std::move(d)));
    }
    return render_value(detail::jinja::Value::list(std::move(list)), options);
  });
}

inline result<std::string> ChatTemplate::render_json(const io::json::Value& messages,
                                                     const ChatRenderOptions& options) const {
  return edgellm::detail::guard_exceptions("ChatTemplate::render", [&]() -> result<std::string> {
    if (!messages.is_array())
      return make_error(errc::invalid_argument, "ChatTemplate::render",
                        "messages: expected an array, got " + io::json::describe(messages));
    return render_value(detail::jinja::from_json(messages), options);
  });
}

inline result<std::string> ChatTemplate::render_value(detail::jinja::Value messages,
                                                      const ChatRenderOptions& options) const {
  using detail::jinja::Value;
  if (!body_) return make_error(errc::invalid_argument, "ChatTemplate::render", "an empty ChatTemplate");
  detail::jinja::Dict globals;
  globals.set("messages", std::move(messages));
  globals.set("add_generation_prompt", Value::boolean(options.add_generation_prompt));
  if (auto bos = options.bos_token ? options.bos_token : bos_) globals.set("bos_token", Value::string(*bos));
  if (auto eos = options.eos_token ? options.eos_token : eos_) globals.set("eos_token", Value::string(*eos));
  for (const auto& [k, v] : options.variables) globals.set(k, detail::jinja::from_json(v));
  detail::jinja::EvalLimits limits;
  limits.max_output_bytes = options.max_output_bytes;
  limits.max_iterations = options.max_loop_iterations;
  return detail::jinja::Evaluator(*source_, name_, limits, options.now).render(*body_, std::move(globals));
}

}  // namespace edgellm::model
