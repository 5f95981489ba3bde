// The request fields that constrain tokens (response_format, grammar, a forced tool_choice,
// logit_bias, min_tokens, stop_token_ids, ignore_eos) and Predicted Outputs' `prediction`:
// parsed and checked here, kept apart from the rest of the protocol.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/json_schema_grammar.h"

namespace tf::server {

struct ConstraintFields {
  std::string grammar_text;            // GBNF; empty: free text
  std::string grammar_start = "root";  // the rule the reply matches
  std::string grammar_param;           // the parameter it came from, named in errors
  std::vector<std::pair<int32_t, float>> logit_bias;  // ascending by token
  int64_t min_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  std::optional<std::string> prediction;  // prediction.content, its parts joined
};

// Reads the fields above from a request body; throws ApiError naming the parameter. A forced tool
// call is written in the chat template's `tool_syntax` (none: a text completion, which has no
// tools); where the prompt opened the reasoning, every grammar (a forced call, response_format,
// grammar) constrains the answer after it.
ConstraintFields parse_constraint_fields(const nlohmann::ordered_json& body,
                                         std::optional<ToolCallSyntax> tool_syntax = ToolCallSyntax::qwen3_json,
                                         bool starts_in_reasoning = false);

// Compiles the grammar and fills the request's TokenConstraints (and ignore_eos); a grammar that
// does not compile is a 400 naming grammar_param.
void apply_constraint_fields(const ConstraintFields& fields, GenerationRequest* request);

// Predicted Outputs' usage, as OpenAI defines it: prediction tokens that appear in the completion
// (the longest common subsequence of the two) and those that do not. Exact within max_steps of
// diff work (any rewrite a few thousand edits from its prediction); past that, a lower bound.
struct PredictionUsage {
  int64_t accepted = 0;
  int64_t rejected = 0;
};
PredictionUsage prediction_usage(const std::vector<int32_t>& prediction, const std::vector<int32_t>& completion,
                                 int64_t max_steps = int64_t(1) << 25);

}  // namespace tf::server
