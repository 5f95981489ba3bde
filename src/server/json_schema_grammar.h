// response_format's JSON Schema subset, and any-JSON for json_object, as GBNF text for the grammar
// engine (src/grammar). A keyword outside the subset is refused with a 400 naming its path.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tf::server {

// GBNF whose root matches one JSON value valid against `schema` (param: where the schema sits in
// the request, for errors); an object's members in the order of its 'properties' as the client
// wrote them (hence ordered_json). Supported: type (one or a list), properties/required/
// additionalProperties, items/minItems/maxItems, enum, const, anyOf/oneOf/allOf, $ref into $defs
// or definitions (recursion allowed), strings with minLength/maxLength or a pattern
// (json_schema_pattern.h), numbers, integers, booleans, null. Keywords beside $ref or anyOf/oneOf
// bind the target and every branch (a branch nothing can match is left out); enum and const keep
// the values the other keywords allow; without 'type', the types its keywords speak of (any value
// when none do). Annotations (title, description, default, examples, $schema, $id, $comment) are ignored.
std::string json_schema_gbnf(const nlohmann::ordered_json& schema, const std::string& param);
// Any JSON object (response_format json_object).
std::string json_object_gbnf();

// One function a tool call may name: its parameters' schema (an empty object: any object).
struct ToolSchema {
  std::string name;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();
  std::string param;  // where the schema sits in the request, for errors ("tools[0].function.parameters")
};
// How the chat template writes a call: Qwen3's JSON (<tool_call>\n{"name": NAME, "arguments":
// ARGS}\n</tool_call>) or the Qwen3.5-class XML (<tool_call>\n<function=NAME>\n<parameter=KEY>\n
// VALUE\n</parameter>\n...</function>\n</tool_call>, a "string" parameter raw, others as JSON).
enum class ToolCallSyntax { qwen3_json, qwen3_5_xml };
struct ToolCallForm {
  ToolCallSyntax syntax = ToolCallSyntax::qwen3_json;
  bool is_parallel = true;  // one or more calls, separated by a newline; else exactly one
};
// Tool-call blocks in the template's syntax, each naming one of `tools` with the parameters its
// schema requires: the whole reply for tool_choice "required" (every tool) or a named function
// (one), the calls after optional_calls_gbnf's text for strict tools under "auto".
std::string tool_call_gbnf(const std::vector<ToolSchema>& tools, const ToolCallForm& form);

// GBNF text and the rule a reply must match.
struct StartedGbnf {
  std::string text;
  std::string start = "root";
};
// For a prompt that opened <think>: the reasoning stays the model's own, free up to "</think>" and
// the blank line the template writes after it; `answer` (rooted at `root`) constrains what follows.
// The added rules take names `answer` does not use.
StartedGbnf after_reasoning_gbnf(StartedGbnf answer);
// tool_choice "auto" with strict tools: free text (a <think> block, then any text without
// "<tool_call>"), then optionally the calls of `calls` (rooted at `root`): a reply may call or
// not, and where it opens a call, the call follows its tool's schema.
StartedGbnf optional_calls_gbnf(std::string calls);

}  // namespace tf::server
