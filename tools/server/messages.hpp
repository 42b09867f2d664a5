// SPDX-License-Identifier: Apache-2.0
// A chat request's messages, checked and reduced to what chat templates read: the role, the
// content as text, an assistant's tool_calls (their arguments parsed back into JSON values, as
// Hugging Face's templates expect: `tool_call.arguments | tojson`), and a tool result's
// tool_call_id and name. Every refusal names the message and its field.
#pragma once

#include "api_error.hpp"

#include <edgellm/io/json.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace edgellm::server {

// content: a string, or [{"type": "text", "text": ...}, ...] joined; null or absent only where
// `may_be_empty` (an assistant turn that only calls tools).
inline std::optional<ApiError> message_text(const json::Value* c, const std::string& where,
                                            bool may_be_empty, std::string& out) {
  if (c != nullptr && c->is_string()) {
    out = c->as_string();
    return std::nullopt;
  }
  if (c != nullptr && c->is_array()) {
    for (const json::Value& part : c->as_array()) {
      const json::Value* type = part.find("type");
      const json::Value* text = part.find("text");
      if (type == nullptr || !type->is_string() || type->as_string() != "text" || text == nullptr ||
          !text->is_string())
        return bad_param(where + ".content", where + ".content: only parts {\"type\": \"text\", "
                                                     "\"text\": ...} are supported");
      out += text->as_string();
    }
    return std::nullopt;
  }
  if (may_be_empty && (c == nullptr || c->is_null())) return std::nullopt;
  return bad_param(where + ".content", where + ".content: expected a string or an array of text parts");
}

// An assistant's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}]
// with arguments a JSON text (OpenAI) or already a JSON object.
inline std::optional<ApiError> message_tool_calls(const json::Value& calls, const std::string& where,
                                                  json::Array& out) {
  if (!calls.is_array() || calls.size() == 0)
    return bad_param(where, where + ": expected a non-empty array of calls");
  for (std::size_t j = 0; j < calls.size(); ++j) {
    const json::Value& call = calls.as_array()[j];
    const std::string at = fmt::format("{}[{}]", where, j);
    const json::Value* id = call.find("id");
    const json::Value* type = call.find("type");
    const json::Value* fn = call.find("function");
    if (!call.is_object() || fn == nullptr || !fn->is_object())
      return bad_param(at, at + ": expected {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    if (type != nullptr && !(type->is_string() && type->as_string() == "function"))
      return bad_param(at + ".type", at + ".type: only \"function\" is supported");
    if (id != nullptr && !id->is_string()) return bad_param(at + ".id", at + ".id: expected a string");
    const json::Value* name = fn->find("name");
    if (name == nullptr || !name->is_string() || name->as_string().empty())
      return bad_param(at + ".function.name", at + ".function.name: expected a non-empty string");
    json::Value arguments = json::Object{};
    if (const json::Value* a = fn->find("arguments"); a != nullptr && !a->is_null()) {
      if (a->is_string()) {
        auto parsed = json::parse(a->as_string(), at + ".function.arguments", {.max_depth = 64});
        if (!parsed)
          return bad_param(at + ".function.arguments",
                           at + ".function.arguments: not valid JSON: " + parsed.error().message);
        arguments = std::move(*parsed);
      } else if (a->is_object()) {
        arguments = *a;
      } else {
        return bad_param(at + ".function.arguments",
                         at + ".function.arguments: expected a JSON object as a string");
      }
    }
    json::Object f;
    f.append("name", name->as_string());
    f.append("arguments", std::move(arguments));
    json::Object c;
    if (id != nullptr) c.append("id", id->as_string());
    c.append("type", "function");
    c.append("function", json::Value(std::move(f)));
    out.emplace_back(std::move(c));
  }
  return std::nullopt;
}

/// `messages` (the request's field) as the array ChatTemplate::render_json takes, into `out`.
/// Roles: system (and OpenAI's developer, rendered as system), user, assistant (content, or
/// tool_calls, or both), tool (content, optional tool_call_id and name).
inline std::optional<ApiError> template_messages(const json::Value* messages,
                                                 std::size_t max_messages, json::Array& out) {
  if (messages == nullptr || !messages->is_array() || messages->size() == 0)
    return bad_param("messages", "messages: expected a non-empty array");
  if (messages->size() > max_messages)
    return bad_param("messages", fmt::format("messages: {} is more than this server's limit of {}",
                                             messages->size(), max_messages));
  out.clear();
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json::Value& m = messages->as_array()[i];
    const std::string where = fmt::format("messages[{}]", i);
    const json::Value* role = m.find("role");
    if (!m.is_object() || role == nullptr || !role->is_string())
      return bad_param(where, where + ": expected an object with a string \"role\"");
    const std::string& rl = role->as_string();
    if (rl != "system" && rl != "developer" && rl != "user" && rl != "assistant" && rl != "tool")
      return bad_param(where + ".role", where + ".role: '" + rl +
                                            "' is not supported (system, developer, user, "
                                            "assistant, tool)");
    json::Object msg;
    msg.append("role", rl == "developer" ? "system" : rl);
    const json::Value* calls = m.find("tool_calls");
    if (calls != nullptr && calls->is_null()) calls = nullptr;
    if (calls != nullptr && rl != "assistant")
      return bad_param(where + ".tool_calls", where + ".tool_calls: only an assistant message calls tools");
    std::string content;
    if (auto e = message_text(m.find("content"), where, calls != nullptr, content)) return e;
    msg.append("content", std::move(content));
    if (calls != nullptr) {
      json::Array list;
      if (auto e = message_tool_calls(*calls, where + ".tool_calls", list)) return e;
      msg.append("tool_calls", json::Value(std::move(list)));
    }
    if (rl == "tool") {
      for (const char* key : {"tool_call_id", "name"}) {
        const json::Value* v = m.find(key);
        if (v == nullptr || v->is_null()) continue;
        if (!v->is_string())
          return bad_param(where + "." + key, where + "." + key + ": expected a string");
        msg.append(key, v->as_string());
      }
    }
    out.emplace_back(std::move(msg));
  }
  return std::nullopt;
}

}  // namespace edgellm::server
