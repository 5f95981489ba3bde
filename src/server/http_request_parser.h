// HTTP/1.1 request parsing with the server's limits (head size, header count and line length,
// target length, body size for every transfer coding), fed bytes as they arrive. Both the
// connection code and the fuzz target (fuzz/fuzz_http_request.cpp) use this one parser.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::server {

struct HttpParseLimits {
  size_t max_head_bytes = 16384;    // request line plus every header line
  size_t max_header_count = 100;
  size_t max_line_bytes = 8192;     // one header line (name and value), or the request target
  size_t max_body_bytes = 8u << 20;  // after de-chunking: Content-Length and chunked alike
};

struct HttpRequest {
  std::string method;  // as sent ("GET", "POST", ...)
  std::string target;  // as sent, query included
  std::string path;    // the target up to '?'
  int version = 11;    // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;
  bool keep_alive = true;
  bool expects_continue = false;  // "Expect: 100-continue": the client waits before sending the body

  // The first header of that (lower-case) name, or empty.
  std::string_view header(std::string_view lower_name) const;
};

// Why a request could not be parsed: the status to answer and a sentence for the client.
struct HttpParseFailure {
  int status = 400;  // 400 malformed, 413 body too large, 414 target too long, 431 head too large
  std::string message;
  std::string code;  // the error's OpenAI-style code, e.g. "request_too_large"
};

class HttpRequestParser {
 public:
  explicit HttpRequestParser(const HttpParseLimits& limits);
  ~HttpRequestParser();
  HttpRequestParser(const HttpRequestParser&) = delete;
  HttpRequestParser& operator=(const HttpRequestParser&) = delete;

  // Parses from `bytes`; returns how many were consumed (the rest belongs to a later call: an
  // unfinished line, or the next pipelined request once this one is done). Stops once after the
  // head is complete, so the caller can refuse the request before any body byte is read.
  size_t feed(std::string_view bytes);
  // The client closed its side: an unfinished request is a failure.
  void feed_eof();

  bool has_started() const;
  bool is_head_done() const;
  bool is_done() const;
  const std::optional<HttpParseFailure>& failure() const;
  // The request so far (method, target and headers once the head is done; the body once done).
  const HttpRequest& request() const;
  HttpRequest take_request();
  // Ready for the next request on the same connection.
  void reset();

 private:
  struct Impl;
  HttpParseLimits limits_;
  std::unique_ptr<Impl> impl_;
};

// Parses every pipelined request in `bytes` with the given limits until the first failure or the
// end; returns the complete requests and the failure, if any. For tests and fuzzing.
std::pair<std::vector<HttpRequest>, std::optional<HttpParseFailure>> parse_http_requests(
    std::string_view bytes, const HttpParseLimits& limits);

}  // namespace tf::server
