// Which chat template a model directory has (recognised by its exact text), plain ChatML, and the
// string helpers shared by the Qwen renderers.
#include "tokenizer/chat_template.h"

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/regular_file.h"
#include "core/sha256.h"
#include "tokenizer/chat_render.h"
#include "tokenizer/python_json.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

// SHA-256 of each template text we render natively (a single trailing newline removed, which
// Jinja drops anyway). A template that is not here renders only under an explicit family.
struct KnownTemplate {
  const char* sha256;
  ChatTemplateFamily family;
};
constexpr KnownTemplate known_templates[] = {
    // Qwen3 (0.6B ... 235B-A22B): tests/fixtures/templates/qwen3.jinja
    {"87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5", ChatTemplateFamily::qwen3},
    // Qwen3.6-27B (Qwen3.5-class, with preserve_thinking): tests/fixtures/templates/qwen3.6.jinja
    {"e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259", ChatTemplateFamily::qwen3_5},
    // Plain ChatML, the embedded code model's: tests/fixtures/templates/chatml.jinja
    {"9f0e276ab90bb7e2e874715ac082205729cf14b6b15e1e4cda8ecf5f0e002872", ChatTemplateFamily::chatml},
};

std::string read_file_text(const fs::path& path) {
  require_regular_file(path, "the chat template file");
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// (template text, where it came from); the text is empty when the directory has none.
std::pair<std::string, std::string> find_template_text(const std::string& model_dir) {
  const fs::path jinja = fs::path(model_dir) / "chat_template.jinja";
  if (fs::exists(jinja)) return {read_file_text(jinja), jinja.string()};
  const fs::path config_path = fs::path(model_dir) / "tokenizer_config.json";
  if (!fs::exists(config_path)) return {"", config_path.string()};
  const nlohmann::json config = nlohmann::json::parse(read_file_text(config_path), nullptr, false);
  if (config.is_discarded() || !config.is_object())
    fail("tokenizer config " + config_path.string() + " is not a JSON object");
  const auto it = config.find("chat_template");
  const std::string source = config_path.string() + " (chat_template)";
  if (it == config.end() || it->is_null()) return {"", source};
  if (it->is_string()) return {it->get<std::string>(), source};
  // A list of named templates: the one named "default" is the chat template.
  if (it->is_array()) {
    for (const auto& entry : *it)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return {entry["template"].get<std::string>(), source};
    return {"", source};
  }
  fail("tokenizer config " + config_path.string() + ": chat_template: expected a string or a list of "
       "{\"name\", \"template\"} objects, but got " + std::string(it->type_name()));
}

RenderedChat render_chatml(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  chat_render::Writer out;
  for (const ChatMessage& message : messages) {
    out += "<|im_start|>" + message.role + "\n";
    if (message.role == "system")
      out += message.content;
    else
      out.literal(message.content);
    out += "<|im_end|>\n";
  }
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out.take();
}

}  // namespace

namespace chat_render {

std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

std::string_view before_first(std::string_view s, std::string_view separator) {
  return s.substr(0, s.find(separator));
}

std::string_view after_last(std::string_view s, std::string_view separator) {
  const size_t found = s.rfind(separator);
  return found == std::string_view::npos ? s : s.substr(found + separator.size());
}

bool is_tool_response_wrapper(std::string_view content) {
  return content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
}

}  // namespace chat_render

ChatTemplateFamily recognise_chat_template(const std::string& template_text) {
  std::string_view text = template_text;
  if (text.ends_with("\n")) text.remove_suffix(1);
  const std::string digest = sha256_hex(text);
  for (const KnownTemplate& known : known_templates)
    if (digest == known.sha256) return known.family;
  return ChatTemplateFamily::none;
}

ChatTemplateFamily chat_template_family_from_name(const std::string& name, const std::string& what) {
  if (name == "qwen3") return ChatTemplateFamily::qwen3;
  if (name == "qwen3.5") return ChatTemplateFamily::qwen3_5;
  if (name == "chatml") return ChatTemplateFamily::chatml;
  fail(what + " must be auto, qwen3, qwen3.5 or chatml; got '" + name + "'");
}

ChatTemplate ChatTemplate::from_model_dir(const std::string& model_dir, const std::string& family_name) {
  const auto [text, source] = find_template_text(model_dir);
  if (family_name != "auto")
    return ChatTemplate(chat_template_family_from_name(family_name, "the chat template family"), source);
  if (text.empty()) return ChatTemplate(ChatTemplateFamily::none, source);
  const ChatTemplateFamily family = recognise_chat_template(text);
  if (family == ChatTemplateFamily::none)
    fail("the chat template in " + source + " is not one TensorFold renders (it knows the Qwen3, "
         "Qwen3.5-class and plain ChatML templates by their exact text); give --chat-template "
         "qwen3, qwen3.5 or chatml to render this model's chats as one of those");
  return ChatTemplate(family, source);
}

const char* ChatTemplate::family_name() const {
  switch (family_) {
    case ChatTemplateFamily::none: return "none";
    case ChatTemplateFamily::chatml: return "chatml";
    case ChatTemplateFamily::qwen3: return "qwen3";
    case ChatTemplateFamily::qwen3_5: return "qwen3.5";
  }
  return "none";
}

bool ChatTemplate::opens_thinking(const ChatOptions& options) const {
  return family_ == ChatTemplateFamily::qwen3_5 && options.add_generation_prompt &&
         options.enable_thinking != false;
}

RenderedChat ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  if (messages.empty()) fail("chat has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      fail("chat message " + std::to_string(i) + " has unknown role '" + role +
           "' (expected system, user, assistant or tool)");
  }
  if (!options.continue_final_message) return render_whole(messages, options);
  const ChatMessage& last = messages.back();
  if (options.add_generation_prompt) fail("continue_final_message and add_generation_prompt cannot both be true");
  if (last.role != "assistant" || !last.tool_calls.empty())
    fail("continue_final_message needs the last message to be an assistant message without tool calls");
  // As transformers cuts it: after the last occurrence of the content's stripped text, with its
  // trailing whitespace only where the template wrote the content whole. A content of whitespace
  // only ends before the turn's <|im_end|> (transformers would keep the closed turn).
  RenderedChat rendered = render_whole(messages, options);
  const std::string stripped = python_strip(last.content);
  size_t end = rendered.text.rfind(stripped.empty() ? std::string("<|im_end|>") : stripped);
  if (end == std::string::npos)
    fail("continue_final_message: the last message's content does not appear in the rendered chat (the template "
         "changes it)");
  if (!stripped.empty()) {
    const size_t n_lstripped = last.content.size() - last.content.find(stripped);
    end += rendered.text.compare(end, n_lstripped, last.content) == 0 ? n_lstripped : stripped.size();
  }
  rendered.text.resize(end);
  std::erase_if(rendered.literal_spans, [&](const TextSpan& span) { return span.begin >= end; });
  for (TextSpan& span : rendered.literal_spans) span.end = std::min(span.end, end);
  return rendered;
}

RenderedChat ChatTemplate::render_whole(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  switch (family_) {
    case ChatTemplateFamily::none:
      fail("this model has no chat template (none in " + source_ + "); send the prompt to /v1/completions");
    case ChatTemplateFamily::chatml:
      if (!options.tools.empty()) fail("this model's chat template (plain ChatML) has no tools");
      for (const ChatMessage& message : messages)
        if (!message.tool_calls.empty()) fail("this model's chat template (plain ChatML) has no tool calls");
      return render_chatml(messages, options);
    case ChatTemplateFamily::qwen3: return chat_render::render_qwen3(messages, options);
    case ChatTemplateFamily::qwen3_5: return chat_render::render_qwen3_5(messages, options);
  }
  fail_internal("unknown chat template family");
}

}  // namespace tf
