// Shared by the native chat renderers (chat_template.cpp, qwen3_template.cpp, qwen3_5_template.cpp):
// the output with its literal spans, and the Python string helpers the Jinja sources use.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace tf::chat_render {

class Writer {
 public:
  Writer& operator+=(std::string_view text) {
    rendered_.text += text;
    return *this;
  }
  // Text the client sent (a message's content or reasoning, a tool call, a tool's definition; not
  // the system prompt, the operator's): special tokens are not matched inside it.
  void literal(std::string_view text) {
    const size_t begin = rendered_.text.size();
    rendered_.text += text;
    if (!text.empty()) rendered_.literal_spans.push_back({begin, rendered_.text.size()});
  }
  RenderedChat take() { return std::move(rendered_); }

 private:
  RenderedChat rendered_;
};

// Python's s.lstrip('\n'), s.rstrip('\n'), s.strip('\n').
std::string_view lstrip_newlines(std::string_view s);
std::string_view rstrip_newlines(std::string_view s);
inline std::string_view strip_newlines(std::string_view s) { return rstrip_newlines(lstrip_newlines(s)); }
// Python's s.split(separator)[0] and s.split(separator)[-1].
std::string_view before_first(std::string_view s, std::string_view separator);
std::string_view after_last(std::string_view s, std::string_view separator);
bool is_tool_response_wrapper(std::string_view content);

RenderedChat render_qwen3(const std::vector<ChatMessage>& messages, const ChatOptions& options);
RenderedChat render_qwen3_5(const std::vector<ChatMessage>& messages, const ChatOptions& options);

}  // namespace tf::chat_render
