// POST /v1/chat/completions and /v1/completions: a parsed request becomes a prompt, goes to the
// engine (one lane per choice), and its updates come back as one JSON reply or as an SSE stream,
// split by the chat template's reply parser into reasoning, content and tool calls.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/http_transport.h"
#include "server/openai_protocol.h"

namespace tf {
class Engine;
class ServingStack;
class Tokenizer;
}  // namespace tf

namespace tf::server {

// What a request needs once the model is loaded.
struct ServingContext {
  std::shared_ptr<Engine> engine;
  std::shared_ptr<const Tokenizer> tokenizer;
  ChatTemplate chat_template{ChatTemplateFamily::none};
  // true: special tokens written in user and tool messages are matched (the old behaviour);
  // false (the default): they are encoded as the text they are.
  bool is_special_in_user_text = false;
  ProtocolLimits limits;
  int64_t n_ctx = 0;
  int64_t default_max_tokens = 2048;  // a chat request without max_tokens: at most this (and the context)
};

// The engine requests whose replies are still being sent, so a shutdown can end each of them.
class InFlightRequests {
 public:
  // False once cancel_all ran: the caller cancels the request itself.
  bool add(Engine& engine, uint64_t request_id);
  void remove(uint64_t request_id);
  // Cancels every request added and any added later; returns how many were in flight.
  int64_t cancel_all();

 private:
  std::mutex mutex_;
  std::unordered_map<uint64_t, Engine*> requests_;
  bool is_cancelling_ = false;
};

// The server's settings that shape every request's context.
struct ContextSettings {
  std::vector<std::string> served_model_names;  // empty: the model directory's name
  int64_t max_tokens_limit = 131072;
  int64_t default_max_tokens = 2048;
  bool allow_bench_extensions = false;
  bool is_special_in_user_text = false;
};

std::shared_ptr<const ServingContext> make_serving_context(const ServingStack& stack, const ContextSettings& settings);

// Answers the request through `exchange` (a worker thread: it waits on the engine); throws
// ApiError for anything the client got wrong before the reply began.
void handle_completion(const std::shared_ptr<const ServingContext>& context, Endpoint endpoint,
                       const HttpRequest& request, HttpExchange& exchange, InFlightRequests& in_flight);

// POST /tokenize: {"tokens": [ids], "count"}, or with "with_pieces" [{"id", "piece"}] (a piece that is
// not whole UTF-8 comes as its bytes); "messages" tokenizes the chat prompt a completion would use.
json tokenize_reply(const ServingContext& context, std::string_view body_text);

}  // namespace tf::server
