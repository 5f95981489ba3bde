// Parsing and validating OpenAI request JSON, and building reply, chunk and error JSON.
#include "server/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/json_error_text.h"
#include "core/json_nesting.h"
#include "server/chat_request.h"
#include "server/field_reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tf::server {
namespace {

constexpr size_t max_stop_strings = 4;
constexpr int32_t max_chat_top_logprobs = 20;
constexpr int32_t max_completion_logprobs = 5;

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

// llama.cpp's id_slot: -1 (any free slot) or one of the server's slots, for one reply (the n
// choices of a request run in several slots at once).
int32_t parse_id_slot(const FieldReader& fields, const ProtocolLimits& limits, int64_t n_choices) {
  const json* value = fields.find("id_slot");
  if (!value) return -1;
  if (!value->is_number_integer()) fields.wrong_type("id_slot", "an integer");
  // A parsed non-negative number is unsigned: compared as such, no value wraps.
  const int64_t n_slots = limits.n_slots;
  const bool is_slot = value->is_number_unsigned()
                           ? value->get<uint64_t>() < uint64_t(n_slots)
                           : value->get<int64_t>() >= -1 && value->get<int64_t>() < n_slots;
  if (!is_slot)
    throw invalid("id_slot", "Invalid 'id_slot': this server has " + std::to_string(limits.n_slots) + " slots (0.." +
                                 std::to_string(limits.n_slots - 1) + "; -1 is any free slot), but got " +
                                 value->dump() + " instead.");
  const int32_t slot = int32_t(value->get<int64_t>());
  if (slot >= 0 && n_choices > 1)
    throw invalid("id_slot", "'id_slot' pins one reply to a slot, but n = " + std::to_string(n_choices) +
                                 " choices run in several slots at once; send n = 1 to pin a slot.");
  return slot;
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
  refuse_unsupported_fields(fields, endpoint);
  request.n_choices = fields.integer("n", 1, limits.max_choices).value_or(1);

  const int64_t max_limit = limits.max_tokens_limit;
  std::optional<int64_t> max_tokens = fields.integer("max_tokens", 1, max_limit);
  if (auto max_completion = fields.integer("max_completion_tokens", 1, max_limit))
    max_tokens = max_completion;
  request.max_tokens = max_tokens;

  SamplingParams& sampling = request.sampling;
  // A field the request leaves out takes the model's generation_config.json value, then OpenAI's.
  const GenerationDefaults& defaults = limits.sampling_defaults;
  sampling.temperature =
      float(fields.number("temperature", 0.0, 2.0).value_or(defaults.temperature.value_or(1.0)));
  sampling.top_p = float(fields.number("top_p", 0.0, 1.0).value_or(defaults.top_p.value_or(1.0)));
  sampling.min_p = float(fields.number("min_p", 0.0, 1.0).value_or(defaults.min_p.value_or(0.0)));
  sampling.top_k = int32_t(fields.integer("top_k", 0, std::numeric_limits<int32_t>::max())
                               .value_or(std::min<int64_t>(defaults.top_k.value_or(0), std::numeric_limits<int32_t>::max())));
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
    if (!request.is_stream)
      throw invalid("stream_options", "'stream_options' is only allowed when 'stream' is true.");
    const FieldReader stream_options(*options, "stream_options.");
    request.include_usage = stream_options.boolean("include_usage").value_or(false);
  }
  request.skips_special_tokens = fields.boolean("skip_special_tokens").value_or(true);
  request.use_draft = fields.boolean("draft").value_or(true);
  request.return_token_ids = fields.boolean("return_token_ids").value_or(false);
  request.return_provenance = fields.boolean("return_provenance").value_or(false);
  request.cache_prompt = fields.boolean("cache_prompt").value_or(true);
  request.cache_salt = fields.string("cache_salt").value_or("");
  if (request.cache_salt.size() > 256) throw invalid("cache_salt", "'cache_salt' must be at most 256 bytes.");
  request.id_slot = parse_id_slot(fields, limits, request.n_choices);
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
  return request;
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

// A completion's token as OpenAI's legacy logprobs name it: its text, or "bytes:\xe4\xb8" when its
// bytes are not whole UTF-8 (so two byte tokens never share one key of top_logprobs).
std::string completion_token_text(const Tokenizer& tokenizer, int32_t token) {
  const std::string& bytes = tokenizer.token_bytes(token);
  if (is_valid_utf8(bytes)) return bytes;
  std::string out = "bytes:";
  char escaped[5];
  for (unsigned char c : bytes) {
    std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
    out += escaped;
  }
  return out;
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

json tool_calls_json(const std::vector<AssembledToolCall>& calls) {
  json list = json::array();
  for (const AssembledToolCall& call : calls)
    list.push_back({{"id", call.id}, {"type", "function"},
                    {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  return list;
}

// The figures of one choice's reply (extensions beside OpenAI's fields).
// A seed as the client sends it back: `seed` is an int64 in the request (a negative one held as its
// two's complement), so one past INT64_MAX is reported as that negative number.
int64_t reported_seed(uint64_t seed) { return int64_t(seed); }

void add_reply_figures(json& body, const ReplySummary& summary, uint64_t seed) {
  body["timings"] = timings_json(summary.timings);
  body["token_sha"] = summary.token_sha;
  body["seed"] = reported_seed(seed);
  if (summary.token_ids) body["completion_token_ids"] = *summary.token_ids;
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
  if (json_nesting_depth(body) > kMaxJsonNesting)
    throw invalid("", "The request body nests arrays and objects deeper than " + std::to_string(kMaxJsonNesting) +
                          " levels.");
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::exception& error) {
    // The parser's own words say where and why ("at line 1, column 9: ... invalid string: surrogate
    // ...", "number overflow parsing '1e400'"), without the "[json.exception...]" tag; bounded, as
    // they quote the body.
    std::string why = json_error_text(error.what());
    if (why.size() > 240) {
      size_t cut = 240;
      while (cut > 0 && (static_cast<unsigned char>(why[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
      why = why.substr(0, cut) + "...";
    }
    throw invalid("", "We could not parse the JSON body of your request (" + why +
                          "). The body must be a valid JSON object.");
  }
  if (!parsed.is_object()) throw invalid("", "The request body must be a JSON object.");
  return parsed;
}

CompletionRequest parse_chat_request(const json& body, const ProtocolLimits& limits) {
  CompletionRequest request = parse_common(body, Endpoint::chat, limits);
  const FieldReader fields(body);
  parse_chat_fields(fields, limits, request);
  // After the chat fields, so tools and tool_choice are refused by their own checks first.
  const ChatTemplate chat_template(limits.chat_family);
  request.constraints = parse_constraint_fields(
      body, limits.chat_family == ChatTemplateFamily::qwen3_5 ? ToolCallSyntax::qwen3_5_xml : ToolCallSyntax::qwen3_json,
      chat_template.opens_thinking(request.chat_options));
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
  request.constraints = parse_constraint_fields(body, std::nullopt);  // a text completion has no tools
  parse_prompt(fields, request);
  if (auto n_logprobs = fields.integer("logprobs", 0, max_completion_logprobs))
    request.n_top_logprobs = int32_t(*n_logprobs);
  return request;
}

uint64_t seed_of_choice(uint64_t seed, int64_t index) {
  if (index == 0) return seed;
  // splitmix64 of (seed, index): distinct choices get unrelated streams, and the same request
  // always derives the same seeds; 53 bits, so a JavaScript client can send one back exactly.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * uint64_t(index);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) & ((uint64_t(1) << 53) - 1);
}

TokenizeRequest parse_tokenize_request(const json& body, const ProtocolLimits& limits) {
  const FieldReader fields(body);
  TokenizeRequest request;
  request.add_special = fields.boolean("add_special").value_or(true);
  request.with_pieces = fields.boolean("with_pieces").value_or(false);
  const std::optional<std::string> content = fields.string("content");
  if (fields.find("messages")) {
    if (content) throw invalid("content", "Give either 'content' or 'messages', not both.");
    json chat = body;  // the chat fields as a chat completion takes them, minus /tokenize's own
    for (const char* own : {"add_special", "with_pieces"}) chat.erase(own);
    request.chat = parse_chat_request(chat, limits);
    return request;
  }
  if (!content) throw invalid("content", "Missing required parameter: 'content' (or 'messages').");
  request.content = *content;
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

json logprobs_json(Endpoint endpoint, const ListedLogprobs& listed, const Tokenizer& tokenizer) {
  if (endpoint == Endpoint::chat) {
    json content = json::array();
    for (const TokenLogprobs& entry : listed.logprobs) {
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
       text_offsets = json(listed.text_offsets);
  for (const TokenLogprobs& entry : listed.logprobs) {
    const std::string text = completion_token_text(tokenizer, entry.token);
    tokens.push_back(text);
    token_logprobs.push_back(entry.logprob);
    // Best first; a key two tokens share (same text) keeps the better one. The chosen token is
    // always among them, as OpenAI's are (up to logprobs + 1 entries; logprobs 0 gives it alone).
    json top = json::object();
    for (const TokenLogprob& alternative : entry.top) {
      const std::string key = completion_token_text(tokenizer, alternative.token);
      if (!top.contains(key)) top[key] = alternative.logprob;
    }
    if (!top.contains(text)) top[text] = entry.logprob;
    top_logprobs.push_back(std::move(top));
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top_logprobs)},
              {"text_offset", std::move(text_offsets)}};
}

const char* wire_finish_reason(const ReplySummary& summary, bool has_tool_calls) {
  // cancelled and error replies never get here: they are answered with an error (completion_handler).
  if (summary.finish_reason == FinishReason::length) return "length";
  return has_tool_calls && !summary.ended_inside_tool_call ? "tool_calls" : "stop";
}

json choice_json(const ReplyHeader& header, int64_t index, const AssembledReply& reply, const json& logprobs,
                 const ReplySummary& summary, uint64_t seed) {
  json choice = {{"index", index}};
  if (header.endpoint == Endpoint::chat) {
    json message = {{"role", "assistant"}};
    // OpenAI sends null content beside tool calls when there is no text.
    message["content"] = reply.content.empty() && !reply.tool_calls.empty() ? json() : json(reply.content);
    if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
    if (!reply.tool_calls.empty()) message["tool_calls"] = tool_calls_json(reply.tool_calls);
    choice["message"] = std::move(message);
  } else {
    choice["text"] = reply.content;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = wire_finish_reason(summary, !reply.tool_calls.empty());
  choice["seed"] = reported_seed(seed);
  choice["token_sha"] = summary.token_sha;
  return choice;
}

json reply_json(const ReplyHeader& header, json choices, const ReplySummary& first, const json& usage) {
  json body = header_fields(header, /*is_chunk=*/false);
  body["choices"] = std::move(choices);
  body["usage"] = usage;
  add_reply_figures(body, first, header.seed);
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

json opening_chunk_json(const ReplyHeader& header, int64_t index) {
  json chunk = header_fields(header, /*is_chunk=*/true);
  json choice = {{"index", index}};
  if (header.endpoint == Endpoint::chat) choice["delta"] = {{"role", "assistant"}, {"content", ""}};
  else choice["text"] = "";
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

json delta_chunk_json(const ReplyHeader& header, int64_t index, const ReplyPiece& piece, const json& logprobs) {
  json chunk = header_fields(header, /*is_chunk=*/true);
  json choice = {{"index", index}};
  if (header.endpoint == Endpoint::chat) {
    json delta = json::object();
    if (!piece.reasoning.empty()) delta["reasoning_content"] = piece.reasoning;
    if (!piece.content.empty()) delta["content"] = piece.content;
    if (!piece.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCallDelta& call : piece.tool_calls) {
        json entry = {{"index", call.index}};
        if (call.id) entry["id"] = *call.id;
        if (call.id) entry["type"] = "function";
        json function = json::object();
        if (call.name) function["name"] = *call.name;
        function["arguments"] = call.arguments;
        entry["function"] = std::move(function);
        calls.push_back(std::move(entry));
      }
      delta["tool_calls"] = std::move(calls);
    }
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = piece.content;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = nullptr;
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

json final_chunk_json(const ReplyHeader& header, int64_t index, const ReplySummary& summary, bool has_tool_calls,
                      uint64_t seed) {
  json chunk = header_fields(header, /*is_chunk=*/true);
  json choice = {{"index", index}};
  if (header.endpoint == Endpoint::chat) choice["delta"] = json::object();
  else choice["text"] = "";
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = wire_finish_reason(summary, has_tool_calls);
  chunk["choices"] = json::array({std::move(choice)});
  // No usage here: a stream reports it once, for every choice, in the include_usage chunk (a
  // client that reads the last usage it saw would take one choice's for the request's).
  add_reply_figures(chunk, summary, seed);
  return chunk;
}

json usage_chunk_json(const ReplyHeader& header, const json& usage, const ReplySummary& first) {
  json chunk = header_fields(header, /*is_chunk=*/true);
  chunk["choices"] = json::array();
  chunk["usage"] = usage;
  add_reply_figures(chunk, first, header.seed);
  return chunk;
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tf::server
