// POST /v1/chat/completions and /v1/completions: a parsed request becomes a prompt, goes to the
// engine, and its updates come back as one JSON reply or as an SSE stream.
#pragma once
#include <memory>

#include <httplib.h>

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
};

// Answers the request into `response`; throws ApiError for anything the client got wrong.
void handle_completion(const std::shared_ptr<const ServingContext>& context, Endpoint endpoint,
                       const httplib::Request& request, httplib::Response& response);

}  // namespace tf::server
