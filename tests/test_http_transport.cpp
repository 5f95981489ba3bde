// The HTTP request parser's limits, byte by byte, and the transport over real loopback sockets:
// pipelined replies in order however long each route takes, a client that stops reading dropped
// at the write deadline (its route told), and the head deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "server/http_request_parser.h"
#include "server/http_transport.h"

namespace tf::server {
namespace {

using namespace std::chrono_literals;

HttpParseLimits small_limits() {
  HttpParseLimits limits;
  limits.max_head_bytes = 1024;
  limits.max_header_count = 8;
  limits.max_line_bytes = 256;
  limits.max_body_bytes = 100;
  return limits;
}

TEST(HttpRequestParser, ParsesPipelinedRequestsWithEitherFraming) {
  const std::string bytes =
      "GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k\r\n\r\n"
      "POST /tokenize HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
      "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  auto [requests, failure] = parse_http_requests(bytes, small_limits());
  ASSERT_FALSE(failure) << failure->message;
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].path, "/v1/models");
  EXPECT_EQ(requests[0].target, "/v1/models?x=1");
  EXPECT_EQ(requests[0].header("authorization"), "Bearer k");
  EXPECT_EQ(requests[1].body, "hello");
  EXPECT_EQ(requests[2].body, "abcde");
  EXPECT_TRUE(requests[2].keep_alive);
}

TEST(HttpRequestParser, TheAbsoluteFormNamesTheSameResourceAsTheOriginForm) {
  const std::string bytes =
      "GET http://127.0.0.1:8080/v1/models?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET HTTPS://example.com HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET http://example.com?q HTTP/1.1\r\nHost: a\r\n\r\n"
      "GET /http://x HTTP/1.1\r\nHost: a\r\n\r\n";
  auto [requests, failure] = parse_http_requests(bytes, small_limits());
  ASSERT_FALSE(failure) << failure->message;
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].path, "/v1/models");
  EXPECT_EQ(requests[0].target, "/v1/models?x=1");
  EXPECT_EQ(requests[1].target, "/");
  EXPECT_EQ(requests[2].target, "/?q");
  EXPECT_EQ(requests[2].path, "/");
  EXPECT_EQ(requests[3].path, "/http://x");  // an origin form is never rewritten
}

TEST(HttpRequestParser, StopsAfterTheHeadSoTheCallerMayRefuseBeforeTheBody) {
  HttpRequestParser parser(small_limits());
  const std::string head = "POST /x HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n";
  EXPECT_EQ(parser.feed(head + "body"), head.size());
  EXPECT_TRUE(parser.is_head_done());
  EXPECT_FALSE(parser.is_done());
  EXPECT_TRUE(parser.request().expects_continue);
  EXPECT_EQ(parser.feed("body"), 4u);
  EXPECT_TRUE(parser.is_done());
}

struct LimitCase {
  const char* name;
  std::string bytes;
  int status;
};

TEST(HttpRequestParser, EveryLimitIsAnErrorWithItsStatus) {
  const HttpParseLimits limits = small_limits();
  std::string many_headers = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 9; ++i) many_headers += "X-" + std::to_string(i) + ": v\r\n";
  const LimitCase cases[] = {
      {"content-length over the body limit", "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 413},
      {"chunked over the body limit", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" +
                                          std::string(64, 'a') + "\r\n40\r\n" + std::string(64, 'a') + "\r\n",
       413},
      {"more header lines than allowed", many_headers + "\r\n", 431},
      {"a header line too long", "GET / HTTP/1.1\r\nX: " + std::string(300, 'v') + "\r\n\r\n", 431},
      {"a head too large, no end in sight", "GET /" + std::string(5000, 'a'), 431},
      {"a target too long", "GET /" + std::string(300, 'a') + " HTTP/1.1\r\n\r\n", 414},
      {"a chunk-size line without an end",
       "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(5000, '0'), 400},
      {"not HTTP", "hello there\r\n\r\n", 400},
      {"an unfinished head", "GET / HTTP/1.1\r\nHost: a\r\n", 400},
      {"an unfinished body", "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", 400},
      // A coding that leaves the body's end unknown is refused, never read as another request.
      {"a transfer coding other than chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nGET / HTTP/1.1\r\n\r\n", 501},
      {"chunked not last", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 501},
      {"two Transfer-Encoding lines", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
  };
  for (const LimitCase& c : cases) {
    auto [requests, failure] = parse_http_requests(c.bytes, limits);
    ASSERT_TRUE(failure) << c.name;
    EXPECT_EQ(failure->status, c.status) << c.name << ": " << failure->message;
    EXPECT_FALSE(failure->message.empty());
    EXPECT_TRUE(requests.empty()) << c.name;  // nothing after the refusal is read as a request
  }
}

TEST(HttpRequestParser, BytesArrivingOneAtATimeParseTheSame) {
  const std::string bytes = "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
  HttpRequestParser parser(small_limits());
  std::string pending;
  for (char c : bytes) {
    pending += c;
    pending.erase(0, parser.feed(pending));
    pending.erase(0, parser.feed(pending));  // once more: the head may just have ended
  }
  ASSERT_TRUE(parser.is_done());
  EXPECT_EQ(parser.request().body, "hello");
}

// Found by fuzz_http_request: a trailer section longer than the head limit was accepted whole but
// refused in pieces. Now it is refused both ways, and one that fits is accepted both ways.
TEST(HttpRequestParser, ALongTrailerSectionIsRefusedWholeAndInPieces) {
  const HttpParseLimits limits = small_limits();
  const std::string head = "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n";
  for (const int n_trailers : {2, 5}) {
    std::string bytes = head;
    for (int i = 0; i < n_trailers; ++i) bytes += "X-T" + std::to_string(i) + ": " + std::string(240, 'v') + "\r\n";
    bytes += "\r\n";
    const bool is_too_long = n_trailers == 5;  // 5 x 248 bytes > 1024
    auto [requests, failure] = parse_http_requests(bytes, limits);
    EXPECT_EQ(bool(failure), is_too_long) << n_trailers;
    if (failure) {
      EXPECT_EQ(failure->status, 400);
    }
    HttpRequestParser parser(limits);
    std::string pending;
    for (char c : bytes) {
      pending += c;
      pending.erase(0, parser.feed(pending));
      pending.erase(0, parser.feed(pending));
      if (parser.failure()) break;
    }
    EXPECT_EQ(bool(parser.failure()), is_too_long) << n_trailers;
    EXPECT_EQ(parser.is_done(), !is_too_long) << n_trailers;
    if (!is_too_long) {
      EXPECT_EQ(parser.request().body, "hello");
    }
  }
}

// A client socket on loopback with a small receive buffer.
int connect_to(int port, int receive_buffer = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (receive_buffer > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(uint16_t(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  return fd;
}

// A client with a 4 KB receive buffer that has asked for a stream: the fd, to read slowly or not at all.
int request_stream(int port) {
  const int fd = connect_to(port, 4096);
  const std::string request = "GET /stream HTTP/1.1\r\n\r\n";
  EXPECT_EQ(send(fd, request.data(), request.size(), 0), ssize_t(request.size()));
  return fd;
}

std::string read_until_closed(int fd, std::chrono::milliseconds timeout) {
  timeval tv{0, 100'000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string data;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) break;
    if (n > 0) data.append(buffer, size_t(n));
  }
  return data;
}

HttpHandlers plain_handlers() {
  HttpHandlers handlers;
  handlers.check_head = [](const HttpRequest&) { return std::optional<HttpReply>(); };
  handlers.parse_failure_reply = [](const HttpParseFailure& f) { return HttpReply{f.status, "text/plain", f.message, {}}; };
  handlers.stopping_reply = [] { return HttpReply{503, "text/plain", "stopping", {}}; };
  handlers.over_capacity_reply = [](const std::string& why) { return HttpReply{503, "text/plain", why, {}}; };
  return handlers;
}

TEST(HttpTransport, PipelinedRepliesComeInOrderWhateverEachRouteTakes) {
  HttpTransportOptions options;
  options.port = 0;
  HttpHandlers handlers = plain_handlers();
  HttpTransport* transport_ptr = nullptr;
  handlers.handle = [&](HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
    transport_ptr->run_on_worker([request, exchange] {
      if (request.path == "/slow") std::this_thread::sleep_for(300ms);
      exchange->reply(HttpReply{200, "text/plain", "<" + request.path + ">", {}});
    });
  };
  HttpTransport transport(options, handlers);
  transport_ptr = &transport;
  const int port = transport.listen();
  transport.start();
  const int fd = connect_to(port);
  const std::string requests = "GET /slow HTTP/1.1\r\n\r\nGET /fast HTTP/1.1\r\n\r\nGET /last HTTP/1.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(send(fd, requests.data(), requests.size(), 0), ssize_t(requests.size()));
  const std::string replies = read_until_closed(fd, 5s);
  close(fd);
  const size_t slow = replies.find("</slow>"), fast = replies.find("</fast>"), last = replies.find("</last>");
  ASSERT_NE(slow, std::string::npos) << replies;
  ASSERT_NE(fast, std::string::npos) << replies;
  ASSERT_NE(last, std::string::npos) << replies;
  EXPECT_LT(slow, fast);
  EXPECT_LT(fast, last);
  EXPECT_NE(replies.find("Connection: close"), std::string::npos);
}

TEST(HttpTransport, AClientThatStopsReadingIsDroppedAtTheWriteDeadline) {
  HttpTransportOptions options;
  options.port = 0;
  options.write_timeout = 300ms;
  HttpHandlers handlers = plain_handlers();
  HttpTransport* transport_ptr = nullptr;
  std::atomic<bool> is_told{false};
  std::atomic<bool> is_route_done{false};
  std::atomic<int64_t> told_after_ms{-1};
  handlers.handle = [&](HttpRequest, std::shared_ptr<HttpExchange> exchange) {
    transport_ptr->run_on_worker([&, exchange] {
      const auto started = std::chrono::steady_clock::now();
      exchange->on_client_gone([&] {
        told_after_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
        is_told = true;
      });
      exchange->begin_stream(200, "text/event-stream", {});
      const std::string chunk(16384, 'x');
      while (exchange->send_chunk(chunk) && std::chrono::steady_clock::now() - started < 20s)
        std::this_thread::sleep_for(1ms);
      exchange->end_stream();
      is_route_done = true;
    });
  };
  HttpTransport transport(options, handlers);
  transport_ptr = &transport;
  const int port = transport.listen();
  transport.start();
  const int fd = request_stream(port);
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  while (!is_route_done && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  close(fd);
  ASSERT_TRUE(is_told) << "the route never heard its client stopped reading";
  EXPECT_TRUE(is_route_done);
  EXPECT_LT(told_after_ms.load(), 10'000);
}

// The write deadline counts from the last bytes the client took, not from when a long queued write
// began: a client that keeps reading, however slowly, gets its whole stream (one deadline for a whole
// queued write cut such clients off mid-reply).
TEST(HttpTransport, AClientThatReadsSlowlyButSteadilyGetsTheWholeStream) {
  HttpTransportOptions options;
  options.port = 0;
  options.write_timeout = 300ms;
  HttpHandlers handlers = plain_handlers();
  HttpTransport* transport_ptr = nullptr;
  std::atomic<bool> is_told{false};
  constexpr int kChunks = 200;
  handlers.handle = [&](HttpRequest, std::shared_ptr<HttpExchange> exchange) {
    transport_ptr->run_on_worker([&, exchange] {
      exchange->on_client_gone([&] { is_told = true; });
      exchange->begin_stream(200, "text/event-stream", {});
      const std::string chunk(16384, 'x');
      for (int i = 0; i < kChunks && exchange->send_chunk(chunk); ++i) {
      }
      exchange->end_stream();
    });
  };
  HttpTransport transport(options, handlers);
  transport_ptr = &transport;
  const int port = transport.listen();
  transport.start();
  const int fd = request_stream(port);
  std::string data;
  char buffer[4096];
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!data.ends_with("0\r\n\r\n") && std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n == 0) break;  // closed
    if (n > 0) data.append(buffer, size_t(n));
    std::this_thread::sleep_for(2ms);  // about 2 MB/s: the 3.2 MB stream takes well over the deadline
  }
  close(fd);
  EXPECT_TRUE(data.ends_with("0\r\n\r\n")) << "the stream was cut after " << data.size() << " bytes";
  EXPECT_GE(data.size(), size_t(kChunks) * 16384);
  EXPECT_FALSE(is_told);
}

// A client that leaves behind more pipelined requests than the connection reads while a route works
// (reading pauses at 1 MiB) is still noticed, and its request told, within a fraction of a second.
TEST(HttpTransport, AClientLeavingBehindAFullInboxIsNoticed) {
  HttpTransportOptions options;
  options.port = 0;
  HttpHandlers handlers = plain_handlers();
  HttpTransport* transport_ptr = nullptr;
  std::atomic<bool> is_told{false};
  handlers.handle = [&](HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
    if (request.path != "/slow") return exchange->reply(HttpReply{200, "text/plain", "ok", {}});
    transport_ptr->run_on_worker([&, exchange] {
      exchange->on_client_gone([&] { is_told = true; });
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (!is_told && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
      exchange->reply(HttpReply{200, "text/plain", "late", {}});
    });
  };
  HttpTransport transport(options, handlers);
  transport_ptr = &transport;
  const int port = transport.listen();
  transport.start();
  const int fd = connect_to(port);
  std::string requests = "GET /slow HTTP/1.1\r\n\r\n";
  // Just past the 1 MiB the connection reads: the rest must fit the socket buffers, or the client's
  // close (its FIN behind unsent bytes) could not reach the server at all.
  while (requests.size() < (size_t(1) << 20) + 32768) requests += "GET /health HTTP/1.1\r\n\r\n";
  size_t sent = 0;
  while (sent < requests.size()) {
    const ssize_t n = send(fd, requests.data() + sent, requests.size() - sent, 0);
    ASSERT_GT(n, 0);
    sent += size_t(n);
  }
  std::this_thread::sleep_for(300ms);  // the inbox fills and reading pauses
  const auto closed_at = std::chrono::steady_clock::now();
  close(fd);
  while (!is_told && std::chrono::steady_clock::now() - closed_at < 5s) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(is_told) << "the route never heard its client left";
  EXPECT_LT(std::chrono::steady_clock::now() - closed_at, 2s);
}

TEST(HttpTransport, AHeadThatDoesNotArriveInTimeClosesTheConnection) {
  HttpTransportOptions options;
  options.port = 0;
  options.head_timeout = 300ms;
  HttpHandlers handlers = plain_handlers();
  handlers.handle = [](HttpRequest, std::shared_ptr<HttpExchange> exchange) { exchange->reply(HttpReply{}); };
  HttpTransport transport(options, handlers);
  const int port = transport.listen();
  transport.start();
  const int fd = connect_to(port);
  const std::string partial = "GET / HTTP/1.1\r\nX-Slow: 1\r\n";
  ASSERT_EQ(send(fd, partial.data(), partial.size(), 0), ssize_t(partial.size()));
  const auto started = std::chrono::steady_clock::now();
  const std::string data = read_until_closed(fd, 5s);
  const auto waited = std::chrono::steady_clock::now() - started;
  close(fd);
  EXPECT_TRUE(data.empty()) << data;
  EXPECT_LT(waited, 3s);
}

TEST(HttpTransport, ConnectionsOverTheTotalCapGet503AndTheRestAreServed) {
  HttpTransportOptions options;
  options.port = 0;
  options.max_connections = 2;
  HttpHandlers handlers = plain_handlers();
  handlers.handle = [](HttpRequest, std::shared_ptr<HttpExchange> exchange) {
    exchange->reply(HttpReply{200, "text/plain", "served", {}});
  };
  HttpTransport transport(options, handlers);
  const int port = transport.listen();
  transport.start();
  const int held[2] = {connect_to(port), connect_to(port)};
  for (int i = 0; i < 200 && transport.n_connections() < 2; ++i) std::this_thread::sleep_for(5ms);
  const int over = connect_to(port);
  const std::string request = "GET / HTTP/1.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(send(over, request.data(), request.size(), 0), ssize_t(request.size()));
  const std::string refused = read_until_closed(over, 3s);
  close(over);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503 ", 0), 0u) << refused;
  ASSERT_EQ(send(held[0], request.data(), request.size(), 0), ssize_t(request.size()));
  const std::string served = read_until_closed(held[0], 3s);
  EXPECT_EQ(served.rfind("HTTP/1.1 200 ", 0), 0u) << served;
  for (int fd : held) close(fd);
}

}  // namespace
}  // namespace tf::server
