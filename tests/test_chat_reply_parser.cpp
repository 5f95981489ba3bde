// The reply parser: what a whole reply parses into (reasoning, content, tool calls in both Qwen
// formats), and that the same reply fed in any pieces (every cut point, token groups of 1..k tokens
// of the real tokenizer, random groups) assembles to exactly that.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "server/chat_reply_parser.h"
#include "tokenizer/tokenizer.h"

using namespace tf;
using namespace tf::server;

namespace {

struct Expected {
  std::string reasoning;
  std::string content;
  std::vector<AssembledToolCall> tool_calls;
};

AssembledReply parse_in_pieces(const ReplyParserOptions& options, const std::vector<std::string>& pieces) {
  ChatReplyParser parser(options);
  AssembledReply reply;
  for (const std::string& piece : pieces) reply.add(parser.push(piece));
  reply.add(parser.finish());
  return reply;
}

void expect_same(const AssembledReply& got, const AssembledReply& want, const std::string& where) {
  EXPECT_EQ(got.reasoning, want.reasoning) << where;
  EXPECT_EQ(got.content, want.content) << where;
  ASSERT_EQ(got.tool_calls.size(), want.tool_calls.size()) << where;
  for (size_t i = 0; i < got.tool_calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].id, want.tool_calls[i].id) << where;
    EXPECT_EQ(got.tool_calls[i].name, want.tool_calls[i].name) << where;
    EXPECT_EQ(got.tool_calls[i].arguments, want.tool_calls[i].arguments) << where;
  }
}

const Tokenizer& qwen3_tokenizer() {
  static const auto tokenizer = Tokenizer::from_file(TF_SOURCE_DIR "/tests/fixtures/models/qwen3-tiny-chat/tokenizer.json");
  return *tokenizer;
}

// Every way we cut: each byte position into two pieces, the reply's tokens (as a stream decoder
// releases their text) in groups of 1..8, and random groups.
void expect_cut_invariant(const ReplyParserOptions& options, const std::string& reply, const Expected& expected) {
  const AssembledReply whole = parse_in_pieces(options, {reply});
  expect_same(whole, AssembledReply{expected.reasoning, expected.content, expected.tool_calls}, "whole: " + reply);
  for (size_t cut = 0; cut <= reply.size(); ++cut)
    expect_same(parse_in_pieces(options, {reply.substr(0, cut), reply.substr(cut)}), whole,
                "cut at " + std::to_string(cut) + ": " + reply);
  const Tokenizer& tokenizer = qwen3_tokenizer();
  const std::vector<int32_t> ids = tokenizer.encode(reply);
  std::vector<std::string> token_texts;
  StreamDecoder decoder(tokenizer);
  for (int32_t id : ids) token_texts.push_back(decoder.push(id));
  token_texts.back() += decoder.flush();
  const auto grouped = [&](const std::vector<size_t>& sizes) {
    std::vector<std::string> pieces;
    size_t at = 0;
    for (size_t i = 0; at < token_texts.size(); ++i) {
      std::string piece;
      for (size_t j = 0; j < sizes[i % sizes.size()] && at < token_texts.size(); ++j) piece += token_texts[at++];
      pieces.push_back(piece);
    }
    return pieces;
  };
  for (size_t k = 1; k <= 8; ++k)
    expect_same(parse_in_pieces(options, grouped({k})), whole, std::to_string(k) + " tokens a delta: " + reply);
  std::mt19937 random(1234);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> sizes;
    for (int i = 0; i < 16; ++i) sizes.push_back(1 + random() % 6);
    expect_same(parse_in_pieces(options, grouped(sizes)), whole, "random groups: " + reply);
  }
}

ReplyParserOptions qwen3_options(bool has_tools) {
  ReplyParserOptions options;
  options.family = ChatTemplateFamily::qwen3;
  options.parses_reasoning = true;
  options.parses_tool_calls = has_tools;
  options.tool_call_id_prefix = "call_x_";
  return options;
}

ReplyParserOptions qwen3_5_options(bool is_thinking) {
  ReplyParserOptions options;
  options.family = ChatTemplateFamily::qwen3_5;
  options.parses_reasoning = true;
  options.starts_in_reasoning = is_thinking;
  options.parses_tool_calls = true;
  options.tool_call_id_prefix = "call_y_";
  options.parameter_types["get_weather"] = {{"city", "string"}, {"days", "integer"}};
  options.parameter_types["write_file"] = {{"path", "string"}, {"text", "string"}};
  return options;
}

TEST(ChatReplyParser, Qwen3ReasoningAndJsonToolCalls) {
  expect_cut_invariant(qwen3_options(true),
                       "<think>\nThe user wants weather.\n\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                       "\"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>", {"The user wants weather.", "", {{"call_x_0", "get_weather", "{\"city\": \"Paris\", \"days\": 2}"}}});
  expect_cut_invariant(qwen3_options(true),
                       "Sure, both.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                       "{\"name\": \"b\", \"arguments\": {\"q\": \"</tool_call> inside\"}}\n</tool_call>", {"", "Sure, both.", {{"call_x_0", "a", "{}"}, {"call_x_1", "b", "{\"q\": \"</tool_call> inside\"}"}}});
}

TEST(ChatReplyParser, Qwen3MalformedOrCutCallsStayText) {
  expect_cut_invariant(qwen3_options(true), "Text \n<tool_call>\n{\"name\": oops}\n</tool_call> then text", {"", "Text \n<tool_call>\n{\"name\": oops}\n</tool_call> then text", {}});
  expect_cut_invariant(qwen3_options(true), "Calling <tool_call>\n{\"name\": \"a\", \"argu", {"", "Calling <tool_call>\n{\"name\": \"a\", \"argu", {}});
  expect_cut_invariant(qwen3_options(true), "A reply with < and <tool and </think> in it", {"", "A reply with < and <tool and </think> in it", {}});
  // With tools but no call, the reply's own trailing whitespace is content, as without tools;
  // after a call it is the template's.
  expect_cut_invariant(qwen3_options(true), "names = 1\n", {"", "names = 1\n", {}});
  expect_cut_invariant(qwen3_options(true), "Ok.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n",
                       {"", "Ok.", {{"call_x_0", "a", "{}"}}});
}

TEST(ChatReplyParser, Qwen3WithoutToolsKeepsContentAsIs) {
  expect_cut_invariant(qwen3_options(false), "<think>\nr1\nr2\n</think>\n\nAnswer with <tool_call> text\n\n", {"r1\nr2", "Answer with <tool_call> text\n\n", {}});
  expect_cut_invariant(qwen3_options(false), "<thinking is not a tag", {"", "<thinking is not a tag", {}});
  expect_cut_invariant(qwen3_options(false), "<think>\nnever closed\n", {"never closed\n", "", {}});
}

TEST(ChatReplyParser, Qwen3_5XmlToolCalls) {
  expect_cut_invariant(
      qwen3_5_options(true),
      "I need the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", {"I need the weather.", "", {{"call_y_0", "get_weather", "{\"city\": \"Paris\", \"days\": 3}"}}});
  expect_cut_invariant(
      qwen3_5_options(false),
      "Writing two files.\n\n<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=text>\n"
      "def f():\n    return \"<x>\"\n\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=now>\n</function>\n"
      "</tool_call>", {"", "Writing two files.",
       {{"call_y_0", "write_file", "{\"path\": \"a.py\", \"text\": \"def f():\\n    return \\\"<x>\\\"\\n\"}"},
        {"call_y_1", "now", "{}"}}});
  // Untyped parameters are read as JSON when they are JSON.
  expect_cut_invariant(qwen3_5_options(false),
                       "<tool_call>\n<function=set>\n<parameter=v>\n[1, 2.5, {\"k\": null}]\n</parameter>\n<parameter=w>\n"
                       "plain words\n</parameter>\n</function>\n</tool_call>", {"", "", {{"call_y_0", "set", "{\"v\": [1, 2.5, {\"k\": null}], \"w\": \"plain words\"}"}}});
}

TEST(ChatReplyParser, Qwen3_5CutCallsAndPlainReplies) {
  // The budget ran out inside a parameter: no call, the text as written (CallsGoOutOnlyWhole).
  expect_cut_invariant(qwen3_5_options(false),
                       "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n1",
                       {"", "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n1", {}});
  expect_cut_invariant(qwen3_5_options(false), "<tool_call>\nnot xml at all", {"", "<tool_call>\nnot xml at all", {}});
  // A parameter written twice keeps its first value: the arguments are an object of unique keys.
  expect_cut_invariant(qwen3_5_options(false),
                       "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n<parameter=city>\nB\n"
                       "</parameter>\n</function>\n</tool_call>", {"", "", {{"call_y_0", "get_weather", "{\"city\": \"A\"}"}}});
  expect_cut_invariant(qwen3_5_options(true), "Just thinking, no answer yet", {"Just thinking, no answer yet", "", {}});
  expect_cut_invariant(qwen3_5_options(false), "Hello <b>world</b>!", {"", "Hello <b>world</b>!", {}});
}

// A reply its budget (or a stop string) cuts inside a call finished no call: both formats release
// a call only whole, so the cut call is the text the model wrote, as content, after the calls it
// did finish, and a stream never sent a piece of it (vLLM answers a cut call with its text, too).
TEST(ChatReplyParser, CallsGoOutOnlyWhole) {
  const std::string json_call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  const std::string xml_call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>";
  for (const auto& [options, call, cut_call] : {
           std::tuple{qwen3_options(true), json_call, std::string("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci")},
           std::tuple{qwen3_5_options(false), xml_call, std::string("<tool_call>\n<function=get_weather>\n<parameter=city>\nOs")},
           std::tuple{qwen3_5_options(false), xml_call, std::string("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<param")}}) {
    const std::string id = options.tool_call_id_prefix + "0";
    expect_cut_invariant(options, "Ok.\n" + cut_call, {"", "Ok.\n" + cut_call, {}});
    expect_cut_invariant(options, "Ok.\n" + call + "\n" + cut_call,
                         {"", "Ok.\n" + cut_call, {{id, "get_weather", "{\"city\": \"Oslo\"}"}}});
    // Byte by byte, nothing of the call is released before its end.
    ChatReplyParser parser(options);
    const std::string closing = options.family == ChatTemplateFamily::qwen3 ? "</tool_call>" : "</function>";
    const size_t call_end = call.find(closing) + closing.size();
    for (size_t i = 0; i < call.size(); ++i) {
      const ReplyPiece piece = parser.push(call.substr(i, 1));
      EXPECT_EQ(piece.tool_calls.size(), i + 1 == call_end ? 1u : 0u) << "byte " << i << " of " << call;
    }
  }
}

TEST(ChatReplyParser, TextCompletionsAreAllContent) {
  expect_cut_invariant(ReplyParserOptions{}, "<think>x</think><tool_call>y</tool_call>\n", {"", "<think>x</think><tool_call>y</tool_call>\n", {}});
}

}  // namespace
