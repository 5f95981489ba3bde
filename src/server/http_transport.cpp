// The HTTP/1.1 transport: an Asio acceptor and one strand per connection on a few I/O threads, so a
// slow client costs a socket and a timer, never a thread. Each connection reads into a bounded
// inbox, feeds the limit-checking parser, and answers one request at a time in arrival order
// (pipelining); while a route works it keeps reading, so a client that leaves is noticed at once.
#include "server/http_transport.h"

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/status.hpp>

#include "core/error.h"

namespace tf::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

// Bytes a connection may hold unparsed while a route works (pipelined requests wait here).
constexpr size_t max_watch_bytes = 1u << 20;
// How long a connection that was answered with an error keeps reading (and dropping) what the
// client still sends, so the client sees the answer rather than a reset.
constexpr std::chrono::milliseconds linger_time{1000};
// Bytes queued behind the write in flight; a client this far behind is dropped like one past the
// write deadline (a stream's chunks would otherwise pile up in memory).
constexpr size_t max_queued_bytes = 64u << 20;
// Connections over the caps get a 503 to their first request; this many at once, the rest are closed.
constexpr int max_refusing_connections = 64;

std::string status_line(int status) {
  const auto reason = boost::beast::http::obsolete_reason(boost::beast::http::int_to_status(unsigned(status)));
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason.data(), reason.size()) + "\r\n";
}

std::string head_bytes(int status, const std::string& content_type,
                       const std::vector<std::pair<std::string, std::string>>& headers,
                       const std::string& framing, bool will_close) {
  std::string head = status_line(status);
  if (!content_type.empty()) head += "Content-Type: " + content_type + "\r\n";
  for (const auto& [name, value] : headers) head += name + ": " + value + "\r\n";
  head += framing;
  head += will_close ? "Connection: close\r\n" : "Connection: keep-alive\r\n";
  head += "\r\n";
  return head;
}

}  // namespace

struct Connection;

struct HttpTransport::Impl {
  HttpTransportOptions options;
  HttpHandlers handlers;

  // Declared before the io_context: connections still queued in it when it is destroyed count
  // themselves out here.
  mutable std::mutex mutex;
  std::condition_variable exchanges_done;
  int n_open = 0;       // connections within the caps
  int n_refusing = 0;   // connections over the caps, waiting for their 503
  int n_exchanges = 0;  // requests handed to a route and not yet answered
  std::map<std::string, int> open_per_peer;
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> connections;
  uint64_t next_connection_id = 0;
  std::atomic<bool> is_stopping{false};
  bool is_shut_down = false;

  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{asio::make_work_guard(io)};
  // On a strand of their own: accepting and closing the listener may come from different threads.
  asio::strand<asio::io_context::executor_type> accept_strand{asio::make_strand(io)};
  tcp::acceptor acceptor{accept_strand};
  asio::steady_timer accept_retry{accept_strand};
  std::vector<std::thread> io_threads;
  std::unique_ptr<asio::thread_pool> workers;

  Impl(HttpTransportOptions transport_options, HttpHandlers transport_handlers)
      : options(std::move(transport_options)), handlers(std::move(transport_handlers)) {}

  void accept_next();
  void admit(tcp::socket socket);
  void exchange_ended() {
    std::lock_guard<std::mutex> lock(mutex);
    --n_exchanges;
    exchanges_done.notify_all();
  }
  template <class Fn>
  void for_each_connection(Fn fn);
};

class Exchange;

// One client connection; every member is touched on its strand only.
struct Connection : std::enable_shared_from_this<Connection> {
  enum class Phase { idle, head, body, handling, lingering, closed };

  HttpTransport::Impl& server;
  tcp::socket socket;
  const std::string peer;
  const uint64_t id;
  const bool is_over_capacity;  // counted in n_refusing: answers its first request with a 503
  const std::string over_capacity_reason;
  asio::steady_timer read_deadline;
  asio::steady_timer write_deadline;
  asio::steady_timer hangup_check;  // while reading waits on a full inbox (watch_for_hangup)
  HttpRequestParser parser;
  std::string inbox;  // bytes read and not yet parsed
  std::array<char, 16384> read_chunk;
  bool is_reading = false;
  bool is_head_checked = false;
  Phase phase = Phase::head;
  std::string writing;  // the bytes being written, sent up to writing_sent
  size_t writing_sent = 0;
  uint64_t bytes_sent = 0;         // handed to the kernel, in all
  uint64_t taken_at_deadline = 0;  // bytes_taken() when the write deadline was last set
  std::string outbox;   // queued behind it
  bool close_after_flush = false;
  std::shared_ptr<Exchange> exchange;  // the request a route is answering

  Connection(HttpTransport::Impl& owner, tcp::socket connected, std::string peer_address, uint64_t connection_id,
             std::string refusal)
      : server(owner),
        socket(std::move(connected)),
        peer(std::move(peer_address)),
        id(connection_id),
        is_over_capacity(!refusal.empty()),
        over_capacity_reason(std::move(refusal)),
        read_deadline(socket.get_executor()),
        hangup_check(socket.get_executor()),
        write_deadline(socket.get_executor()),
        parser(owner.options.parse) {}

  ~Connection() {
    std::lock_guard<std::mutex> lock(server.mutex);
    server.connections.erase(id);
    if (is_over_capacity) {
      --server.n_refusing;
    } else {
      --server.n_open;
      if (--server.open_per_peer[peer] == 0) server.open_per_peer.erase(peer);
    }
  }

  void start() {
    set_read_deadline(server.options.head_timeout);
    watch_deadline(read_deadline, [](Connection& c) { return c.phase != Phase::handling; });
    watch_deadline(write_deadline, [](Connection& c) { return c.is_write_stalled(); });
    process();
  }

  // Bytes of the reply the client has taken: those sent, less those the kernel still holds
  // (unsent or unacknowledged).
  uint64_t bytes_taken() {
    int held = 0;
    if (ioctl(socket.native_handle(), SIOCOUTQ, &held) != 0) held = 0;
    return bytes_sent - uint64_t(std::max(held, 0));
  }

  void set_write_deadline() {
    taken_at_deadline = bytes_taken();
    write_deadline.expires_after(server.options.write_timeout);
  }

  // A write waiting past its deadline with the client having taken nothing since it was set. A
  // client that took something gets the deadline again: a large send buffer reports room only in
  // large steps, so a slow but steady reader would otherwise look stalled.
  bool is_write_stalled() {
    if (writing.empty()) return false;
    if (bytes_taken() == taken_at_deadline) return true;
    set_write_deadline();
    return false;
  }

  void set_read_deadline(std::chrono::milliseconds after) { read_deadline.expires_after(after); }
  void clear_read_deadline() { read_deadline.expires_at(Clock::time_point::max()); }

  // One wait at a time per timer: moving its expiry cancels the wait, which then waits anew; a
  // wait that ends at its expiry while `is_armed` closes the connection.
  template <class IsArmed>
  void watch_deadline(asio::steady_timer& timer, IsArmed is_armed) {
    timer.async_wait([self = shared_from_this(), &timer, is_armed](error_code) {
      if (self->phase == Phase::closed) return;
      if (timer.expiry() <= Clock::now() && is_armed(*self)) return self->close();
      self->watch_deadline(timer, is_armed);
    });
  }

  // With pipelined requests filling the inbox, reading pauses and a close would go unseen until the
  // reply is written: ask the kernel now and then whether the client hung up (POLLRDHUP), so a
  // non-streaming request behind them is still cancelled when its client leaves.
  void watch_for_hangup() {
    hangup_check.expires_after(std::chrono::milliseconds(200));
    hangup_check.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->phase != Phase::handling || self->is_reading) return;
      pollfd probe{self->socket.native_handle(), POLLRDHUP, 0};
      if (::poll(&probe, 1, 0) == 1 && (probe.revents & (POLLRDHUP | POLLHUP | POLLERR))) return self->close();
      self->read_more();
    });
  }

  void read_more() {
    if (is_reading || phase == Phase::closed) return;
    if (phase == Phase::handling && inbox.size() >= max_watch_bytes) return watch_for_hangup();  // read again once answered
    is_reading = true;
    socket.async_read_some(asio::buffer(read_chunk), [self = shared_from_this()](error_code ec, size_t n) {
      self->on_read(ec, n);
    });
  }

  void on_read(error_code ec, size_t n) {
    is_reading = false;
    if (phase == Phase::closed) return;
    if (ec) {
      // The client closed its side or the connection broke: a route still working learns of it.
      if (phase == Phase::head || phase == Phase::body) parser.feed_eof();
      return close();
    }
    if (phase == Phase::lingering) return read_more();  // dropped: the answer is already out
    inbox.append(read_chunk.data(), n);
    if (phase == Phase::handling) return read_more();  // a pipelined request waits its turn
    if (phase == Phase::idle) {
      phase = Phase::head;
      set_read_deadline(server.options.head_timeout);
    }
    process();
  }

  // Parses what the inbox holds and acts on it: refuse, answer 100 Continue, hand to a route, or read more.
  void process() {
    while (phase == Phase::head || phase == Phase::body) {
      const size_t used = parser.feed(inbox);
      inbox.erase(0, used);
      if (parser.failure()) return refuse(server.handlers.parse_failure_reply(*parser.failure()));
      if (parser.is_head_done() && !is_head_checked) {
        is_head_checked = true;
        phase = Phase::body;
        set_read_deadline(server.options.body_timeout);
        if (is_over_capacity) return refuse(server.handlers.over_capacity_reply(over_capacity_reason));
        if (server.is_stopping) return refuse(server.handlers.stopping_reply());
        if (auto refusal = server.handlers.check_head(parser.request())) {
          if (!parser.is_done()) return refuse(std::move(*refusal));  // its body stays unread
          return dispatch(std::move(*refusal));  // no body: the connection may go on
        }
        if (parser.request().expects_continue && !parser.is_done()) write("HTTP/1.1 100 Continue\r\n\r\n");
        continue;
      }
      if (parser.is_done()) return dispatch();
      if (used == 0) return read_more();
    }
  }

  // Hands the complete request to a route, or answers it with `answer` when the head was refused.
  void dispatch(std::optional<HttpReply> answer = std::nullopt);
  void end_exchange(bool will_close);

  // Answers without a route and closes: the rest of the request is never read.
  void refuse(HttpReply reply) {
    write(head_bytes(reply.status, reply.content_type, reply.headers,
                     "Content-Length: " + std::to_string(reply.body.size()) + "\r\n", true) +
          reply.body);
    close_after_flush = true;
    phase = Phase::lingering;
    clear_read_deadline();
  }

  void write(std::string bytes) {
    if (phase == Phase::closed) return;
    if (outbox.size() + (writing.size() - writing_sent) + bytes.size() > max_queued_bytes) return close();
    outbox += bytes;
    if (writing.empty()) write_next();
  }

  // Sends what is queued a piece at a time, the deadline counted from the last bytes the client
  // took (is_write_stalled): a client that reads, however slowly, keeps its stream (one deadline
  // for a whole queued write cut such clients off mid-reply).
  void write_next() {
    if (writing_sent == writing.size()) {
      writing.clear();
      writing_sent = 0;
    }
    if (writing.empty()) {
      if (outbox.empty()) {
        write_deadline.expires_at(Clock::time_point::max());
        if (close_after_flush) linger();
        return;
      }
      writing.swap(outbox);
      outbox.clear();
    }
    set_write_deadline();
    socket.async_write_some(asio::buffer(writing.data() + writing_sent, writing.size() - writing_sent),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              if (ec) return self->close();
                              self->writing_sent += n;
                              self->bytes_sent += n;
                              self->write_next();
                            });
  }

  // Everything is sent: say so (FIN) and drop what the client still sends, for a short while.
  void linger() {
    if (phase == Phase::closed) return;
    error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    phase = Phase::lingering;
    inbox.clear();
    set_read_deadline(linger_time);
    read_more();
  }

  void close();
};

// A route's handle on one request's answer; posts every write to the connection's strand.
class Exchange final : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Connection> connection, int version, bool keep_alive, bool is_head)
      : connection_(connection), strand_(connection->socket.get_executor()), version_(version),
        keep_alive_(keep_alive), is_head_(is_head) {}

  void reply(HttpReply reply) override {
    const bool will_close = closes_after();
    std::string bytes = head_bytes(reply.status, reply.content_type, reply.headers,
                                   "Content-Length: " + std::to_string(reply.body.size()) + "\r\n", will_close) +
                        (is_head_ ? std::string() : reply.body);  // HEAD: the GET reply's head alone
    post([bytes = std::move(bytes), will_close](Connection& c) {
      c.write(bytes);
      c.end_exchange(will_close);
    });
  }

  bool begin_stream(int status, const std::string& content_type,
                    std::vector<std::pair<std::string, std::string>> headers) override {
    is_chunked_ = version_ >= 11;
    will_close_ = closes_after() || !is_chunked_;  // an HTTP/1.0 stream ends when the connection does
    std::string bytes = head_bytes(status, content_type, headers,
                                   is_chunked_ ? "Transfer-Encoding: chunked\r\n" : "", will_close_);
    post([bytes = std::move(bytes)](Connection& c) { c.write(bytes); });
    return !is_client_gone();
  }

  bool send_chunk(std::string data) override {
    if (is_client_gone()) return false;
    if (data.empty()) return true;  // an empty chunk would end the stream
    if (is_chunked_) {
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", data.size());
      data = size + data + "\r\n";
    }
    post([data = std::move(data)](Connection& c) { c.write(data); });
    return !is_client_gone();
  }

  void end_stream() override {
    post([ending = std::string(is_chunked_ ? "0\r\n\r\n" : ""), will_close = will_close_](Connection& c) {
      c.write(ending);
      c.end_exchange(will_close);
    });
  }

  bool is_client_gone() const override { return is_gone_; }

  void on_client_gone(std::function<void()> callback) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!is_gone_) {
        on_gone_ = std::move(callback);
        return;
      }
    }
    callback();
  }

  // On the strand, when the connection closes before the answer is complete.
  void mark_gone() {
    std::function<void()> callback;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (is_gone_) return;
      is_gone_ = true;
      callback.swap(on_gone_);
    }
    if (callback) callback();
  }

 private:
  bool closes_after() const {
    auto connection = connection_.lock();
    return !keep_alive_ || !connection || connection->server.is_stopping;
  }

  template <class Fn>
  void post(Fn fn) {
    auto connection = connection_.lock();
    if (!connection) return;
    asio::post(strand_, [connection, fn = std::move(fn), self = this]() mutable {
      if (connection->exchange.get() == self) fn(*connection);
    });
  }

  std::weak_ptr<Connection> connection_;
  tcp::socket::executor_type strand_;
  const int version_;
  const bool keep_alive_;
  const bool is_head_;
  bool is_chunked_ = true;
  bool will_close_ = false;
  std::atomic<bool> is_gone_{false};
  std::mutex mutex_;
  std::function<void()> on_gone_;
};

void Connection::dispatch(std::optional<HttpReply> answer) {
  phase = Phase::handling;
  clear_read_deadline();
  HttpRequest request = parser.take_request();
  parser.reset();
  is_head_checked = false;
  exchange = std::make_shared<Exchange>(shared_from_this(), request.version, request.keep_alive, request.method == "HEAD");
  {
    std::lock_guard<std::mutex> lock(server.mutex);
    ++server.n_exchanges;
  }
  auto current = exchange;
  try {
    if (answer)
      current->reply(std::move(*answer));
    else
      server.handlers.handle(std::move(request), current);
  } catch (const std::exception& error) {  // routes catch their own; this is a last line
    std::fprintf(stderr, "tensorfold: an HTTP handler failed: %s\n", error.what());
    close();
    return;
  }
  read_more();  // watch for the client leaving (and buffer a pipelined request)
}

void Connection::end_exchange(bool will_close) {
  if (!exchange) return;
  exchange.reset();
  server.exchange_ended();
  if (will_close || server.is_stopping) {
    close_after_flush = true;
    if (writing.empty() && outbox.empty()) linger();
    return;
  }
  // The next request, pipelined or still to come.
  phase = inbox.empty() ? Phase::idle : Phase::head;
  set_read_deadline(phase == Phase::idle ? server.options.idle_timeout : server.options.head_timeout);
  process();
  if (phase == Phase::idle) read_more();
}

void Connection::close() {
  if (phase == Phase::closed) return;
  phase = Phase::closed;
  error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
  read_deadline.cancel();
  write_deadline.cancel();
  hangup_check.cancel();
  if (exchange) {
    auto gone = std::move(exchange);
    exchange.reset();
    server.exchange_ended();
    gone->mark_gone();
  }
}

template <class Fn>
void HttpTransport::Impl::for_each_connection(Fn fn) {
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [id, weak] : connections)
      if (auto connection = weak.lock()) live.push_back(std::move(connection));
  }
  for (auto& connection : live)
    asio::post(connection->socket.get_executor(), [connection, fn] { fn(*connection); });
}

void HttpTransport::Impl::accept_next() {
  acceptor.async_accept(asio::make_strand(io), [this](error_code ec, tcp::socket socket) {
    if (!acceptor.is_open() || is_stopping) return;
    if (ec) {  // out of descriptors, most likely: wait a little rather than spin
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](error_code wait_ec) {
        if (!wait_ec) accept_next();
      });
      return;
    }
    admit(std::move(socket));
    accept_next();
  });
}

void HttpTransport::Impl::admit(tcp::socket socket) {
  error_code ec;
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  if (ec) return;
  const std::string peer = remote.address().to_string();
  socket.set_option(tcp::no_delay(true), ec);  // stream chunks are small and should leave at once
  std::string refusal;
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (n_open >= options.max_connections) {
      refusal = "The server has " + std::to_string(options.max_connections) +
                " connections open, its limit (--max-connections); retry shortly.";
    } else if (open_per_peer[peer] >= options.max_connections_per_peer) {
      refusal = "This client address has " + std::to_string(options.max_connections_per_peer) +
                " connections open, the limit per client (--max-connections-per-client); close some or retry "
                "shortly.";
    }
    if (open_per_peer[peer] == 0 && !refusal.empty()) open_per_peer.erase(peer);
    if (!refusal.empty()) {
      if (n_refusing >= max_refusing_connections) return;  // the socket closes unanswered
      ++n_refusing;
    } else {
      ++n_open;
      ++open_per_peer[peer];
    }
    id = next_connection_id++;
  }
  auto connection = std::make_shared<Connection>(*this, std::move(socket), peer, id, std::move(refusal));
  {
    std::lock_guard<std::mutex> lock(mutex);
    connections[id] = connection;
  }
  asio::post(connection->socket.get_executor(), [connection] { connection->start(); });
}

HttpTransport::HttpTransport(HttpTransportOptions options, HttpHandlers handlers)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(handlers))) {}

HttpTransport::~HttpTransport() { shut_down(); }

int HttpTransport::listen() {
  Impl& impl = *impl_;
  error_code ec;
  // A name ("localhost") listens on its first address.
  tcp::resolver resolver(impl.io);
  const auto resolved = resolver.resolve(impl.options.host, std::to_string(impl.options.port),
                                         tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || resolved.empty())
    fail("cannot listen on " + impl.options.host + ":" + std::to_string(impl.options.port) +
         " (the host is neither an address nor a name this machine resolves" + (ec ? ": " + ec.message() : "") + ")");
  const tcp::endpoint endpoint = resolved.begin()->endpoint();
  impl.acceptor.open(endpoint.protocol(), ec);
  // SO_REUSEADDR only (no SO_REUSEPORT): a second server on a busy port fails instead of sharing it.
  if (!ec) impl.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(impl.options.listen_backlog, ec);
  if (ec)
    fail("cannot listen on " + impl.options.host + ":" + std::to_string(impl.options.port) + " (" + ec.message() +
         "; is the port in use, or the host not an address of this machine?)");
  return impl.acceptor.local_endpoint().port();
}

void HttpTransport::start() {
  Impl& impl = *impl_;
  impl.workers = std::make_unique<asio::thread_pool>(size_t(std::max(1, impl.options.n_workers)));
  impl.accept_next();
  for (int i = 0; i < std::max(1, impl.options.n_io_threads); ++i)
    impl.io_threads.emplace_back([&impl] { impl.io.run(); });
}

void HttpTransport::run_on_worker(std::function<void()> work) { asio::post(*impl_->workers, std::move(work)); }

void HttpTransport::stop_admitting() {
  Impl& impl = *impl_;
  if (impl.is_stopping.exchange(true)) return;
  asio::post(impl.accept_strand, [&impl] {
    error_code ignored;
    impl.acceptor.close(ignored);
    impl.accept_retry.cancel();
  });
  // Idle connections close now; one mid-request gets stopping_reply once its head is in.
  impl.for_each_connection([](Connection& c) {
    if (c.phase == Connection::Phase::idle) c.close();
  });
}

bool HttpTransport::wait_for_exchanges(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  return impl_->exchanges_done.wait_until(lock, deadline, [&] { return impl_->n_exchanges == 0; });
}

void HttpTransport::shut_down() {
  Impl& impl = *impl_;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    if (impl.is_shut_down) return;
    impl.is_shut_down = true;
  }
  stop_admitting();
  impl.for_each_connection([](Connection& c) { c.close(); });
  // Routes still working hear their client is gone (mark_gone ran on close) and return.
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (n_connections() > 0 && Clock::now() < deadline && !impl.io_threads.empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl.work.reset();
  impl.io.stop();
  for (std::thread& thread : impl.io_threads) thread.join();
  impl.io_threads.clear();
  if (impl.workers) impl.workers->join();
}

int64_t HttpTransport::n_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->n_open + impl_->n_refusing;
}

}  // namespace tf::server
