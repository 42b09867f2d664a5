// SPDX-License-Identifier: Apache-2.0
// edgellm-server's errors as OpenAI writes them: an HTTP status and
// {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <edgellm/io/json_value.hpp>
#include <edgellm/io/json_write.hpp>

#include <string>
#include <utility>

namespace edgellm::server {

namespace json = edgellm::io::json;

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};

inline std::string error_body(const ApiError& e) {
  json::Object inner;
  inner.append("message", e.message);
  inner.append("type", e.type);
  inner.append("param", e.param.empty() ? json::Value() : json::Value(e.param));
  inner.append("code", e.code.empty() ? json::Value() : json::Value(e.code));
  json::Object outer;
  outer.append("error", json::Value(std::move(inner)));
  return json::dump(json::Value(std::move(outer)));
}


inline ApiError invalid(std::string message) {
  return {400, std::move(message), "invalid_request_error", {}, {}};
}

inline ApiError server_fault(int status, std::string message) {
  return {status, std::move(message), "server_error", {}, {}};
}

inline ApiError bad_param(std::string param, std::string message) {
  return {400, std::move(message), "invalid_request_error", std::move(param), {}};
}

}  // namespace edgellm::server
