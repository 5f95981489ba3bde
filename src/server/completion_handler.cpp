// Chat and text completions: prompt building, engine submission, and the reply as JSON or SSE.
#include "server/completion_handler.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "server/reply_channel.h"
#include "server/sse.h"
#include "speculation/proposer.h"
#include "tokenizer/tokenizer.h"

namespace tf::server {
namespace {

// How long a worker waits for tokens before looking again whether its client is still there.
constexpr std::chrono::milliseconds poll_interval{200};
constexpr int64_t default_completion_max_tokens = 16;  // OpenAI's default for /v1/completions

uint64_t random_u64() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return generator();
}

std::string random_reply_id(Endpoint endpoint) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random_u64()));
  return std::string(endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-") + hex;
}

std::vector<int32_t> build_prompt(const CompletionRequest& request, const Tokenizer& tokenizer) {
  if (request.endpoint == Endpoint::completion && !request.prompt_text)
    return request.prompt_tokens;
  std::string text;
  if (request.endpoint == Endpoint::chat) {
    try {
      text = render_chat(request.messages, request.chat_options);
    } catch (const Error& error) {
      throw ApiError(400, error.what(), "invalid_request_error", "messages");
    }
  } else {
    text = *request.prompt_text;
  }
  std::vector<int32_t> tokens = tokenizer.encode(text);
  if (tokens.empty())
    throw ApiError(400, "The prompt is empty after tokenization.", "invalid_request_error",
                   request.endpoint == Endpoint::chat ? "messages" : "prompt");
  return tokens;
}

GenerationRequest to_generation_request(const CompletionRequest& request,
                                        std::vector<int32_t> prompt,
                                        const ServingContext& context) {
  GenerationRequest generation;
  const int64_t room_left = std::max<int64_t>(1, context.n_ctx - int64_t(prompt.size()));
  // A chat without max_tokens gets the server's default cap, so a careless client cannot hold a
  // lane for the whole context.
  generation.max_tokens = request.max_tokens.value_or(
      request.endpoint == Endpoint::chat
          ? std::min({room_left, context.limits.max_tokens_limit, context.default_max_tokens})
          : default_completion_max_tokens);
  generation.prompt = std::move(prompt);
  generation.sampling = request.sampling;
  generation.stop = request.stop;
  generation.n_top_logprobs = request.n_top_logprobs;
  generation.wants_provenance = request.return_provenance;
  apply_constraint_fields(request.constraints, &generation);
  if (!request.use_draft) generation.draft.proposers = kNoProposers;
  generation.cache_prompt = request.cache_prompt;
  generation.cache_salt = request.cache_salt;
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

// Counts what has been sent of one reply; shared by the JSON and the SSE paths.
struct ReplyProgress {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t text_bytes = 0;
  std::optional<std::vector<int32_t>> token_ids;  // kept when the request asked for them
  // Provenance of tokens not yet sent (the SSE path hands it to the next chunk it writes), when asked.
  std::optional<std::vector<TokenProvenance>> provenance;
  // Predicted Outputs: the prediction's tokens and the completion's, for the usage figures.
  std::optional<std::vector<int32_t>> prediction, completion_ids;

  // The logprobs object of this update's tokens, or null when none were requested.
  json add(const GenerationUpdate& update, Endpoint endpoint, const Tokenizer& tokenizer) {
    json logprobs;
    if (!update.logprobs.empty())
      logprobs = logprobs_json(endpoint, update.logprobs, tokenizer, text_bytes);
    completion_tokens += int64_t(update.tokens.size());
    text_bytes += int64_t(update.text.size());
    if (token_ids) token_ids->insert(token_ids->end(), update.tokens.begin(), update.tokens.end());
    if (provenance) provenance->insert(provenance->end(), update.provenance.begin(), update.provenance.end());
    if (completion_ids) completion_ids->insert(completion_ids->end(), update.tokens.begin(), update.tokens.end());
    return logprobs;
  }

  // Puts the provenance gathered so far into `chunk`'s choice, and starts gathering anew.
  void hand_provenance_to(json& chunk) {
    if (!provenance) return;
    chunk["choices"][0]["provenance"] = provenance_json(*provenance);
    provenance->clear();
  }

  ReplySummary summary(const GenerationUpdate& final_update) const {
    ReplySummary summary{final_update.finish_reason, prompt_tokens, completion_tokens,
                         final_update.timings, final_update.token_sha, token_ids, std::nullopt};
    if (prediction) summary.prediction = prediction_usage(*prediction, *completion_ids);
    return summary;
  }
};

ApiError engine_error(const GenerationUpdate& final_update) {
  return ApiError(500, "Generation failed: " + final_update.error, "server_error");
}

// Waits for the whole reply and sends it as one JSON body; returns without a word if the client
// left (the engine was told when it left).
void answer_whole(const ServingContext& context, ReplyChannel& channel, const ReplyHeader& header,
                  ReplyProgress progress, HttpExchange& exchange) {
  const bool is_chat = header.endpoint == Endpoint::chat;
  std::string text;
  json logprobs = nullptr;
  while (!channel.is_client_gone()) {
    for (const GenerationUpdate& update : channel.take(poll_interval)) {
      json update_logprobs = progress.add(update, header.endpoint, *context.tokenizer);
      text += update.text;
      if (!update_logprobs.is_null()) {
        if (logprobs.is_null()) {
          logprobs = std::move(update_logprobs);
        } else if (is_chat) {
          for (json& entry : update_logprobs["content"]) logprobs["content"].push_back(entry);
        } else {
          for (auto& [key, values] : update_logprobs.items())
            for (json& value : values) logprobs[key].push_back(value);
        }
      }
      if (!update.is_final) continue;
      if (update.finish_reason == FinishReason::error) throw engine_error(update);
      json reply = reply_json(header, text, logprobs, progress.summary(update));
      progress.hand_provenance_to(reply);
      exchange.reply(HttpReply{200, "application/json", dump_json(reply), {}});
      return;
    }
  }
}

// One SSE stream, written by the worker as updates arrive, until the final update or until the
// client is gone (then the engine has been told).
void answer_stream(const ServingContext& context, ReplyChannel& channel, const ReplyHeader& header,
                   bool include_usage, ReplyProgress progress, HttpExchange& exchange) {
  if (!exchange.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return;
  // chat streams open with the assistant role, as OpenAI's do
  if (header.endpoint == Endpoint::chat && !exchange.send_chunk(sse_event(opening_chunk_json(header)))) return;
  while (!channel.is_client_gone()) {
    for (const GenerationUpdate& update : channel.take(poll_interval)) {
      json logprobs = progress.add(update, header.endpoint, *context.tokenizer);
      if (!update.text.empty() || !logprobs.is_null()) {
        json chunk = delta_chunk_json(header, update.text, logprobs);
        progress.hand_provenance_to(chunk);
        if (!exchange.send_chunk(sse_event(chunk))) return;
      }
      if (!update.is_final) continue;
      const ReplySummary summary = progress.summary(update);
      json final_chunk = final_chunk_json(header, summary);
      progress.hand_provenance_to(final_chunk);  // tokens whose text was held back, or had none
      std::string ending = update.finish_reason == FinishReason::error ? sse_event(error_body(engine_error(update)))
                                                                       : sse_event(final_chunk);
      if (include_usage) ending += sse_event(usage_chunk_json(header, summary));
      ending += sse_done();
      exchange.send_chunk(std::move(ending));
      exchange.end_stream();
      return;
    }
  }
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

void handle_completion(const std::shared_ptr<const ServingContext>& context, Endpoint endpoint,
                       const HttpRequest& request, HttpExchange& exchange, InFlightRequests& in_flight) {
  const json body = parse_body(request.body);
  CompletionRequest parsed = endpoint == Endpoint::chat
                                 ? parse_chat_request(body, context->limits)
                                 : parse_completion_request(body, context->limits);
  if (!parsed.is_seed_given) parsed.sampling.seed = random_u64() & 0xFFFFFFFFu;

  std::vector<int32_t> prompt = build_prompt(parsed, *context->tokenizer);
  ReplyProgress progress;
  progress.prompt_tokens = int64_t(prompt.size());
  if (parsed.return_token_ids) progress.token_ids.emplace();
  if (parsed.return_provenance) progress.provenance.emplace();
  GenerationRequest generation = to_generation_request(parsed, std::move(prompt), *context);
  if (parsed.constraints.prediction) {
    // The prediction is a copy source for long copy: it changes speed, never tokens.
    generation.draft.copy_source = context->tokenizer->encode(*parsed.constraints.prediction);
    progress.prediction = generation.draft.copy_source;
    progress.completion_ids.emplace();
  }
  auto channel = ReplyChannel::create();
  Engine& engine = *context->engine;
  const SubmitResult submitted = engine.submit(std::move(generation), channel->sink());
  throw_if_rejected(submitted, endpoint);
  const uint64_t id = submitted.request_id;
  // From here on the lane is freed (within a round) whenever nobody waits: the client left, or
  // the server stops (then the final update still reaches the client).
  struct Registration {
    InFlightRequests& in_flight;
    uint64_t id;
    ~Registration() { in_flight.remove(id); }
  } registration{in_flight, id};
  if (!in_flight.add(engine, id)) engine.cancel(id);
  exchange.on_client_gone([channel, engine = context->engine, id] {
    channel->mark_client_gone();
    engine->cancel(id);
  });

  ReplyHeader header{endpoint, random_reply_id(endpoint), int64_t(std::time(nullptr)),
                     context->limits.model_id, parsed.sampling.seed};
  if (!parsed.is_stream) return answer_whole(*context, *channel, header, progress, exchange);
  try {
    answer_stream(*context, *channel, header, parsed.include_usage, progress, exchange);
  } catch (const std::exception& error) {  // the reply has begun: no error reply can follow
    std::fprintf(stderr, "tensorfold: stream %s failed: %s\n", header.id.c_str(), error.what());
    channel->mark_client_gone();
    engine.cancel(id);
    exchange.end_stream();
  }
}

}  // namespace tf::server
