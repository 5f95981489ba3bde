// The Qwen3 chat template (tests/fixtures/templates/qwen3.jinja) rendered natively, step by step:
// tools as JSON lines in the system turn, tool calls as JSON inside <tool_call>, tool results as
// <tool_response> blocks in a user turn, thinking shown only after the last user query.
#include <string>

#include "tokenizer/chat_render.h"
#include "tokenizer/python_json.h"

namespace tf::chat_render {
namespace {

constexpr std::string_view tools_preamble =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view tools_epilogue =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

void render_system(const std::vector<ChatMessage>& messages, const ChatOptions& options, Writer& out) {
  const bool has_system = messages[0].role == "system";
  if (options.tools.empty()) {
    if (has_system) out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
    return;
  }
  out += "<|im_start|>system\n";
  if (has_system) out += messages[0].content + "\n\n";
  out += tools_preamble;
  for (const auto& tool : options.tools) {
    out += "\n";
    out.literal(python_json_dumps(tool));
  }
  out += tools_epilogue;
}

// An assistant turn; its thinking is shown only after the last query and only when it has
// thinking or is the final turn.
void render_assistant(const ChatMessage& message, bool is_after_last_query, bool is_last, Writer& out) {
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
    out.literal(strip_newlines(reasoning));
    out += "\n</think>\n\n";
    out.literal(lstrip_newlines(content));
  } else {
    out.literal(content);
  }
  for (size_t i = 0; i < message.tool_calls.size(); ++i) {
    const ChatToolCall& call = message.tool_calls[i];
    if ((i == 0 && !content.empty()) || i > 0) out += "\n";
    out += "<tool_call>\n{\"name\": \"";
    out.literal(call.name);
    out += "\", \"arguments\": ";
    out.literal(call.arguments.is_string() ? call.arguments.get<std::string>() : python_json_dumps(call.arguments));
    out += "}\n</tool_call>";
  }
  out += "<|im_end|>\n";
}

}  // namespace

RenderedChat render_qwen3(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  const auto n_messages = static_cast<int64_t>(messages.size());
  Writer out;
  render_system(messages, options, out);

  // The last user message that is a real query, not tool output wrapped as a user turn.
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
    if (message.role == "user") {
      out += "<|im_start|>user\n";
      out.literal(message.content);
      out += "<|im_end|>\n";
    } else if (message.role == "system" && i > 0) {
      out += "<|im_start|>system\n" + message.content + "<|im_end|>\n";
    } else if (message.role == "assistant") {
      render_assistant(message, i > last_query_index, is_last, out);
    } else if (message.role == "tool") {
      // Consecutive tool results share one user turn.
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out.literal(message.content);
      out += "\n</tool_response>";
      if (is_last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (options.enable_thinking == false) out += "<think>\n\n</think>\n\n";
  }
  return out.take();
}

}  // namespace tf::chat_render
