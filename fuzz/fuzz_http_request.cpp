// HTTP request heads and bodies as the server parses them (server/http_request_parser.h, the
// server's limits): bytes in, requests or a failure out (4xx, or 501 for a transfer coding the server
// does not implement), never a crash; and bytes arriving in
// pieces parse exactly as when they arrive at once (the connection feeds them as they come).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http_request_parser.h"

using namespace tf::server;

namespace {

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

// Feeds `bytes` in pieces of `piece` bytes, as a connection's reads would deliver them.
std::pair<std::vector<HttpRequest>, std::optional<HttpParseFailure>> parse_in_pieces(
    std::string_view bytes, const HttpParseLimits& limits, size_t piece) {
  std::vector<HttpRequest> requests;
  HttpRequestParser parser(limits);
  std::string inbox;
  size_t offset = 0;
  for (;;) {
    const size_t used = parser.feed(inbox);
    inbox.erase(0, used);
    if (parser.failure()) return {std::move(requests), parser.failure()};
    if (parser.is_done()) {
      requests.push_back(parser.take_request());
      parser.reset();
      continue;
    }
    if (used > 0) continue;
    if (offset == bytes.size()) {
      if (parser.has_started()) {
        parser.feed_eof();
        if (parser.failure()) return {std::move(requests), parser.failure()};
      }
      return {std::move(requests), std::nullopt};
    }
    const size_t n = std::min(piece, bytes.size() - offset);
    inbox.append(bytes.data() + offset, n);
    offset += n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the piece size; the rest is what a client sent.
  const size_t piece = 1 + data[0] % 64;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  HttpParseLimits limits;  // small, so inputs reach every limit
  limits.max_head_bytes = 2048;
  limits.max_header_count = 16;
  limits.max_line_bytes = 512;
  limits.max_body_bytes = 4096;
  const auto [whole, whole_failure] = parse_http_requests(bytes, limits);
  const auto [pieces, pieces_failure] = parse_in_pieces(bytes, limits, piece);
  if (whole.size() != pieces.size())
    broken("pieces of " + std::to_string(piece) + " bytes gave " + std::to_string(pieces.size()) +
           " requests, the whole input " + std::to_string(whole.size()));
  for (size_t i = 0; i < whole.size(); ++i) {
    const HttpRequest& a = whole[i];
    const HttpRequest& b = pieces[i];
    if (a.method != b.method || a.target != b.target || a.body != b.body || a.headers != b.headers)
      broken("request " + std::to_string(i) + " parsed differently in pieces");
    if (a.body.size() > limits.max_body_bytes) broken("a body over the limit was accepted");
    if (a.headers.size() > limits.max_header_count) broken("more headers than the limit were accepted");
    if (a.target.size() > limits.max_line_bytes) broken("a target over the limit was accepted");
  }
  if (whole_failure.has_value() != pieces_failure.has_value()) broken("pieces and the whole input disagree on failing");
  for (const auto* failure : {&whole_failure, &pieces_failure})
    if (*failure && (((*failure)->status < 400 || (*failure)->status >= 500) && (*failure)->status != 501 ||
                     (*failure)->message.empty()))
      broken("a parse failure answered with status " + std::to_string((*failure)->status));
  return 0;
}
