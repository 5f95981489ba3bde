// Server-sent events framing for streamed replies.
#include "server/sse.h"

#include "server/openai_protocol.h"

namespace tf::server {

std::string sse_event(const nlohmann::ordered_json& payload) {
  return "data: " + dump_json(payload) + "\n\n";
}

const std::string& sse_done() {
  static const std::string done = "data: [DONE]\n\n";
  return done;
}

}  // namespace tf::server
