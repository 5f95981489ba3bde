// The OpenAI wire format: request JSON parsed and validated into native structs, and the
// reply / stream-chunk / error JSON built from the engine's updates. No HTTP and no engine here.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "loader/generation_config.h"
#include "sampling/sampler.h"
#include "server/chat_reply_parser.h"
#include "server/constraint_params.h"
#include "server/logprob_release.h"
#include "tokenizer/chat_template.h"

namespace tf {

class Tokenizer;

namespace server {

// Ordered: a client's tool schemas reach the chat template with their keys in the order sent,
// as Python's dict keeps them for transformers.
using json = nlohmann::ordered_json;

// A request the client got wrong (or a server condition), answered as an OpenAI error object.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::string param = "", std::string code = "")
      : std::runtime_error(message), status(status), type(std::move(type)),
        param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string type;
  std::string param;  // empty: null
  std::string code;   // empty: null
};

// {"error": {"message", "type", "param", "code"}}
json error_body(const ApiError& error);

// What a client hears of an exception that escaped a handler: an ApiError as it is; a tf::Error is
// the request's fault (400 with its text); anything else (tf::InternalError, the machine failing)
// is ours: 500 with a generic text, the real one only in the server's log.
ApiError api_error_for(const std::exception& error);

// What the server allows, shared by every parse.
struct ProtocolLimits {
  std::string model_id;                  // the served model; requests naming another get 404
  std::vector<std::string> model_aliases;  // other names accepted for the same model
  int64_t max_tokens_limit = 131072;     // larger max_tokens values are rejected
  bool allow_bench_extensions = false;   // "replay" (serve --bench-extensions)
  GenerationDefaults sampling_defaults;  // the model's generation_config.json, for fields a request omits
  ChatTemplateFamily chat_family = ChatTemplateFamily::qwen3;  // what the chat template can render
  int64_t max_choices = 16;              // the largest n
  int32_t n_slots = 1;                   // --parallel: id_slot names one of 0..n_slots-1
};

enum class Endpoint { chat, completion };

// tool_choice. `required` and a named function are constrained by a tool-call grammar
// (constraint_params: tool_call_gbnf); the parse keeps them for the reply parser.
enum class ToolChoiceMode { automatic, none, required, function };
struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::automatic;
  std::string function_name;  // mode function
};

// A /v1/chat/completions or /v1/completions request, validated, before tokenization.
struct CompletionRequest {
  Endpoint endpoint = Endpoint::chat;
  std::vector<ChatMessage> messages;    // chat
  ChatOptions chat_options;             // chat: thinking switches, the tools offered
  ToolChoice tool_choice;               // chat
  bool parallel_tool_calls = true;      // chat: false stops the reply after its first call
  std::optional<std::string> reasoning_effort;  // chat: as sent (it has set enable_thinking)
  int64_t n_choices = 1;                // n: choices, each with its own seed (seed_of_choice)
  std::optional<std::string> prompt_text;  // completion: a string prompt
  std::vector<int32_t> prompt_tokens;      // completion: a prompt given as token ids
  std::optional<int64_t> max_tokens;    // absent: the endpoint's default
  SamplingParams sampling;
  bool is_seed_given = false;           // false: the server draws sampling.seed
  std::vector<std::string> stop;
  bool is_stream = false;
  bool skips_special_tokens = true;     // "skip_special_tokens" (vLLM's): special tokens add no text
  bool include_usage = false;           // stream_options.include_usage
  int32_t n_top_logprobs = -1;          // -1: no logprobs
  bool use_draft = true;
  bool return_token_ids = false;        // the reply's token ids in "completion_token_ids"
  bool return_provenance = false;       // each token's source and round in "provenance" (extension)
  bool cache_prompt = true;             // "cache_prompt": the prefix cache (llama.cpp's name)
  std::string cache_salt;               // "cache_salt": only requests with the same salt share blocks
  int32_t id_slot = -1;                 // "id_slot": the slot the reply runs in (-1: any free one)
  // Benchmark extension: a reply the replay proposer drafts, alone, replay_accept tokens a round
  // (0: as many as the window holds), so a benchmark can force an acceptance length.
  std::vector<int32_t> replay;
  int64_t replay_accept = 0;
  ConstraintFields constraints;  // response_format, grammar, logit_bias, ..., prediction
};

// Checks the bytes (valid UTF-8) and parses a JSON object; throws ApiError.
json parse_body(std::string_view body);

// Validate every known field; unknown fields are ignored as OpenAI does, but a field OpenAI defines
// that this server does not do is refused by name (never silently dropped). Throws ApiError.
CompletionRequest parse_chat_request(const json& body, const ProtocolLimits& limits);
CompletionRequest parse_completion_request(const json& body, const ProtocolLimits& limits);

// The seed of choice `index` of a request seeded `seed`: choice 0 keeps it, the others get
// distinct seeds derived from it (reported back in each choice).
uint64_t seed_of_choice(uint64_t seed, int64_t index);

// /tokenize and /detokenize bodies. A /tokenize body gives "content" (text) or "messages" (a chat,
// rendered as /v1/chat/completions renders it, with its tools and template switches).
struct TokenizeRequest {
  std::string content;
  std::optional<CompletionRequest> chat;  // when "messages" was given
  bool add_special = true;
  bool with_pieces = false;  // each token with its text: [{"id", "piece"}]
};
TokenizeRequest parse_tokenize_request(const json& body, const ProtocolLimits& limits);
std::vector<int32_t> parse_detokenize_request(const json& body);

// Identity of one reply, shared by its body or all of its chunks.
struct ReplyHeader {
  Endpoint endpoint = Endpoint::chat;
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
  uint64_t seed = 0;
};

// Everything the final update says about a finished reply.
struct ReplySummary {
  FinishReason finish_reason = FinishReason::stop;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  ReplyTimings timings;
  std::string token_sha;
  std::optional<std::vector<int32_t>> token_ids;  // when the request asked for them
  std::optional<PredictionUsage> prediction;      // when the request had a prediction
  // The reply ended inside a tool call (a stop string, EOS or the budget cut it): the model did not
  // finish calling, so the finish reason is not "tool_calls".
  bool ended_inside_tool_call = false;
};

json usage_json(const ReplySummary& summary);
json timings_json(const ReplyTimings& timings);

// The logprobs object of a choice: chat {"content": [...]}, completion {"tokens", ...} with the
// listed tokens' text offsets.
json logprobs_json(Endpoint endpoint, const ListedLogprobs& listed, const Tokenizer& tokenizer);

// [{"source": "target" | "long_copy" | "drafter" | "mtp" | "ngram" | "replay", "round": R}, ...], one per token.
json provenance_json(const std::vector<TokenProvenance>& provenance);

// OpenAI's finish_reason: "length" for a reply cut by its budget, "tool_calls" for one that ended
// having called tools, else "stop".
const char* wire_finish_reason(const ReplySummary& summary, bool has_tool_calls);

// One finished choice of a whole reply: chat {"message": {content, reasoning_content, tool_calls}},
// completion {"text"}; the choice's own seed and token_sha ride along (extensions).
json choice_json(const ReplyHeader& header, int64_t index, const AssembledReply& reply, const json& logprobs,
                 const ReplySummary& summary, uint64_t seed);

// A whole non-streamed reply: its choices, usage over all of them, and the first choice's timings,
// token_sha and seed at the top, as a single-choice reply has always had them.
json reply_json(const ReplyHeader& header, json choices, const ReplySummary& first, const json& usage);

// Stream chunks: the opening one (chat: the assistant role), deltas (reasoning, content, tool-call
// deltas), a choice's final one with finish_reason, timings and token_sha (no usage), and the
// include_usage one with empty choices (and the first choice's figures, as a reply's top level has).
json opening_chunk_json(const ReplyHeader& header, int64_t index);
json delta_chunk_json(const ReplyHeader& header, int64_t index, const ReplyPiece& piece, const json& logprobs);
json final_chunk_json(const ReplyHeader& header, int64_t index, const ReplySummary& summary, bool has_tool_calls,
                      uint64_t seed);
json usage_chunk_json(const ReplyHeader& header, const json& usage, const ReplySummary& first);

// JSON text for the wire: invalid UTF-8 (a token cut mid-character) becomes U+FFFD, not a throw.
std::string dump_json(const json& value);

}  // namespace server
}  // namespace tf
