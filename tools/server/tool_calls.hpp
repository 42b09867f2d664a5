// SPDX-License-Identifier: Apache-2.0
// edgellm-server's side of OpenAI tool calling: the request's tools, tool_choice and
// parallel_tool_calls read into a constrain::ToolCallSpec; a streamed reply's free text sent as
// it comes while what may open a call is held back; and the calls of a reply written as
// OpenAI's tool_calls (whole in a reply, one delta per call in a stream).
//
// The constraint and the parsing are the library's (constrain/tool_calls.hpp): a reply is
// generated under a lazy ToolCallConstraint, then parse_tool_calls() splits it into text and calls.
#pragma once

#include "api_error.hpp"

#include <edgellm/constrain/tool_calls.hpp>
#include <edgellm/io/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::server {

/// A request's tools: what the template renders, and how the reply is constrained.
struct ToolRequest {
  json::Value tools;                   ///< the request's tools array, as given
  std::vector<constrain::Tool> list;   ///< parsed
  constrain::ToolCallSpec spec;        ///< format, tool_choice, parallel_tool_calls
  /// The compile cache's key: the spec and the tools.
  std::string key() const {
    return fmt::format("{}|{}|{}|{}\n{}", constrain::to_string(spec.format),
                       static_cast<int>(spec.choice.mode), spec.choice.name, spec.parallel,
                       json::dump(tools));
  }
};

/// Reads tools, tool_choice and parallel_tool_calls from a chat request into `out`; nothing when
/// the request has no tools (an empty array or null counts as none). `format`: the call format
/// of the model's chat template, none when it shows no tool calls (then only tool_choice "none"
/// is accepted with tools: the template renders them, nothing is parsed).
inline std::optional<ApiError> parse_tool_request(const json::Value& body,
                                                  std::optional<constrain::ToolCallFormat> format,
                                                  std::optional<ToolRequest>& out) {
  out.reset();
  const json::Value* tools = body.find("tools");
  const json::Value* choice = body.find("tool_choice");
  const json::Value* parallel = body.find("parallel_tool_calls");
  const bool none_given = tools == nullptr || tools->is_null() || (tools->is_array() && tools->size() == 0);
  if (none_given) {
    // tool_choice without tools: "none" and "auto" mean nothing; a call asked for cannot be made.
    if (choice != nullptr && !choice->is_null() &&
        !(choice->is_string() && (choice->as_string() == "none" || choice->as_string() == "auto")))
      return bad_param("tool_choice", "tool_choice: a call is asked for but the request has no tools");
    return std::nullopt;
  }
  auto list = constrain::parse_tools(*tools);
  if (!list) return bad_param("tools", list.error().message);
  ToolRequest r;
  r.tools = *tools;
  r.list = std::move(*list);
  if (choice != nullptr && !choice->is_null()) {
    if (choice->is_string()) {
      const std::string& s = choice->as_string();
      if (s != "auto" && s != "none" && s != "required")
        return bad_param("tool_choice", "tool_choice: expected \"auto\", \"none\", \"required\" or "
                                        "{\"type\": \"function\", \"function\": {\"name\": ...}}");
      r.spec.choice = constrain::parse_tool_choice(s);
    } else {
      const json::Value* type = choice->find("type");
      const json::Value* fn = choice->find("function");
      const json::Value* name = fn != nullptr ? fn->find("name") : nullptr;
      if (!choice->is_object() || type == nullptr || !type->is_string() ||
          type->as_string() != "function" || name == nullptr || !name->is_string())
        return bad_param("tool_choice", "tool_choice: expected \"auto\", \"none\", \"required\" or "
                                        "{\"type\": \"function\", \"function\": {\"name\": ...}}");
      const auto known = std::find_if(r.list.begin(), r.list.end(), [&](const constrain::Tool& t) {
        return t.name == name->as_string();
      });
      if (known == r.list.end())
        return bad_param("tool_choice", "tool_choice.function.name: no tool named \"" +
                                            name->as_string() + "\" in tools");
      r.spec.choice = {constrain::ToolChoice::Mode::function, name->as_string()};
    }
  }
  if (parallel != nullptr && !parallel->is_null()) {
    if (!parallel->is_bool()) return bad_param("parallel_tool_calls", "parallel_tool_calls: expected true or false");
    r.spec.parallel = parallel->as_bool();
  }
  if (!format && r.spec.choice.mode != constrain::ToolChoice::Mode::none)
    return bad_param("tools", "tools: this model's chat template shows no tool calls (Qwen "
                              "<tool_call>, Llama 3.1/3.2 JSON, Mistral [TOOL_CALLS]); only "
                              "tool_choice \"none\" is possible");
  if (format) r.spec.format = *format;
  out = std::move(r);
  return std::nullopt;
}

/// A streamed reply's text, passed on as it comes except what may open a call: a tail that is a
/// prefix of the trigger ("<tool_call>", "[TOOL_CALLS]") waits for the next piece; from the
/// trigger on nothing more is text. A Llama 3 call is the whole reply: its text waits until its
/// first non-blank bytes show it is not a call ('{' or "<|python_tag|>").
class CallTextStream {
 public:
  explicit CallTextStream(constrain::ToolCallFormat format)
      : format_(format), trigger_(constrain::ToolCallGrammar::format_trigger(format)) {}

  /// Takes the next piece of the reply; returns the text now safe to send.
  std::string take(std::string_view piece) {
    reply_.append(piece);
    if (call_) return {};
    std::size_t safe = reply_.size();
    if (format_ == constrain::ToolCallFormat::llama3) {
      if (!free_) {
        const std::size_t first = reply_.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) return {};
        const std::string_view rest = std::string_view(reply_).substr(first);
        for (const std::string_view opener : {std::string_view("{"), std::string_view("<|python_tag|>")}) {
          const std::size_t n = std::min(rest.size(), opener.size());
          if (rest.substr(0, n) == opener.substr(0, n)) {
            if (n == opener.size()) call_ = true;
            return {};
          }
        }
        free_ = true;
      }
    } else if (const std::size_t at = reply_.find(trigger_, sent_); at != std::string::npos) {
      call_ = true;
      safe = at;
    } else {
      // The longest tail that could still grow into the trigger waits.
      for (std::size_t k = std::min(trigger_.size() - 1, reply_.size() - sent_); k > 0; --k)
        if (std::string_view(reply_).substr(reply_.size() - k) == std::string_view(trigger_).substr(0, k)) {
          safe = reply_.size() - k;
          break;
        }
    }
    std::string out = reply_.substr(sent_, safe - sent_);
    sent_ = safe;
    return out;
  }

  /// At the end of the reply: what of `content` (the parsed text, or the whole reply when it
  /// held no call) was not sent yet. Nothing when the sent text is not its start (the parsed
  /// text trims the blank space around calls).
  std::string rest(std::string_view content) const {
    const std::string_view sent = std::string_view(reply_).substr(0, sent_);
    if (content.substr(0, sent.size()) != sent) return {};
    return std::string(content.substr(sent.size()));
  }

  const std::string& reply() const noexcept { return reply_; }

 private:
  constrain::ToolCallFormat format_;
  std::string trigger_;
  std::string reply_;
  std::size_t sent_ = 0;   // reply_[0, sent_) has been sent
  bool call_ = false;      // the trigger has come: the rest is calls
  bool free_ = false;      // llama3: the reply is text
};

/// OpenAI's tool_calls array: {"id", "type": "function", "function": {"name", "arguments"}} per
/// call (arguments as JSON text); with `indexed`, each with its "index" (a stream's deltas).
/// `ids`: the call ids, one per call.
inline json::Array tool_calls_json(const std::vector<constrain::ToolCall>& calls,
                                   const std::vector<std::string>& ids, bool indexed) {
  json::Array out;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    json::Object fn;
    fn.append("name", calls[i].name);
    fn.append("arguments", calls[i].arguments);
    json::Object c;
    if (indexed) c.append("index", i);
    c.append("id", ids[i]);
    c.append("type", "function");
    c.append("function", json::Value(std::move(fn)));
    out.emplace_back(std::move(c));
  }
  return out;
}

}  // namespace edgellm::server
