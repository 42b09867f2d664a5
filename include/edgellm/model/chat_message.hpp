// SPDX-License-Identifier: Apache-2.0
// One message of a chat: what a chat template renders (model/chat_template.hpp) and what the
// chat loop of decode/ keeps.
#pragma once

#include <string>

namespace edgellm::model {

/// One message of a chat.
struct ChatMessage {
  std::string role;  ///< "system", "user", "assistant" (templates may know more, e.g. "tool")
  std::string content;
};

}  // namespace edgellm::model
