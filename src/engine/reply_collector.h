// Collects one request's streamed updates into a whole reply, for benchmarks and tests that drive
// an Engine directly rather than through the server.
#pragma once
#include <future>
#include <string>
#include <vector>

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

}  // namespace tf
