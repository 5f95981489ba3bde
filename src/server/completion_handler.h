// POST /v1/chat/completions and /v1/completions: a parsed request becomes a prompt, goes to the
// engine, and its updates come back as one JSON reply or as an SSE stream.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "server/http_transport.h"
#include "server/openai_protocol.h"

namespace tf {
class Engine;
class Tokenizer;
}  // namespace tf

namespace tf::server {

// What a request needs once the model is loaded.
struct ServingContext {
  std::shared_ptr<Engine> engine;
  std::shared_ptr<const Tokenizer> tokenizer;
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

// Answers the request through `exchange` (a worker thread: it waits on the engine); throws
// ApiError for anything the client got wrong before the reply began.
void handle_completion(const std::shared_ptr<const ServingContext>& context, Endpoint endpoint,
                       const HttpRequest& request, HttpExchange& exchange, InFlightRequests& in_flight);

}  // namespace tf::server
