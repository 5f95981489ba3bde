// OpenAI request parsing and validation, and reply/chunk JSON, without a server or a model.
#include <gtest/gtest.h>

#include <limits>
#include <set>

#include "core/error.h"
#include "core/json_nesting.h"
#include "server/chat_request.h"
#include "server/openai_protocol.h"
#include "server/sse.h"
#include "tokenizer/tokenizer.h"

using namespace tf;
using namespace tf::server;

namespace {

ProtocolLimits test_limits() {
  ProtocolLimits limits;
  limits.model_id = "qwen3-tiny-chat";
  limits.model_aliases = {"models/qwen3-tiny-chat"};
  limits.max_tokens_limit = 1000;
  return limits;
}

json chat_body(json extra = json::object()) {
  json body = {{"model", "qwen3-tiny-chat"},
               {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  body.update(extra);
  return body;
}

// Runs `parse` and returns the ApiError it throws (fails the test when none is thrown).
template <typename Parse>
ApiError error_of(Parse parse) {
  try {
    parse();
  } catch (const ApiError& error) {
    return error;
  }
  ADD_FAILURE() << "expected an ApiError";
  return ApiError(0, "");
}

ApiError chat_error(json extra) {
  return error_of([&] { parse_chat_request(chat_body(std::move(extra)), test_limits()); });
}

ApiError completion_error(json body) {
  return error_of([&] { parse_completion_request(body, test_limits()); });
}

// Tokens are single letters 'a' + id, so logprob JSON is predictable.
class LetterTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, const std::vector<TextSpan>&) const override {
    return encode(text);
  }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(c - 'a');
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t id : ids) text += token_bytes(id);
    return text;
  }
  std::string token_bytes(int32_t id) const override { return std::string(1, char('a' + id)); }
  int32_t token_id(std::string_view content) const override { return content[0] - 'a'; }
  bool is_special(int32_t) const override { return false; }
  int64_t n_tokens() const override { return 26; }
};

}  // namespace

TEST(OpenAiProtocol, ChatRequestWithEveryKnownField) {
  const json body = chat_body({{"max_completion_tokens", 7},
                               {"temperature", 0.8},
                               {"top_p", 0.9},
                               {"top_k", 40},
                               {"min_p", 0.05},
                               {"seed", 1234},
                               {"stop", {"\n\n", "END"}},
                               {"presence_penalty", 0.5},
                               {"frequency_penalty", -0.5},
                               {"logprobs", true},
                               {"top_logprobs", 3},
                               {"chat_template_kwargs", {{"enable_thinking", false}}},
                               {"n", 1},
                               {"draft", false},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}},
                               {"some_future_field", {1, 2, 3}}});
  const CompletionRequest request = parse_chat_request(body, test_limits());
  EXPECT_EQ(request.endpoint, Endpoint::chat);
  ASSERT_EQ(request.messages.size(), 1u);
  EXPECT_EQ(request.messages[0].role, "user");
  EXPECT_EQ(request.messages[0].content, "hi");
  EXPECT_EQ(request.max_tokens, 7);
  EXPECT_FLOAT_EQ(request.sampling.temperature, 0.8f);
  EXPECT_FLOAT_EQ(request.sampling.top_p, 0.9f);
  EXPECT_EQ(request.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(request.sampling.min_p, 0.05f);
  EXPECT_EQ(request.sampling.seed, 1234u);
  EXPECT_TRUE(request.is_seed_given);
  EXPECT_EQ(request.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_FLOAT_EQ(request.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(request.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(request.n_top_logprobs, 3);
  EXPECT_EQ(request.chat_options.enable_thinking, false);
  EXPECT_FALSE(request.use_draft);
  EXPECT_TRUE(request.is_stream);
  EXPECT_TRUE(request.include_usage);
}

TEST(OpenAiProtocol, ChatDefaults) {
  const CompletionRequest request = parse_chat_request(chat_body(), test_limits());
  EXPECT_FALSE(request.max_tokens.has_value());
  EXPECT_FLOAT_EQ(request.sampling.temperature, 1.0f);
  EXPECT_FALSE(request.is_seed_given);
  EXPECT_EQ(request.n_top_logprobs, -1);
  EXPECT_TRUE(request.use_draft);
  EXPECT_FALSE(request.is_stream);
  EXPECT_FALSE(request.chat_options.enable_thinking.has_value());
}

TEST(OpenAiProtocol, NullMeansAbsent) {
  const CompletionRequest request =
      parse_chat_request(chat_body({{"temperature", nullptr}, {"stop", nullptr}}), test_limits());
  EXPECT_FLOAT_EQ(request.sampling.temperature, 1.0f);
  EXPECT_TRUE(request.stop.empty());
}

TEST(OpenAiProtocol, ContentPartsAreJoined) {
  json body = chat_body();
  body["messages"] = json::array(
      {{{"role", "system"}, {"content", "be brief"}},
       {{"role", "user"},
        {"content", json::array({{{"type", "text"}, {"text", "one "}},
                                 {{"type", "text"}, {"text", "two"}}})}},
       {{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", "hmm"}},
       {{"role", "tool"}, {"content", "42"}}});
  const CompletionRequest request = parse_chat_request(body, test_limits());
  ASSERT_EQ(request.messages.size(), 4u);
  EXPECT_EQ(request.messages[1].content, "one two");
  EXPECT_EQ(request.messages[2].content, "");
  EXPECT_EQ(request.messages[2].reasoning_content, "hmm");
}

// Current OpenAI clients send the system turn as "developer"; the Qwen templates know it as "system".
TEST(OpenAiProtocol, DeveloperRoleIsTheSystemTurn) {
  json body = chat_body();
  body["messages"] = json::array({{{"role", "developer"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}});
  const CompletionRequest request = parse_chat_request(body, test_limits());
  ASSERT_EQ(request.messages.size(), 2u);
  EXPECT_EQ(request.messages[0].role, "system");
  EXPECT_EQ(request.messages[0].content, "be brief");
}

TEST(OpenAiProtocol, WrongTypesNameTheParameter) {
  EXPECT_EQ(chat_error({{"temperature", "hot"}}).param, "temperature");
  // One token spelled twice would add its biases past the documented -100..100.
  EXPECT_EQ(chat_error({{"logit_bias", {{"2070", 60}, {"02070", 60}}}}).param, "logit_bias");
  EXPECT_EQ(chat_error({{"max_tokens", 1.5}}).param, "max_tokens");
  EXPECT_EQ(chat_error({{"stream", "yes"}}).param, "stream");
  EXPECT_EQ(chat_error({{"seed", "7"}}).param, "seed");
  EXPECT_EQ(chat_error({{"stop", 3}}).param, "stop");
  EXPECT_EQ(chat_error({{"stop", {"a", 1}}}).param, "stop");
  EXPECT_EQ(chat_error({{"stream", true}, {"stream_options", {{"include_usage", 1}}}}).param,
            "stream_options.include_usage");
  EXPECT_EQ(chat_error({{"stream_options", {{"include_usage", true}}}}).param, "stream_options");  // not streamed
  EXPECT_EQ(chat_error({{"chat_template_kwargs", {{"enable_thinking", "no"}}}}).param,
            "chat_template_kwargs.enable_thinking");
  EXPECT_EQ(chat_error({{"model", 5}}).param, "model");
  const ApiError error = chat_error({{"top_k", 2.5}});
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.type, "invalid_request_error");
  EXPECT_NE(std::string(error.what()).find("top_k"), std::string::npos);
}

TEST(OpenAiProtocol, RangesAreChecked) {
  EXPECT_EQ(chat_error({{"top_p", 1.5}}).param, "top_p");
  EXPECT_EQ(chat_error({{"top_p", -0.1}}).param, "top_p");
  EXPECT_EQ(chat_error({{"temperature", 2.5}}).param, "temperature");
  EXPECT_EQ(chat_error({{"min_p", 2}}).param, "min_p");
  EXPECT_EQ(chat_error({{"top_k", -1}}).param, "top_k");
  EXPECT_EQ(chat_error({{"presence_penalty", 3}}).param, "presence_penalty");
  EXPECT_EQ(chat_error({{"frequency_penalty", -3}}).param, "frequency_penalty");
  EXPECT_EQ(chat_error({{"max_tokens", -5}}).param, "max_tokens");
  EXPECT_EQ(chat_error({{"max_tokens", 0}}).param, "max_tokens");
  EXPECT_EQ(chat_error({{"max_tokens", 1000000000000LL}}).param, "max_tokens");
  EXPECT_EQ(chat_error({{"max_completion_tokens", 1001}}).param, "max_completion_tokens");
  EXPECT_EQ(chat_error({{"n", 17}}).param, "n");
  EXPECT_EQ(chat_error({{"top_logprobs", 21}, {"logprobs", true}}).param, "top_logprobs");
  EXPECT_EQ(chat_error({{"top_logprobs", 2}}).param, "top_logprobs");  // without logprobs
  EXPECT_EQ(chat_error({{"stop", {"a", "b", "c", "d", "e"}}}).param, "stop");
  EXPECT_EQ(chat_error({{"stop", ""}}).param, "stop");
}

// Bodies parsed from text, as the server sees them: nlohmann types non-negative numbers there as
// unsigned, which once skipped the minimum check ("max_tokens": 0 passed).
TEST(OpenAiProtocol, IntegerRangesHoldForParsedBodies) {
  ProtocolLimits limits = test_limits();
  limits.allow_bench_extensions = true;
  auto param_of_error = [&](const std::string& field, const std::string& value) {
    const json parsed_value = json::parse(value);
    const bool is_replay = field.rfind("replay.", 0) == 0;
    const json extra = is_replay ? json{{"replay", {{"token_ids", {1}}, {field.substr(7), parsed_value}}}}
                                 : json{{field, parsed_value}};
    return error_of([&] { parse_chat_request(chat_body(extra), limits); }).param;
  };
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad_values = {
      {"max_tokens", {"0", "-1", "1001", "18446744073709551615", "1.5", "2.0"}},
      {"max_completion_tokens", {"0", "-3", "1001", "1e3"}},
      {"n", {"0", "-1", "17", "1.0"}},
      {"top_k", {"-1", "2147483648", "18446744073709551615", "0.5"}},
      {"seed", {"9223372036854775808", "18446744073709551615", "1.25", "-9223372036854775809"}},
      {"replay.accept", {"0", "-1", "1025", "2.5"}},
  };
  for (const auto& [field, values] : bad_values)
    for (const std::string& value : values) EXPECT_EQ(param_of_error(field, value), field) << field << " = " << value;

  // Integer bounds print exactly, not as a double's 9.2e+18.
  const ApiError huge_seed = error_of([&] { parse_chat_request(chat_body(json::parse(R"({"seed": 9223372036854775808})")), limits); });
  EXPECT_NE(std::string(huge_seed.what()).find("<= 9223372036854775807,"), std::string::npos) << huge_seed.what();
  const ApiError zero = error_of([&] { parse_chat_request(chat_body(json::parse(R"({"max_tokens": 0})")), limits); });
  EXPECT_EQ(zero.status, 400);
  EXPECT_NE(std::string(zero.what()).find("below minimum value. Expected a value >= 1, but got 0"), std::string::npos)
      << zero.what();

  auto parsed = [&](const char* text) { return parse_chat_request(chat_body(json::parse(text)), limits); };
  EXPECT_EQ(parsed(R"({"max_tokens": 1000})").max_tokens, 1000);
  EXPECT_EQ(parsed(R"({"max_completion_tokens": 1})").max_tokens, 1);
  EXPECT_EQ(parsed(R"({"n": 1, "top_k": 0})").sampling.top_k, 0);
  EXPECT_EQ(parsed(R"({"seed": 9223372036854775807})").sampling.seed, uint64_t(INT64_MAX));
  EXPECT_EQ(parsed(R"({"seed": -1})").sampling.seed, ~uint64_t(0));
  EXPECT_EQ(parsed(R"({"replay": {"token_ids": [1], "accept": 1024}})").replay_accept, 1024);
}

// "replay" forces acceptance lengths in benchmarks: refused unless the server allows the extension,
// and checked field by field when it does. "return_token_ids" is for anyone.
TEST(OpenAiProtocol, ReplayIsABenchmarkExtension) {
  const json replay = {{"token_ids", {3, 1, 4}}, {"accept", 2}};
  const ApiError refused = chat_error({{"replay", replay}});
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.param, "replay");
  EXPECT_NE(std::string(refused.what()).find("--bench-extensions"), std::string::npos);

  ProtocolLimits limits = test_limits();
  limits.allow_bench_extensions = true;
  const CompletionRequest request =
      parse_chat_request(chat_body({{"replay", replay}, {"return_token_ids", true}}), limits);
  EXPECT_EQ(request.replay, (std::vector<int32_t>{3, 1, 4}));
  EXPECT_EQ(request.replay_accept, 2);
  EXPECT_TRUE(request.return_token_ids);
  EXPECT_EQ(parse_chat_request(chat_body({{"replay", {{"token_ids", {5}}}}}), limits).replay_accept, 0);

  auto error_with = [&](const json& value) {
    return error_of([&] { parse_chat_request(chat_body({{"replay", value}}), limits); });
  };
  EXPECT_EQ(error_with({{"accept", 2}}).param, "replay.token_ids");
  EXPECT_EQ(error_with({{"token_ids", "1 2"}}).param, "replay.token_ids");
  EXPECT_EQ(error_with({{"token_ids", {1, -2}}}).param, "replay.token_ids");
  EXPECT_EQ(error_with({{"token_ids", {1}}, {"accept", 0}}).param, "replay.accept");
  EXPECT_EQ(error_with({{"token_ids", {1}}, {"accept", "4"}}).param, "replay.accept");
  EXPECT_EQ(error_with(json::array({1, 2})).param, "replay");
  EXPECT_EQ(chat_error({{"return_token_ids", 1}}).param, "return_token_ids");
}

TEST(OpenAiProtocol, UnknownModelIs404AndAliasesAreAccepted) {
  const ApiError error = chat_error({{"model", "gpt-4o"}});
  EXPECT_EQ(error.status, 404);
  EXPECT_EQ(error.code, "model_not_found");
  EXPECT_NO_THROW(parse_chat_request(chat_body({{"model", "models/qwen3-tiny-chat"}}),
                                     test_limits()));
  json without_model = chat_body();
  without_model.erase("model");
  EXPECT_NO_THROW(parse_chat_request(without_model, test_limits()));
}

TEST(OpenAiProtocol, BadMessagesAreRejected) {
  json body = chat_body();
  body.erase("messages");
  EXPECT_EQ(error_of([&] { parse_chat_request(body, test_limits()); }).param, "messages");
  EXPECT_EQ(chat_error({{"messages", json::array()}}).param, "messages");
  EXPECT_EQ(chat_error({{"messages", "hi"}}).param, "messages");
  EXPECT_EQ(chat_error({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}).param,
            "messages[0].role");
  EXPECT_EQ(chat_error({{"messages", {{{"content", "x"}}}}}).param, "messages[0].role");
  EXPECT_EQ(chat_error({{"messages", {{{"role", "user"}}}}}).param, "messages[0].content");
  EXPECT_EQ(chat_error({{"messages", {{{"role", "user"}, {"content", 5}}}}}).param,
            "messages[0].content");
  EXPECT_EQ(chat_error({{"messages",
                         {{{"role", "user"},
                           {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}}}})
                .param,
            "messages[0].content[0]");
  EXPECT_EQ(chat_error({{"messages", {"just a string"}}}).param, "messages[0]");
}

TEST(OpenAiProtocol, CompletionPrompts) {
  const ProtocolLimits limits = test_limits();
  CompletionRequest text = parse_completion_request({{"prompt", "Once upon"}}, limits);
  EXPECT_EQ(text.prompt_text, "Once upon");
  EXPECT_EQ(text.n_top_logprobs, -1);
  CompletionRequest ids =
      parse_completion_request({{"prompt", {1, 2, 3}}, {"logprobs", 2}}, limits);
  EXPECT_FALSE(ids.prompt_text.has_value());
  EXPECT_EQ(ids.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids.n_top_logprobs, 2);
  CompletionRequest batch_of_one = parse_completion_request({{"prompt", {"hello"}}}, limits);
  EXPECT_EQ(batch_of_one.prompt_text, "hello");
  CompletionRequest ids_batch_of_one =
      parse_completion_request({{"prompt", json::array({json::array({4, 5})})}}, limits);
  EXPECT_EQ(ids_batch_of_one.prompt_tokens, (std::vector<int32_t>{4, 5}));
}

TEST(OpenAiProtocol, BadCompletionPromptsAreRejected) {
  EXPECT_EQ(completion_error(json::object()).param, "prompt");
  EXPECT_EQ(completion_error({{"prompt", ""}}).param, "prompt");
  EXPECT_EQ(completion_error({{"prompt", json::array()}}).param, "prompt");
  EXPECT_EQ(completion_error({{"prompt", {1, -2}}}).param, "prompt");
  EXPECT_EQ(completion_error({{"prompt", {1, "a"}}}).param, "prompt");
  EXPECT_EQ(completion_error({{"prompt", {"a", "b"}}}).param, "prompt");
  EXPECT_EQ(completion_error({{"prompt", 12}}).param, "prompt");
  EXPECT_EQ(completion_error({{"prompt", "x"}, {"logprobs", 6}}).param, "logprobs");
  EXPECT_EQ(completion_error({{"prompt", "x"}, {"logprobs", true}}).param, "logprobs");
}

// Token ids beyond int32 are refused here, parsed from the wire (they would otherwise wrap to
// another token); ids inside int32 but past the vocabulary are the engine's to refuse.
TEST(OpenAiProtocol, TokenIdsOutsideInt32AreRefused) {
  for (const char* id : {"1099511627776", "2147483648", "18446744073709551615", "-1", "1.0", "1e3"}) {
    SCOPED_TRACE(id);
    const json prompt = parse_body(std::string(R"({"prompt": [5, )") + id + "]}");
    EXPECT_EQ(completion_error(prompt).param, "prompt");
    const json tokens = parse_body(std::string(R"({"tokens": [5, )") + id + "]}");
    EXPECT_EQ(error_of([&] { parse_detokenize_request(tokens); }).param, "tokens");
  }
  EXPECT_EQ(parse_completion_request(parse_body(R"({"prompt": [2147483647]})"), test_limits()).prompt_tokens,
            (std::vector<int32_t>{2147483647}));
}

TEST(OpenAiProtocol, BodyMustBeValidUtf8Json) {
  EXPECT_EQ(parse_body(R"({"a": 1})")["a"], 1);
  EXPECT_EQ(error_of([] { parse_body("{\"prompt\": \"\xff\xfe\"}"); }).status, 400);
  // A parse error says where and why, bounded and still valid UTF-8 however the body is cut.
  EXPECT_EQ(error_of([] { parse_body(R"({"content": "x", "z": 1e400})"); }).status, 400);  // past a double
  const ApiError surrogate = error_of([] { parse_body(R"({"content": "\ud800"})"); });
  EXPECT_NE(std::string(surrogate.what()).find("surrogate"), std::string::npos) << surrogate.what();
  for (const char* lead : {"", "x"}) {  // an unterminated string of two-byte characters, quoted in the error
    std::string body = std::string("{\"a\": \"") + lead;
    for (int i = 0; i < 200; ++i) body += "\xc3\xa9";
    const ApiError long_error = error_of([&] { parse_body(body); });
    EXPECT_LT(std::string(long_error.what()).size(), 420u);
    EXPECT_NO_THROW(error_body(long_error).dump()) << long_error.what();
  }
  // Nesting past the bound is refused before anything walks it (printing and the schema converter
  // recurse); brackets inside strings do not count.
  const auto nested = [](int depth) { return "{\"a\": " + std::string(size_t(depth - 1), '[') + std::string(size_t(depth - 1), ']') + "}"; };
  EXPECT_EQ(parse_body(nested(kMaxJsonNesting)).size(), 1u);
  EXPECT_EQ(error_of([&] { parse_body(nested(kMaxJsonNesting + 1)); }).status, 400);
  EXPECT_EQ(error_of([] { parse_body("{\"a\": " + std::string(1000000, '[') + "}"); }).status, 400);
  EXPECT_EQ(parse_body("{\"a\": \"" + std::string(1000, '[') + "\\\"{\"}")["a"].get<std::string>().size(), 1002u);
  EXPECT_NE(std::string(error_of([] { parse_body("{\"prompt\": \"\xc3\"}"); }).what())
                .find("UTF-8"),
            std::string::npos);
  EXPECT_EQ(error_of([] { parse_body("{not json"); }).status, 400);
  EXPECT_EQ(error_of([] { parse_body("[1, 2]"); }).status, 400);
  EXPECT_EQ(error_of([] { parse_body(""); }).status, 400);
}

TEST(OpenAiProtocol, TokenizeBodies) {
  const ProtocolLimits limits = test_limits();
  EXPECT_EQ(parse_tokenize_request({{"content", "hi"}}, limits).content, "hi");
  EXPECT_FALSE(parse_tokenize_request({{"content", "hi"}, {"add_special", false}}, limits).add_special);
  EXPECT_TRUE(parse_tokenize_request({{"content", "hi"}, {"with_pieces", true}}, limits).with_pieces);
  EXPECT_EQ(error_of([&] { parse_tokenize_request(json::object(), limits); }).param, "content");
  EXPECT_EQ(error_of([&] { parse_tokenize_request({{"content", 1}}, limits); }).param, "content");
  EXPECT_EQ(error_of([&] { parse_tokenize_request({{"with_pieces", "yes"}, {"content", "a"}}, limits); }).param, "with_pieces");
  const TokenizeRequest chat = parse_tokenize_request(
      {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"add_generation_prompt", false}}, limits);
  ASSERT_TRUE(chat.chat);
  EXPECT_EQ(chat.chat->messages[0].content, "hi");
  EXPECT_FALSE(chat.chat->chat_options.add_generation_prompt);
  EXPECT_EQ(error_of([&] { parse_tokenize_request({{"messages", json::array()}}, limits); }).param, "messages");
  EXPECT_EQ(parse_detokenize_request({{"tokens", {3, 4}}}), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(error_of([] { parse_detokenize_request({{"tokens", "ab"}}); }).param, "tokens");
}

// add_generation_prompt and continue_final_message on chat requests (and /tokenize, which shares them):
// continuing turns the generation prompt off unless asked for, and needs an assistant message last.
TEST(OpenAiProtocol, ContinueFinalMessage) {
  const ProtocolLimits limits = test_limits();
  const json user = {{"role", "user"}, {"content", "hi"}};
  const json assistant = {{"role", "assistant"}, {"content", "The"}};
  const auto chat_options = [&](json body) { return parse_chat_request(body, limits).chat_options; };
  const ChatOptions continued = chat_options({{"messages", {user, assistant}}, {"continue_final_message", true}});
  EXPECT_TRUE(continued.continue_final_message);
  EXPECT_FALSE(continued.add_generation_prompt);
  EXPECT_FALSE(chat_options({{"messages", {user}}, {"add_generation_prompt", false}}).add_generation_prompt);
  EXPECT_TRUE(chat_options({{"messages", {user}}}).add_generation_prompt);
  const auto param_of = [&](json body) { return error_of([&] { parse_chat_request(body, limits); }).param; };
  EXPECT_EQ(param_of({{"messages", {user, assistant}}, {"continue_final_message", true}, {"add_generation_prompt", true}}),
            "continue_final_message");
  EXPECT_EQ(param_of({{"messages", {user}}, {"continue_final_message", true}}), "continue_final_message");
  EXPECT_EQ(param_of({{"messages", {user}}, {"continue_final_message", "yes"}}), "continue_final_message");
  EXPECT_EQ(param_of({{"messages", {user}}, {"add_generation_prompt", 0}}), "add_generation_prompt");
  // A per-request template is refused by name rather than ignored.
  EXPECT_EQ(param_of({{"messages", {user}}, {"chat_template", "{{ messages[0].content }}"}}), "chat_template");
  EXPECT_TRUE(parse_tokenize_request({{"messages", {user, assistant}}, {"continue_final_message", true}}, limits)
                  .chat->chat_options.continue_final_message);
}

TEST(OpenAiProtocol, ErrorBodyHasOpenAiShape) {
  const json body = error_body(ApiError(404, "no such model", "invalid_request_error", "model",
                                        "model_not_found"));
  EXPECT_EQ(body["error"]["message"], "no such model");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "model");
  EXPECT_EQ(body["error"]["code"], "model_not_found");
  const json bare = error_body(ApiError(500, "boom", "server_error"));
  EXPECT_TRUE(bare["error"]["param"].is_null());
  EXPECT_TRUE(bare["error"]["code"].is_null());
}

TEST(OpenAiProtocol, ReplyCarriesUsageTimingsShaAndSeed) {
  const ReplyHeader header{Endpoint::chat, "chatcmpl-1", 1700000000, "m", 99};
  ReplySummary summary;
  summary.finish_reason = FinishReason::length;
  summary.prompt_tokens = 5;
  summary.completion_tokens = 3;
  summary.timings.predicted_n = 3;
  summary.timings.rounds = 2;
  summary.token_sha = "abc";
  AssembledReply hey;
  hey.content = "hey";
  auto whole = [&](const ReplyHeader& h, const AssembledReply& r) {
    return reply_json(h, json::array({choice_json(h, 0, r, nullptr, summary, h.seed)}), summary, usage_json(summary));
  };
  const json reply = whole(header, hey);
  EXPECT_EQ(reply["object"], "chat.completion");
  EXPECT_EQ(reply["choices"][0]["message"]["content"], "hey");
  EXPECT_EQ(reply["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(reply["usage"]["total_tokens"], 8);
  EXPECT_EQ(reply["timings"]["tokens_per_round"], 1.5);
  for (const char* key : {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "rounds",
                          "draft_n", "draft_accepted_n", "tokens_per_round"})
    EXPECT_TRUE(reply["timings"].contains(key)) << key;
  EXPECT_EQ(reply["token_sha"], "abc");
  EXPECT_EQ(reply["seed"], 99);
  // A negative seed comes back as the client sent it (held as its two's complement), so it replays.
  ReplyHeader negative = header;
  negative.seed = uint64_t(-5);
  EXPECT_EQ(whole(negative, hey)["seed"], -5);
  EXPECT_EQ(whole(negative, hey)["choices"][0]["seed"], -5);
  EXPECT_FALSE(reply.contains("completion_token_ids"));
  summary.token_ids = std::vector<int32_t>{7, 8, 9};
  EXPECT_EQ(whole(header, hey)["completion_token_ids"], json({7, 8, 9}));
  EXPECT_EQ(final_chunk_json(header, 0, summary, false, 99)["completion_token_ids"], json({7, 8, 9}));

  const ReplyHeader completion{Endpoint::completion, "cmpl-1", 1, "m", 1};
  AssembledReply ok;
  ok.content = "ok";
  const json text_reply = whole(completion, ok);
  EXPECT_EQ(text_reply["object"], "text_completion");
  EXPECT_EQ(text_reply["choices"][0]["text"], "ok");
}

TEST(OpenAiProtocol, StreamChunks) {
  const ReplyHeader header{Endpoint::chat, "chatcmpl-1", 1, "m", 7};
  EXPECT_EQ(opening_chunk_json(header, 0)["choices"][0]["delta"]["role"], "assistant");
  ReplyPiece to;
  to.content = "to";
  const json delta = delta_chunk_json(header, 0, to, nullptr);
  EXPECT_EQ(delta["object"], "chat.completion.chunk");
  EXPECT_EQ(delta["choices"][0]["delta"]["content"], "to");
  EXPECT_TRUE(delta["choices"][0]["finish_reason"].is_null());
  ReplySummary summary;
  summary.token_sha = "f00";
  const json final_chunk = final_chunk_json(header, 0, summary, false, 7);
  EXPECT_EQ(final_chunk["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(final_chunk["token_sha"], "f00");
  EXPECT_TRUE(final_chunk.contains("timings"));
  EXPECT_FALSE(final_chunk.contains("usage"));  // only the include_usage chunk reports it
  const json usage = usage_chunk_json(header, usage_json(summary), summary);
  EXPECT_EQ(usage["token_sha"], "f00");
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_TRUE(usage.contains("usage"));
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(OpenAiProtocol, LogprobsForBothEndpoints) {
  const LetterTokenizer tokenizer;
  const std::vector<TokenLogprobs> logprobs = {{0, -0.5f, {{0, -0.5f}, {1, -1.5f}}},
                                               {2, -0.25f, {{2, -0.25f}}}};
  const json chat = logprobs_json(Endpoint::chat, {logprobs, {0, 1}}, tokenizer);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], "a");
  EXPECT_EQ(chat["content"][0]["bytes"], json::array({97}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "b");
  const json completion = logprobs_json(Endpoint::completion, {logprobs, {10, 11}}, tokenizer);
  EXPECT_EQ(completion["tokens"], json::array({"a", "c"}));
  EXPECT_EQ(completion["text_offset"], json::array({10, 11}));
  EXPECT_EQ(completion["top_logprobs"][0]["b"], -1.5);
}

// Tokens of raw bytes: 中 split in three, é whole, x.
class ByteTokenizer : public LetterTokenizer {
 public:
  std::string token_bytes(int32_t id) const override {
    static const char* const bytes[] = {"\xe4", "\xb8", "\xad", "\xc3\xa9", "x"};
    return bytes[id];
  }
  int64_t n_tokens() const override { return 5; }
};

// Completions name byte tokens as OpenAI does ("bytes:\xe4"), so alternatives never collapse into one
// "\ufffd" key; the chosen token is among its alternatives. (Offsets: test_logprob_release.cpp.)
TEST(OpenAiProtocol, CompletionLogprobsNameByteTokensAsOpenAiDoes) {
  const ByteTokenizer tokenizer;
  const std::vector<TokenLogprobs> logprobs = {{3, -0.1f, {{3, -0.1f}}},
                                               {4, -0.2f, {{4, -0.2f}}},
                                               {0, -0.7f, {{1, -0.5f}, {2, -0.6f}}},
                                               {1, -0.3f, {{1, -0.3f}, {4, -1.0f}}},
                                               {2, -0.4f, {}}};
  const json completion = logprobs_json(Endpoint::completion, {logprobs, {5, 6, 7, 8, 8}}, tokenizer);
  EXPECT_EQ(completion["tokens"], json::array({"\xc3\xa9", "x", "bytes:\\xe4", "bytes:\\xb8", "bytes:\\xad"}));
  EXPECT_EQ(completion["text_offset"], json::array({5, 6, 7, 8, 8}));
  const json& third = completion["top_logprobs"][2];
  EXPECT_EQ(third.size(), 3u);
  EXPECT_FLOAT_EQ(third["bytes:\\xb8"].get<float>(), -0.5f);
  EXPECT_FLOAT_EQ(third["bytes:\\xad"].get<float>(), -0.6f);
  EXPECT_FLOAT_EQ(third["bytes:\\xe4"].get<float>(), -0.7f);  // the chosen one, though not in the top
  // logprobs 0: no alternatives asked, the chosen token still given (OpenAI: up to logprobs + 1)
  EXPECT_EQ(completion["top_logprobs"][4], json({{"bytes:\\xad", -0.4f}}));
}

TEST(OpenAiProtocol, DumpReplacesInvalidUtf8) {
  EXPECT_EQ(dump_json(json("a\xe4")), "\"a\xef\xbf\xbd\"");
}

// An exception that escapes a handler: the request's fault keeps its words and a 4xx; a bug or a
// machine failure answers 500 without a word of its text.
TEST(OpenAiProtocol, InternalErrorsAnswer500WithoutTheirText) {
  const ApiError user = api_error_for(tf::Error("the prompt names a missing file"));
  EXPECT_EQ(user.status, 400);
  EXPECT_EQ(user.type, "invalid_request_error");
  EXPECT_STREQ(user.what(), "the prompt names a missing file");

  for (const ApiError& ours : {api_error_for(tf::InternalError("batch row 3 has an invalid parent")),
                               api_error_for(std::runtime_error("cudaMalloc at 0x7f00"))}) {
    EXPECT_EQ(ours.status, 500);
    EXPECT_EQ(ours.type, "server_error");
    EXPECT_EQ(std::string(ours.what()).find("parent"), std::string::npos);
    EXPECT_EQ(std::string(ours.what()).find("0x7f00"), std::string::npos);
  }
  const ApiError passed = api_error_for(ApiError(404, "no such model", "invalid_request_error", "model"));
  EXPECT_EQ(passed.status, 404);
  EXPECT_EQ(passed.param, "model");
}

// --- Chat fields: tools, tool calls, the reasoning switches, refused fields, choices.

static json weather_tool() {
  return json::parse(R"({"type": "function", "function": {"name": "get_weather", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}}}}})");
}

TEST(OpenAiProtocol, ToolsKeepTheirKeyOrderAndToolCallsParse) {
  const json tools = json::array({json::parse(R"({"type": "function", "function": {"parameters": {}, "name": "b_first"}})")});
  const CompletionRequest request = parse_chat_request(chat_body({{"tools", tools}, {"tool_choice", "auto"},
                                                                  {"parallel_tool_calls", false}}), test_limits());
  ASSERT_EQ(request.chat_options.tools.size(), 1u);
  EXPECT_EQ(request.chat_options.tools[0].dump(), R"({"type":"function","function":{"parameters":{},"name":"b_first"}})");
  EXPECT_FALSE(request.parallel_tool_calls);
  EXPECT_EQ(request.tool_choice.mode, ToolChoiceMode::automatic);

  json body = chat_body({{"tools", json::array({weather_tool()})}});
  body["messages"] = json::parse(R"([{"role": "developer", "content": "be brief"}, {"role": "user", "content": "w?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "cold"}])");
  ProtocolLimits limits = test_limits();
  const CompletionRequest qwen3 = parse_chat_request(body, limits);
  EXPECT_EQ(qwen3.messages[0].role, "system");  // developer is the system prompt
  ASSERT_EQ(qwen3.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(qwen3.messages[2].tool_calls[0].name, "get_weather");
  EXPECT_EQ(qwen3.messages[2].tool_calls[0].arguments, "{\"city\": \"Oslo\"}");  // Qwen3 writes the string as is
  limits.chat_family = ChatTemplateFamily::qwen3_5;
  const CompletionRequest qwen3_5 = parse_chat_request(body, limits);
  EXPECT_EQ(qwen3_5.messages[2].tool_calls[0].arguments["city"], "Oslo");  // one <parameter> per key
  body["messages"][2]["tool_calls"][0]["function"]["arguments"] = "[1, 2]";
  EXPECT_EQ(error_of([&] { parse_chat_request(body, limits); }).param, "messages[2].tool_calls[0].function.arguments");
  body["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{\"n\": 1e400}";  // an object nlohmann cannot hold
  const ApiError overflow = error_of([&] { parse_chat_request(body, limits); });
  EXPECT_EQ(overflow.param, "messages[2].tool_calls[0].function.arguments");
  EXPECT_NE(std::string(overflow.what()).find("not valid JSON"), std::string::npos) << overflow.what();
  limits.chat_family = ChatTemplateFamily::chatml;
  EXPECT_EQ(error_of([&] { parse_chat_request(chat_body({{"tools", json::array({weather_tool()})}}), limits); }).param,
            "tools");
  // tool_choice 'none' leaves the tools out of the prompt: any template takes them.
  EXPECT_NO_THROW(parse_chat_request(chat_body({{"tools", json::array({weather_tool()})}, {"tool_choice", "none"}}), limits));
}

// Python's json keeps an integer of any size, so the reference's prompt has its digits; nlohmann
// alone would make it a double and write 1.2345678901234568e+29.
TEST(OpenAiProtocol, BigIntegersInToolsAndArgumentsReachThePromptAsWritten) {
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "pick", "parameters": {"type": "object",
      "properties": {"n": {"type": "integer", "maximum": 123456789012345678901234567890, "minimum": -1.0}}}}}])";
  const auto body_text = [&](const std::string& arguments) {
    return R"({"model": "qwen3-tiny-chat", )" + tools + R"(, "messages": [{"role": "user", "content": "pick"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "pick", "arguments": )" + arguments + R"(}}]}, {"role": "tool", "content": "ok"}]})";
  };
  for (const ChatTemplateFamily family : {ChatTemplateFamily::qwen3, ChatTemplateFamily::qwen3_5}) {
    for (const std::string arguments : {R"({"n": -98765432109876543210987654321})",
                                        R"("{\"n\": -98765432109876543210987654321}")"}) {
      ProtocolLimits limits = test_limits();
      limits.chat_family = family;
      const std::string text = body_text(arguments);
      CompletionRequest request = parse_chat_request(parse_body(text), limits);
      keep_numbers_as_written(text, request);
      const std::string prompt = ChatTemplate(family).render(request.messages, request.chat_options).text;
      const std::string where = std::string(ChatTemplate(family).family_name()) + " " + arguments + ":\n" + prompt;
      EXPECT_NE(prompt.find(R"("maximum": 123456789012345678901234567890, "minimum": -1.0)"), std::string::npos) << where;
      EXPECT_NE(prompt.find("-98765432109876543210987654321"), std::string::npos) << where;
      EXPECT_EQ(prompt.find("e+"), std::string::npos) << where;
    }
  }
}

TEST(OpenAiProtocol, BadToolFieldsNameTheirParameter) {
  const json tools = json::array({weather_tool()});
  EXPECT_EQ(chat_error({{"tools", "get_weather"}}).param, "tools");
  EXPECT_EQ(chat_error({{"tools", json::array({1})}}).param, "tools[0]");
  EXPECT_EQ(chat_error({{"tools", json::parse(R"([{"type": "retrieval", "function": {"name": "x"}}])")}}).param, "tools[0].type");
  EXPECT_EQ(chat_error({{"tools", json::parse(R"([{"type": "function"}])")}}).param, "tools[0].function");
  EXPECT_EQ(chat_error({{"tools", json::parse(R"([{"type": "function", "function": {"name": ""}}])")}}).param,
            "tools[0].function.name");
  EXPECT_EQ(chat_error({{"tools", json::array({weather_tool(), weather_tool()})}}).param, "tools[1].function.name");
  EXPECT_EQ(chat_error({{"tools", json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": 3}}])")}}).param,
            "tools[0].function.parameters");
  EXPECT_EQ(chat_error({{"tools", tools}, {"tool_choice", "sometimes"}}).param, "tool_choice");
  EXPECT_EQ(chat_error({{"tools", tools}, {"tool_choice", 3}}).param, "tool_choice");
  EXPECT_EQ(chat_error({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}).param,
            "tool_choice.function.name");
  EXPECT_EQ(chat_error({{"tool_choice", "required"}}).param, "tool_choice");  // nothing to call
  // required and a named function are constrained by the tool-call grammar, and kept for the reply parser.
  const CompletionRequest required = parse_chat_request(chat_body({{"tools", tools}, {"tool_choice", "required"}}), test_limits());
  EXPECT_EQ(required.tool_choice.mode, ToolChoiceMode::required);
  EXPECT_EQ(required.constraints.grammar_param, "tool_choice");
  EXPECT_FALSE(required.constraints.grammar_text.empty());
  const CompletionRequest named = parse_chat_request(
      chat_body({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", tools[0]["function"]}}}}), test_limits());
  EXPECT_EQ(named.tool_choice.mode, ToolChoiceMode::function);
  EXPECT_EQ(named.constraints.grammar_param, "tool_choice");
  ProtocolLimits xml_calls = test_limits();
  xml_calls.chat_family = ChatTemplateFamily::qwen3_5;  // its calls are XML, and so is the forced grammar
  const CompletionRequest xml_required = parse_chat_request(chat_body({{"tools", tools}, {"tool_choice", "required"}}), xml_calls);
  EXPECT_NE(xml_required.constraints.grammar_text.find("<function="), std::string::npos);
  EXPECT_NE(xml_required.constraints.grammar_text.find("reasoning-text-0 \"</think>"), std::string::npos)
      << "thinking is on: the prompt opened <think>, the call follows its close";
  EXPECT_EQ(xml_required.constraints.grammar_start, "reasoning-then-answer");
  json no_thinking = chat_body({{"tools", tools}, {"tool_choice", "required"}, {"reasoning_effort", "none"}});
  EXPECT_EQ(parse_chat_request(no_thinking, xml_calls).constraints.grammar_text.find("</think>"), std::string::npos);
  EXPECT_NO_THROW(parse_chat_request(chat_body({{"tools", tools}, {"tool_choice", "auto"}}), xml_calls));
  EXPECT_EQ(chat_error({{"tools", tools}, {"parallel_tool_calls", "no"}}).param, "parallel_tool_calls");
  json body = chat_body();
  body["messages"] = json::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])");
  EXPECT_EQ(error_of([&] { parse_chat_request(body, test_limits()); }).param, "messages[1].tool_calls[0].function.name");
  body["messages"][1]["tool_calls"] = json::parse(R"([{"function": {"name": "f"}}])");
  EXPECT_EQ(error_of([&] { parse_chat_request(body, test_limits()); }).param, "messages[1].tool_calls[0].function.arguments");
  body["messages"][1]["tool_calls"] = json::parse(R"([{"function": {"name": "f", "arguments": 5}}])");
  EXPECT_EQ(error_of([&] { parse_chat_request(body, test_limits()); }).param, "messages[1].tool_calls[0].function.arguments");
  body["messages"][1]["tool_calls"] = json::parse(R"([{"type": "web", "function": {"name": "f", "arguments": "{}"}}])");
  EXPECT_EQ(error_of([&] { parse_chat_request(body, test_limits()); }).param, "messages[1].tool_calls[0].type");
  body["messages"] = json::parse(R"([{"role": "user", "content": "q", "tool_calls": []}])");
  EXPECT_EQ(error_of([&] { parse_chat_request(body, test_limits()); }).param, "messages[0].tool_calls");
  body["messages"] = json::parse(R"([{"role": "tool"}])");
  EXPECT_EQ(error_of([&] { parse_chat_request(body, test_limits()); }).param, "messages[0].content");
}

TEST(OpenAiProtocol, ReasoningSwitches) {
  const ProtocolLimits limits = test_limits();
  auto thinking = [&](json extra) { return parse_chat_request(chat_body(std::move(extra)), limits).chat_options.enable_thinking; };
  EXPECT_EQ(thinking({{"reasoning_effort", "none"}}), false);
  EXPECT_EQ(thinking({{"reasoning_effort", "high"}}), true);
  EXPECT_EQ(thinking({{"chat_template_kwargs", {{"enable_thinking", false}}}}), false);
  EXPECT_EQ(thinking(json::object()), std::nullopt);
  EXPECT_EQ(parse_chat_request(chat_body({{"chat_template_kwargs", {{"preserve_thinking", true}}}}), limits)
                .chat_options.preserve_thinking, true);
  EXPECT_EQ(chat_error({{"reasoning_effort", "max"}}).param, "reasoning_effort");
  EXPECT_EQ(chat_error({{"reasoning_effort", 1}}).param, "reasoning_effort");
  EXPECT_EQ(chat_error({{"reasoning_effort", "low"}, {"chat_template_kwargs", {{"enable_thinking", false}}}}).param,
            "reasoning_effort");
  EXPECT_EQ(chat_error({{"chat_template_kwargs", {{"enable_thinking", "no"}}}}).param, "chat_template_kwargs.enable_thinking");
  EXPECT_EQ(chat_error({{"chat_template_kwargs", {{"thinking_budget", 5}}}}).param, "chat_template_kwargs.thinking_budget");
  ProtocolLimits chatml = test_limits();
  chatml.chat_family = ChatTemplateFamily::chatml;
  EXPECT_EQ(error_of([&] { parse_chat_request(chat_body({{"reasoning_effort", "low"}}), chatml); }).param, "reasoning_effort");
  EXPECT_NO_THROW(parse_chat_request(chat_body({{"reasoning_effort", "none"}}), chatml));
}

TEST(OpenAiProtocol, UnsupportedOpenAiFieldsAreRefusedByName) {
  for (const char* field : {"functions", "function_call", "audio", "web_search_options", "verbosity"})
    EXPECT_EQ(chat_error({{field, json::object()}}).param, field) << field;
  // The constraint fields are honoured (constraint_params), not refused.
  const CompletionRequest constrained = parse_chat_request(
      chat_body({{"logit_bias", {{"1", 5}}}, {"prediction", {{"type", "content"}, {"content", "x"}}},
                 {"ignore_eos", true}, {"min_tokens", 1}, {"stop_token_ids", {2}}}),
      test_limits());
  EXPECT_EQ(constrained.constraints.logit_bias.size(), 1u);
  EXPECT_EQ(parse_chat_request(chat_body({{"response_format", {{"type", "json_object"}}}}), test_limits())
                .constraints.grammar_param, "response_format");
  EXPECT_EQ(constrained.constraints.prediction, std::optional<std::string>("x"));
  EXPECT_TRUE(constrained.constraints.ignore_eos);
  EXPECT_EQ(constrained.constraints.min_tokens, 1);
  EXPECT_EQ(constrained.constraints.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(chat_error({{"store", true}}).param, "store");
  EXPECT_NO_THROW(parse_chat_request(chat_body({{"store", false}, {"user", "u1"}, {"metadata", {{"k", "v"}}}}), test_limits()));
  EXPECT_EQ(chat_error({{"modalities", {"text", "audio"}}}).param, "modalities");
  EXPECT_NO_THROW(parse_chat_request(chat_body({{"modalities", {"text"}}}), test_limits()));
  for (const auto& [field, value] : {std::pair<const char*, json>{"best_of", 2}, {"echo", true}, {"suffix", "x"}})
    EXPECT_EQ(completion_error({{"prompt", "p"}, {field, value}}).param, field) << field;
  // The values that ask for nothing (which SDKs send) are accepted.
  EXPECT_NO_THROW(parse_completion_request(json{{"prompt", "p"}, {"best_of", 1}, {"echo", false}, {"suffix", ""}},
                                           test_limits()));
  EXPECT_NO_THROW(parse_chat_request(chat_body({{"functions", json::array()}, {"function_call", "none"}}), test_limits()));
  // A penalty of another server's API is refused, not silently ignored (1 asks for none).
  EXPECT_EQ(chat_error({{"repetition_penalty", 1.3}}).param, "repetition_penalty");
  EXPECT_EQ(completion_error({{"prompt", "p"}, {"repeat_penalty", 1.1}}).param, "repeat_penalty");
  EXPECT_NO_THROW(parse_chat_request(chat_body({{"repetition_penalty", 1.0}}), test_limits()));
  // llama.cpp's slot pin is honoured (OpenAiProtocol.IdSlotPinsOneReplyToAnExistingSlot), not refused.
  EXPECT_EQ(parse_chat_request(chat_body({{"id_slot", 0}}), test_limits()).id_slot, 0);
  EXPECT_EQ(parse_completion_request(json{{"prompt", "p"}, {"logit_bias", {{"1", -5}}}}, test_limits())
                .constraints.logit_bias.size(), 1u);
  EXPECT_EQ(chat_error({{"messages", json::parse(R"([{"role": "narrator", "content": "x"}])")}}).param, "messages[0].role");
}

// id_slot (llama.cpp's): -1 or absent is any free slot, 0..n_slots-1 pins the reply to that slot; any
// other value, a wrong type, or a pin with n > 1 (whose choices run in several slots) is a 400 naming it.
TEST(OpenAiProtocol, IdSlotPinsOneReplyToAnExistingSlot) {
  ProtocolLimits limits = test_limits();
  limits.n_slots = 4;
  EXPECT_EQ(parse_chat_request(chat_body(), limits).id_slot, -1);
  EXPECT_EQ(parse_chat_request(chat_body({{"id_slot", -1}}), limits).id_slot, -1);
  EXPECT_EQ(parse_chat_request(chat_body({{"id_slot", nullptr}}), limits).id_slot, -1);
  EXPECT_EQ(parse_chat_request(chat_body({{"id_slot", 3}}), limits).id_slot, 3);
  EXPECT_EQ(parse_completion_request(json{{"prompt", "p"}, {"id_slot", 1}}, limits).id_slot, 1);
  EXPECT_EQ(parse_chat_request(chat_body({{"id_slot", -1}, {"n", 3}}), limits).n_choices, 3);
  const auto error = [&](json extra) {
    return error_of([&] { parse_chat_request(chat_body(std::move(extra)), limits); });
  };
  for (const json& value : {json(4), json(-2), json(std::numeric_limits<uint64_t>::max()),
                            json(std::numeric_limits<int64_t>::min())}) {
    const ApiError refused = error({{"id_slot", value}});
    EXPECT_EQ(refused.status, 400) << value;
    EXPECT_EQ(refused.param, "id_slot") << value;
    EXPECT_NE(std::string(refused.what()).find("this server has 4 slots (0..3"), std::string::npos) << refused.what();
  }
  for (const json& value : {json("1"), json(1.5), json(true), json::array({1}), json::object()}) {
    const ApiError refused = error({{"id_slot", value}});
    EXPECT_EQ(refused.param, "id_slot") << value;
    EXPECT_NE(std::string(refused.what()).find("expected an integer"), std::string::npos) << refused.what();
  }
  const ApiError several = error({{"id_slot", 2}, {"n", 2}});
  EXPECT_EQ(several.param, "id_slot");
  EXPECT_NE(std::string(several.what()).find("n = 2"), std::string::npos) << several.what();
  EXPECT_EQ(error_of([&] { parse_completion_request(json{{"prompt", "p"}, {"id_slot", 9}}, limits); }).param, "id_slot");
}

TEST(OpenAiProtocol, ModelDefaultsFillSamplingFieldsARequestOmits) {
  ProtocolLimits limits = test_limits();
  limits.sampling_defaults = {0.6, 0.95, 20, 0.05};
  const CompletionRequest defaulted = parse_chat_request(chat_body(), limits);
  EXPECT_FLOAT_EQ(defaulted.sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(defaulted.sampling.top_p, 0.95f);
  EXPECT_EQ(defaulted.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(defaulted.sampling.min_p, 0.05f);
  const CompletionRequest given = parse_chat_request(chat_body({{"temperature", 0}, {"top_k", 0}}), limits);
  EXPECT_EQ(given.sampling.temperature, 0.0f);
  EXPECT_EQ(given.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(given.sampling.top_p, 0.95f);
  const CompletionRequest openai = parse_chat_request(chat_body(), test_limits());
  EXPECT_EQ(openai.sampling.temperature, 1.0f);  // no generation_config: OpenAI's defaults
}

TEST(OpenAiProtocol, ChoicesGetDistinctReportedSeeds) {
  EXPECT_EQ(parse_chat_request(chat_body({{"n", 4}}), test_limits()).n_choices, 4);
  EXPECT_EQ(seed_of_choice(42, 0), 42u);
  std::set<uint64_t> seeds;
  for (int64_t i = 0; i < 16; ++i) seeds.insert(seed_of_choice(42, i));
  EXPECT_EQ(seeds.size(), 16u);
  EXPECT_EQ(seed_of_choice(42, 3), seed_of_choice(42, 3));
  EXPECT_NE(seed_of_choice(42, 1), seed_of_choice(43, 1));
}

TEST(OpenAiProtocol, ToolCallRepliesAndDeltas) {
  const ReplyHeader header{Endpoint::chat, "chatcmpl-1", 1, "m", 7};
  ReplySummary summary;
  AssembledReply reply;
  reply.reasoning = "think";
  reply.tool_calls = {{"call_0", "get_weather", "{\"city\": \"Oslo\"}"}};
  const json choice = choice_json(header, 2, reply, nullptr, summary, 9);
  EXPECT_EQ(choice["index"], 2);
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(choice["message"]["reasoning_content"], "think");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["type"], "function");
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["seed"], 9);
  summary.finish_reason = FinishReason::length;
  EXPECT_EQ(choice_json(header, 0, reply, nullptr, summary, 9)["finish_reason"], "length");
  ReplyPiece piece;
  piece.tool_calls = {{0, std::string("call_0"), std::string("get_weather"), ""}, {0, std::nullopt, std::nullopt, "{\"a\""}};
  const json delta = delta_chunk_json(header, 1, piece, nullptr)["choices"][0];
  EXPECT_EQ(delta["index"], 1);
  EXPECT_EQ(delta["delta"]["tool_calls"][0]["id"], "call_0");
  EXPECT_EQ(delta["delta"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_FALSE(delta["delta"]["tool_calls"][1].contains("id"));
  EXPECT_EQ(delta["delta"]["tool_calls"][1]["function"]["arguments"], "{\"a\"");
  EXPECT_EQ(final_chunk_json(header, 1, summary, true, 3)["choices"][0]["finish_reason"], "length");
  // A stop string (or EOS) cut the call: the model did not finish calling.
  summary.finish_reason = FinishReason::stop;
  summary.ended_inside_tool_call = true;
  EXPECT_EQ(choice_json(header, 0, reply, nullptr, summary, 9)["finish_reason"], "stop");
  EXPECT_EQ(final_chunk_json(header, 1, summary, true, 3)["choices"][0]["finish_reason"], "stop");
}
