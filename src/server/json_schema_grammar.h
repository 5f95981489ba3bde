// response_format's JSON Schema subset, and any-JSON for json_object, as GBNF text for the grammar
// engine (src/grammar). A keyword outside the subset is refused with a 400 naming its path.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tf::server {

// GBNF whose root matches one JSON value valid against `schema` (param: where the schema sits in
// the request, for errors). Supported: type (one or a list), properties/required/
// additionalProperties, items/minItems/maxItems, enum, const, anyOf/oneOf, $ref into $defs or
// definitions (recursion allowed), strings with minLength/maxLength and pattern (a regex subset:
// literals, escapes \d \w \s, classes, groups, |, * + ? {m,n}, ^ $), numbers, integers, booleans,
// null. Annotations (title, description, default, examples, $schema, $id, $comment) are ignored.
std::string json_schema_gbnf(const nlohmann::json& schema, const std::string& param);
// Any JSON object (response_format json_object).
std::string json_object_gbnf();

// One function a tool call may name: its parameters' schema (an empty object: any object).
struct ToolSchema {
  std::string name;
  nlohmann::json parameters = nlohmann::json::object();
  std::string param;  // where the schema sits in the request, for errors ("tools[0].function.parameters")
};
// tool_choice "required" (every tool) or a named function (one): the reply is Qwen3 tool-call
// blocks, <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>, with ARGS following the
// tool's schema; with is_parallel, one or more blocks separated by a newline.
std::string tool_call_gbnf(const std::vector<ToolSchema>& tools, bool is_parallel);

}  // namespace tf::server
