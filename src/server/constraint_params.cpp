// Parsing the token-constraint fields and Predicted Outputs; JSON Schema conversion lives in
// json_schema_grammar.cpp, the grammar engine in src/grammar.
#include "server/constraint_params.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
#include "server/json_schema_grammar.h"
#include "server/openai_protocol.h"

namespace tf::server {
namespace {

// The body's own member order: a schema's properties are written in the order the client gave.
using plain_json = nlohmann::ordered_json;

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, "Invalid '" + param + "': " + message, "invalid_request_error", param);
}

const plain_json* field(const plain_json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::vector<int32_t> token_id_list(const plain_json& value, const std::string& param) {
  if (!value.is_array()) throw bad(param, "expected an array of token ids.");
  std::vector<int32_t> ids;
  for (const plain_json& item : value) {
    if (!item.is_number_integer() || item.get<int64_t>() < 0 || item.get<int64_t>() > INT32_MAX)
      throw bad(param, "token ids must be non-negative integers, but got " + item.dump() + ".");
    ids.push_back(int32_t(item.get<int64_t>()));
  }
  return ids;
}

std::vector<std::pair<int32_t, float>> parse_logit_bias(const plain_json& value) {
  if (!value.is_object()) throw bad("logit_bias", "expected an object mapping token ids to biases.");
  std::vector<std::pair<int32_t, float>> bias;
  for (const auto& [key, amount] : value.items()) {
    const bool is_id = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), ::isdigit);
    if (!is_id || std::stoll(key) > INT32_MAX)
      throw bad("logit_bias", "keys must be token ids (non-negative integers as strings), but got '" + key + "'.");
    if (!amount.is_number() || !std::isfinite(amount.get<double>()) || amount.get<double>() < -100.0 ||
        amount.get<double>() > 100.0)
      throw bad("logit_bias", "the bias of token " + key + " must be a number from -100 to 100, but got " +
                                  amount.dump() + ".");
    bias.push_back({int32_t(std::stoll(key)), float(amount.get<double>())});
  }
  std::sort(bias.begin(), bias.end());
  // "2070" and "02070" are one token: two biases for it would add up past the documented range.
  for (size_t i = 1; i < bias.size(); ++i)
    if (bias[i].first == bias[i - 1].first)
      throw bad("logit_bias", "token " + std::to_string(bias[i].first) + " is given more than once.");
  return bias;
}

// "required" or {"type": "function", "function": {"name": ...}} turn into a tool-call grammar;
// "auto" (or no tool_choice) does where a tool is strict: the reply may call or not, and a call it
// opens follows the schema of a strict tool (any arguments for the others); "none" constrains nothing.
void parse_tool_choice(const plain_json& body, ToolCallForm form, ConstraintFields* out) {
  const plain_json* tools = field(body, "tools");
  const plain_json* choice = field(body, "tool_choice");
  std::string named;
  bool is_forced = true;
  if (!choice || choice->is_string()) {
    const std::string mode = choice ? choice->get<std::string>() : "auto";
    if (mode == "none") return;
    if (mode == "auto") is_forced = false;
    else if (mode != "required") throw bad("tool_choice", "expected 'auto', 'none', 'required' or a named function.");
  } else if (choice->is_object()) {
    const plain_json* function = field(*choice, "function");
    const plain_json* name = function && function->is_object() ? field(*function, "name") : nullptr;
    if (choice->value("type", "") != "function" || !name || !name->is_string())
      throw bad("tool_choice", "a named tool choice is {\"type\": \"function\", \"function\": {\"name\": ...}}.");
    named = name->get<std::string>();
  } else {
    throw bad("tool_choice", "expected a string or an object.");
  }
  if (!is_forced && (!tools || !tools->is_array())) return;
  if (!is_forced && tools->empty()) throw bad("tools", "expected at least one tool; leave 'tools' out to offer none.");
  if (!tools || !tools->is_array() || tools->empty())
    throw bad("tools", "tool_choice '" + (named.empty() ? std::string("required") : named) + "' needs a non-empty 'tools' array.");
  std::vector<ToolSchema> schemas;
  bool any_strict = false;
  for (size_t i = 0; i < tools->size(); ++i) {
    const plain_json& tool = (*tools)[i];
    const std::string param = "tools[" + std::to_string(i) + "]";
    const plain_json* function = tool.is_object() ? field(tool, "function") : nullptr;
    const plain_json* name = function && function->is_object() ? field(*function, "name") : nullptr;
    if (!name || !name->is_string()) throw bad(param + ".function.name", "every tool needs a function name.");
    const plain_json* strict = field(*function, "strict");
    const bool is_strict = strict && strict->is_boolean() && strict->get<bool>();
    any_strict = any_strict || is_strict;
    ToolSchema schema{name->get<std::string>(), plain_json::object(), param + ".function.parameters"};
    // Under "auto" only a strict tool's schema binds its calls; forced calls follow every schema.
    if (const plain_json* parameters = field(*function, "parameters"); parameters && (is_forced || is_strict))
      schema.parameters = *parameters;
    if (named.empty() || schema.name == named) schemas.push_back(std::move(schema));
  }
  if (!is_forced && !any_strict) return;
  if (schemas.empty()) throw bad("tool_choice", "no tool in 'tools' is named '" + named + "'.");
  const plain_json* parallel = field(body, "parallel_tool_calls");
  if (parallel && !parallel->is_boolean()) throw bad("parallel_tool_calls", "expected a boolean.");
  form.is_parallel = named.empty() && (!parallel || parallel->get<bool>());
  out->grammar_text = tool_call_gbnf(schemas, form);
  out->grammar_param = "tool_choice";
  if (!is_forced) {
    StartedGbnf optional = optional_calls_gbnf(std::move(out->grammar_text));
    out->grammar_text = std::move(optional.text);
    out->grammar_start = std::move(optional.start);
    out->grammar_param = "tools";
  }
}

bool is_schema_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

void parse_response_format(const plain_json& format, ConstraintFields* out) {
  if (!format.is_object()) throw bad("response_format", "expected an object.");
  const plain_json* type = field(format, "type");
  if (!type || !type->is_string())
    throw bad("response_format.type", "expected 'text', 'json_object' or 'json_schema'.");
  const std::string kind = type->get<std::string>();
  if (kind == "text") return;
  out->grammar_param = "response_format";
  if (kind == "json_object") {
    out->grammar_text = json_object_gbnf();
    return;
  }
  if (kind != "json_schema")
    throw bad("response_format.type", "expected 'text', 'json_object' or 'json_schema', but got '" + kind + "'.");
  const plain_json* spec = field(format, "json_schema");
  if (!spec || !spec->is_object())
    throw bad("response_format.json_schema", "expected an object with 'name' and 'schema'.");
  // OpenAI's rules: a name is required, and strict a boolean.
  const plain_json* name = field(*spec, "name");
  if (!name) throw bad("response_format.json_schema.name", "missing; expected 1 to 64 letters, digits, '_' or '-'.");
  if (!name->is_string() || !is_schema_name(name->get_ref<const std::string&>()))
    throw bad("response_format.json_schema.name", "expected 1 to 64 letters, digits, '_' or '-', but got " + name->dump() + ".");
  if (const plain_json* strict = field(*spec, "strict"); strict && !strict->is_boolean())
    throw bad("response_format.json_schema.strict", "expected a boolean, but got " + strict->dump() + ".");
  const plain_json* schema = field(*spec, "schema");
  out->grammar_text = json_schema_gbnf(schema ? *schema : plain_json::object(), "response_format.json_schema.schema");
}

std::string prediction_content(const plain_json& prediction) {
  if (!prediction.is_object()) throw bad("prediction", "expected {\"type\": \"content\", \"content\": ...}.");
  const plain_json* type = field(prediction, "type");
  if (!type || *type != "content") throw bad("prediction.type", "the only supported type is 'content'.");
  const plain_json* content = field(prediction, "content");
  if (!content) throw bad("prediction.content", "missing; expected a string or an array of text parts.");
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) throw bad("prediction.content", "expected a string or an array of text parts.");
  std::string text;
  for (size_t i = 0; i < content->size(); ++i) {
    const plain_json& part = (*content)[i];
    const plain_json* part_text = part.is_object() ? field(part, "text") : nullptr;
    if (!part_text || !part_text->is_string() || part.value("type", "") != "text")
      throw bad("prediction.content[" + std::to_string(i) + "]", "expected {\"type\": \"text\", \"text\": \"...\"}.");
    text += part_text->get<std::string>();
  }
  return text;
}

}  // namespace

ConstraintFields parse_constraint_fields(const plain_json& body, std::optional<ToolCallSyntax> tool_syntax,
                                         bool starts_in_reasoning) {
  ConstraintFields out;
  if (const plain_json* format = field(body, "response_format")) parse_response_format(*format, &out);
  if (const plain_json* grammar = field(body, "grammar")) {
    if (!grammar->is_string() || grammar->get_ref<const std::string&>().empty())
      throw bad("grammar", "expected a non-empty GBNF string.");
    if (!out.grammar_text.empty()) throw bad("grammar", "a request takes either 'grammar' or a JSON response_format, not both.");
    out.grammar_text = grammar->get<std::string>();
    out.grammar_param = "grammar";
  }
  const std::string before_tools = out.grammar_param;
  ConstraintFields tool_fields;
  if (tool_syntax) parse_tool_choice(body, {*tool_syntax, true}, &tool_fields);
  // Under "auto" the client's own response_format or grammar wins over strict tools' calls.
  if (tool_fields.grammar_param == "tools" && !before_tools.empty()) tool_fields = ConstraintFields();
  if (!tool_fields.grammar_text.empty()) {
    if (!before_tools.empty())
      throw bad("tool_choice", "a forced tool call cannot be combined with '" + before_tools + "'.");
    out.grammar_text = std::move(tool_fields.grammar_text);
    out.grammar_start = std::move(tool_fields.grammar_start);
    out.grammar_param = tool_fields.grammar_param;
  }
  if (starts_in_reasoning && !out.grammar_text.empty()) {
    StartedGbnf answer = after_reasoning_gbnf({std::move(out.grammar_text), out.grammar_start});
    out.grammar_text = std::move(answer.text);
    out.grammar_start = std::move(answer.start);
  }
  if (const plain_json* bias = field(body, "logit_bias")) out.logit_bias = parse_logit_bias(*bias);
  if (const plain_json* min_tokens = field(body, "min_tokens")) {
    if (!min_tokens->is_number_integer() || min_tokens->get<int64_t>() < 0)
      throw bad("min_tokens", "expected a non-negative integer, but got " + min_tokens->dump() + ".");
    out.min_tokens = min_tokens->get<int64_t>();
  }
  if (const plain_json* ids = field(body, "stop_token_ids")) out.stop_token_ids = token_id_list(*ids, "stop_token_ids");
  if (const plain_json* ignore_eos = field(body, "ignore_eos")) {
    if (!ignore_eos->is_boolean()) throw bad("ignore_eos", "expected a boolean.");
    out.ignore_eos = ignore_eos->get<bool>();
  }
  if (out.ignore_eos && !out.grammar_text.empty())
    throw bad("ignore_eos", "cannot be combined with '" + out.grammar_param + "': a reply that completes its grammar must end.");
  if (const plain_json* prediction = field(body, "prediction")) out.prediction = prediction_content(*prediction);
  return out;
}

void apply_constraint_fields(const ConstraintFields& fields, GenerationRequest* request) {
  TokenConstraints& constraints = request->constraints;
  if (!fields.grammar_text.empty()) {
    try {
      constraints.grammar = Grammar::parse(fields.grammar_text, fields.grammar_start);
      // Its first expansion, here rather than in the engine, so a grammar too ambiguous to start is
      // this request's 400 before any reply (tokens play no part in it).
      GrammarMatcher(constraints.grammar, std::make_shared<TokenVocabulary>(std::vector<std::string>{})).start();
    } catch (const Error& error) {
      throw bad(fields.grammar_param, error.what());
    }
  }
  constraints.logit_bias = fields.logit_bias;
  constraints.min_tokens = fields.min_tokens;
  constraints.stop_token_ids = fields.stop_token_ids;
  request->ignore_eos = request->ignore_eos || fields.ignore_eos;
}

PredictionUsage prediction_usage(const std::vector<int32_t>& prediction, const std::vector<int32_t>& completion,
                                 int64_t max_steps) {
  // Myers' greedy diff: the furthest reaching path for each number of edits d, O((n + m) * d), so
  // a close rewrite costs little however long it is. A far one could cost (n + m)^2: past
  // max_steps the count is a common subsequence found greedily instead (a lower bound).
  const int64_t n = int64_t(prediction.size()), m = int64_t(completion.size());
  const int64_t max_d = n + m;
  std::vector<int64_t> v(size_t(2 * max_d + 3), 0);
  const int64_t offset = max_d + 1;
  int64_t steps = 0;
  for (int64_t d = 0; d <= max_d && steps <= max_steps; ++d) {
    for (int64_t k = -d; k <= d; k += 2) {
      int64_t x = (k == -d || (k != d && v[size_t(offset + k - 1)] < v[size_t(offset + k + 1)]))
                      ? v[size_t(offset + k + 1)]
                      : v[size_t(offset + k - 1)] + 1;
      int64_t y = x - k;
      const int64_t x0 = x;
      while (x < n && y < m && prediction[size_t(x)] == completion[size_t(y)]) ++x, ++y;
      steps += 1 + (x - x0);
      v[size_t(offset + k)] = x;
      if (x >= n && y >= m) {
        const int64_t common = (n + m - d) / 2;
        return {common, n - common};
      }
    }
  }
  // Each completion token matched to its next occurrence in the prediction, O(m log n).
  std::unordered_map<int32_t, std::vector<int64_t>> positions;
  for (int64_t i = 0; i < n; ++i) positions[prediction[size_t(i)]].push_back(i);
  int64_t common = 0, next = 0;
  for (int32_t token : completion) {
    const auto found = positions.find(token);
    if (found == positions.end()) continue;
    const auto at = std::lower_bound(found->second.begin(), found->second.end(), next);
    if (at == found->second.end()) continue;
    ++common;
    next = *at + 1;
  }
  return {common, n - common};
}

}  // namespace tf::server
