// Token constraints under speculation, on the embedded model with its real tokenizer and drafter (and
// the JSON-schema and tool-call cases on a tiny hybrid too):
// a JSON-schema grammar, a forced Qwen3.5-class tool call, a GBNF grammar, logit_bias, min_tokens and stop_token_ids give the same
// reply drafted (long copy, the drafter, n-grams, a prediction) or undrafted, alone or among other
// lanes, greedy and sampled; constrained neighbours change no token of an unconstrained request.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "engine/lane_constraint.h"
#include "grammar/grammar_matcher.h"
#include "server/chat_reply_parser.h"
#include "server/json_schema_grammar.h"
#include "support/engine_runner.h"
#include "support/equalities.h"
#include "support/fixtures.h"
#include "support/random_drafter.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

using nlohmann::json;
using test::EngineRun;
using test::run_engine;

const std::string kTarget = test::source_path("models/tensorfold-code-target");

// A target with its tokenizer and a block drafter.
struct ConstrainedTarget {
  std::shared_ptr<Model> target;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<DFlashDrafter> drafter;
};

const ConstrainedTarget& embedded() {
  static const ConstrainedTarget loaded = [] {
    ConstrainedTarget t{load_model(kTarget, {}), Tokenizer::from_file(kTarget + "/tokenizer.json"), nullptr};
    t.drafter = load_drafter(test::source_path("models/tensorfold-code-drafter"), *t.target, 0);
    return t;
  }();
  return loaded;
}

// The tiny Qwen3.5-class hybrid with the real Qwen3 vocabulary (the tiny chat model's tokenizer) and
// a random drafter fitting it: constraints on a recurrent state's verify rows.
const ConstrainedTarget& hybrid() {
  static const test::TempDir drafter_dir;
  static const ConstrainedTarget loaded = [] {
    ConstrainedTarget t{load_model(test::fixture_model("qwen3.5-tiny-chat"), {}),
                        Tokenizer::from_file(test::fixture_model("qwen3-tiny-chat") + "/tokenizer.json"), nullptr};
    test::write_random_drafter(drafter_dir.path, t.target->config(), 9);
    t.drafter = load_drafter(drafter_dir.path, *t.target, 0);
    return t;
  }();
  return loaded;
}

const json kSchema = {
    {"type", "object"},
    {"properties",
     {{"name", {{"type", "string"}, {"maxLength", 24}}},
      {"kind", {{"enum", {"function", "class", "module"}}}},
      {"lines", {{"type", "integer"}}},
      {"args", {{"type", "array"}, {"items", {{"type", "string"}, {"pattern", "^[a-z_]{1,12}$"}}}, {"maxItems", 4}}},
      {"pure", {{"type", "boolean"}}}}},
    {"required", {"kind", "name", "lines", "args"}}};

// Prompts that quote a JSON reply of the schema's shape, so long copy and n-grams propose it.
std::vector<std::string> prompts() {
  const std::string example =
      R"({"args": ["items", "target"], "kind": "function", "lines": 12, "name": "binary_search", "pure": true})";
  return {
      "Describe def binary_search(items, target) as JSON like " + example + "\nJSON: " + example + "\nJSON: ",
      "def parse_args(argv):\n    return argv[1:]\n# as JSON:\n",
      "class Stack:\n    def push(self, item):\n        self.items.append(item)\n",
      "JSON: " + example + "\n" + example + "\n",
  };
}

// One grammar's requests over `texts`, greedy or sampled (a seed each).
std::vector<GenerationRequest> constrained_requests(const ConstrainedTarget& t, const std::string& gbnf,
                                                    const std::vector<std::string>& texts, bool sampled,
                                                    float temperature = 0.9f) {
  auto grammar = Grammar::parse(gbnf);
  std::vector<GenerationRequest> requests;
  int i = 0;
  for (const std::string& text : texts) {
    GenerationRequest r;
    r.prompt = t.tokenizer->encode(text);
    r.max_tokens = 60;
    r.constraints.grammar = grammar;
    if (sampled) {
      r.sampling.temperature = temperature;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = uint64_t(70 + i);
    }
    requests.push_back(r);
    ++i;
  }
  return requests;
}

std::vector<GenerationRequest> schema_requests(const ConstrainedTarget& t, bool sampled) {
  return constrained_requests(t, server::json_schema_gbnf(kSchema, "schema"), prompts(), sampled);
}

// A forced Qwen3.5-class call of one tool, and prompts that quote such calls (long copy and
// n-grams propose them) or code (a raw string parameter runs on).
const char* kXmlCall = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
                       "</parameter>\n</function>\n</tool_call>";
std::vector<GenerationRequest> xml_call_requests(const ConstrainedTarget& t, bool sampled) {
  const auto weather_tool = [](const char* city_schema) {
    return std::vector<server::ToolSchema>{
        {"get_weather",
         nlohmann::ordered_json::parse(std::string(R"({"type": "object", "properties": {"city": )") + city_schema +
                                       R"(, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
                                          "required": ["city", "days"]})"),
         "tools[0].function.parameters"}};
  };
  const std::string call = kXmlCall;
  const float temperature = 0.5f;  // cooler: the small model's free text runs on
  // A free-text city: the model's string may never close within the budget.
  auto requests = constrained_requests(
      t, server::tool_call_gbnf(weather_tool(R"({"type": "string"})"), {server::ToolCallSyntax::qwen3_5_xml, false}),
      {"Call the tool like this:\n" + call + "\n" + call + "\n", call + "\n" + call + "\n" + call + "\n",
       "def get_weather(city, days):\n    return city\n"},
      sampled, temperature);
  // A city from a list, so the call's end is a few forced tokens away and some replies complete
  // whatever the numerics (the free-text ones did by chance).
  const auto listed = constrained_requests(
      t,
      server::tool_call_gbnf(weather_tool(R"({"type": "string", "enum": ["Paris", "Rome"]})"),
                             {server::ToolCallSyntax::qwen3_5_xml, false}),
      {call + "\n" + call + "\n", "Paris, 3 days:\n" + call + "\nParis, 3 days:\n"}, sampled, temperature);
  requests.insert(requests.end(), listed.begin(), listed.end());
  for (size_t i = requests.size() - listed.size(); i < requests.size(); ++i) requests[i].max_tokens = 80;  // a whole call
  return requests;
}

// A stopped forced call is one whole call the reply parser reads, with its required parameters.
void expect_valid_xml_call(const ConstrainedTarget& t, const Reply& reply, const GenerationRequest& request) {
  const std::string text = t.tokenizer->decode(reply.tokens);
  GrammarMatcher matcher(request.constraints.grammar, grammar_vocabulary(*t.tokenizer, t.target->config().vocab_size));
  GrammarState state = matcher.advance_bytes(matcher.start(), text);
  ASSERT_FALSE(state.is_dead()) << text;
  if (reply.final_update.finish_reason != FinishReason::stop) return;
  EXPECT_TRUE(state.is_complete) << text;
  server::ReplyParserOptions options;
  options.family = ChatTemplateFamily::qwen3_5;
  options.parses_tool_calls = true;
  options.parameter_types["get_weather"] = {{"city", "string"}, {"days", "integer"}, {"metric", "boolean"}};
  server::ChatReplyParser parser(options);
  server::ReplyPiece piece = parser.push(text);
  piece.append(parser.finish());
  ASSERT_GE(piece.tool_calls.size(), 1u) << text;
  EXPECT_EQ(piece.tool_calls[0].name, "get_weather");
  std::string arguments;
  for (const auto& delta : piece.tool_calls) arguments += delta.arguments;
  const json parsed = json::parse(arguments);
  EXPECT_TRUE(parsed.contains("city") && parsed["days"].is_number_integer()) << arguments;
}

EngineOptions options_with_windows(int64_t lane_window) {
  EngineOptions options;
  options.n_parallel = 8;
  options.n_ctx = 512;
  options.lane_window = lane_window;
  options.speculation.min_confident_match = 4;
  return options;
}

// The reply's text follows the grammar to its end (when it ended before its budget).
void expect_valid_reply(const ConstrainedTarget& t, const Reply& reply, const GenerationRequest& request) {
  GrammarMatcher matcher(request.constraints.grammar, grammar_vocabulary(*t.tokenizer, t.target->config().vocab_size));
  const std::string text = t.tokenizer->decode(reply.tokens);
  GrammarState state = matcher.advance_bytes(matcher.start(), text);
  ASSERT_FALSE(state.is_dead()) << text;
  if (reply.final_update.finish_reason == FinishReason::stop) {
    EXPECT_TRUE(state.is_complete);
    const json parsed = json::parse(text);  // throws on bad JSON
    EXPECT_TRUE(parsed.contains("kind") && parsed.contains("name") && parsed["lines"].is_number_integer());
  }
}

using ReplyCheck = void (*)(const ConstrainedTarget&, const Reply&, const GenerationRequest&);

// expect_completion: some reply ends its grammar within its budget (a random tiny model's free
// strings and numbers may run past it).
void expect_drafted_equals_undrafted_constrained(const ConstrainedTarget& e, const std::vector<GenerationRequest>& requests,
                                                 ReplyCheck check, bool expect_completion = true) {
  const EngineRun plain = run_engine(e.target, test::without_drafts(requests), options_with_windows(16), false, e.tokenizer);
  int64_t n_stopped = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    check(e, plain.replies[i], requests[i]);
    n_stopped += plain.replies[i].final_update.finish_reason == FinishReason::stop;
  }
  if (expect_completion) {
    EXPECT_GT(n_stopped, 0) << "some replies must complete their grammar";
  }
  // A prediction holding a plausible reply is one more copy source.
  auto predicted = requests;
  for (auto& r : predicted) r.draft.copy_source = plain.replies[0].tokens;
  int64_t accepted = 0;
  // Narrow windows alone (trees cut short, many rounds), wide ones together (lanes share rounds).
  for (bool together : {false, true}) {
    const int64_t window = together ? 16 : 3;
    const EngineRun drafted = run_engine(e.target, requests, options_with_windows(window), together, e.tokenizer, e.drafter);
    test::expect_same_tokens(plain.replies, drafted.replies, together ? "drafted together" : "drafted alone");
    const EngineRun with_prediction = run_engine(e.target, predicted, options_with_windows(19 - window), together, e.tokenizer);
    test::expect_same_tokens(plain.replies, with_prediction.replies, "with a prediction");
    for (const auto& r : drafted.replies) accepted += r.final_update.timings.draft_accepted_n;
    for (const auto& r : with_prediction.replies) accepted += r.final_update.timings.draft_accepted_n;
    if (together) test::expect_rounds_shared_by_lanes(drafted.stats, "drafted together");
  }
  EXPECT_GT(accepted, 0) << "the test must exercise accepted drafts";
}

TEST(StructuredOutputTest, JsonSchemaDraftedEqualsUndraftedGreedy) {
  expect_drafted_equals_undrafted_constrained(embedded(), schema_requests(embedded(), false), expect_valid_reply);
}
TEST(StructuredOutputTest, JsonSchemaDraftedEqualsUndraftedSampled) {
  expect_drafted_equals_undrafted_constrained(embedded(), schema_requests(embedded(), true), expect_valid_reply);
}
TEST(StructuredOutputTest, XmlToolCallDraftedEqualsUndraftedGreedy) {
  expect_drafted_equals_undrafted_constrained(embedded(), xml_call_requests(embedded(), false), expect_valid_xml_call);
}
// Sampled, the small model's free-text city rarely closes within the budget (at bf16 inputs none of
// the three does), so completion under drafts is left to the greedy and JSON tests.
TEST(StructuredOutputTest, XmlToolCallDraftedEqualsUndraftedSampled) {
  expect_drafted_equals_undrafted_constrained(embedded(), xml_call_requests(embedded(), true), expect_valid_xml_call,
                                              false);
}
// The same on a hybrid: each verify row's mask for its own draft prefix, over a recurrent state
// (its random weights rarely finish a JSON reply or a call within the budget).
TEST(StructuredOutputTest, HybridJsonSchemaDraftedEqualsUndraftedGreedy) {
  expect_drafted_equals_undrafted_constrained(hybrid(), schema_requests(hybrid(), false), expect_valid_reply, false);
}
TEST(StructuredOutputTest, HybridXmlToolCallDraftedEqualsUndraftedSampled) {
  expect_drafted_equals_undrafted_constrained(hybrid(), xml_call_requests(hybrid(), true), expect_valid_xml_call, false);
}

// Constrained and unconstrained requests side by side give what each gives alone; the
// unconstrained ones give what they give with no constrained request anywhere.
TEST(StructuredOutputTest, ConcurrentEqualsSoloAndNeighboursChangeNoToken) {
  const auto& e = embedded();
  auto requests = schema_requests(e, false);
  auto sampled = schema_requests(e, true);
  requests.resize(2);
  requests.insert(requests.end(), sampled.begin() + 2, sampled.end());  // two greedy, two sampled
  auto free_text = requests;
  for (auto& r : free_text) r.constraints = {};
  std::vector<GenerationRequest> mixed = requests;
  mixed.insert(mixed.end(), free_text.begin(), free_text.end());
  EngineOptions options = options_with_windows(8);
  options.n_parallel = int32_t(mixed.size());
  options.prefill_chunk = 9;
  const EngineRun together = run_engine(e.target, mixed, options, true, e.tokenizer, e.drafter);
  test::expect_rounds_shared_by_lanes(together.stats, "constrained beside free text");
  options.n_parallel = 1;
  const EngineRun alone = run_engine(e.target, mixed, options, false, e.tokenizer, e.drafter);
  test::expect_same_tokens(alone.replies, together.replies, "alone vs together");
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_valid_reply(e, together.replies[i], requests[i]);
    EXPECT_NE(together.replies[i].tokens, together.replies[requests.size() + i].tokens)
        << "the schema must change request " << i << "'s reply";
  }
}

// A GBNF grammar whose only replies are a few literal alternatives, with multi-byte text.
TEST(StructuredOutputTest, GbnfGrammarWithMultiByteTextUnderDrafts) {
  const auto& e = embedded();
  GenerationRequest r;
  r.prompt = e.tokenizer->encode("answer = \"caf\xC3\xA9\"  # or \"na\xC3\xAFve\"\nanswer = ");
  r.max_tokens = 40;
  r.constraints.grammar = Grammar::parse("root ::= \"\\\"\" (\"caf\xC3\xA9\" | \"na\xC3\xAFve\" | [a-z]{1,3}) \"\\\"\" (\" # \" [^\\n]{0,8})?\n");
  std::vector<GenerationRequest> requests = {r, r};
  requests[1].sampling.temperature = 1.0f;
  requests[1].sampling.seed = 5;
  const EngineRun plain = run_engine(e.target, test::without_drafts(requests), options_with_windows(16), false, e.tokenizer);
  const EngineRun drafted = run_engine(e.target, requests, options_with_windows(16), true, e.tokenizer, e.drafter);
  test::expect_same_tokens(plain.replies, drafted.replies, "gbnf");
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string text = e.tokenizer->decode(plain.replies[i].tokens);
    EXPECT_EQ(plain.replies[i].final_update.finish_reason, FinishReason::stop) << text;
    EXPECT_EQ(text[0], '"') << text;
  }
}

// logit_bias, min_tokens and stop_token_ids: the same in every verify row, so drafted = undrafted;
// each does what it says.
TEST(StructuredOutputTest, BiasMinTokensAndStopTokenIdsUnderDrafts) {
  const auto& e = embedded();
  GenerationRequest base;
  base.prompt = e.tokenizer->encode(prompts()[2]);
  base.max_tokens = 40;
  const EngineRun reference = run_engine(e.target, {base}, options_with_windows(16), false, e.tokenizer);
  const std::vector<int32_t>& free_reply = reference.replies[0].tokens;
  ASSERT_GT(free_reply.size(), 6u);

  std::vector<GenerationRequest> requests;
  GenerationRequest banned = base;  // the free reply's first token can never come
  banned.constraints.logit_bias = {{free_reply[0], -100.0f}};
  requests.push_back(banned);
  GenerationRequest forced = base;  // +100 on one token: greedy picks it every time
  forced.constraints.logit_bias = {{free_reply[3], 100.0f}};
  requests.push_back(forced);
  GenerationRequest stopped = base;  // ends where the free reply first has that token
  stopped.constraints.stop_token_ids = {free_reply[5]};
  requests.push_back(stopped);
  GenerationRequest long_enough = base;
  long_enough.prompt = e.tokenizer->encode("x = 1\n");
  long_enough.max_tokens = 30;
  long_enough.constraints.min_tokens = 30;
  requests.push_back(long_enough);
  GenerationRequest sampled_bias = banned;
  sampled_bias.sampling.temperature = 0.8f;
  sampled_bias.sampling.seed = 77;
  sampled_bias.constraints.logit_bias.push_back({free_reply[1], 2.5f});
  requests.push_back(sampled_bias);

  const EngineRun plain = run_engine(e.target, test::without_drafts(requests), options_with_windows(16), false, e.tokenizer);
  for (bool together : {false, true}) {
    const EngineRun drafted = run_engine(e.target, requests, options_with_windows(16), together, e.tokenizer, e.drafter);
    test::expect_same_tokens(plain.replies, drafted.replies, together ? "together" : "alone");
  }
  EXPECT_NE(plain.replies[0].tokens.at(0), free_reply[0]);
  for (int32_t token : plain.replies[1].tokens) EXPECT_EQ(token, free_reply[3]);
  const auto first_stop = std::find(free_reply.begin(), free_reply.end(), free_reply[5]);
  EXPECT_EQ(plain.replies[2].tokens, std::vector<int32_t>(free_reply.begin(), first_stop));
  EXPECT_EQ(plain.replies[2].final_update.finish_reason, FinishReason::stop);
  // min_tokens only refuses the end: the reply is the free one up to where that one ended.
  GenerationRequest free_short = long_enough;
  free_short.constraints = {};
  const std::vector<int32_t> free_end = run_engine(e.target, {free_short}, options_with_windows(16), false, e.tokenizer).replies[0].tokens;
  EXPECT_EQ(plain.replies[3].tokens.size(), 30u);
  EXPECT_EQ(std::vector<int32_t>(plain.replies[3].tokens.begin(), plain.replies[3].tokens.begin() + int64_t(free_end.size())), free_end);
  for (int32_t token : plain.replies[4].tokens) EXPECT_NE(token, free_reply[0]);
}

TEST(StructuredOutputTest, EngineRefusesConstraintsThatCannotRun) {
  const auto& e = embedded();
  Engine engine(options_with_windows(16), e.target, e.tokenizer);
  auto refused = [&](GenerationRequest r) {
    r.prompt = {1, 2, 3};
    return engine.submit(r, [](const GenerationUpdate&) { return true; });
  };
  GenerationRequest r;
  r.constraints.logit_bias = {{int32_t(e.target->config().vocab_size), 1.0f}};
  EXPECT_EQ(refused(r).param, "logit_bias");
  r = {};
  r.constraints.stop_token_ids = {-1};
  EXPECT_EQ(refused(r).param, "stop_token_ids");
  r = {};
  r.max_tokens = 4;
  r.constraints.min_tokens = 5;
  EXPECT_EQ(refused(r).param, "min_tokens");
  r = {};
  r.ignore_eos = true;
  r.constraints.grammar = Grammar::parse("root ::= \"a\"");
  EXPECT_EQ(refused(r).param, "ignore_eos");
}

}  // namespace
}  // namespace tf
