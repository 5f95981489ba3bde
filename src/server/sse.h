// Server-sent events framing for streamed replies: `data: {json}\n\n` events, then `data: [DONE]`.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace tf::server {

std::string sse_event(const nlohmann::ordered_json& payload);
// The terminator OpenAI clients wait for.
const std::string& sse_done();

}  // namespace tf::server
