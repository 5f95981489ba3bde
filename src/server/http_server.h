// The OpenAI-compatible HTTP server: routes, API key, limits, graceful shutdown, and the serving
// stack loaded in the background while /health answers 503. The transport is http_transport.h.
#pragma once
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loader/checkpoint.h"

namespace tf {
class ServingStack;
}  // namespace tf

namespace tf::server {

struct ServerOptions {
  // Loads the tokenizer, model, drafter and engine (app/serving_stack.h) on the loader thread,
  // reporting the bytes of weights read; throws tf::Error when they cannot be loaded.
  std::function<std::shared_ptr<const ServingStack>(LoadProgress)> load_stack;
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port (printed when listening)
  std::string api_key;               // empty: no authentication
  size_t max_body_bytes = 8u << 20;  // larger bodies answer 413
  int64_t max_tokens_limit = 131072;
  int64_t default_max_tokens = 2048;  // a chat request without max_tokens gets at most this many
  bool allow_bench_extensions = false;  // accept "replay" (benchmarks force acceptance lengths)
  int n_http_threads = 16;           // requests that wait on the engine at once (workers)
  int n_io_threads = 2;              // threads for every socket, however many connections
  int max_connections = 1024;        // open at once; more get 503 and are closed
  int max_connections_per_peer = 256;  // the same from one client address
  std::chrono::milliseconds head_timeout{10'000};   // a request's head must arrive within this
  std::chrono::milliseconds idle_timeout{15'000};   // a kept-alive connection may wait this long
  std::chrono::milliseconds write_timeout{15'000};  // a client that takes no bytes this long is dropped
  std::chrono::milliseconds shutdown_timeout{5'000};  // stop(): replies in flight get this long to end
  std::string web_dir;               // the chat page's files (index.html, app.js, app.css); empty: none
  std::string slot_save_path;        // where POST /slots saves and restores; empty: saving is off
  int64_t max_saved_slots = 256;     // files under slot_save_path; a new name past it answers 400
  // Host names (or "*": any) a request's Host and Origin may name besides the loopback ones and the
  // bound address, so no web page can reach the server through another name (DNS rebinding) or
  // send it a request from another site; a wildcard bind (0.0.0.0, ::) allows any unless some are given.
  std::vector<std::string> allowed_hosts;
  int max_side_jobs = 4;             // /tokenize, /detokenize and slot actions at once; more answer 503
  std::vector<std::string> served_model_names;  // the model's API names; empty: its directory's name
  bool is_special_in_user_text = false;  // match special tokens written in user and tool messages
};

// "localhost", "*.localhost", "::1" or a dotted 127.x.y.z address (lower-cased, no port or brackets).
bool is_loopback_name(const std::string& name);

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, starts loading the model and serves until stop(). Throws tf::Error when the address
  // cannot be bound or the model fails to load.
  void run();
  // Asks run() to stop gracefully: admit nothing new, end every reply in flight with its terminal
  // event (a final chunk and [DONE], or the JSON reply so far), and return within shutdown_timeout.
  // Safe from any thread (a signal watcher); does not wait.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::server
