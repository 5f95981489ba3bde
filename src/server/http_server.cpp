// The OpenAI-compatible HTTP server: one route table, API key check, limits, errors as OpenAI
// JSON, and the serving stack loaded on a background thread while /health answers 503.
#include "server/http_server.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "app/serving_stack.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/completion_handler.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace tf::server {
namespace {

enum class LoadState { loading, ready, failed };

void send_json(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& response, const ApiError& error) {
  if (error.status == 503) response.set_header("Retry-After", "1");
  send_json(response, error.status, error_body(error));
}

// Compares without an early exit, so response timing does not reveal how much of a key matched.
bool is_same_secret(const std::string& given, const std::string& expected) {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i)
    difference |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  return difference == 0;
}

}  // namespace

struct HttpServer::Impl {
  using RouteHandler = std::function<void(const httplib::Request&, httplib::Response&)>;

  struct Route {
    std::string method;
    std::string pattern;  // an httplib (std::regex) path pattern
    bool is_public;       // answered without the API key
    bool needs_model;     // answered 503 while the model loads
    RouteHandler handle;
  };

  ServerOptions options;
  httplib::Server http;
  std::vector<Route> routes;
  int64_t started_at = int64_t(std::time(nullptr));

  std::atomic<LoadState> load_state{LoadState::loading};
  std::atomic<double> load_fraction{0.0};  // of the weights read, while loading
  std::string load_error;  // written before load_state becomes failed
  bool is_load_error_internal = false;  // a bug rather than a bad file: run() exits as the CLI says for bugs
  std::shared_ptr<const ServingStack> stack;       // set before load_state becomes ready
  std::shared_ptr<const ServingContext> context;  // set before load_state becomes ready
  std::thread loader;
  std::atomic<bool> is_listen_started{false};

  explicit Impl(ServerOptions server_options) : options(std::move(server_options)) {
    define_routes();
    configure_http();
  }

  void define_routes() {
    routes = {
        {"GET", "/health", true, false, [this](auto&, auto& res) { health(res); }},
        // The chat page: fixed names only, so nothing a client sends becomes a path.
        {"GET", "/", true, false, [this](auto&, auto& res) { page_file("index.html", "text/html", res); }},
        {"GET", "/app.js", true, false, [this](auto&, auto& res) { page_file("app.js", "text/javascript", res); }},
        {"GET", "/app.css", true, false, [this](auto&, auto& res) { page_file("app.css", "text/css", res); }},
        {"GET", "/v1/models", false, true, [this](auto&, auto& res) { list_models(res); }},
        {"GET", "/v1/models/(.+)", false, true,
         [this](auto& req, auto& res) { show_model(req.matches[1].str(), res); }},
        {"GET", "/metrics", false, true, [this](auto&, auto& res) { metrics(res); }},
        {"POST", "/v1/chat/completions", false, true,
         [this](auto& req, auto& res) { handle_completion(context, Endpoint::chat, req, res); }},
        {"POST", "/v1/completions", false, true,
         [this](auto& req, auto& res) {
           handle_completion(context, Endpoint::completion, req, res);
         }},
        {"POST", "/tokenize", false, true, [this](auto& req, auto& res) { tokenize(req, res); }},
        {"POST", "/detokenize", false, true,
         [this](auto& req, auto& res) { detokenize(req, res); }},
    };
  }

  void configure_http() {
    const size_t n_threads = size_t(options.n_http_threads);
    http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
    http.set_payload_max_length(options.max_body_bytes);
    // httplib's default adds SO_REUSEPORT, which lets a second server share a busy port silently.
    http.set_socket_options([](socket_t socket) {
      int yes = 1;
      setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    for (const Route& route : routes) {
      auto guarded = [this, &route](const httplib::Request& req, httplib::Response& res) {
        serve_guarded(route, req, res);
      };
      if (route.method == "GET")
        http.Get(route.pattern, guarded);
      else
        http.Post(route.pattern, guarded);
    }
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          return fill_error(req, res);
        }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                                  std::exception_ptr) {
      send_error(res, ApiError(500, "Internal server error.", "server_error"));
    });
  }

  // Every handler runs here: authentication, readiness, and no exception ever escapes.
  void serve_guarded(const Route& route, const httplib::Request& req, httplib::Response& res) {
    try {
      if (!route.is_public && !options.api_key.empty()) check_api_key(req);
      if (route.needs_model) check_ready();
      route.handle(req, res);
    } catch (const ApiError& error) {
      send_error(res, error);
    } catch (const std::exception& error) {
      const ApiError answer = api_error_for(error);
      if (answer.status >= 500)  // the client hears nothing of it: the details go to the log
        std::fprintf(stderr, "tensorfold: %s %s failed: %s\n", req.method.c_str(),
                     req.path.c_str(), error.what());
      send_error(res, answer);
    } catch (...) {
      send_error(res, ApiError(500, "Internal server error.", "server_error"));
    }
  }

  void check_api_key(const httplib::Request& req) const {
    const std::string header = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const bool is_bearer = header.compare(0, prefix.size(), prefix) == 0;
    if (!is_bearer || !is_same_secret(header.substr(prefix.size()), options.api_key))
      throw ApiError(401,
                     header.empty() ? "Missing API key: send 'Authorization: Bearer <key>'."
                                    : "Incorrect API key provided.",
                     "invalid_request_error", "", "invalid_api_key");
  }

  void check_ready() const {
    if (load_state.load() != LoadState::ready)
      throw ApiError(503, "The model is still loading; retry shortly.", "server_error", "",
                     "model_loading");
  }

  // httplib's own errors (no route, body too large, bad request) in OpenAI's shape.
  httplib::Server::HandlerResponse fill_error(const httplib::Request& req,
                                              httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string allowed;
    for (const Route& route : routes)
      if (std::regex_match(req.path, std::regex(route.pattern)))
        allowed += (allowed.empty() ? "" : ", ") + route.method;
    if (res.status == 404 && !allowed.empty()) {
      res.set_header("Allow", allowed);
      send_error(res, ApiError(405, "Method " + req.method + " is not allowed for " + req.path +
                                        "; use " + allowed + ".",
                               "invalid_request_error", "", "method_not_allowed"));
    } else if (res.status == 404) {
      send_error(res, ApiError(404, "Unknown route: " + req.method + " " + req.path + ".",
                               "invalid_request_error", "", "not_found"));
    } else if (res.status == 413) {
      send_error(res, ApiError(413, "The request body is larger than the limit of " +
                                        std::to_string(options.max_body_bytes) + " bytes.",
                               "invalid_request_error", "", "request_too_large"));
    } else {
      send_error(res, ApiError(res.status, "The request could not be processed (HTTP " +
                                               std::to_string(res.status) + ").",
                               res.status >= 500 ? "server_error" : "invalid_request_error"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }

  void page_file(const char* name, const char* type, httplib::Response& res) const {
    std::ifstream in(options.web_dir + "/" + name, std::ios::binary);
    if (options.web_dir.empty() || !in)
      throw ApiError(404, std::string("This server has no chat page (") + name + " is not in --web-dir '" +
                              options.web_dir + "').",
                     "invalid_request_error", "", "not_found");
    std::ostringstream content;
    content << in.rdbuf();
    res.set_header("Cache-Control", "no-cache");
    res.set_content(content.str(), std::string(type) + "; charset=utf-8");
  }

  void health(httplib::Response& res) const {
    switch (load_state.load()) {
      case LoadState::ready: {
        const EngineHealth engine_health = context->engine->health();
        if (engine_health.is_ok) return send_json(res, 200, {{"status", "ok"}});
        return send_json(res, 503, {{"status", "error"},
                                    {"message", "The engine failed: " + engine_health.message +
                                                    ". The server retries with the next request; "
                                                    "restart it if this persists."}});
      }
      case LoadState::loading:
        return send_json(res, 503, {{"status", "loading"}, {"progress", load_fraction.load()}});
      case LoadState::failed:
        return send_json(res, 503, {{"status", "error"}, {"message", load_error}});
    }
  }

  json model_card() const {
    return {{"id", context->limits.model_id},
            {"object", "model"},
            {"created", started_at},
            {"owned_by", "tensorfold"},
            {"max_model_len", context->n_ctx}};  // the most positions (prompt + reply) a request may use
  }

  void list_models(httplib::Response& res) const {
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model_card()})}});
  }

  void show_model(const std::string& id, httplib::Response& res) const {
    if (id != context->limits.model_id)
      throw ApiError(404, "The model '" + id + "' does not exist.", "invalid_request_error",
                     "model", "model_not_found");
    send_json(res, 200, model_card());
  }

  void metrics(httplib::Response& res) const {
    res.set_content(prometheus_text(context->engine->stats()),
                    "text/plain; version=0.0.4; charset=utf-8");
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) const {
    send_json(res, 200, tokenize_reply(*context, parse_body(req.body)));
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) const {
    const std::vector<int32_t> tokens = parse_detokenize_request(parse_body(req.body));
    for (int32_t token : tokens)
      if (token >= context->tokenizer->n_tokens())
        throw ApiError(400, "Invalid 'tokens': token id " + std::to_string(token) +
                                " is outside the vocabulary.",
                       "invalid_request_error", "tokens");
    send_json(res, 200, {{"content", context->tokenizer->decode(tokens)}});
  }

  void load_in_background() {
    loader = std::thread([this] {
      try {
        auto loaded = options.load_stack([this](size_t done, size_t total) {
          if (total > 0) load_fraction = double(done) / double(total);
        });
        const auto serving = make_serving_context(
            *loaded, {options.served_model_names, options.max_tokens_limit, options.allow_bench_extensions,
                      options.is_special_in_user_text});
        stack = loaded;
        context = serving;
        load_state = LoadState::ready;
        std::fprintf(stderr, "tensorfold: model %s ready\n", serving->limits.model_id.c_str());
      } catch (const std::exception& error) {
        load_error = error.what();
        is_load_error_internal = dynamic_cast<const Error*>(&error) == nullptr;
        load_state = LoadState::failed;
        std::fprintf(stderr, "tensorfold: loading the model failed: %s\n", error.what());
        stop();
      }
    });
  }

  void stop() {
    // httplib ignores stop() until its accept loop runs, so wait briefly for it to start.
    for (int i = 0; i < 500 && is_listen_started && !http.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http.stop();
  }
};

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() {
  stop();
  if (impl_->loader.joinable()) impl_->loader.join();
}

void HttpServer::run() {
  Impl& impl = *impl_;
  const ServerOptions& options = impl.options;
  int port = options.port;
  if (port == 0) {
    port = impl.http.bind_to_any_port(options.host);
  } else if (!impl.http.bind_to_port(options.host, port)) {
    port = -1;
  }
  if (port <= 0)
    fail("cannot listen on " + options.host + ":" + std::to_string(options.port) +
         " (is the port in use, or the host not an address of this machine?)");
  std::fprintf(stderr, "tensorfold: listening on http://%s:%d (model loading)\n",
               options.host.c_str(), port);
  impl.is_listen_started = true;
  impl.load_in_background();
  impl.http.listen_after_bind();
  impl.loader.join();
  if (impl.load_state.load() == LoadState::failed) {
    const std::string message = "could not load the model: " + impl.load_error;
    if (impl.is_load_error_internal) fail_internal(message);
    fail(message);
  }
}

void HttpServer::stop() { impl_->stop(); }

}  // namespace tf::server
