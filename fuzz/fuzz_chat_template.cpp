// The Qwen3 chat template (ChatTemplate, family qwen3) rendered from fuzzed messages: any roles, contents with or without
// thinking blocks, every option. Layout: a flag byte, then messages separated by 0x1E; a
// message's first byte picks its role, and an 0x1F inside it starts its reasoning_content.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const roles[] = {"system", "user", "assistant", "tool", "developer"};
  const uint8_t flags = data[0];
  tf::ChatOptions options;
  options.add_generation_prompt = flags & 1;
  if (flags & 2) options.enable_thinking = bool(flags & 4);

  std::vector<tf::ChatMessage> messages;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  while (!rest.empty() || messages.empty()) {
    auto [record, after] = tf::fuzz::split_once(rest, "\x1e");
    tf::ChatMessage message;
    message.role = record.empty() ? "user" : roles[uint8_t(record[0]) % 5];
    if (!record.empty()) record.remove_prefix(1);
    auto [content, reasoning] = tf::fuzz::split_once(record, "\x1f");
    message.content = std::string(content);
    if (record.find('\x1f') != std::string_view::npos) message.reasoning_content = std::string(reasoning);
    messages.push_back(std::move(message));
    if (after.data() == nullptr || after.empty()) break;
    rest = after;
  }

  tf::fuzz::expect_only_user_errors([&] {
    const std::string text = tf::ChatTemplate(tf::ChatTemplateFamily::qwen3).render(messages, options).text;
    if (!text.starts_with("<|im_start|>")) tf::fuzz::broken("a rendered chat does not open a turn");
    const std::string_view prompt = options.enable_thinking == false
                                        ? "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                                        : "<|im_start|>assistant\n";
    if (options.add_generation_prompt && !text.ends_with(prompt))
      tf::fuzz::broken("a rendered chat does not end with the generation prompt");
    for (const tf::ChatMessage& message : messages)
      if (message.role == "user" && text.find(message.content) == std::string::npos)
        tf::fuzz::broken("a user message's text is missing from the rendered chat");
  });
  return 0;
}
