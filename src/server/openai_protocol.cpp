// Parsing and validating OpenAI request JSON, and building reply, chunk and error JSON.
#include "server/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tf::server {
namespace {

constexpr size_t max_stop_strings = 4;
constexpr int32_t max_chat_top_logprobs = 20;
constexpr int32_t max_completion_logprobs = 5;

ApiError invalid(const std::string& param, const std::string& message) {
  return ApiError(400, message, "invalid_request_error", param);
}

std::string number_text(double value) {
  json as_json = value;
  if (value == std::floor(value) && std::fabs(value) < 1e15) as_json = int64_t(value);
  return as_json.dump();
}

// Reads one known field: null counts as absent; a wrong type or range names the field.
class FieldReader {
 public:
  explicit FieldReader(const json& object, std::string prefix = "")
      : object_(object), prefix_(std::move(prefix)) {}

  const json* find(const std::string& name) const {
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::string param(const std::string& name) const { return prefix_ + name; }

  [[noreturn]] void wrong_type(const std::string& name, const char* expected) const {
    const json* value = find(name);
    throw invalid(param(name), "Invalid type for '" + param(name) + "': expected " + expected +
                                   ", but got " + (value ? value->type_name() : "null") +
                                   " instead.");
  }

  std::optional<double> number(const std::string& name, double min, double max) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_number()) wrong_type(name, "a number");
    const double x = value->get<double>();
    check_range(name, x < min, x > max, min, max, "decimal");
    return x;
  }

  std::optional<int64_t> integer(const std::string& name, int64_t min, int64_t max) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_number_integer()) wrong_type(name, "an integer");
    // nlohmann types non-negative numbers as unsigned; compare as integers, so one check covers
    // both types and no bound rounds through a double.
    const bool is_above_int64 =
        value->is_number_unsigned() && value->get<uint64_t>() > uint64_t(INT64_MAX);
    const int64_t x = is_above_int64 ? INT64_MAX : value->get<int64_t>();
    check_range(name, x < min, is_above_int64 || x > max, double(min), double(max), "integer");
    return x;
  }

  std::optional<bool> boolean(const std::string& name) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) wrong_type(name, "a boolean");
    return value->get<bool>();
  }

  std::optional<std::string> string(const std::string& name) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_string()) wrong_type(name, "a string");
    return value->get<std::string>();
  }

  const json* object(const std::string& name) const {
    const json* value = find(name);
    if (value && !value->is_object()) wrong_type(name, "an object");
    return value;
  }

 private:
  // The one range check for decimals and integers: the bounds and the value compare in the caller's
  // type; the message quotes the value as sent.
  void check_range(const std::string& name, bool is_below, bool is_above, double min, double max,
                   const char* kind) const {
    if (!is_below && !is_above) return;
    const std::string expected = is_below ? " below minimum value. Expected a value >= " + number_text(min)
                                          : " above maximum value. Expected a value <= " + number_text(max);
    throw invalid(param(name), "Invalid '" + param(name) + "': " + kind + expected + ", but got " +
                                   find(name)->dump() + " instead.");
  }

  const json& object_;
  std::string prefix_;
};

void check_model(const FieldReader& fields, const ProtocolLimits& limits) {
  const std::optional<std::string> model = fields.string("model");
  if (!model || *model == limits.model_id) return;
  for (const std::string& alias : limits.model_aliases)
    if (*model == alias) return;
  throw ApiError(404, "The model '" + *model + "' does not exist. This server serves '" +
                          limits.model_id + "'.",
                 "invalid_request_error", "model", "model_not_found");
}

std::vector<std::string> parse_stop(const FieldReader& fields) {
  const json* stop = fields.find("stop");
  if (!stop) return {};
  std::vector<std::string> strings;
  if (stop->is_string()) {
    strings.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    if (stop->size() > max_stop_strings)
      throw invalid("stop", "Invalid 'stop': at most " + std::to_string(max_stop_strings) +
                                " stop strings are allowed, but got " +
                                std::to_string(stop->size()) + ".");
    for (const json& item : *stop) {
      if (!item.is_string())
        throw invalid("stop", "Invalid type for 'stop': expected a string or an array of "
                              "strings, but the array holds a " +
                                  std::string(item.type_name()) + ".");
      strings.push_back(item.get<std::string>());
    }
  } else {
    fields.wrong_type("stop", "a string or an array of strings");
  }
  for (const std::string& s : strings)
    if (s.empty()) throw invalid("stop", "Invalid 'stop': stop strings must not be empty.");
  return strings;
}

// Fields both endpoints share: sampling, budget, stop, stream, the draft extension.
std::vector<int32_t> parse_token_ids(const json& array, const std::string& param);

CompletionRequest parse_common(const json& body, Endpoint endpoint,
                               const ProtocolLimits& limits) {
  if (!body.is_object())
    throw invalid("", "The request body must be a JSON object.");
  const FieldReader fields(body);
  check_model(fields, limits);

  CompletionRequest request;
  request.endpoint = endpoint;
  fields.integer("n", 1, 1);  // one choice per request: any other n is rejected

  const int64_t max_limit = limits.max_tokens_limit;
  std::optional<int64_t> max_tokens = fields.integer("max_tokens", 1, max_limit);
  if (auto max_completion = fields.integer("max_completion_tokens", 1, max_limit))
    max_tokens = max_completion;
  request.max_tokens = max_tokens;

  SamplingParams& sampling = request.sampling;
  sampling.temperature = float(fields.number("temperature", 0.0, 2.0).value_or(1.0));
  sampling.top_p = float(fields.number("top_p", 0.0, 1.0).value_or(1.0));
  sampling.min_p = float(fields.number("min_p", 0.0, 1.0).value_or(0.0));
  sampling.top_k =
      int32_t(fields.integer("top_k", 0, std::numeric_limits<int32_t>::max()).value_or(0));
  sampling.presence_penalty = float(fields.number("presence_penalty", -2.0, 2.0).value_or(0.0));
  sampling.frequency_penalty =
      float(fields.number("frequency_penalty", -2.0, 2.0).value_or(0.0));
  if (auto seed = fields.integer("seed", std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max())) {
    sampling.seed = uint64_t(*seed);
    request.is_seed_given = true;
  }

  request.stop = parse_stop(fields);
  request.is_stream = fields.boolean("stream").value_or(false);
  if (const json* options = fields.object("stream_options")) {
    const FieldReader stream_options(*options, "stream_options.");
    request.include_usage = stream_options.boolean("include_usage").value_or(false);
  }
  request.use_draft = fields.boolean("draft").value_or(true);
  request.return_token_ids = fields.boolean("return_token_ids").value_or(false);
  request.return_provenance = fields.boolean("return_provenance").value_or(false);
  request.cache_prompt = fields.boolean("cache_prompt").value_or(true);
  request.cache_salt = fields.string("cache_salt").value_or("");
  if (request.cache_salt.size() > 256) throw invalid("cache_salt", "'cache_salt' must be at most 256 bytes.");
  if (const json* replay = fields.object("replay")) {
    if (!limits.allow_bench_extensions)
      throw invalid("replay", "'replay' is a benchmark extension; this server was not started with "
                              "--bench-extensions.");
    const FieldReader replay_fields(*replay, "replay.");
    const json* ids = replay_fields.find("token_ids");
    if (!ids) throw invalid("replay.token_ids", "Missing required parameter: 'replay.token_ids'.");
    if (!ids->is_array()) replay_fields.wrong_type("token_ids", "an array of token ids");
    request.replay = parse_token_ids(*ids, "replay.token_ids");
    request.replay_accept = replay_fields.integer("accept", 1, 1024).value_or(0);
  }
  request.constraints = parse_constraint_fields(body);
  return request;
}

std::string message_content(const json& message, const std::string& param) {
  auto it = message.find("content");
  if (it == message.end() || it->is_null()) {
    if (message.value("role", "") == "assistant") return "";  // e.g. a tool-call turn
    throw invalid(param + ".content", "Missing required parameter: '" + param + ".content'.");
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array())
    throw invalid(param + ".content", "Invalid type for '" + param +
                                          ".content': expected a string or an array of "
                                          "content parts, but got " +
                                          it->type_name() + " instead.");
  std::string text;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& part = (*it)[i];
    const std::string part_param = param + ".content[" + std::to_string(i) + "]";
    if (!part.is_object() || part.value("type", json()) != "text" ||
        !part.contains("text") || !part["text"].is_string())
      throw invalid(part_param, "Invalid '" + part_param +
                                    "': only content parts of the form {\"type\": \"text\", "
                                    "\"text\": \"...\"} are supported.");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> parse_messages(const FieldReader& fields) {
  const json* messages = fields.find("messages");
  if (!messages) throw invalid("messages", "Missing required parameter: 'messages'.");
  if (!messages->is_array()) fields.wrong_type("messages", "an array");
  if (messages->empty())
    throw invalid("messages", "Invalid 'messages': empty array. Expected an array with "
                              "minimum length 1, but got an empty array instead.");
  std::vector<ChatMessage> parsed;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!message.is_object())
      throw invalid(param, "Invalid type for '" + param + "': expected an object, but got " +
                               message.type_name() + " instead.");
    const FieldReader message_fields(message, param + ".");
    const std::optional<std::string> role = message_fields.string("role");
    if (!role) throw invalid(param + ".role", "Missing required parameter: '" + param + ".role'.");
    if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" && *role != "tool")
      throw invalid(param + ".role", "Invalid value: '" + *role + "'. Supported values are: "
                                     "'system', 'developer', 'user', 'assistant' and 'tool'.");
    ChatMessage chat_message;
    // OpenAI's newer name for the system turn; Qwen templates know only "system".
    chat_message.role = *role == "developer" ? "system" : *role;
    chat_message.content = message_content(message, param);
    if (*role == "assistant")
      chat_message.reasoning_content = message_fields.string("reasoning_content");
    parsed.push_back(std::move(chat_message));
  }
  return parsed;
}

// A prompt given as token ids: non-negative integers (the engine checks them against the vocab).
std::vector<int32_t> parse_token_ids(const json& array, const std::string& param) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (const json& item : array) {
    if (!item.is_number_integer() || item.get<int64_t>() < 0 ||
        item.get<int64_t>() > std::numeric_limits<int32_t>::max())
      throw invalid(param, "Invalid '" + param + "': token ids must be non-negative integers.");
    ids.push_back(int32_t(item.get<int64_t>()));
  }
  return ids;
}

void parse_prompt(const FieldReader& fields, CompletionRequest& request) {
  const json* prompt = fields.find("prompt");
  if (!prompt) throw invalid("prompt", "Missing required parameter: 'prompt'.");
  const json* single = prompt;
  // A one-element batch is the same prompt; bigger batches would need n choices.
  if (prompt->is_array() && prompt->size() == 1 && !(*prompt)[0].is_number()) single = &(*prompt)[0];
  if (single->is_string()) {
    if (single->get_ref<const std::string&>().empty())
      throw invalid("prompt", "Invalid 'prompt': the prompt must not be empty.");
    request.prompt_text = single->get<std::string>();
    return;
  }
  if (!single->is_array())
    fields.wrong_type("prompt", "a string or an array of token ids");
  if (single->empty())
    throw invalid("prompt", "Invalid 'prompt': the prompt must not be empty.");
  if (!(*single)[0].is_number())
    throw invalid("prompt", "Invalid 'prompt': only one prompt per request is supported (a "
                            "string or an array of token ids).");
  request.prompt_tokens = parse_token_ids(*single, "prompt");
}

json token_entry_bytes(const std::string& bytes) {
  json list = json::array();
  for (unsigned char c : bytes) list.push_back(int(c));
  return list;
}

std::string token_text(const Tokenizer& tokenizer, int32_t token) {
  return utf8::replace_invalid(tokenizer.token_bytes(token));
}

json header_fields(const ReplyHeader& header, bool is_chunk) {
  const char* object = header.endpoint == Endpoint::chat
                           ? (is_chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return json{{"id", header.id},
              {"object", object},
              {"created", header.created},
              {"model", header.model},
              {"system_fingerprint", "tensorfold"}};
}

json choice_json(const ReplyHeader& header, const std::string& text, const json& logprobs,
                 const json& finish_reason, bool is_delta) {
  json choice = {{"index", 0}};
  if (header.endpoint == Endpoint::chat) {
    if (is_delta)
      choice["delta"] = text.empty() ? json::object() : json{{"content", text}};
    else
      choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason;
  return choice;
}

void add_reply_figures(json& body, const ReplyHeader& header, const ReplySummary& summary) {
  body["usage"] = usage_json(summary);
  body["timings"] = timings_json(summary.timings);
  body["token_sha"] = summary.token_sha;
  body["seed"] = header.seed;
  if (summary.token_ids) body["completion_token_ids"] = *summary.token_ids;
}

const char* wire_finish_reason(FinishReason reason) {
  // cancelled and error replies only reach a client that is still there on shutdown.
  return reason == FinishReason::length ? "length" : "stop";
}

}  // namespace

json error_body(const ApiError& error) {
  return json{{"error",
               {{"message", error.what()},
                {"type", error.type},
                {"param", error.param.empty() ? json() : json(error.param)},
                {"code", error.code.empty() ? json() : json(error.code)}}}};
}

ApiError api_error_for(const std::exception& error) {
  if (const auto* api_error = dynamic_cast<const ApiError*>(&error)) return *api_error;
  if (dynamic_cast<const Error*>(&error)) return ApiError(400, error.what(), "invalid_request_error");
  return ApiError(500, "Internal server error.", "server_error");
}

json parse_body(std::string_view body) {
  if (!is_valid_utf8(body))
    throw invalid("", "The request body is not valid UTF-8.");
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    throw invalid("", "We could not parse the JSON body of your request. The body must be a "
                      "valid JSON object.");
  if (!parsed.is_object()) throw invalid("", "The request body must be a JSON object.");
  return parsed;
}

CompletionRequest parse_chat_request(const json& body, const ProtocolLimits& limits) {
  CompletionRequest request = parse_common(body, Endpoint::chat, limits);
  const FieldReader fields(body);
  request.messages = parse_messages(fields);
  if (const json* kwargs = fields.object("chat_template_kwargs")) {
    const FieldReader template_fields(*kwargs, "chat_template_kwargs.");
    request.chat_options.enable_thinking = template_fields.boolean("enable_thinking");
  }
  const bool is_logprobs = fields.boolean("logprobs").value_or(false);
  const std::optional<int64_t> n_top =
      fields.integer("top_logprobs", 0, max_chat_top_logprobs);
  if (n_top && !is_logprobs)
    throw invalid("top_logprobs", "Invalid 'top_logprobs': 'logprobs' must be true when "
                                  "'top_logprobs' is given.");
  if (is_logprobs) request.n_top_logprobs = int32_t(n_top.value_or(0));
  return request;
}

CompletionRequest parse_completion_request(const json& body, const ProtocolLimits& limits) {
  CompletionRequest request = parse_common(body, Endpoint::completion, limits);
  const FieldReader fields(body);
  parse_prompt(fields, request);
  if (auto n_logprobs = fields.integer("logprobs", 0, max_completion_logprobs))
    request.n_top_logprobs = int32_t(*n_logprobs);
  return request;
}

TokenizeRequest parse_tokenize_request(const json& body) {
  const FieldReader fields(body);
  TokenizeRequest request;
  const std::optional<std::string> content = fields.string("content");
  if (!content) throw invalid("content", "Missing required parameter: 'content'.");
  request.content = *content;
  request.add_special = fields.boolean("add_special").value_or(true);
  return request;
}

std::vector<int32_t> parse_detokenize_request(const json& body) {
  const FieldReader fields(body);
  const json* tokens = fields.find("tokens");
  if (!tokens) throw invalid("tokens", "Missing required parameter: 'tokens'.");
  if (!tokens->is_array()) fields.wrong_type("tokens", "an array of token ids");
  return parse_token_ids(*tokens, "tokens");
}

json usage_json(const ReplySummary& summary) {
  json usage = {{"prompt_tokens", summary.prompt_tokens},
                {"completion_tokens", summary.completion_tokens},
                {"total_tokens", summary.prompt_tokens + summary.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", summary.timings.cache_n}}}};
  if (summary.prediction)
    usage["completion_tokens_details"] = {{"accepted_prediction_tokens", summary.prediction->accepted},
                                          {"rejected_prediction_tokens", summary.prediction->rejected}};
  return usage;
}

json timings_json(const ReplyTimings& timings) {
  return json{{"prompt_n", timings.prompt_n},
              {"cache_n", timings.cache_n},
              {"prompt_ms", timings.prompt_ms},
              {"predicted_n", timings.predicted_n},
              {"predicted_ms", timings.predicted_ms},
              {"rounds", timings.rounds},
              {"draft_n", timings.draft_n},
              {"draft_accepted_n", timings.draft_accepted_n},
              {"tokens_per_round", timings.tokens_per_round()}};
}

json logprobs_json(Endpoint endpoint, const std::vector<TokenLogprobs>& logprobs,
                   const Tokenizer& tokenizer, int64_t text_offset) {
  if (endpoint == Endpoint::chat) {
    json content = json::array();
    for (const TokenLogprobs& entry : logprobs) {
      json top = json::array();
      for (const TokenLogprob& alternative : entry.top)
        top.push_back({{"token", token_text(tokenizer, alternative.token)},
                       {"logprob", alternative.logprob},
                       {"bytes", token_entry_bytes(tokenizer.token_bytes(alternative.token))}});
      content.push_back({{"token", token_text(tokenizer, entry.token)},
                         {"logprob", entry.logprob},
                         {"bytes", token_entry_bytes(tokenizer.token_bytes(entry.token))},
                         {"top_logprobs", std::move(top)}});
    }
    return json{{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offsets = json::array();
  for (const TokenLogprobs& entry : logprobs) {
    const std::string text = token_text(tokenizer, entry.token);
    tokens.push_back(text);
    token_logprobs.push_back(entry.logprob);
    json top = json::object();
    for (const TokenLogprob& alternative : entry.top)
      top[token_text(tokenizer, alternative.token)] = alternative.logprob;
    top_logprobs.push_back(std::move(top));
    text_offsets.push_back(text_offset);
    text_offset += int64_t(tokenizer.token_bytes(entry.token).size());
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top_logprobs)},
              {"text_offset", std::move(text_offsets)}};
}

json reply_json(const ReplyHeader& header, const std::string& text, const json& logprobs,
                const ReplySummary& summary) {
  json body = header_fields(header, /*is_chunk=*/false);
  body["choices"] = json::array(
      {choice_json(header, text, logprobs, wire_finish_reason(summary.finish_reason), false)});
  add_reply_figures(body, header, summary);
  return body;
}

json provenance_json(const std::vector<TokenProvenance>& provenance) {
  json entries = json::array();
  for (const TokenProvenance& p : provenance)
    entries.push_back({{"source", p.source == TokenProvenance::kTarget ? "target"
                                                                        : proposer_kind_name(ProposerKind(p.source))},
                       {"round", p.round}});
  return entries;
}

json opening_chunk_json(const ReplyHeader& header) {
  json chunk = header_fields(header, /*is_chunk=*/true);
  json choice = choice_json(header, "", nullptr, nullptr, true);
  if (header.endpoint == Endpoint::chat) choice["delta"] = {{"role", "assistant"}, {"content", ""}};
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

json delta_chunk_json(const ReplyHeader& header, const std::string& text, const json& logprobs) {
  json chunk = header_fields(header, /*is_chunk=*/true);
  chunk["choices"] = json::array({choice_json(header, text, logprobs, nullptr, true)});
  return chunk;
}

json final_chunk_json(const ReplyHeader& header, const ReplySummary& summary) {
  json chunk = header_fields(header, /*is_chunk=*/true);
  chunk["choices"] = json::array(
      {choice_json(header, "", nullptr, wire_finish_reason(summary.finish_reason), true)});
  add_reply_figures(chunk, header, summary);
  return chunk;
}

json usage_chunk_json(const ReplyHeader& header, const ReplySummary& summary) {
  json chunk = header_fields(header, /*is_chunk=*/true);
  chunk["choices"] = json::array();
  add_reply_figures(chunk, header, summary);
  return chunk;
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tf::server
