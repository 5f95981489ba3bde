// Chat and text completions: prompt building, engine submission (one lane per choice), and the
// reply as JSON or SSE, each choice's text passed through the chat template's reply parser.
#include "server/completion_handler.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <random>

#include "app/serving_stack.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/chat_request.h"
#include "server/reply_channel.h"
#include "server/sse.h"
#include "speculation/proposer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tf::server {
namespace {

// How long a worker waits for tokens before looking again whether its client is still there.
constexpr std::chrono::milliseconds poll_interval{200};
constexpr int64_t default_completion_max_tokens = 16;  // OpenAI's default for /v1/completions

uint64_t random_u64() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return generator();
}

std::string random_hex() {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random_u64()));
  return hex;
}

// The chat's prompt as the model's template renders it; user and tool text keeps its special
// tokens as text unless the server was told otherwise.
std::vector<int32_t> build_prompt(const CompletionRequest& request, const ServingContext& context) {
  const Tokenizer& tokenizer = *context.tokenizer;
  if (request.endpoint == Endpoint::completion && !request.prompt_text) return request.prompt_tokens;
  std::vector<int32_t> tokens;
  if (request.endpoint == Endpoint::chat) {
    ChatOptions options = request.chat_options;
    // tool_choice "none": the model is not shown the tools, so it has no call format to write.
    if (request.tool_choice.mode == ToolChoiceMode::none) options.tools.clear();
    RenderedChat rendered;
    try {
      rendered = context.chat_template.render(request.messages, options);
    } catch (const Error& error) {
      throw ApiError(400, error.what(), "invalid_request_error", "messages");
    }
    tokens = context.is_special_in_user_text ? tokenizer.encode(rendered.text)
                                             : tokenizer.encode(rendered.text, rendered.literal_spans);
  } else {
    tokens = tokenizer.encode(*request.prompt_text);
  }
  if (tokens.empty())
    throw ApiError(400, "The prompt is empty after tokenization.", "invalid_request_error",
                   request.endpoint == Endpoint::chat ? "messages" : "prompt");
  return tokens;
}

bool parses_tool_calls(const CompletionRequest& request) {
  return request.endpoint == Endpoint::chat && !request.chat_options.tools.empty() &&
         request.tool_choice.mode != ToolChoiceMode::none;
}

ReplyParserOptions parser_options(const CompletionRequest& request, const ServingContext& context,
                                  const std::string& tool_call_id_prefix) {
  ReplyParserOptions options;
  if (request.endpoint != Endpoint::chat) return options;  // a text completion is all content
  const ChatTemplate& chat_template = context.chat_template;
  options.family = chat_template.family();
  options.parses_reasoning = chat_template.has_thinking();
  options.starts_in_reasoning = chat_template.opens_thinking(request.chat_options);
  options.parses_tool_calls = parses_tool_calls(request);
  options.tool_call_id_prefix = tool_call_id_prefix;
  for (const json& tool : request.chat_options.tools) {
    const json& function = tool["function"];
    auto& types = options.parameter_types[function["name"].get<std::string>()];
    const auto parameters = function.find("parameters");
    if (parameters == function.end() || !parameters->is_object()) continue;
    const auto properties = parameters->find("properties");
    if (properties == parameters->end() || !properties->is_object()) continue;
    for (const auto& [name, schema] : properties->items())
      if (schema.is_object() && schema.contains("type") && schema["type"].is_string())
        types[name] = schema["type"].get<std::string>();
  }
  return options;
}

GenerationRequest to_generation_request(const CompletionRequest& request, const std::vector<int32_t>& prompt,
                                        const ServingContext& context, uint64_t seed) {
  GenerationRequest generation;
  const int64_t room_left = std::max<int64_t>(1, context.n_ctx - int64_t(prompt.size()));
  // A chat without max_tokens gets the server's default cap, so a careless client cannot hold a
  // lane for the whole context.
  generation.max_tokens = request.max_tokens.value_or(
      request.endpoint == Endpoint::chat
          ? std::min({room_left, context.limits.max_tokens_limit, context.default_max_tokens})
          : std::min(room_left, default_completion_max_tokens));  // an unasked default never overflows the context
  generation.prompt = prompt;
  generation.sampling = request.sampling;
  generation.sampling.seed = seed;
  generation.stop = request.stop;
  // One call only: the reply ends where its first call closes, outside the reasoning (which may
  // quote the tag). A forced call's grammar allows one call by itself.
  const bool is_forced_call =
      request.tool_choice.mode == ToolChoiceMode::required || request.tool_choice.mode == ToolChoiceMode::function;
  if (parses_tool_calls(request) && !request.parallel_tool_calls && !is_forced_call)
    generation.closing = ClosingString{"</tool_call>", "<think>", "</think>",
                                       context.chat_template.opens_thinking(request.chat_options), "<tool_call>"};
  generation.skips_special_tokens = request.skips_special_tokens;
  generation.n_top_logprobs = request.n_top_logprobs;
  generation.wants_provenance = request.return_provenance;
  apply_constraint_fields(request.constraints, &generation);
  if (!request.use_draft) generation.draft.proposers = kNoProposers;
  generation.cache_prompt = request.cache_prompt;
  generation.cache_salt = request.cache_salt;
  generation.slot = request.id_slot;
  if (!request.replay.empty()) {  // a forced acceptance: the replay drafts alone
    generation.draft.replay = request.replay;
    generation.draft.replay_depth = request.replay_accept;
    generation.draft.proposers = proposer_bit(ProposerKind::replay);
  }
  return generation;
}

void throw_if_rejected(const SubmitResult& result, Endpoint endpoint) {
  // The engine knows prompts, not chats: a chat's prompt is its messages.
  const std::string param =
      result.param == "prompt" && endpoint == Endpoint::chat ? "messages" : result.param;
  switch (result.status) {
    case SubmitStatus::accepted:
      return;
    case SubmitStatus::queue_full:
      throw ApiError(503, result.message.empty() ? "The server is busy; retry shortly."
                                                 : result.message,
                     "server_error", "", "queue_full");
    case SubmitStatus::too_long:
      throw ApiError(400, result.message, "invalid_request_error", param,
                     "context_length_exceeded");
    case SubmitStatus::invalid:
      throw ApiError(400, result.message, "invalid_request_error", param);
  }
}

// Whether a final update ends its reply short of an answer: an error, or a cancellation that
// reached a client still listening (the server is shutting down).
bool is_unfinished(const GenerationUpdate& update) {
  return update.is_final && (update.finish_reason == FinishReason::error || update.finish_reason == FinishReason::cancelled);
}

// What a client hears of an unfinished reply. A shutdown is a 503 to retry elsewhere (never a reply
// that looks complete); a constraint that cannot go on (a grammar too ambiguous at some point of
// the reply) is the request's fault, named by the parameter that set it; anything else the server's.
ApiError engine_error(const GenerationUpdate& final_update, const std::string& constraint_param) {
  if (final_update.finish_reason == FinishReason::cancelled)
    return ApiError(503, "The server shut down before this reply was finished; retry it.", "server_error", "",
                    "shutting_down");
  if (final_update.is_constraint_failure)
    return ApiError(400, "Invalid '" + constraint_param + "': " + final_update.error, "invalid_request_error",
                    constraint_param);
  return ApiError(500, "Generation failed: " + final_update.error, "server_error");
}

// One choice in flight: its lane's channel, what has been sent of it, and its reply parser.
struct Choice {
  int64_t index = 0;
  uint64_t seed = 0;
  uint64_t request_id = 0;
  std::shared_ptr<ReplyChannel> channel;
  ChatReplyParser parser;
  bool is_parallel_tool_calls = true;
  int64_t completion_tokens = 0;
  LogprobRelease logprob_release;
  std::optional<std::vector<int32_t>> token_ids;  // kept when the request asked for them
  // Provenance of tokens not yet sent (the SSE path hands it to the next chunk it writes), when asked.
  std::optional<std::vector<TokenProvenance>> provenance;
  // Predicted Outputs: the prediction's tokens and the completion's, for the usage figures.
  std::optional<std::vector<int32_t>> prediction, completion_ids;
  bool is_done = false;
  ReplySummary summary;  // once done

  Choice(ReplyParserOptions options, const Tokenizer& tokenizer, bool skips_special_tokens)
      : parser(std::move(options)), logprob_release(tokenizer, skips_special_tokens) {}

  // Counts the update's tokens; returns the parsed text it releases and its logprobs (null when
  // none were asked for).
  std::pair<ReplyPiece, json> add(const GenerationUpdate& update, Endpoint endpoint, const Tokenizer& tokenizer,
                                  int64_t prompt_tokens) {
    completion_tokens += int64_t(update.tokens.size());
    const ListedLogprobs listed = logprob_release.add(update);
    const json logprobs = listed.is_empty() ? json() : logprobs_json(endpoint, listed, tokenizer);
    if (token_ids) token_ids->insert(token_ids->end(), update.tokens.begin(), update.tokens.end());
    if (provenance) provenance->insert(provenance->end(), update.provenance.begin(), update.provenance.end());
    if (completion_ids) completion_ids->insert(completion_ids->end(), update.tokens.begin(), update.tokens.end());
    ReplyPiece piece = parser.push(update.text);
    if (update.is_final) {
      // A single call stopped by its closing tag (parallel_tool_calls false): the tag was cut.
      if (!is_parallel_tool_calls && update.finish_reason == FinishReason::stop && parser.is_inside_tool_call())
        piece.append(parser.push("</tool_call>"));
      const bool ended_inside_tool_call = parser.is_inside_tool_call();
      piece.append(parser.finish());
      is_done = true;
      summary = ReplySummary{update.finish_reason, prompt_tokens, completion_tokens, update.timings,
                             update.token_sha, token_ids, std::nullopt};
      summary.ended_inside_tool_call = ended_inside_tool_call;
      if (prediction) summary.prediction = prediction_usage(*prediction, *completion_ids);
    }
    return {std::move(piece), std::move(logprobs)};
  }

  // Puts the provenance gathered so far into `chunk`'s choice, and starts gathering anew.
  void hand_provenance_to(json& choice) {
    if (!provenance) return;
    choice["provenance"] = provenance_json(*provenance);
    provenance->clear();
  }
};

// The choices of one request: submitted together, cancelled together.
struct Choices {
  std::shared_ptr<const ServingContext> context;
  Endpoint endpoint = Endpoint::chat;
  int64_t prompt_tokens = 0;
  bool wants_logprobs = false;
  std::string constraint_param;  // the parameter that set the grammar, for its errors
  std::vector<std::unique_ptr<Choice>> items;

  void cancel_all() {
    for (const auto& choice : items) {
      choice->channel->mark_client_gone();
      if (!choice->is_done) context->engine->cancel(choice->request_id);
    }
  }

  bool is_client_gone() const { return items[0]->channel->is_client_gone(); }

  // Usage over every choice: one prompt (and its cached part), every choice's completion and
  // prediction figures.
  json usage() const {
    ReplySummary total;
    total.prompt_tokens = prompt_tokens;
    total.timings.cache_n = items[0]->summary.timings.cache_n;
    for (const auto& choice : items) {
      total.completion_tokens += choice->summary.completion_tokens;
      if (!choice->summary.prediction) continue;
      if (!total.prediction) total.prediction.emplace();
      total.prediction->accepted += choice->summary.prediction->accepted;
      total.prediction->rejected += choice->summary.prediction->rejected;
    }
    return usage_json(total);
  }
};

Choices submit_choices(const std::shared_ptr<const ServingContext>& context, const CompletionRequest& request,
                       const std::vector<int32_t>& prompt, const std::string& reply_hex) {
  Choices choices;
  choices.context = context;
  choices.endpoint = request.endpoint;
  choices.wants_logprobs = request.n_top_logprobs >= 0;
  choices.prompt_tokens = int64_t(prompt.size());
  choices.constraint_param = request.constraints.grammar_param;
  // The prediction is a copy source for long copy: it changes speed, never tokens.
  std::optional<std::vector<int32_t>> prediction;
  if (request.constraints.prediction) {
    prediction = context->tokenizer->encode(*request.constraints.prediction);
    // No reply is longer than the context, so a longer prediction cannot be what it writes.
    if (int64_t(prediction->size()) > context->n_ctx)
      throw ApiError(400, "The prediction is " + std::to_string(prediction->size()) +
                              " tokens, longer than the context (" + std::to_string(context->n_ctx) + " tokens).",
                     "invalid_request_error", "prediction");
  }
  std::vector<Engine::Submission> group;
  for (int64_t index = 0; index < request.n_choices; ++index) {
    auto choice = std::make_unique<Choice>(
        parser_options(request, *context, "call_" + reply_hex + "_" + std::to_string(index) + "_"),
        *context->tokenizer, request.skips_special_tokens);
    choice->index = index;
    choice->seed = seed_of_choice(request.sampling.seed, index);
    choice->is_parallel_tool_calls = request.parallel_tool_calls;
    if (request.return_token_ids) choice->token_ids.emplace();
    if (request.return_provenance) choice->provenance.emplace();
    GenerationRequest generation = to_generation_request(request, prompt, *context, choice->seed);
    if (prediction) {
      generation.draft.copy_source = *prediction;
      choice->prediction = prediction;
      choice->completion_ids.emplace();
    }
    choice->channel = ReplyChannel::create();
    group.push_back({std::move(generation), choice->channel->sink()});
    choices.items.push_back(std::move(choice));
  }
  // All choices or none: a request whose choices run only in part is no reply.
  const std::vector<SubmitResult> submitted = context->engine->submit_together(std::move(group));
  throw_if_rejected(submitted.front(), request.endpoint);
  for (size_t i = 0; i < submitted.size(); ++i) choices.items[i]->request_id = submitted[i].request_id;
  return choices;
}

void append_logprobs(json& into, json&& more, Endpoint endpoint) {
  if (more.is_null()) return;
  if (into.is_null()) {
    into = std::move(more);
  } else if (endpoint == Endpoint::chat) {
    for (json& entry : more["content"]) into["content"].push_back(entry);
  } else {
    for (auto& [key, values] : more.items())
      for (json& value : values) into[key].push_back(value);
  }
}

// Waits for every choice and sends the reply as one JSON body; returns without a word if the
// client left (the engine was told when it left).
void answer_whole(Choices& choices, const ReplyHeader& header, HttpExchange& exchange) {
  const Tokenizer& tokenizer = *choices.context->tokenizer;
  json choice_list = json::array();
  for (const auto& choice : choices.items) {
    AssembledReply reply;
    // Asked for, logprobs are a list even when a stop string left no token to list (as vLLM's are).
    json logprobs = choices.wants_logprobs ? logprobs_json(header.endpoint, {}, tokenizer) : json();
    while (!choice->is_done) {
      if (choices.is_client_gone()) return;
      for (const GenerationUpdate& update : choice->channel->take(poll_interval)) {
        auto [piece, update_logprobs] = choice->add(update, header.endpoint, tokenizer, choices.prompt_tokens);
        reply.add(piece);
        append_logprobs(logprobs, std::move(update_logprobs), header.endpoint);
        if (is_unfinished(update)) {
          choices.cancel_all();
          throw engine_error(update, choices.constraint_param);
        }
      }
    }
    json entry = choice_json(header, choice->index, reply, logprobs, choice->summary, choice->seed);
    choice->hand_provenance_to(entry);
    if (choice->summary.token_ids) entry["completion_token_ids"] = *choice->summary.token_ids;
    choice_list.push_back(std::move(entry));
  }
  const json reply = reply_json(header, std::move(choice_list), choices.items[0]->summary, choices.usage());
  exchange.reply(HttpReply{200, "application/json", dump_json(reply), {}});
}

// One SSE stream, written by the worker as updates of any choice arrive, until every choice is
// done or the client is gone (then the engine has been told, for every choice).
void answer_stream(Choices& choices, const ReplyHeader& header, bool include_usage, HttpExchange& exchange) {
  if (!exchange.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return;
  // With include_usage every other chunk carries "usage": null, as OpenAI's do.
  const auto event = [include_usage](json chunk) {
    if (include_usage) chunk["usage"] = nullptr;
    return sse_event(chunk);
  };
  if (header.endpoint == Endpoint::chat) {  // chat streams open with the assistant role, as OpenAI's do
    std::string opening;
    for (const auto& choice : choices.items) opening += event(opening_chunk_json(header, choice->index));
    if (!exchange.send_chunk(std::move(opening))) return;
  }
  const Tokenizer& tokenizer = *choices.context->tokenizer;
  auto is_all_done = [&] {
    for (const auto& choice : choices.items)
      if (!choice->is_done) return false;
    return true;
  };
  while (!is_all_done()) {
    if (choices.is_client_gone()) return;
    bool has_waited = false;
    for (const auto& choice : choices.items) {
      if (choice->is_done) continue;
      // The first unfinished choice waits for tokens; the others only take what is there.
      const auto wait = has_waited ? std::chrono::milliseconds(0) : poll_interval;
      has_waited = true;
      for (const GenerationUpdate& update : choice->channel->take(wait)) {
        auto [piece, logprobs] = choice->add(update, header.endpoint, tokenizer, choices.prompt_tokens);
        if (!piece.is_empty() || !logprobs.is_null()) {
          json chunk = delta_chunk_json(header, choice->index, piece, logprobs);
          choice->hand_provenance_to(chunk["choices"][0]);
          if (!exchange.send_chunk(event(std::move(chunk)))) return;
        }
        if (!update.is_final) continue;
        if (is_unfinished(update)) {
          choices.cancel_all();
          exchange.send_chunk(sse_event(error_body(engine_error(update, choices.constraint_param))) + sse_done());
          exchange.end_stream();
          return;
        }
        json final_chunk = final_chunk_json(header, choice->index, choice->summary,
                                            choice->parser.n_tool_calls() > 0, choice->seed);
        choice->hand_provenance_to(final_chunk["choices"][0]);  // tokens whose text was held back, or had none
        if (!exchange.send_chunk(event(std::move(final_chunk)))) return;
      }
    }
  }
  std::string ending;
  if (include_usage) ending += sse_event(usage_chunk_json(header, choices.usage(), choices.items[0]->summary));
  ending += sse_done();
  exchange.send_chunk(std::move(ending));
  exchange.end_stream();
}

}  // namespace

bool InFlightRequests::add(Engine& engine, uint64_t request_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (is_cancelling_) return false;
  requests_[request_id] = &engine;
  return true;
}

void InFlightRequests::remove(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  requests_.erase(request_id);
}

int64_t InFlightRequests::cancel_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  is_cancelling_ = true;
  for (auto& [id, engine] : requests_) engine->cancel(id);
  return int64_t(requests_.size());
}

std::shared_ptr<const ServingContext> make_serving_context(const ServingStack& stack, const ContextSettings& settings) {
  auto serving = std::make_shared<ServingContext>();
  serving->engine = stack.engine();
  serving->tokenizer = stack.tokenizer();
  serving->chat_template = stack.chat_template();
  serving->is_special_in_user_text = settings.is_special_in_user_text;
  const ModelFacts& facts = stack.facts();
  if (settings.served_model_names.empty()) {
    serving->limits.model_id = facts.model_id;
  } else {
    serving->limits.model_id = settings.served_model_names[0];
    serving->limits.model_aliases.assign(settings.served_model_names.begin() + 1, settings.served_model_names.end());
  }
  serving->limits.model_aliases.push_back(facts.model_dir);
  serving->limits.max_tokens_limit = settings.max_tokens_limit;
  serving->limits.allow_bench_extensions = settings.allow_bench_extensions;
  serving->limits.sampling_defaults = facts.generation_defaults;
  serving->limits.chat_family = stack.chat_template().family();
  serving->limits.n_slots = serving->engine->options().n_parallel;
  serving->n_ctx = serving->engine->options().n_ctx;
  serving->default_max_tokens = settings.default_max_tokens;
  return serving;
}

void handle_completion(const std::shared_ptr<const ServingContext>& context, Endpoint endpoint,
                       const HttpRequest& request, HttpExchange& exchange, InFlightRequests& in_flight) {
  const json body = parse_body(request.body);
  CompletionRequest parsed = endpoint == Endpoint::chat
                                 ? parse_chat_request(body, context->limits)
                                 : parse_completion_request(body, context->limits);
  if (endpoint == Endpoint::chat) keep_numbers_as_written(request.body, parsed);
  if (!parsed.is_seed_given) parsed.sampling.seed = random_u64() & 0xFFFFFFFFu;

  const std::vector<int32_t> prompt = build_prompt(parsed, *context);
  const std::string reply_hex = random_hex();
  Choices choices = submit_choices(context, parsed, prompt, reply_hex);
  Engine& engine = *context->engine;
  // From here on the lanes are freed (within a round) whenever nobody waits: the client left, or
  // the server stops (then the final updates still reach the client).
  std::vector<std::pair<std::shared_ptr<ReplyChannel>, uint64_t>> lanes;
  for (const auto& choice : choices.items) lanes.emplace_back(choice->channel, choice->request_id);
  struct Registration {
    InFlightRequests& in_flight;
    std::vector<uint64_t> ids;
    ~Registration() {
      for (uint64_t id : ids) in_flight.remove(id);
    }
  } registration{in_flight, {}};
  for (const auto& [channel, id] : lanes) {
    registration.ids.push_back(id);
    if (!in_flight.add(engine, id)) engine.cancel(id);
  }
  exchange.on_client_gone([lanes, engine = context->engine] {
    for (const auto& [channel, id] : lanes) {
      channel->mark_client_gone();
      engine->cancel(id);
    }
  });

  const ReplyHeader header{endpoint, (endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-") + reply_hex,
                           int64_t(std::time(nullptr)), context->limits.model_id, parsed.sampling.seed};
  if (!parsed.is_stream) {
    try {
      answer_whole(choices, header, exchange);
    } catch (...) {
      choices.cancel_all();
      throw;
    }
    return;
  }
  try {
    answer_stream(choices, header, parsed.include_usage, exchange);
  } catch (const std::exception& error) {  // the reply has begun: no error reply can follow
    std::fprintf(stderr, "tensorfold: stream %s failed: %s\n", header.id.c_str(), error.what());
    choices.cancel_all();
    exchange.end_stream();
  }
}

json tokenize_reply(const ServingContext& context, std::string_view body_text) {
  // Qwen tokenizers add no BOS/EOS, so add_special is accepted and changes nothing.
  TokenizeRequest parsed = parse_tokenize_request(parse_body(body_text), context.limits);
  if (parsed.chat) keep_numbers_as_written(body_text, *parsed.chat);
  const Tokenizer& tokenizer = *context.tokenizer;
  const std::vector<int32_t> ids = parsed.chat ? build_prompt(*parsed.chat, context) : tokenizer.encode(parsed.content);
  if (!parsed.with_pieces) return {{"tokens", ids}, {"count", ids.size()}};
  json tokens = json::array();
  for (int32_t id : ids) {
    const std::string bytes = tokenizer.token_bytes(id);
    json piece = bytes;
    if (!is_valid_utf8(bytes)) {  // part of a character: its bytes, as llama.cpp's /tokenize gives them
      piece = json::array();
      for (unsigned char c : bytes) piece.push_back(int(c));
    }
    tokens.push_back({{"id", id}, {"piece", std::move(piece)}});
  }
  return {{"tokens", std::move(tokens)}, {"count", ids.size()}};
}

}  // namespace tf::server
