// The JSON request bodies of every endpoint, as the server parses them: bytes in, a validated
// request or an OpenAI error out (never another exception, never a crash).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "server/openai_protocol.h"

using namespace tf::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  ProtocolLimits limits;
  limits.model_id = "tensorfold-code";
  limits.model_aliases = {"default"};
  limits.allow_bench_extensions = size % 2 == 0;  // both sides of the replay extension
  try {
    const json parsed = parse_body(body);
    auto try_parse = [&](auto&& parse) {
      try {
        parse();
      } catch (const ApiError& error) {
        if (error.status < 400 || error.status >= 500)
          tf::fuzz::broken("a request error answered with status " + std::to_string(error.status));
        (void)dump_json(error_body(error));
      }
    };
    try_parse([&] {
      const CompletionRequest request = parse_chat_request(parsed, limits);
      if (request.messages.empty()) tf::fuzz::broken("a chat request without messages was accepted");
    });
    try_parse([&] {
      const CompletionRequest request = parse_completion_request(parsed, limits);
      if (!request.prompt_text && request.prompt_tokens.empty())
        tf::fuzz::broken("a completion request without a prompt was accepted");
      for (int32_t id : request.prompt_tokens)
        if (id < 0) tf::fuzz::broken("a negative prompt token id was accepted");
    });
    try_parse([&] { (void)parse_tokenize_request(parsed, limits); });
    try_parse([&] {
      for (int32_t id : parse_detokenize_request(parsed))
        if (id < 0) tf::fuzz::broken("a negative token id was accepted by /detokenize");
    });
  } catch (const ApiError&) {
    // parse_body refused the bytes: not UTF-8, not JSON, not an object.
  } catch (const std::exception& error) {
    tf::fuzz::broken(std::string("a request body escaped as a non-API error: ") + error.what());
  }
  return 0;
}
