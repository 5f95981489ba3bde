// The Qwen3 chat template rendered natively, following the Jinja source in
// tokenizer_config.json step by step (tools and tool_calls are out of scope).
#include "tokenizer/chat_template.h"

#include <string_view>

#include "core/error.h"

namespace tf {
namespace {

std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Python's s.split(separator)[0] and s.split(separator)[-1].
std::string_view before_first(std::string_view s, std::string_view separator) {
  return s.substr(0, s.find(separator));
}
std::string_view after_last(std::string_view s, std::string_view separator) {
  const size_t found = s.rfind(separator);
  return found == std::string_view::npos ? s : s.substr(found + separator.size());
}

// A user message that only carries tool output does not count as the user's query.
bool is_tool_response_wrapper(std::string_view content) {
  return content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
}

void check_roles(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) fail("chat has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      fail("chat message " + std::to_string(i) + " has unknown role '" + role +
           "' (expected system, user, assistant or tool)");
    }
  }
}

// An assistant turn; its thinking is shown only after the last query and only when it has
// thinking or is the final turn.
void render_assistant(const ChatMessage& message, bool is_after_last_query, bool is_last, std::string& out) {
  std::string_view content = message.content;
  std::string_view reasoning;
  if (message.reasoning_content) {
    reasoning = *message.reasoning_content;
  } else if (content.find("</think>") != std::string_view::npos) {
    reasoning = lstrip_newlines(after_last(rstrip_newlines(before_first(content, "</think>")), "<think>"));
    content = lstrip_newlines(after_last(content, "</think>"));
  }
  out += "<|im_start|>assistant\n";
  if (is_after_last_query && (is_last || !reasoning.empty())) {
    out += "<think>\n";
    out += rstrip_newlines(lstrip_newlines(reasoning));
    out += "\n</think>\n\n";
    out += lstrip_newlines(content);
  } else {
    out += content;
  }
  out += "<|im_end|>\n";
}

}  // namespace

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  check_roles(messages);
  const auto n_messages = static_cast<int64_t>(messages.size());
  std::string out;
  if (messages[0].role == "system") out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";

  int64_t last_query_index = n_messages - 1;
  for (int64_t i = n_messages - 1; i >= 0; --i) {
    if (messages[i].role == "user" && !is_tool_response_wrapper(messages[i].content)) {
      last_query_index = i;
      break;
    }
  }

  for (int64_t i = 0; i < n_messages; ++i) {
    const ChatMessage& message = messages[i];
    const bool is_last = i == n_messages - 1;
    if (message.role == "user" || (message.role == "system" && i > 0)) {
      out += "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>\n";
    } else if (message.role == "assistant") {
      render_assistant(message, i > last_query_index, is_last, out);
    } else if (message.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + message.content + "\n</tool_response>";
      if (is_last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (options.enable_thinking == false) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

}  // namespace tf
