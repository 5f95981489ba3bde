// The grammar engine: GBNF parsing, byte-level matching of UTF-8 classes, token masks (multi-byte
// and partial tokens, the trie walk against a token-by-token check on the real tokenizer), the
// JSON Schema subset and its refusals, the sampler's constraint, draft-tree pruning and the
// Predicted Outputs usage count.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "engine/lane_constraint.h"
#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
#include "sampling/sampler.h"
#include "server/chat_reply_parser.h"
#include "server/constraint_params.h"
#include "server/json_schema_grammar.h"
#include "server/openai_protocol.h"
#include "speculation/draft_tree.h"
#include "support/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

using nlohmann::json;

// Whether the grammar matches `text` whole (alive and complete after its bytes).
bool matches(const std::string& gbnf, const std::string& text, const std::string& start = "root") {
  auto grammar = Grammar::parse(gbnf, start);
  GrammarMatcher matcher(grammar, std::make_shared<TokenVocabulary>(std::vector<std::string>{"x"}));
  GrammarState state = matcher.advance_bytes(matcher.start(), text);
  return state.is_complete;
}

// Whether `text` is a prefix some match continues.
bool is_prefix(const std::string& gbnf, const std::string& text) {
  auto grammar = Grammar::parse(gbnf);
  GrammarMatcher matcher(grammar, std::make_shared<TokenVocabulary>(std::vector<std::string>{"x"}));
  return !matcher.advance_bytes(matcher.start(), text).is_dead();
}

std::string schema_grammar(const json& schema) { return server::json_schema_gbnf(schema, "schema"); }

TEST(GrammarTest, LiteralsClassesGroupsAndRepetitions) {
  const std::string g = R"(root ::= "a" [b-d]+ ("x" | "yz")? digit{2,3}
digit ::= [0-9]  # a comment
)";
  EXPECT_TRUE(matches(g, "ab12"));
  EXPECT_TRUE(matches(g, "abcdyz123"));
  EXPECT_TRUE(matches(g, "adx99"));
  EXPECT_FALSE(matches(g, "a12"));      // + needs one
  EXPECT_FALSE(matches(g, "ab1"));      // {2,3} needs two
  EXPECT_FALSE(matches(g, "ab1234"));   // at most three
  EXPECT_FALSE(matches(g, "abxyz12"));  // ? is at most one
  EXPECT_TRUE(is_prefix(g, "abc"));
  EXPECT_FALSE(is_prefix(g, "b"));
}

TEST(GrammarTest, RulesContinueOnTheNextLineAndEscapesWork) {
  const std::string g = "root ::= item\n  | \"\\x41\\u00e9\\n\"\nitem ::= \"[\" [^\\]]* \"]\"\n";
  EXPECT_TRUE(matches(g, "[abc]"));
  EXPECT_TRUE(matches(g, "A\xC3\xA9\n"));
  EXPECT_FALSE(matches(g, "[a]b]"));
}

TEST(GrammarTest, CodePointClassesBecomeUtf8ByteSequences) {
  const std::string g = R"(root ::= [^"]*)";
  EXPECT_TRUE(matches(g, "caf\xC3\xA9"));              // é, 2 bytes
  EXPECT_TRUE(matches(g, "\xE2\x82\xAC"));             // €, 3 bytes
  EXPECT_TRUE(matches(g, "\xF0\x9F\x98\x80"));         // 😀, 4 bytes
  EXPECT_FALSE(is_prefix(g, "\xA9"));                  // a lone continuation byte
  EXPECT_FALSE(is_prefix(g, "\xED\xA0\x80"));          // a surrogate's encoding
  EXPECT_FALSE(is_prefix(g, "\xC0\xAF"));              // an overlong encoding
  EXPECT_FALSE(is_prefix(g, "\xF4\x90\x80\x80"));      // past U+10FFFF
  EXPECT_TRUE(is_prefix(g, "\xF0\x9F"));               // a character cut in two is alive...
  EXPECT_FALSE(matches(g, "\xF0\x9F"));                // ...but not complete
  EXPECT_FALSE(is_prefix(g, "\""));
  EXPECT_TRUE(matches(R"(root ::= [α-ω]+)", "\xCE\xB1\xCF\x89"));  // α ω
  EXPECT_FALSE(is_prefix(R"(root ::= [α-ω]+)", "a"));
}

TEST(GrammarTest, BadGrammarsAreRefusedWithTheirPlace) {
  auto message = [](const std::string& g) {
    try {
      Grammar::parse(g);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("root ::= item").find("'item' is used but not defined"), std::string::npos);
  EXPECT_NE(message("item ::= \"a\"").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(message("root ::= root \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(message("root ::= (\"\")*").find("left-recursive"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"\nx ::= \"unterminated").find("line 2"), std::string::npos);
  EXPECT_NE(message("root ::= [z-a]").find("out of order"), std::string::npos);
  EXPECT_NE(message("root ::= \"a\"{2000}").find("above"), std::string::npos);
}

// What a client can send in one body must never exhaust the stack: deep groups are refused, long
// chains of rules and grammars whose parses multiply through empty rules are walked without
// recursion, each (position, stack) once.
TEST(GrammarTest, DeepOrExplosiveGrammarsNeitherCrashNorHang) {
  const int depth = 100000;
  try {
    Grammar::parse("root ::= " + std::string(depth, '(') + "\"a\"" + std::string(depth, ')'));
    ADD_FAILURE() << "100,000 nested groups were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nest deeper than"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(matches("root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')'), "a"));

  std::string chain = "root ::= r0 \"!\"\n";  // 50,000 rules, each only naming the next
  for (int i = 0; i < 50000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  chain += "r50000 ::= \"a\" | \"\"\n";
  EXPECT_TRUE(matches(chain, "a!"));
  EXPECT_TRUE(matches(chain, "!"));
  EXPECT_FALSE(matches(chain, "aa!"));

  // Long chains of rules under many stacks are work, not ambiguity: 1,000 parses, each over a chain
  // of 270 rules, start and match.
  std::string wide = "root ::= a \"0\"";
  for (int i = 1; i < 1000; ++i) wide += " | a \"" + std::to_string(i) + "\"";
  wide += "\na ::= b1\n";
  for (int i = 1; i < 270; ++i) wide += "b" + std::to_string(i) + " ::= b" + std::to_string(i + 1) + "\n";
  wide += "b270 ::= \"x\"\n";
  EXPECT_TRUE(matches(wide, "x1"));
  EXPECT_TRUE(matches(wide, "x999"));

  // Rules each two of the next, the last optional: 2^n ways to reach the first byte, and as many
  // distinct stacks. Eight levels stay below the bound and match; forty are refused at once.
  const auto doubling = [](int levels) {
    std::string g = "root ::= d0 \"!\"\n";
    for (int i = 0; i < levels; ++i)
      g += "d" + std::to_string(i) + " ::= d" + std::to_string(i + 1) + " d" + std::to_string(i + 1) + "\n";
    return g + "d" + std::to_string(levels) + " ::= \"\" | \"a\"\n";
  };
  EXPECT_TRUE(matches(doubling(8), "aaa!"));
  EXPECT_TRUE(matches(doubling(8), "!"));
  try {
    matches(doubling(40), "a!");
    ADD_FAILURE() << "2^40 parses were walked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
}

// A tiny vocabulary with whole, partial and multi-byte tokens.
std::shared_ptr<TokenVocabulary> tiny_vocabulary() {
  return std::make_shared<TokenVocabulary>(std::vector<std::string>{
      "\"", "a", "ab", "\xC3", "\xA9", "\xC3\xA9", "\"a", "a\"", "", "\xC3\xA9\"", "b"});
}

std::vector<int32_t> allowed_list(const std::vector<uint32_t>& mask, int64_t n) {
  std::vector<int32_t> out;
  for (int32_t t = 0; t < n; ++t)
    if ((mask[size_t(t) >> 5] >> (t & 31)) & 1) out.push_back(t);
  return out;
}

TEST(GrammarTest, TokenMasksJudgeEveryTokenByItsBytes) {
  auto vocabulary = tiny_vocabulary();
  GrammarMatcher matcher(Grammar::parse(R"(root ::= "\"" [^"]* "\"")"), vocabulary);
  const int64_t n = vocabulary->n_tokens();
  GrammarState start = matcher.start();
  EXPECT_EQ(allowed_list(matcher.allowed_tokens(start), n), (std::vector<int32_t>{0, 6}));
  GrammarState open = matcher.advance_token(start, 0);
  // Inside the string: a lead byte alone is alive (partial), a continuation byte alone is not, the
  // empty token never is, and a token closing the string is.
  EXPECT_EQ(allowed_list(matcher.allowed_tokens(open), n), (std::vector<int32_t>{0, 1, 2, 3, 5, 7, 9, 10}));
  GrammarState partial = matcher.advance_token(open, 3);
  EXPECT_EQ(allowed_list(matcher.allowed_tokens(partial), n), (std::vector<int32_t>{4}));
  GrammarState closed = matcher.advance_token(matcher.advance_token(partial, 4), 0);
  EXPECT_TRUE(closed.is_complete);
  EXPECT_TRUE(allowed_list(matcher.allowed_tokens(closed), n).empty());
  EXPECT_TRUE(matcher.advance_token(closed, 1).is_dead());
  // Masks are cached per state: asking again computes nothing.
  const int64_t computed = matcher.n_mask_computations();
  matcher.allowed_tokens(open);
  EXPECT_EQ(matcher.n_mask_computations(), computed);
}

// The trie walk equals checking each token on its own, over the real tokenizer, along a walk
// through a JSON-schema grammar.
TEST(GrammarTest, TrieMasksEqualTokenByTokenChecksOnTheRealTokenizer) {
  auto tokenizer = Tokenizer::from_file(test::source_path("models/tensorfold-code-target/tokenizer.json"));
  auto vocabulary = grammar_vocabulary(*tokenizer, tokenizer->n_tokens());
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"name", {{"type", "string"}}},
                         {"tags", {{"type", "array"}, {"items", {{"enum", {"a\xC3\xA9", "b"}}}}}},
                         {"n", {{"type", "integer"}}}}},
                       {"required", {"name", "n"}}};
  GrammarMatcher matcher(Grammar::parse(schema_grammar(schema)), vocabulary);
  const std::string text = "{\"n\": -12, \"name\": \"d\xC3\xA9j\xC3\xA0 vu\", \"tags\": [\"a\xC3\xA9\"]}";
  GrammarState state = matcher.start();
  int64_t n_checked = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i % 3 == 0 || i == text.size()) {
      const std::vector<uint32_t>& mask = matcher.allowed_tokens(state);
      for (int32_t t = 0; t < vocabulary->n_tokens(); ++t) {
        const bool expected = !matcher.advance_token(state, t).is_dead();
        ASSERT_EQ(bool((mask[size_t(t) >> 5] >> (t & 31)) & 1), expected) << "token " << t << " at byte " << i;
      }
      ++n_checked;
    }
    if (i < text.size()) {
      state = matcher.advance(state, uint8_t(text[i]));
      ASSERT_FALSE(state.is_dead()) << "byte " << i;
    }
  }
  EXPECT_TRUE(state.is_complete);
  EXPECT_GT(n_checked, 10);
}

TEST(JsonSchemaTest, ObjectsWithRequiredAndOptionalMembers) {
  const json schema = {{"type", "object"},
                       {"properties", {{"a", {{"type", "integer"}}}, {"b", {{"type", "boolean"}}}, {"c", {{"type", "null"}}}}},
                       {"required", {"b"}}};
  const std::string g = schema_grammar(schema);
  EXPECT_TRUE(matches(g, R"({"b": true})"));
  EXPECT_TRUE(matches(g, R"({"a": 3, "b": false, "c": null})"));
  EXPECT_TRUE(matches(g, R"({"a":-7,"b":true})"));
  EXPECT_TRUE(matches(g, "{\n  \"b\": true\n}"));
  EXPECT_FALSE(matches(g, R"({"a": 3})"));           // b is required
  EXPECT_FALSE(matches(g, R"({"b": true, "d": 1})"));  // no other members
  EXPECT_FALSE(matches(g, R"({"a": 3.5, "b": true})"));  // an integer
  EXPECT_FALSE(matches(g, R"({"b": true,})"));
  EXPECT_FALSE(matches(g, R"({"a": 01, "b": true})"));
}

TEST(JsonSchemaTest, ArraysEnumsConstsAndNesting) {
  const json schema = {
      {"type", "object"},
      {"properties",
       {{"list", {{"type", "array"}, {"items", {{"type", "number"}}}, {"minItems", 1}, {"maxItems", 3}}},
        {"kind", {{"enum", {"cat", "dog", 3, nullptr}}}},
        {"version", {{"const", "v1"}}},
        {"inner", {{"type", "object"}, {"properties", {{"x", {{"type", {"string", "null"}}}}}}, {"required", {"x"}}}}}},
      {"required", {"list", "kind", "version", "inner"}}};
  const std::string g = schema_grammar(schema);
  EXPECT_TRUE(matches(g, R"({"inner": {"x": "q"}, "kind": "dog", "list": [1, 2.5e3], "version": "v1"})"));
  EXPECT_TRUE(matches(g, R"({"inner": {"x": null}, "kind": 3, "list": [0], "version": "v1"})"));
  EXPECT_TRUE(matches(g, R"({"inner": {"x": null}, "kind": null, "list": [1,2,3], "version": "v1"})"));
  EXPECT_FALSE(matches(g, R"({"inner": {"x": null}, "kind": null, "list": [], "version": "v1"})"));
  EXPECT_FALSE(matches(g, R"({"inner": {"x": null}, "kind": null, "list": [1,2,3,4], "version": "v1"})"));
  EXPECT_FALSE(matches(g, R"({"inner": {"x": null}, "kind": "bird", "list": [1], "version": "v1"})"));
  EXPECT_FALSE(matches(g, R"({"inner": {"x": 1}, "kind": 3, "list": [1], "version": "v1"})"));
  EXPECT_FALSE(matches(g, R"({"inner": {"x": null}, "kind": 3, "list": [1], "version": "v2"})"));
}

TEST(JsonSchemaTest, StringsWithLengthsPatternsAndEscapes) {
  EXPECT_TRUE(matches(schema_grammar({{"type", "string"}}), R"("tab\tquote\" \u00e9 \\")"));
  EXPECT_FALSE(matches(schema_grammar({{"type", "string"}}), "\"raw\nnewline\""));
  const std::string sized = schema_grammar({{"type", "string"}, {"minLength", 2}, {"maxLength", 3}});
  EXPECT_TRUE(matches(sized, R"("ab")"));
  EXPECT_TRUE(matches(sized, "\"a\xC3\xA9\""));  // lengths count characters
  EXPECT_FALSE(matches(sized, R"("a")"));
  EXPECT_FALSE(matches(sized, R"("abcd")"));
  const std::string date = schema_grammar({{"type", "string"}, {"pattern", "^\\d{4}-[01]\\d-[0-3]\\d$"}});
  EXPECT_TRUE(matches(date, R"("2026-12-02")"));
  EXPECT_FALSE(matches(date, R"("2026-2-02")"));
  EXPECT_FALSE(matches(date, R"("x2026-12-02")"));
  const std::string word = schema_grammar({{"type", "string"}, {"pattern", "^(foo|ba[rz])+(?:!)?$"}});
  EXPECT_TRUE(matches(word, R"("foobar!")"));
  EXPECT_TRUE(matches(word, R"("baz")"));
  EXPECT_FALSE(matches(word, R"("bax")"));
  const std::string unanchored = schema_grammar({{"type", "string"}, {"pattern", "ab"}});
  EXPECT_TRUE(matches(unanchored, R"("xxabyy")"));
  EXPECT_FALSE(matches(unanchored, R"("xxa")"));
  const std::string quote = schema_grammar({{"type", "string"}, {"pattern", "^a\"[^x]$"}});
  EXPECT_TRUE(matches(quote, R"("a\"b")"));
  EXPECT_FALSE(matches(quote, R"("a\"x")"));
  EXPECT_FALSE(matches(quote, R"("a\""")"));  // a negated class still leaves out a bare quote
}

TEST(JsonSchemaTest, AnyOfReferencesAndRecursion) {
  const json schema = {{"$defs", {{"node", {{"type", "object"},
                                            {"properties", {{"v", {{"type", "integer"}}}, {"next", {{"anyOf", {{{"$ref", "#/$defs/node"}}, {{"type", "null"}}}}}}}},
                                            {"required", {"v", "next"}}}}}},
                       {"$ref", "#/$defs/node"}};
  const std::string g = schema_grammar(schema);
  EXPECT_TRUE(matches(g, R"({"next": null, "v": 1})"));
  EXPECT_TRUE(matches(g, R"({"next": {"next": {"next": null, "v": 3}, "v": 2}, "v": 1})"));
  EXPECT_FALSE(matches(g, R"({"next": {"v": 2}, "v": 1})"));
  EXPECT_TRUE(matches(server::json_object_gbnf(), R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(matches(server::json_object_gbnf(), R"([1])"));
}

TEST(JsonSchemaTest, UnsupportedFeaturesAreRefusedNamingTheirPath) {
  auto param_of = [](const json& schema) {
    try {
      server::json_schema_gbnf(schema, "response_format.json_schema.schema");
    } catch (const server::ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.param;
    }
    return std::string("no error");
  };
  EXPECT_EQ(param_of({{"type", "string"}, {"format", "email"}}), "response_format.json_schema.schema.format");
  EXPECT_EQ(param_of({{"type", "object"}, {"properties", {{"n", {{"type", "integer"}, {"minimum", 0}}}}}}),
            "response_format.json_schema.schema.properties.n.minimum");
  EXPECT_EQ(param_of({{"allOf", json::array()}}), "response_format.json_schema.schema.allOf");
  EXPECT_EQ(param_of({{"type", "string"}, {"pattern", "(?=a)"}}), "response_format.json_schema.schema.pattern");
  EXPECT_EQ(param_of({{"type", "string"}, {"pattern", "(a)\\1"}}), "response_format.json_schema.schema.pattern");
  EXPECT_EQ(param_of({{"$ref", "https://example.com/s.json"}}), "response_format.json_schema.schema.$ref");
  EXPECT_EQ(param_of({{"type", "array"}, {"maxItems", 5000}}), "response_format.json_schema.schema.maxItems");
  EXPECT_EQ(param_of({{"type", "tuple"}}), "response_format.json_schema.schema.type");
  // 'properties' of another type than an object, empty or not, is no list of members.
  EXPECT_EQ(param_of({{"type", "object"}, {"properties", json::array()}}), "response_format.json_schema.schema.properties");
  EXPECT_EQ(param_of({{"properties", ""}}), "response_format.json_schema.schema.properties");
  // Schemas nothing can satisfy are refused, never answered with a reply that breaks them.
  EXPECT_EQ(param_of({{"type", "object"}, {"required", {"x"}}}), "response_format.json_schema.schema.required");
  EXPECT_EQ(param_of({{"type", "integer"}, {"enum", {"a"}}}), "response_format.json_schema.schema.enum");
  EXPECT_EQ(param_of({{"type", "string"}, {"const", 3}}), "response_format.json_schema.schema.const");
  EXPECT_EQ(param_of({{"type", "string"}, {"pattern", "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((a)))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))"}}),
            "response_format.json_schema.schema.pattern");
  EXPECT_EQ(param_of({{"type", "string"}, {"pattern", std::string(100000, '(') + std::string(100000, ')')}}),
            "response_format.json_schema.schema.pattern");
  // A chain of $defs is shallow JSON but deep to walk: refused, not a stack overflow.
  json chain = {{"$ref", "#/$defs/d0"}, {"$defs", json::object()}};
  for (int i = 0; i < 10000; ++i) chain["$defs"]["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  chain["$defs"]["d10000"] = {{"type", "string"}};
  EXPECT_NE(param_of(chain).find("response_format.json_schema.schema.$defs.d"), std::string::npos);
  // enum beside a type keeps the values of that type; 2.0 is an integer.
  const std::string mixed = schema_grammar({{"type", {"integer", "null"}}, {"enum", {1, "a", 2.0, nullptr}}});
  EXPECT_TRUE(matches(mixed, "1"));
  EXPECT_TRUE(matches(mixed, "2.0"));
  EXPECT_TRUE(matches(mixed, "null"));
  EXPECT_FALSE(matches(mixed, "\"a\""));
}

// The 400 a schema gets: its param and message ("no error" when it converts).
std::pair<std::string, std::string> refusal_of(const json& schema) {
  try {
    server::json_schema_gbnf(nlohmann::ordered_json(schema), "response_format.json_schema.schema");
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return {e.param, e.what()};
  }
  return {"no error", ""};
}

TEST(JsonSchemaTest, PatternWithLengthBoundsMatchesBoth) {
  const std::string name = schema_grammar(json::parse(R"({"type": "string", "pattern": "^[a-z0-9_]+$", "minLength": 2, "maxLength": 4})"));
  EXPECT_TRUE(matches(name, R"("ab")"));    // at the minimum
  EXPECT_TRUE(matches(name, R"("a_9z")"));  // at the maximum
  EXPECT_FALSE(matches(name, R"("a")"));
  EXPECT_FALSE(matches(name, R"("abcde")"));
  EXPECT_FALSE(is_prefix(name, R"("abcde)"));  // cut at the bound, not only at the closing quote
  EXPECT_FALSE(matches(name, R"("aB")"));      // the pattern still binds
  // Unanchored ends: the text around the match counts too.
  const std::string around = schema_grammar(json::parse(R"({"type": "string", "pattern": "b", "maxLength": 3})"));
  EXPECT_TRUE(matches(around, R"("b")"));
  EXPECT_TRUE(matches(around, R"("abc")"));
  EXPECT_FALSE(matches(around, R"("abcd")"));
  EXPECT_FALSE(matches(around, R"("acc")"));
  // A character counts one however many bytes UTF-8 or JSON's escapes write it with.
  const std::string wide = schema_grammar(json::parse(R"({"type": "string", "pattern": "^.+$", "maxLength": 2})"));
  EXPECT_TRUE(matches(wide, "\"\xC3\xA9\xE2\x82\xAC\""));  // é€
  EXPECT_TRUE(matches(wide, "\"\xF0\x9F\x98\x80x\""));     // an emoji and x
  EXPECT_FALSE(matches(wide, "\"\xC3\xA9\xE2\x82\xAC" "a\""));
  const std::string escaped = schema_grammar(json::parse(R"({"type": "string", "pattern": "^a", "minLength": 3, "maxLength": 3})"));
  EXPECT_TRUE(matches(escaped, R"("a\n\"")"));      // a, newline, quote
  EXPECT_TRUE(matches(escaped, R"("a\u001f\\")"));  // a, U+001F, backslash
  EXPECT_FALSE(matches(escaped, R"("a\n\"b")"));
  EXPECT_FALSE(matches(escaped, "\"a\n\"\""));      // a raw newline is no JSON
  const std::string quotes = schema_grammar(json::parse(R"({"type": "string", "pattern": "^[\"\t]+$", "maxLength": 2})"));
  EXPECT_TRUE(matches(quotes, R"("\t\"")"));
  EXPECT_FALSE(matches(quotes, R"("\t\"\t")"));
  // Only a minimum: lengths past it are all alike.
  const std::string at_least = schema_grammar(json::parse(R"({"type": "string", "pattern": "^x*$", "minLength": 3})"));
  EXPECT_TRUE(matches(at_least, R"("xxx")"));
  EXPECT_TRUE(matches(at_least, R"("xxxxxxxxxxxx")"));
  EXPECT_FALSE(matches(at_least, R"("xx")"));
  // No allowed prefix is a dead end: "ca" could only go on to "cab", one past the maximum.
  const std::string pairs = schema_grammar(json::parse(R"({"type": "string", "pattern": "^(ab|c)+$", "maxLength": 2})"));
  EXPECT_TRUE(matches(pairs, R"("ab")"));
  EXPECT_TRUE(matches(pairs, R"("cc")"));
  EXPECT_FALSE(is_prefix(pairs, R"("ca)"));
  // enum values are kept by both; a branch nothing can match is left out.
  const std::string listed = schema_grammar(json::parse(R"({"enum": ["ab", "abcd", "b1"], "pattern": "^[a-z]+$", "maxLength": 3})"));
  EXPECT_TRUE(matches(listed, R"("ab")"));
  EXPECT_FALSE(matches(listed, R"("abcd")"));
  EXPECT_FALSE(matches(listed, R"("b1")"));
  const std::string branches = schema_grammar(json::parse(
      R"({"type": "string", "maxLength": 3, "anyOf": [{"pattern": "^[a-z]{5}$"}, {"pattern": "^\\d+$"}]})"));
  EXPECT_TRUE(matches(branches, R"("123")"));
  EXPECT_FALSE(matches(branches, R"("1234")"));
  EXPECT_EQ(refusal_of(json::parse(R"({"type": "string", "pattern": "^[a-z]{5}$", "maxLength": 3})")).first,
            "response_format.json_schema.schema.pattern");
}

TEST(JsonSchemaTest, PatternWithLengthBoundsPastTheStateLimitIsRefused) {
  for (const char* schema : {R"({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(\\d{1,50}-)+$", "maxLength": 1000}}})",
                             R"({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a{1000}){1000}$", "minLength": 1}}})"}) {
    const auto [param, message] = refusal_of(json::parse(schema));
    EXPECT_EQ(param, "response_format.json_schema.schema.properties.s.pattern") << schema;
    EXPECT_NE(message.find("automaton states"), std::string::npos) << message;
  }
  // Well below the limit: a common identifier bound.
  EXPECT_EQ(refusal_of(json::parse(R"({"type": "string", "pattern": "^[a-z][a-z0-9_]*$", "maxLength": 1000})")).first, "no error");
}

TEST(JsonSchemaTest, PatternMatchesAreWrittenAsJsonEscapes) {
  const std::string tab = schema_grammar({{"type", "string"}, {"pattern", "^a\tb$"}});  // a real TAB in the pattern
  EXPECT_TRUE(matches(tab, R"("a\tb")"));
  EXPECT_FALSE(matches(tab, "\"a\tb\""));  // raw, the string would not be JSON
  const std::string escapes = schema_grammar({{"type", "string"}, {"pattern", "^\\n[\"\\\\]\\x01$"}});
  EXPECT_TRUE(matches(escapes, R"("\n\"\u0001")"));
  EXPECT_TRUE(matches(escapes, R"("\n\\\u0001")"));
  EXPECT_FALSE(matches(escapes, "\"\n\\\"\x01\""));
  const std::string negated = schema_grammar({{"type", "string"}, {"pattern", "^[^a]$"}});
  EXPECT_TRUE(matches(negated, R"("\t")"));
  EXPECT_TRUE(matches(negated, R"("\u001F")"));
  EXPECT_TRUE(matches(negated, R"("\"")"));
  EXPECT_FALSE(matches(negated, R"("a")"));
  EXPECT_FALSE(matches(negated, "\"\t\""));
  // '.' is any character but a line terminator, as in ECMAScript.
  const std::string dot = schema_grammar({{"type", "string"}, {"pattern", "^.$"}});
  EXPECT_TRUE(matches(dot, R"("\t")"));
  EXPECT_TRUE(matches(dot, "\"\xC3\xA9\""));
  EXPECT_FALSE(matches(dot, R"("\n")"));
  EXPECT_FALSE(matches(dot, R"("\r")"));
  // Each top-level alternative has its own anchors.
  const std::string either = schema_grammar({{"type", "string"}, {"pattern", "^a|b$"}});
  EXPECT_TRUE(matches(either, R"("ax")"));
  EXPECT_TRUE(matches(either, R"("xb")"));
  EXPECT_FALSE(matches(either, R"("xa")"));
}

TEST(JsonSchemaTest, PatternClassesTakeEveryPunctuationEscape) {
  const std::string punctuation = "./+*?(){}|$-][^\\";
  std::string escaped_class = "^[";
  for (char c : punctuation) escaped_class += std::string("\\") + c;
  const std::string g = schema_grammar({{"type", "string"}, {"pattern", escaped_class + "]+$"}});
  EXPECT_TRUE(matches(g, json(punctuation).dump()));
  EXPECT_FALSE(matches(g, R"("a")"));
  const std::string shorthand = schema_grammar({{"type", "string"}, {"pattern", "^[\\d\\s][\\w][\\D\\W][\\S]$"}});
  EXPECT_TRUE(matches(shorthand, R"("1_.x")"));
  EXPECT_TRUE(matches(shorthand, R"(" a-.")"));
  EXPECT_FALSE(matches(shorthand, R"("a_.x")"));
  EXPECT_FALSE(matches(shorthand, R"("1_5_")"));
}

TEST(JsonSchemaTest, PatternErrorsNameThePatternAndSayWhatIsWrong) {
  const auto refused = [](const std::string& pattern, const std::string& what) {
    const json schema = {{"type", "object"}, {"properties", {{"x", {{"type", "string"}, {"pattern", pattern}}}}}};
    const auto [param, message] = refusal_of(schema);
    EXPECT_EQ(param, "response_format.json_schema.schema.properties.x.pattern") << pattern;
    EXPECT_NE(message.find(what), std::string::npos) << pattern << ": " << message;
    EXPECT_EQ(message.find("line"), std::string::npos) << pattern << ": " << message;  // not the generated grammar's place
  };
  refused("[z-a]", "'z-a', which is out of order");
  refused("a{}", "'{}', which is not a repetition count");
  refused("a{,3}", "'{,3}', which is not a repetition count");
  refused("a{3,2}", "maximum is below its minimum");
  refused("^(a*)*b$", "'(a*)*' without bound though it can match empty text");
  refused("(a|)+", "can match empty text");
  refused("[\\q]", "unknown escape '\\q'");
  refused("(a", "never closes");
  refused("a)", "closes no group");
  refused("[ab", "never closes");
  refused("\\1", "backreference");
  refused("a\\b", "word boundary");
  refused("a*?", "lazy quantifier");
}

TEST(JsonSchemaTest, KeywordsBesideAnyOfBindEveryBranch) {
  const std::string object = schema_grammar(json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}},
      "required": ["a"], "additionalProperties": false, "anyOf": [{"type": "object"}, {"type": "array"}]})"));
  EXPECT_TRUE(matches(object, R"({"a": 1})"));
  EXPECT_FALSE(matches(object, "[]"));
  EXPECT_FALSE(matches(object, "{}"));
  const std::string lengths = schema_grammar(json::parse(R"({"type": "string", "anyOf": [{"maxLength": 2}, {"minLength": 5}]})"));
  EXPECT_TRUE(matches(lengths, R"("ab")"));
  EXPECT_TRUE(matches(lengths, R"("abcde")"));
  EXPECT_FALSE(matches(lengths, R"("abc")"));
  EXPECT_FALSE(matches(lengths, "null"));
  // A branch's own members join the parent's; anyOf beside oneOf: both hold.
  const std::string members = schema_grammar(json::parse(R"({"type": "object", "properties": {"a": {"type": "string"},
      "b": {"type": "integer"}}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})"));
  EXPECT_TRUE(matches(members, R"({"a": "x"})"));
  EXPECT_TRUE(matches(members, R"({"b": 2})"));
  EXPECT_FALSE(matches(members, "{}"));
  const std::string both = schema_grammar(json::parse(R"({"anyOf": [{"type": "string"}, {"type": "integer"}],
      "oneOf": [{"type": "number"}, {"type": "null"}]})"));
  EXPECT_TRUE(matches(both, "3"));
  EXPECT_FALSE(matches(both, R"("a")"));
  EXPECT_FALSE(matches(both, "null"));
  const std::string all = schema_grammar(json::parse(R"({"allOf": [{"type": "object", "properties": {"x": {"type": "integer"}}},
      {"properties": {"y": {"type": "string"}}, "required": ["y"]}]})"));
  EXPECT_TRUE(matches(all, R"({"x": 1, "y": "a"})"));
  EXPECT_FALSE(matches(all, R"({"x": 1})"));
  // No branch left: refused, naming the keyword.
  EXPECT_EQ(refusal_of(json::parse(R"({"type": "object", "anyOf": [{"type": "string"}]})")).first,
            "response_format.json_schema.schema.anyOf");
  EXPECT_EQ(refusal_of(json::parse(R"({"type": "string", "pattern": "^a", "anyOf": [{"pattern": "^b"}]})")).first,
            "response_format.json_schema.schema.anyOf[0].pattern");
}

TEST(JsonSchemaTest, KeywordsWithoutATypeBindOnlyValuesOfTheirType) {
  // Without 'type', the keywords name the type (valid instances all; minLength alone answered "").
  const std::string min_length = schema_grammar({{"minLength", 5}});
  EXPECT_TRUE(matches(min_length, R"("abcde")"));
  EXPECT_FALSE(matches(min_length, R"("")"));
  EXPECT_FALSE(matches(min_length, "3"));
  const std::string pattern = schema_grammar({{"pattern", "^x$"}});
  EXPECT_TRUE(matches(pattern, R"("x")"));
  EXPECT_FALSE(matches(pattern, R"("")"));
  const std::string items = schema_grammar({{"items", {{"type", "integer"}}}, {"maxItems", 1}});
  EXPECT_TRUE(matches(items, "[1]"));
  EXPECT_FALSE(matches(items, "[1, 2]"));
  EXPECT_FALSE(matches(items, R"(["a"])"));
  const std::string object = schema_grammar({{"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}});
  EXPECT_TRUE(matches(object, R"({"a": 1})"));
  EXPECT_FALSE(matches(object, R"({})"));
  EXPECT_FALSE(matches(object, R"("a")"));
  // Keywords of two types: either, each bound by its own.
  const std::string either = schema_grammar({{"minLength", 2}, {"maxItems", 1}});
  EXPECT_TRUE(matches(either, R"("ab")"));
  EXPECT_TRUE(matches(either, "[true]"));
  EXPECT_FALSE(matches(either, R"("a")"));
  EXPECT_FALSE(matches(either, "[1, 2]"));
  EXPECT_FALSE(matches(either, "null"));
  // No type's keywords: any value.
  EXPECT_TRUE(matches(schema_grammar(json::object()), "null"));
  // A tool's arguments are an object whatever the schema leaves open.
  const std::string call = server::tool_call_gbnf({{"f", {{"properties", {{"a", {{"type", "integer"}}}}}}, "tools[0]"}},
                                                  {server::ToolCallSyntax::qwen3_json, false});
  EXPECT_TRUE(matches(call, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
  EXPECT_FALSE(matches(call, "<tool_call>\n{\"name\": \"f\", \"arguments\": 1}\n</tool_call>"));
}

TEST(JsonSchemaTest, KeywordsBesideRefEnumAndConstAreKept) {
  const std::string ref = schema_grammar(json::parse(R"({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 2})"));
  EXPECT_TRUE(matches(ref, R"("ab")"));
  EXPECT_FALSE(matches(ref, R"("abc")"));
  EXPECT_FALSE(matches(ref, "1"));
  // A sibling on a recursive $ref: one rule per (target, siblings), not an endless expansion.
  const std::string list = schema_grammar(json::parse(R"({"$defs": {"n": {"type": "object", "properties": {
      "v": {"type": "integer"}, "next": {"$ref": "#/$defs/n", "required": ["v"]}}}}, "$ref": "#/$defs/n"})"));
  EXPECT_TRUE(matches(list, R"({"next": {"next": {"v": 2}, "v": 1}})"));  // members sorted: this json sorts keys
  EXPECT_FALSE(matches(list, R"({"next": {"next": {"v": 2}}})"));
  const std::string short_values = schema_grammar(json::parse(R"({"enum": ["a", "abcdefgh", 7], "maxLength": 3})"));
  EXPECT_TRUE(matches(short_values, R"("a")"));
  EXPECT_TRUE(matches(short_values, "7"));
  EXPECT_FALSE(matches(short_values, R"("abcdefgh")"));
  const std::string patterned = schema_grammar(json::parse(R"({"type": "string", "enum": ["ab", "ba", "b"], "pattern": "^b"})"));
  EXPECT_TRUE(matches(patterned, R"("ba")"));
  EXPECT_FALSE(matches(patterned, R"("ab")"));
  EXPECT_EQ(refusal_of(json::parse(R"({"enum": ["abcdefgh"], "maxLength": 3})")).first, "response_format.json_schema.schema.enum");
  EXPECT_EQ(refusal_of(json::parse(R"({"const": "ab", "pattern": "^b"})")).first, "response_format.json_schema.schema.const");
  EXPECT_EQ(refusal_of(json::parse(R"({"const": "ab", "enum": ["a"]})")).first, "response_format.json_schema.schema.const");
  // Thousands of values, some parting inside a UTF-8 lead byte (é, ê), are one parse at a time.
  json many = json::array({1, 12, "\xC3\xA9", "\xC3\xAA"});
  for (int i = 0; i < 6000; ++i) many.push_back("value-" + std::to_string(i));
  const std::string large = schema_grammar({{"enum", many}});
  for (const char* text : {"1", "12", "\"\xC3\xAA\"", "\"value-0\"", "\"value-5999\"", "\"value-42\""})
    EXPECT_TRUE(matches(large, text)) << text;
  for (const char* text : {"2", "\"value-6000\"", "\"value-\"", "\"\xC3\xAB\""}) EXPECT_FALSE(matches(large, text)) << text;
  // The raw strings of a Qwen3.5-class parameter are filtered the same way.
  const std::string xml = server::tool_call_gbnf(
      {{"f", json::parse(R"({"type": "object", "properties": {"s": {"type": "string", "enum": ["ab", "abcdefgh"], "maxLength": 3}}})"),
        "tools[0]"}},
      {server::ToolCallSyntax::qwen3_5_xml, false});
  EXPECT_TRUE(matches(xml, "<tool_call>\n<function=f>\n<parameter=s>\nab\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(matches(xml, "<tool_call>\n<function=f>\n<parameter=s>\nabcdefgh\n</parameter>\n</function>\n</tool_call>"));
}

TEST(JsonSchemaTest, ForcedToolCallsFollowTheQwen3FormAndTheToolSchema) {
  std::vector<server::ToolSchema> tools = {
      {"get_weather", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}, "tools[0]"},
      {"now", json::object(), "tools[1]"}};
  const std::string one = server::tool_call_gbnf(tools, {server::ToolCallSyntax::qwen3_json, false});
  EXPECT_TRUE(matches(one, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_TRUE(matches(one, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(matches(one, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(matches(one, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  const std::string parallel = server::tool_call_gbnf(tools, {server::ToolCallSyntax::qwen3_json, true});
  EXPECT_TRUE(matches(parallel, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                                "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(matches(one, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
}

// A Qwen3.5-class reply's calls as the reply parser gives them: [name, arguments] per call.
std::vector<std::pair<std::string, std::string>> parsed_xml_calls(const std::string& reply, bool starts_in_reasoning,
                                                                  const std::vector<server::ToolSchema>& tools) {
  server::ReplyParserOptions options;
  options.family = ChatTemplateFamily::qwen3_5;
  options.parses_reasoning = true;
  options.starts_in_reasoning = starts_in_reasoning;
  options.parses_tool_calls = true;
  for (const server::ToolSchema& tool : tools)  // as completion_handler derives them
    if (tool.parameters.contains("properties"))
      for (const auto& [name, schema] : tool.parameters["properties"].items())
        if (schema.contains("type") && schema["type"].is_string()) options.parameter_types[tool.name][name] = schema["type"];
  server::ChatReplyParser parser(options);
  server::ReplyPiece piece = parser.push(reply);
  piece.append(parser.finish());
  std::vector<std::pair<std::string, std::string>> calls;
  for (const server::ToolCallDelta& delta : piece.tool_calls) {
    if (delta.name) calls.push_back({*delta.name, ""});
    calls.back().second += delta.arguments;
  }
  return calls;
}

TEST(JsonSchemaTest, ForcedToolCallsFollowTheQwen35XmlFormAndTheToolSchema) {
  using nlohmann::ordered_json;
  std::vector<server::ToolSchema> tools = {
      {"get_weather",
       ordered_json::parse(R"({"type": "object", "properties": {
          "city": {"type": "string"}, "days": {"type": "integer"}, "units": {"type": "string", "enum": ["c", "f"]},
          "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]},
          "mode": {"enum": ["fast", "true"]}}, "required": ["city", "days"]})"),
       "tools[0].function.parameters"},
      {"now", ordered_json::object(), "tools[1].function.parameters"}};
  const server::ToolCallForm one_call{server::ToolCallSyntax::qwen3_5_xml, false};
  const std::string one = server::tool_call_gbnf(tools, one_call);
  const auto call = [](const std::string& name, const std::string& parameters) {
    return "<tool_call>\n<function=" + name + ">\n" + parameters + "</function>\n</tool_call>";
  };
  const auto parameter = [](const std::string& key, const std::string& value) {
    return "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
  };
  // Strings raw (any text without </parameter>, several lines, a '<' or a cut tag inside), other
  // values as JSON; optional parameters present or not, in the order of 'properties'.
  const std::string paris = call("get_weather", parameter("city", "Paris") + parameter("days", "3"));
  EXPECT_TRUE(matches(one, paris));
  const std::string full = call("get_weather", parameter("city", "a <b>\n</param </parameter x") + parameter("days", "-12") +
                                                   parameter("units", "f") + parameter("where", "{\"lat\": 1.5}") +
                                                   parameter("mode", "\"true\""));
  EXPECT_TRUE(matches(one, full));
  EXPECT_TRUE(matches(one, call("now", "")));
  EXPECT_TRUE(matches(one, call("now", parameter("anything", "goes\nhere"))));
  // Refused: a missing required parameter, an unknown function or parameter, the wrong order, a
  // value of the wrong type, a string value that holds the closing tag, two calls where one is asked.
  EXPECT_FALSE(matches(one, call("get_weather", parameter("city", "Paris"))));
  EXPECT_FALSE(matches(one, call("get_time", "")));
  EXPECT_FALSE(matches(one, call("get_weather", parameter("city", "Paris") + parameter("days", "3") + parameter("x", "1"))));
  EXPECT_FALSE(matches(one, call("get_weather", parameter("days", "3") + parameter("city", "Paris"))));
  EXPECT_FALSE(matches(one, call("get_weather", parameter("city", "Paris") + parameter("days", "three"))));
  EXPECT_FALSE(matches(one, call("get_weather", parameter("city", "Paris") + parameter("days", "3") + parameter("units", "k"))));
  EXPECT_FALSE(matches(one, call("get_weather", parameter("city", "x</parameter>y") + parameter("days", "3"))));
  EXPECT_FALSE(matches(one, call("get_weather", parameter("city", "Paris") + parameter("days", "3") + parameter("mode", "true"))));
  EXPECT_FALSE(matches(one, paris + "\n" + paris));
  const std::string parallel = server::tool_call_gbnf(tools, {server::ToolCallSyntax::qwen3_5_xml, true});
  EXPECT_TRUE(matches(parallel, paris + "\n" + call("now", "")));
  // After a prompt that opened <think>: free reasoning, its close and a blank line, then the call.
  // Its rules take names the answer's grammar leaves free.
  const server::StartedGbnf taken = server::after_reasoning_gbnf({"root ::= reasoning-text-0\nreasoning-text-0 ::= \"x\""});
  EXPECT_TRUE(matches(taken.text, "</think>\n\nx", taken.start));
  const server::StartedGbnf thinking = server::after_reasoning_gbnf({one});
  EXPECT_TRUE(matches(thinking.text, "Paris, I think. </thin\n</think>\n\n" + paris, thinking.start));
  EXPECT_TRUE(matches(thinking.text, "</think>\n\n" + paris, thinking.start));
  EXPECT_FALSE(matches(thinking.text, paris, thinking.start));
  EXPECT_FALSE(matches(thinking.text, "</think>\n\n" + paris + "\n" + paris, thinking.start));

  // What the grammar lets through is what the parser reads as calls, with the arguments typed.
  EXPECT_EQ(parsed_xml_calls(full, false, tools),
            (std::vector<std::pair<std::string, std::string>>{
                {"get_weather", R"({"city": "a <b>\n</param </parameter x", "days": -12, "units": "f", "where": {"lat": 1.5}, "mode": "true"})"}}));
  EXPECT_EQ(parsed_xml_calls("Paris, I think.\n</think>\n\n" + paris + "\n" + call("now", ""), true, tools),
            (std::vector<std::pair<std::string, std::string>>{{"get_weather", R"({"city": "Paris", "days": 3})"}, {"now", "{}"}}));
  // And what the template writes for such a call, the grammar accepts.
  ChatMessage assistant{"assistant", "", std::nullopt, {{"call_0", "get_weather", ordered_json::parse(
      R"({"city": "Oslo\nNorway", "days": 2, "where": {"lat": 59.9}})")}}};
  const std::string rendered =
      ChatTemplate(ChatTemplateFamily::qwen3_5).render({{"user", "q", std::nullopt, {}}, assistant}, {false, false, {}, {}}).text;
  const size_t begin = rendered.find("<tool_call>"), end = rendered.find("</tool_call>") + std::string("</tool_call>").size();
  ASSERT_NE(begin, std::string::npos) << rendered;
  EXPECT_TRUE(matches(one, rendered.substr(begin, end - begin))) << rendered;
}

TEST(JsonSchemaTest, ForcedXmlCallsRefuseWhatTheirRawFormCannotHold) {
  auto param_of = [](const std::string& parameters) {
    try {
      server::tool_call_gbnf({{"f", nlohmann::ordered_json::parse(parameters), "tools[0].function.parameters"}},
                             {server::ToolCallSyntax::qwen3_5_xml, true});
    } catch (const server::ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.param;
    }
    return std::string("no error");
  };
  EXPECT_EQ(param_of(R"({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a$"}}})"),
            "tools[0].function.parameters.properties.s.pattern");
  EXPECT_EQ(param_of(R"({"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}})"),
            "tools[0].function.parameters.properties.s.maxLength");
  EXPECT_EQ(param_of(R"({"type": "array"})"), "tools[0].function.parameters.type");
  EXPECT_EQ(param_of(R"({"anyOf": [{"type": "object"}]})"), "tools[0].function.parameters.anyOf");
  EXPECT_EQ(param_of(R"({"type": "object", "properties": {"a>b": {"type": "integer"}}})"),
            "tools[0].function.parameters.properties.a>b");
  EXPECT_EQ(param_of(R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}})"),
            "tools[0].function.parameters.properties.n.minimum");
  EXPECT_EQ(param_of(R"({"type": "object", "properties": []})"), "tools[0].function.parameters.properties");
  EXPECT_EQ(param_of(R"({"type": "object", "properties": {"n": {"type": "integer"}}})"), "no error");
}

TEST(JsonSchemaTest, MembersFollowThePropertiesOrderTheClientGave) {
  // Parsed from text, as the server parses a body: "zeta" before "alpha" stays so.
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(R"({"response_format": {"type": "json_schema",
      "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"zeta": {"type": "integer"},
      "alpha": {"type": "integer"}, "mid": {"type": "boolean"}}, "required": ["zeta", "alpha"]}}}})");
  const std::string g = server::parse_constraint_fields(body).grammar_text;
  EXPECT_TRUE(matches(g, R"({"zeta": 1, "alpha": 2})"));
  EXPECT_TRUE(matches(g, R"({"zeta": 1, "alpha": 2, "mid": true})"));
  EXPECT_FALSE(matches(g, R"({"alpha": 2, "zeta": 1})"));
  EXPECT_FALSE(matches(g, R"({"zeta": 1, "mid": true, "alpha": 2})"));
  // A forced call's arguments and parameters too, in both syntaxes.
  nlohmann::ordered_json tool_body = nlohmann::ordered_json::parse(R"({"tool_choice": "required", "tools": [{"type": "function",
      "function": {"name": "f", "parameters": {"type": "object", "properties": {"zeta": {"type": "integer"},
      "alpha": {"type": "integer"}}, "required": ["zeta", "alpha"]}}}]})");
  const std::string json_call = server::parse_constraint_fields(tool_body).grammar_text;
  EXPECT_TRUE(matches(json_call, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"zeta\": 1, \"alpha\": 2}}\n</tool_call>"));
  EXPECT_FALSE(matches(json_call, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"alpha\": 2, \"zeta\": 1}}\n</tool_call>"));
  const std::string xml_call = server::parse_constraint_fields(tool_body, server::ToolCallSyntax::qwen3_5_xml).grammar_text;
  EXPECT_TRUE(matches(xml_call, "<tool_call>\n<function=f>\n<parameter=zeta>\n1\n</parameter>\n<parameter=alpha>\n2\n"
                                "</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(matches(xml_call, "<tool_call>\n<function=f>\n<parameter=alpha>\n2\n</parameter>\n<parameter=zeta>\n1\n"
                                 "</parameter>\n</function>\n</tool_call>"));
}

// tool_choice "auto" with a strict tool: text, or text and calls; a call opened follows the strict
// tool's schema, a loose tool's call takes any arguments; the reasoning may quote the tag. Without a
// strict tool "auto" constrains nothing; "none" never does; with a prompt that opened the reasoning,
// the reasoning is free and the rest follows.
TEST(JsonSchemaTest, StrictToolsBindAutoCallsAndLeaveTextFree) {
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(R"({"tools": [
      {"type": "function", "function": {"name": "city", "strict": true, "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}},
      {"type": "function", "function": {"name": "loose", "parameters": {"type": "object",
        "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}]})");
  const server::ConstraintFields fields = server::parse_constraint_fields(body);
  EXPECT_EQ(fields.grammar_param, "tools");
  const auto auto_matches = [&](const std::string& reply) { return matches(fields.grammar_text, reply, fields.grammar_start); };
  const std::string city = "<tool_call>\n{\"name\": \"city\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  EXPECT_TRUE(auto_matches(""));
  EXPECT_TRUE(auto_matches("Just text, with <tool and </tool_call> in it.\n"));
  EXPECT_TRUE(auto_matches("Let me look.\n\n" + city));
  EXPECT_TRUE(auto_matches(city + "\n" + city));
  EXPECT_TRUE(auto_matches("<think>\nI could write <tool_call> here.\n</think>\n\n" + city));
  EXPECT_TRUE(auto_matches("<tool_call>\n{\"name\": \"loose\", \"arguments\": {\"anything\": [1]}}\n</tool_call>"));
  EXPECT_FALSE(auto_matches("<tool_call>\n{\"name\": \"city\", \"arguments\": {\"town\": 5}}\n</tool_call>"));
  EXPECT_FALSE(auto_matches("<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(auto_matches(city + "\nand text after the calls"));

  nlohmann::ordered_json loose = body;
  loose["tools"][0]["function"].erase("strict");
  EXPECT_TRUE(server::parse_constraint_fields(loose).grammar_text.empty());
  nlohmann::ordered_json none = body;
  none["tool_choice"] = "none";
  EXPECT_TRUE(server::parse_constraint_fields(none).grammar_text.empty());
  nlohmann::ordered_json with_format = body;
  with_format["response_format"] = {{"type", "json_object"}};
  EXPECT_EQ(server::parse_constraint_fields(with_format).grammar_param, "response_format");  // the client's own wins
  EXPECT_TRUE(server::parse_constraint_fields(body, std::nullopt).grammar_text.empty());  // a text completion

  const server::ConstraintFields thinking = server::parse_constraint_fields(body, server::ToolCallSyntax::qwen3_json, true);
  EXPECT_TRUE(matches(thinking.grammar_text, "quoting <tool_call> while thinking</think>\n\nSo: " + city, thinking.grammar_start));
  EXPECT_FALSE(matches(thinking.grammar_text, "</think>\n\n<tool_call>\n{\"name\": \"city\", \"arguments\": {}}\n</tool_call>",
                       thinking.grammar_start));
}

// response_format after a prompt that opened the reasoning: the JSON is the answer, not the thought.
TEST(JsonSchemaTest, AResponseFormatConstrainsTheAnswerAfterTheReasoning) {
  const server::ConstraintFields fields =
      server::parse_constraint_fields({{"response_format", {{"type", "json_object"}}}}, server::ToolCallSyntax::qwen3_5_xml, true);
  EXPECT_TRUE(matches(fields.grammar_text, "An object, then.\n</think>\n\n{\"a\": 1}", fields.grammar_start));
  EXPECT_FALSE(matches(fields.grammar_text, "{\"a\": 1}", fields.grammar_start));
  const server::ConstraintFields grammar =
      server::parse_constraint_fields({{"grammar", "root ::= \"yes\" | \"no\""}}, server::ToolCallSyntax::qwen3_json, true);
  EXPECT_TRUE(matches(grammar.grammar_text, "hmm</think>\n\nyes", grammar.grammar_start));
}

TEST(SamplerConstraintTest, BiasAndMaskApplyBeforeEverythingAndAnEmptyConstraintChangesNothing) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> logits(100);
  for (float& x : logits) x = u(rng);
  Sampler sampler;
  SamplingParams greedy;
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_k = 10;
  sampled.seed = 9;
  const int32_t best = argmax(logits.data(), 100);
  EXPECT_EQ(sampler.sample(logits.data(), 100, greedy, 5, {}, LogitConstraint{}), best);
  std::vector<uint32_t> mask(4, 0);
  const int32_t only = (best + 17) % 100;
  mask[size_t(only) >> 5] |= 1u << (only & 31);
  LogitConstraint constraint;
  constraint.allowed = mask.data();
  EXPECT_EQ(sampler.sample(logits.data(), 100, greedy, 5, {}, constraint), only);
  for (int64_t position = 0; position < 20; ++position)
    EXPECT_EQ(sampler.sample(logits.data(), 100, sampled, position, {}, constraint), only);
  // A bias of +100 on a token wins greedy; the same op on a copy gives the same draw.
  const std::pair<int32_t, float> bias[] = {{int32_t(only), 100.0f}};
  LogitConstraint biased;
  biased.bias = bias;
  biased.n_bias = 1;
  EXPECT_EQ(sampler.sample(logits.data(), 100, greedy, 5, {}, biased), only);
  std::vector<float> shifted = logits;
  apply_logit_constraint(shifted.data(), 100, biased);
  for (int64_t position = 0; position < 20; ++position)
    EXPECT_EQ(sampler.sample(logits.data(), 100, sampled, position, {}, biased),
              sampler.sample(shifted.data(), 100, sampled, position));
  // Every allowed logit at -inf: the lowest allowed id, never a masked one.
  std::vector<float> dead(100, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(sampler.sample(dead.data(), 100, greedy, 0, {}, constraint), only);
}

TEST(DraftTreeTest, RetainKeepsOrderAndRebuildsTheMainChain) {
  DraftTree tree;
  tree.add_chain(-1, {1, 2, 3}, 100, 0);  // main chain 1-2-3
  tree.add_chain(-1, {4, 5}, 100, 1);     // a sibling branch 4-5
  tree.retain({0, 0, 0, 1, 1});           // the main chain's first node goes: 4-5 becomes main
  ASSERT_EQ(tree.size(), 2);
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{-1, 0}));
  EXPECT_EQ(tree.is_main, (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(tree.sources, (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(tree.max_depth(), 2);
}

TEST(PredictionUsageTest, AcceptedTokensAreTheCommonSubsequence) {
  EXPECT_EQ(server::prediction_usage({1, 2, 3, 4}, {1, 2, 3, 4}).accepted, 4);
  auto usage = server::prediction_usage({1, 2, 3, 4, 5}, {1, 9, 3, 4, 8, 5});
  EXPECT_EQ(usage.accepted, 4);
  EXPECT_EQ(usage.rejected, 1);
  EXPECT_EQ(server::prediction_usage({}, {1}).accepted, 0);
  EXPECT_EQ(server::prediction_usage({7, 7}, {}).rejected, 2);
  // Past its budget of diff work the count is a common subsequence, never more than the exact one,
  // and a long prediction far from a short reply costs no quadratic time.
  const std::vector<int32_t> far(200000, 5);
  const auto bounded = server::prediction_usage(far, {1, 5, 2, 5}, 1000);
  EXPECT_EQ(bounded.accepted, 2);
  EXPECT_EQ(bounded.accepted + bounded.rejected, 200000);
  EXPECT_EQ(server::prediction_usage({1, 2, 3}, {3, 1, 2}).accepted, 2);
  EXPECT_EQ(server::prediction_usage({1, 2, 3}, {3, 1, 2}, 1).accepted, 1);  // the greedy bound, below the exact 2
  std::vector<int32_t> shifted(20000), noise(20000);
  for (int i = 0; i < 20000; ++i) shifted[size_t(i)] = i, noise[size_t(i)] = 100000 + i;
  EXPECT_EQ(server::prediction_usage(shifted, noise).accepted, 0);
}

TEST(ConstraintParamsTest, BadValuesAreRefusedNamingTheParameter) {
  auto param_of = [](const json& body) {
    try {
      server::parse_constraint_fields(body);
    } catch (const server::ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.param;
    }
    return std::string("no error");
  };
  EXPECT_EQ(param_of({{"response_format", {{"type", "yaml"}}}}), "response_format.type");
  EXPECT_EQ(param_of({{"response_format", {{"type", "json_schema"}}}}), "response_format.json_schema");
  const json schema = {{"type", "string"}};
  EXPECT_EQ(param_of({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", schema}}}}}}),
            "response_format.json_schema.name");
  EXPECT_EQ(param_of({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "a b"}, {"schema", schema}}}}}}),
            "response_format.json_schema.name");
  EXPECT_EQ(param_of({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", std::string(65, 'a')}, {"schema", schema}}}}}}),
            "response_format.json_schema.name");
  EXPECT_EQ(param_of({{"response_format", {{"type", "json_schema"},
                                           {"json_schema", {{"name", "ok_name-1"}, {"strict", "yes"}, {"schema", schema}}}}}}),
            "response_format.json_schema.strict");
  EXPECT_EQ(param_of({{"response_format", {{"type", "json_schema"},
                                           {"json_schema", {{"name", "ok_name-1"}, {"strict", true}, {"schema", schema}}}}}}),
            "no error");
  EXPECT_EQ(param_of({{"grammar", 3}}), "grammar");
  EXPECT_EQ(param_of({{"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}}), "grammar");
  EXPECT_EQ(param_of({{"logit_bias", {{"12", 101}}}}), "logit_bias");
  EXPECT_EQ(param_of({{"logit_bias", {{"x", 1}}}}), "logit_bias");
  EXPECT_EQ(param_of({{"min_tokens", -1}}), "min_tokens");
  EXPECT_EQ(param_of({{"stop_token_ids", {1, -2}}}), "stop_token_ids");
  EXPECT_EQ(param_of({{"ignore_eos", "yes"}}), "ignore_eos");
  EXPECT_EQ(param_of({{"ignore_eos", true}, {"response_format", {{"type", "json_object"}}}}), "ignore_eos");
  EXPECT_EQ(param_of({{"prediction", {{"type", "diff"}, {"content", "x"}}}}), "prediction.type");
  EXPECT_EQ(param_of({{"prediction", {{"type", "content"}, {"content", {{{"type", "image"}}}}}}}), "prediction.content[0]");
  EXPECT_EQ(param_of({{"tool_choice", "required"}}), "tools");
  EXPECT_EQ(param_of({{"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}},
                      {"tools", {{{"type", "function"}, {"function", {{"name", "y"}}}}}}}),
            "tool_choice");
  GenerationRequest request;
  try {
    server::apply_constraint_fields(server::parse_constraint_fields({{"grammar", "root ::= nope"}}), &request);
    ADD_FAILURE() << "an undefined rule must be refused";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.param, "grammar");
  }
  // Too ambiguous where it starts: refused with the request, not when its lane starts.
  std::string doubling = "root ::= d0\n";
  for (int i = 0; i < 16; ++i) doubling += "d" + std::to_string(i) + " ::= d" + std::to_string(i + 1) + " d" + std::to_string(i + 1) + "\n";
  doubling += "d16 ::= \"\" | \"a\"\n";
  try {
    server::apply_constraint_fields(server::parse_constraint_fields({{"grammar", doubling}}), &request);
    ADD_FAILURE() << "a grammar with 2^16 ways to its first byte must be refused";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.param, "grammar");
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
  json body;
  body["prediction"] = {{"type", "content"},
                        {"content", json::array({{{"type", "text"}, {"text", "ab"}}, {{"type", "text"}, {"text", "c"}}})}};
  body["logit_bias"] = {{"9", -1.5}, {"2", 3}};
  const auto fields = server::parse_constraint_fields(body);
  EXPECT_EQ(*fields.prediction, "abc");
  EXPECT_EQ(fields.logit_bias, (std::vector<std::pair<int32_t, float>>{{2, 3.0f}, {9, -1.5f}}));
}

}  // namespace
}  // namespace tf
