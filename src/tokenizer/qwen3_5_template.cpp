// The Qwen3.5-class chat template (Qwen3.5 / Qwen3.6, tests/fixtures/templates/qwen3.6.jinja)
// rendered natively, step by step: message text trimmed, tools as JSON lines before the call format
// instructions, tool calls as <function=NAME><parameter=KEY> XML, the prompt opening <think> unless
// thinking is off, and the template's own refusals (no user query, a late system message).
#include <string>

#include "core/error.h"
#include "tokenizer/chat_render.h"
#include "tokenizer/python_json.h"

namespace tf::chat_render {
namespace {

constexpr std::string_view tools_preamble = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
constexpr std::string_view call_instructions =
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must "
    "be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the "
    "function call, but NOT after\n- If there is no function call available, answer the question like "
    "normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

void render_system(const std::vector<ChatMessage>& messages, const ChatOptions& options, Writer& out) {
  const bool has_system = messages[0].role == "system";
  const std::string content = has_system ? python_strip(messages[0].content) : "";
  if (options.tools.empty()) {
    if (has_system) out += "<|im_start|>system\n" + content + "<|im_end|>\n";
    return;
  }
  out += "<|im_start|>system\n";
  out += tools_preamble;
  for (const auto& tool : options.tools) {
    out += "\n";
    out.literal(python_json_dumps(tool));
  }
  out += "\n</tools>";
  out += call_instructions;
  if (!content.empty()) out += "\n\n" + content;
  out += "<|im_end|>\n";
}

void render_tool_calls(const ChatMessage& message, std::string_view content, size_t index, Writer& out) {
  for (size_t i = 0; i < message.tool_calls.size(); ++i) {
    const ChatToolCall& call = message.tool_calls[i];
    if (i == 0)
      out += python_strip(std::string(content)).empty() ? "<tool_call>\n<function=" : "\n\n<tool_call>\n<function=";
    else
      out += "\n<tool_call>\n<function=";
    out.literal(call.name);
    out += ">\n";
    if (!call.arguments.is_object())
      fail("chat message " + std::to_string(index) + ": tool call " + std::to_string(i) +
           " needs its arguments as a JSON object (this template writes one <parameter> per key)");
    for (const auto& [key, value] : call.arguments.items()) {
      out += "<parameter=";
      out.literal(key);
      out += ">\n";
      out.literal(value.is_string() ? value.get<std::string>() : python_json_dumps(value));
      out += "\n</parameter>\n";
    }
    out += "</function>\n</tool_call>";
  }
}

void render_assistant(const ChatMessage& message, size_t index, bool is_thinking_shown, Writer& out) {
  std::string content = python_strip(message.content);
  std::string reasoning;
  if (message.reasoning_content) {
    reasoning = *message.reasoning_content;
  } else if (content.find("</think>") != std::string::npos) {
    reasoning = lstrip_newlines(after_last(rstrip_newlines(before_first(content, "</think>")), "<think>"));
    content = std::string(lstrip_newlines(after_last(content, "</think>")));
  }
  reasoning = python_strip(reasoning);
  out += "<|im_start|>assistant\n";
  if (is_thinking_shown) {
    out += "<think>\n";
    out.literal(reasoning);
    out += "\n</think>\n\n";
  }
  out.literal(content);
  render_tool_calls(message, content, index, out);
  out += "<|im_end|>\n";
}

}  // namespace

RenderedChat render_qwen3_5(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  const size_t n_messages = messages.size();
  Writer out;
  render_system(messages, options, out);

  // The last user message that is a real query; the template refuses a chat without one.
  std::optional<size_t> last_query_index;
  for (size_t i = n_messages; i-- > 0;) {
    if (messages[i].role != "user") continue;
    if (!is_tool_response_wrapper(python_strip(messages[i].content))) {
      last_query_index = i;
      break;
    }
  }
  if (!last_query_index) fail("the chat template found no user query in the messages (it needs a user message)");

  const bool is_preserving = options.preserve_thinking == true;
  for (size_t i = 0; i < n_messages; ++i) {
    const ChatMessage& message = messages[i];
    if (message.role == "system") {
      if (i > 0) fail("chat message " + std::to_string(i) + ": the chat template takes a system message only at the beginning");
    } else if (message.role == "user") {
      out += "<|im_start|>user\n";
      out.literal(python_strip(message.content));
      out += "<|im_end|>\n";
    } else if (message.role == "assistant") {
      render_assistant(message, i, is_preserving || i > *last_query_index, out);
    } else if (message.role == "tool") {
      // The template opens a user turn only after a message that is not a tool result (and not
      // before a first message: it has no previous item there).
      if (i > 0 && messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out.literal(python_strip(message.content));
      out += "\n</tool_response>";
      if (i + 1 == n_messages || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    out += options.enable_thinking == false ? "<think>\n\n</think>\n\n" : "<think>\n";
  }
  return out.take();
}

}  // namespace tf::chat_render
