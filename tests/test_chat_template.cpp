// render_chat against chat prompts rendered by transformers from the Qwen3 Jinja template,
// plus thinking and tool-result cases checked against the same template.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

nlohmann::json chat_rows() {
  std::ifstream file(TF_SOURCE_DIR "/tests/fixtures/tokenizer/qwen3_chat.json");
  return nlohmann::json::parse(file);
}

std::vector<tf::ChatMessage> messages_of(const nlohmann::json& row) {
  std::vector<tf::ChatMessage> messages;
  for (const auto& m : row["messages"]) {
    tf::ChatMessage message{m["role"], m["content"], std::nullopt};
    if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
      message.reasoning_content = m["reasoning_content"].get<std::string>();
    }
    messages.push_back(std::move(message));
  }
  return messages;
}

tf::ChatOptions options_of(const nlohmann::json& row) {
  tf::ChatOptions options;
  options.add_generation_prompt = row["add_generation_prompt"];
  if (!row["enable_thinking"].is_null()) options.enable_thinking = row["enable_thinking"].get<bool>();
  return options;
}

TEST(ChatTemplate, MatchesTransformers) {
  const nlohmann::json rows = chat_rows();
  ASSERT_EQ(rows.size(), 48u);
  for (const auto& row : rows) {
    EXPECT_EQ(tf::render_chat(messages_of(row), options_of(row)), row["text"].get<std::string>()) << row.dump();
  }
}

TEST(ChatTemplate, PromptsTokenizeWithSpecialTokens) {
  const auto tokenizer = tf::Tokenizer::from_file(TF_SOURCE_DIR "/tests/fixtures/models/qwen3-tiny-chat/tokenizer.json");
  const int32_t im_start = tokenizer->token_id("<|im_start|>");
  const int32_t im_end = tokenizer->token_id("<|im_end|>");
  ASSERT_TRUE(tokenizer->is_special(im_start));
  ASSERT_TRUE(tokenizer->is_special(im_end));
  const auto count_text = [](const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
    return n;
  };
  for (const auto& row : chat_rows()) {
    const std::string text = tf::render_chat(messages_of(row), options_of(row));
    const std::vector<int32_t> ids = tokenizer->encode(text);
    EXPECT_EQ(ids.front(), im_start);
    EXPECT_EQ(static_cast<size_t>(std::count(ids.begin(), ids.end(), im_start)), count_text(text, "<|im_start|>"));
    EXPECT_EQ(static_cast<size_t>(std::count(ids.begin(), ids.end(), im_end)), count_text(text, "<|im_end|>"));
    EXPECT_EQ(tokenizer->decode(ids), tf::nfc(text));
  }
}

struct TemplateCase {
  const char* name;
  std::vector<tf::ChatMessage> messages;
  const char* expected;  // rendered by the Jinja template with enable_thinking=false
};

TEST(ChatTemplate, ThinkingAndToolResults) {
  const std::vector<TemplateCase> cases = {
      {"reasoning field on the last turn",
       {{"user", "Q", {}}, {"assistant", "\nA", "\n\nR\n"}},
       "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</think>\n\nA<|im_end|>\n"
       "<|im_start|>assistant\n<think>\n\n</think>\n\n"},
      {"thinking inside the content",
       {{"user", "Q", {}}, {"assistant", "<think>\nR1</think>x<think>R2\n\n</think>\n\nA", {}}},
       "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nR1\n</think>\n\nA<|im_end|>\n"
       "<|im_start|>assistant\n<think>\n\n</think>\n\n"},
      {"reasoning before the last query is dropped",
       {{"user", "Q1", {}}, {"assistant", "A1", "R1"}, {"user", "Q2", {}}},
       "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
       "<|im_start|>assistant\n<think>\n\n</think>\n\n"},
      {"consecutive tool results share a user turn",
       {{"system", "S", {}}, {"user", "Q", {}}, {"assistant", "calling", "why"}, {"tool", "r1", {}},
        {"tool", "r2", {}}, {"assistant", "done", {}}},
       "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nwhy\n"
       "</think>\n\ncalling<|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\n"
       "r2\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n"
       "<|im_start|>assistant\n<think>\n\n</think>\n\n"},
      {"a user turn of tool output is not the last query",
       {{"user", "Q", {}}, {"assistant", "A", "R"}, {"user", "<tool_response>\nx\n</tool_response>", {}},
        {"assistant", "B", {}}},
       "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</think>\n\nA<|im_end|>\n"
       "<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n"
       "</think>\n\nB<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
      {"a late system message and an empty reasoning field",
       {{"user", "Q", {}}, {"system", "S2", {}}, {"assistant", "A", ""}, {"assistant", "B", {}}},
       "<|im_start|>user\nQ<|im_end|>\n<|im_start|>system\nS2<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
       "<|im_start|>assistant\n<think>\n\n</think>\n\nB<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
      {"no user message",
       {{"system", "S", {}}, {"assistant", "<think>R</think>A", {}}},
       "<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
       "<|im_start|>assistant\n<think>\n\n</think>\n\n"},
  };
  tf::ChatOptions options;
  options.enable_thinking = false;
  for (const TemplateCase& c : cases) EXPECT_EQ(tf::render_chat(c.messages, options), c.expected) << c.name;
}

TEST(ChatTemplate, UnknownRoleIsAnError) {
  try {
    tf::render_chat({{"user", "hi", {}}, {"narrator", "once upon a time", {}}}, {});
    FAIL() << "no error";
  } catch (const tf::Error& error) {
    EXPECT_NE(std::string(error.what()).find("narrator"), std::string::npos) << error.what();
  }
  EXPECT_THROW(tf::render_chat({}, {}), tf::Error);
}

}  // namespace
