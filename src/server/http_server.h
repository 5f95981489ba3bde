// The OpenAI-compatible HTTP server: routes, API key, body limits, and the serving stack loaded in
// the background while /health answers 503.
#pragma once
#include <cstddef>
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
  bool allow_bench_extensions = false;  // accept "replay" (benchmarks force acceptance lengths)
  int n_http_threads = 16;           // connections served at once
  std::string web_dir;               // the chat page's files (index.html, app.js, app.css); empty: none
  std::vector<std::string> served_model_names;  // the model's API names; empty: its directory's name
  bool is_special_in_user_text = false;  // match special tokens written in user and tool messages
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, starts loading the model and serves until stop(). Throws tf::Error when the address
  // cannot be bound or the model fails to load.
  void run();
  // Safe from any thread (a signal watcher).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf::server
