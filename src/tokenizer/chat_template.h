// The Qwen3 chat template (ChatML with thinking blocks), rendered natively, byte for byte what
// the Jinja template in tokenizer_config.json gives in transformers for the supported cases.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tf {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" or "tool"
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant only
};

struct ChatOptions {
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  // unset behaves as true
};

// Throws tf::Error for an unknown role.
std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options);

}  // namespace tf
