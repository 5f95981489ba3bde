// Chat templates rendered natively, byte for byte what transformers renders from the model's Jinja
// template: Qwen3 (tools as JSON in <tool_call>), Qwen3.5-class (Qwen3.5/3.6: <function=...>
// <parameter=...> XML, thinking opened by the prompt) and plain ChatML. A model directory's
// template is recognised by its exact text (SHA-256), never guessed from its name.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace tf {

struct ChatToolCall {
  std::string id;
  std::string name;
  // The arguments as the client sent them: a JSON text (a string) or an object. Qwen3 writes a
  // string verbatim; Qwen3.5-class templates need an object (one <parameter> per key, in order).
  nlohmann::ordered_json arguments;
};

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" or "tool"
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant only
  std::vector<ChatToolCall> tool_calls = {};     // assistant only
};

struct ChatOptions {
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;    // unset behaves as true
  std::optional<bool> preserve_thinking;  // Qwen3.6: every assistant turn keeps its thinking
  std::vector<nlohmann::ordered_json> tools;  // OpenAI tool objects, keys in the client's order
  // The prompt ends inside the final (assistant) message, after its content, so the reply continues
  // it (transformers' continue_final_message); add_generation_prompt must then be false.
  bool continue_final_message = false;
};

struct RenderedChat {
  std::string text;
  // Where the client's text landed (messages but the system prompt, tool calls, tool definitions):
  // special tokens are not matched inside these spans, so no message or tool description can write
  // <|im_start|>system into the prompt's structure.
  std::vector<TextSpan> literal_spans;
};

enum class ChatTemplateFamily { none, chatml, qwen3, qwen3_5 };

class ChatTemplate {
 public:
  // The template of a Hugging Face directory (chat_template.jinja, else tokenizer_config.json's
  // "chat_template"), recognised by its text. `family_name` "auto" recognises it; "qwen3",
  // "qwen3.5" or "chatml" renders the directory's chats as that family whatever its template says.
  // Throws tf::Error naming the file for a template that is not recognised or a bad family name.
  static ChatTemplate from_model_dir(const std::string& model_dir, const std::string& family_name = "auto");
  explicit ChatTemplate(ChatTemplateFamily family, std::string source = "") :
      family_(family), source_(std::move(source)) {}

  ChatTemplateFamily family() const { return family_; }
  const char* family_name() const;
  bool has_tools() const { return family_ == ChatTemplateFamily::qwen3 || family_ == ChatTemplateFamily::qwen3_5; }
  bool has_thinking() const { return has_tools(); }
  // True when the prompt for `options` leaves the reply inside an open <think> block (Qwen3.5-class
  // with thinking on): the reply's reasoning ends at its first </think>.
  bool opens_thinking(const ChatOptions& options) const;

  // Throws tf::Error for what the template refuses (the message says which message and why).
  RenderedChat render(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;

 private:
  RenderedChat render_whole(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;

  ChatTemplateFamily family_;
  std::string source_;  // where the template came from, for messages
};

// The family a template text belongs to, or none when it is not one we render (exact texts only).
ChatTemplateFamily recognise_chat_template(const std::string& template_text);

// Parses a family name: "qwen3", "qwen3.5" or "chatml"; throws tf::Error naming `what`.
ChatTemplateFamily chat_template_family_from_name(const std::string& name, const std::string& what);

}  // namespace tf
