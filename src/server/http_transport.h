// The HTTP/1.1 transport under the routes (Boost.Asio + Beast's parser): asynchronous connections
// on a few I/O threads, every limit enforced before a route sees the request, pipelined requests
// answered in order, deadlines for the head, idle keep-alive and each write, connection caps, and
// a graceful stop. Routes answer through an HttpExchange, from any thread.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/http_request_parser.h"

namespace tf::server {

struct HttpTransportOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  HttpParseLimits parse;
  std::chrono::milliseconds head_timeout{10'000};  // from a request's first byte (a new connection's accept) to its whole head
  std::chrono::milliseconds body_timeout{60'000};  // from the head to the whole body
  std::chrono::milliseconds idle_timeout{15'000};  // a kept-alive connection waiting for its next request
  std::chrono::milliseconds write_timeout{15'000}; // one write the client does not take: it is dropped
  int max_connections = 1024;
  int max_connections_per_peer = 256;
  int listen_backlog = 4096;  // the kernel clamps it to net.core.somaxconn
  int n_io_threads = 2;
  int n_workers = 16;  // threads for routes that wait (run_on_worker)
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones (Retry-After, Allow, ...)
};

// One request's answer, shared by the route and the connection. Thread-safe; never blocks on the
// client (writes are queued, and a client that does not take them within the write deadline is
// dropped).
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // The whole reply. Once per exchange, unless a stream was begun.
  virtual void reply(HttpReply reply) = 0;
  // A chunked reply (server-sent events): begin, any number of chunks, end. Each returns false
  // once the client is gone.
  virtual bool begin_stream(int status, const std::string& content_type,
                            std::vector<std::pair<std::string, std::string>> headers) = 0;
  virtual bool send_chunk(std::string data) = 0;
  virtual void end_stream() = 0;
  virtual bool is_client_gone() const = 0;
  // Called once, on an I/O thread, if the client goes before the exchange ends (at once if it has).
  virtual void on_client_gone(std::function<void()> callback) = 0;
};

struct HttpHandlers {
  // On an I/O thread as soon as a head is complete, before any body byte is read: a reply refuses
  // the request (an API key missing, a route unknown), nothing lets it go on. Must not block.
  std::function<std::optional<HttpReply>(const HttpRequest& head)> check_head;
  // On an I/O thread with the whole request. Must not block: work that waits goes to run_on_worker.
  std::function<void(HttpRequest request, std::shared_ptr<HttpExchange> exchange)> handle;
  // The reply to a request the parser refused (413, 431, ...), in the server's error shape.
  std::function<HttpReply(const HttpParseFailure& failure)> parse_failure_reply;
  // The reply to a request that arrives while stopping.
  std::function<HttpReply()> stopping_reply;
  // The reply to a connection over the caps (sent before closing it).
  std::function<HttpReply(const std::string& why)> over_capacity_reply;
};

class HttpTransport {
 public:
  HttpTransport(HttpTransportOptions options, HttpHandlers handlers);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens; returns the port. Throws tf::Error when the address cannot be bound.
  int listen();
  // Starts the I/O threads and the workers (after listen).
  void start();
  void run_on_worker(std::function<void()> work);
  // Stops admitting: the listener closes, idle connections close, and requests that arrive on
  // open connections get stopping_reply; exchanges in flight go on.
  void stop_admitting();
  // Waits until no exchange is in flight or the deadline passes; returns whether none is left.
  bool wait_for_exchanges(std::chrono::steady_clock::time_point deadline);
  // Closes every connection and joins the threads. Idempotent.
  void shut_down();
  int64_t n_connections() const;

  struct Impl;  // opaque: defined, with the connections it owns, in http_transport.cpp

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tf::server
