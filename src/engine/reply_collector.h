// Collects one request's streamed updates into a whole reply, for benchmarks and tests that drive
// an Engine directly rather than through the server.
#pragma once
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/request.h"

namespace tf {

struct Reply {
  std::vector<int32_t> tokens;
  std::string text;
  GenerationUpdate final_update;
};

// wait() blocks until the final update. With cancel_after >= 0 the sink reports the client gone
// after that many tokens.
struct ReplyCollector {
  Reply reply;
  std::promise<void> done;
  int64_t cancel_after = -1;

  UpdateSink sink() {
    return [this](const GenerationUpdate& u) {
      reply.tokens.insert(reply.tokens.end(), u.tokens.begin(), u.tokens.end());
      reply.text += u.text;
      if (u.is_final) {
        reply.final_update = u;
        done.set_value();
        return true;
      }
      return cancel_after < 0 || int64_t(reply.tokens.size()) < cancel_after;
    };
  }
  Reply wait() {
    done.get_future().wait();
    return reply;
  }
};

// Submits every request at once (the engine queues what its lanes cannot take yet) and waits for
// every reply, in request order; a rejected submit is a tf::Error with the engine's message.
inline std::vector<Reply> run_to_completion(Engine& engine, const std::vector<GenerationRequest>& requests) {
  std::vector<std::unique_ptr<ReplyCollector>> collectors;
  for (const auto& request : requests) {
    collectors.push_back(std::make_unique<ReplyCollector>());
    SubmitResult result = engine.submit(request, collectors.back()->sink());
    if (result.status != SubmitStatus::accepted) fail(result.message);
  }
  std::vector<Reply> replies;
  for (auto& c : collectors) replies.push_back(c->wait());
  return replies;
}

}  // namespace tf
