// The OpenAI-compatible HTTP server: one route table, API key check, errors as OpenAI JSON, the
// serving stack loaded on a background thread while /health answers 503, and the graceful stop.
// Sockets, parsing and limits are the transport's (http_transport.h).
#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "app/serving_stack.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/completion_handler.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/slot_routes.h"
#include "tokenizer/tokenizer.h"

namespace tf::server {
namespace {

enum class LoadState { loading, ready, failed };

// A path segment with its %XX escapes decoded (a model id may hold '/' or ' '); as it was when an
// escape is malformed or the bytes are not UTF-8.
std::string percent_decoded(const std::string& segment) {
  std::string out;
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] != '%') {
      out += segment[i];
      continue;
    }
    if (i + 2 >= segment.size() || !std::isxdigit(static_cast<unsigned char>(segment[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(segment[i + 2])))
      return segment;
    out += char(std::stoi(segment.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return is_valid_utf8(out) ? out : segment;
}

HttpReply json_reply(int status, const json& body) { return HttpReply{status, "application/json", dump_json(body), {}}; }

HttpReply error_reply(const ApiError& error) {
  HttpReply reply = json_reply(error.status, error_body(error));
  if (error.status == 503) reply.headers.emplace_back("Retry-After", "1");
  if (error.status == 401) reply.headers.emplace_back("WWW-Authenticate", "Bearer");  // RFC 9110: says which scheme
  return reply;
}

// Compares without an early exit, so response timing does not reveal how much of a key matched.
bool is_same_secret(std::string_view given, const std::string& expected) {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i)
    difference |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  return difference == 0;
}

std::string lower_ascii(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The name part of a Host header or an origin's authority ("[::1]:8080" -> "::1", "a.b:80" -> "a.b"),
// lower-cased.
std::string host_name_of(std::string_view authority) {
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    return lower_ascii(authority.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  return lower_ascii(authority.substr(0, authority.find(':')));
}

}  // namespace

bool is_loopback_name(const std::string& name) {
  const bool is_localhost = name == "localhost" || (name.size() > 10 && name.ends_with(".localhost"));
  const bool is_dotted_ipv4 = name.find_first_not_of("0123456789.") == std::string::npos;
  return is_localhost || name == "::1" || (is_dotted_ipv4 && name.starts_with("127."));
}

namespace {

bool is_wildcard_address(const std::string& host) { return host == "0.0.0.0" || host == "::" || host.empty(); }

}  // namespace

struct HttpServer::Impl {
  // Answers on the I/O thread (quick, never waits) unless the route runs on a worker.
  using RouteHandler = std::function<HttpReply(const HttpRequest&, const std::smatch&)>;
  using WorkerHandler = std::function<void(const HttpRequest&, HttpExchange&)>;

  struct Route {
    std::string method;
    std::regex pattern;   // the whole path
    bool is_public;       // answered without the API key
    bool needs_model;     // answered 503 while the model loads
    RouteHandler answer;  // quick routes
    WorkerHandler work;   // routes that wait on the engine or chew a large body
    bool is_side_job = false;  // a worker route that is not a completion: at most max_side_jobs at once
  };

  ServerOptions options;
  SlotStore slot_store;  // of options.slot_save_path
  std::vector<Route> routes;
  int64_t started_at = int64_t(std::time(nullptr));
  InFlightRequests in_flight;
  std::atomic<int> side_jobs{0};  // side-job routes running or waiting for a worker

  std::atomic<LoadState> load_state{LoadState::loading};
  std::atomic<double> load_fraction{0.0};  // of the weights read, while loading
  std::string load_error;  // written before load_state becomes failed
  bool is_load_error_internal = false;  // a bug rather than a bad file: run() exits as the CLI says for bugs
  std::shared_ptr<const ServingStack> stack;       // set before load_state becomes ready
  std::shared_ptr<const ServingContext> context;  // set before load_state becomes ready
  std::thread loader;
  std::promise<void> loader_finished;  // set when the loader thread ends, however it ends

  std::mutex stop_mutex;
  std::condition_variable stop_wake;
  bool is_stop_requested = false;
  std::atomic<bool> is_stopping{false};  // what the loader checks at each progress report

  std::unique_ptr<HttpTransport> transport;

  explicit Impl(ServerOptions server_options) : options(std::move(server_options)) {
    slot_store.dir = options.slot_save_path;
    slot_store.max_files = options.max_saved_slots;
    define_routes();
    transport = std::make_unique<HttpTransport>(transport_options(), handlers());
  }

  void define_routes() {
    auto page = [this](const char* name, const char* type) {
      return [this, name, type](const HttpRequest&, const std::smatch&) { return page_file(name, type); };
    };
    auto completion = [this](Endpoint endpoint) {
      return [this, endpoint](const HttpRequest& req, HttpExchange& exchange) {
        handle_completion(context, endpoint, req, exchange, in_flight);
      };
    };
    routes = {
        {"GET", std::regex("/health"), true, false, [this](auto&, auto&) { return health(); }, nullptr},
        // The chat page: fixed names only, so nothing a client sends becomes a path.
        {"GET", std::regex("/"), true, false, page("index.html", "text/html"), nullptr},
        {"GET", std::regex("/app\\.js"), true, false, page("app.js", "text/javascript"), nullptr},
        {"GET", std::regex("/app\\.css"), true, false, page("app.css", "text/css"), nullptr},
        {"GET", std::regex("/v1/models"), false, true, [this](auto&, auto&) { return list_models(); }, nullptr},
        {"GET", std::regex("/v1/models/(.+)"), false, true,
         [this](auto&, const std::smatch& match) { return show_model(match[1].str()); }, nullptr},
        {"GET", std::regex("/props"), false, true, [this](auto&, auto&) { return props(); }, nullptr},
        {"GET", std::regex("/metrics"), false, true, [this](auto&, auto&) { return metrics(); }, nullptr},
        {"POST", std::regex("/v1/chat/completions"), false, true, nullptr, completion(Endpoint::chat)},
        {"POST", std::regex("/v1/completions"), false, true, nullptr, completion(Endpoint::completion)},
        {"POST", std::regex("/tokenize"), false, true, nullptr,
         [this](auto& req, auto& exchange) { exchange.reply(tokenize(req)); }, true},
        {"POST", std::regex("/detokenize"), false, true, nullptr,
         [this](auto& req, auto& exchange) { exchange.reply(detokenize(req)); }, true},
        {"GET", std::regex("/slots"), false, true,
         [this](auto&, auto&) { return json_reply(200, slots_json(*context->engine)); }, nullptr},
        // Saving and restoring wait for the engine thread: a worker's job.
        {"POST", std::regex("/slots/([^/]+)"), false, true, nullptr,
         [this](auto& req, auto& exchange) {
           const json body = req.body.empty() ? json::object() : parse_body(req.body);
           exchange.reply(json_reply(200, slot_action(*context->engine, *stack, slot_store, req.path, req.target, body)));
         },
         true},
    };
  }

  HttpTransportOptions transport_options() const {
    HttpTransportOptions transport;
    transport.host = options.host;
    transport.port = options.port;
    transport.parse.max_body_bytes = options.max_body_bytes;
    transport.head_timeout = options.head_timeout;
    transport.idle_timeout = options.idle_timeout;
    transport.write_timeout = options.write_timeout;
    transport.max_connections = options.max_connections;
    transport.max_connections_per_peer = options.max_connections_per_peer;
    transport.n_io_threads = options.n_io_threads;
    transport.n_workers = options.n_http_threads;
    return transport;
  }

  HttpHandlers handlers() {
    HttpHandlers handlers;
    handlers.check_head = [this](const HttpRequest& head) { return check_head(head); };
    handlers.handle = [this](HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
      handle(std::move(request), std::move(exchange));
    };
    handlers.parse_failure_reply = [](const HttpParseFailure& failure) {
      return error_reply(ApiError(failure.status, failure.message, "invalid_request_error", "", failure.code));
    };
    handlers.stopping_reply = [] {
      return error_reply(ApiError(503, "The server is shutting down.", "server_error", "", "shutting_down"));
    };
    handlers.over_capacity_reply = [](const std::string& why) {
      return error_reply(ApiError(503, why, "server_error", "", "too_many_connections"));
    };
    return handlers;
  }

  // The route of a path and method, or null. HEAD takes the GET route (the transport sends the head alone).
  const Route* find_route(const HttpRequest& req, std::smatch& match) const {
    const std::string_view method = req.method == "HEAD" ? "GET" : std::string_view(req.method);
    for (const Route& route : routes)
      if (route.method == method && std::regex_match(req.path, match, route.pattern)) return &route;
    return nullptr;
  }

  // 405 with Allow when the path has routes for other methods, else 404.
  HttpReply no_route_reply(const HttpRequest& req) const {
    std::string allowed;
    for (const Route& route : routes)
      if (std::regex_match(req.path, route.pattern))
        allowed += (allowed.empty() ? "" : ", ") + route.method + (route.method == "GET" ? ", HEAD" : "");
    if (allowed.empty())
      return error_reply(ApiError(404, "Unknown route: " + req.method + " " + req.path + ".",
                                  "invalid_request_error", "", "not_found"));
    HttpReply reply = error_reply(ApiError(405, "Method " + req.method + " is not allowed for " + req.path +
                                                    "; use " + allowed + ".",
                                           "invalid_request_error", "", "method_not_allowed"));
    reply.headers.emplace_back("Allow", allowed);
    return reply;
  }

  // Before any body byte is read: the Host and Origin are this server's, the route exists and the
  // key is right (the routes are the OpenAI API's: saying one is unknown reveals nothing).
  std::optional<HttpReply> check_head(const HttpRequest& head) const {
    try {
      check_host_and_origin(head);
      std::smatch match;
      const Route* route = find_route(head, match);
      if (!route) return no_route_reply(head);
      if (!route->is_public && !options.api_key.empty()) check_api_key(head);
      return std::nullopt;
    } catch (const ApiError& error) {
      return error_reply(error);
    }
  }

  // A loopback name, the bound address, or one --allowed-host gives.
  bool is_named_host(const std::string& name) const {
    if (is_loopback_name(name) || name == lower_ascii(options.host)) return true;
    for (const std::string& allowed : options.allowed_hosts)
      if (allowed == "*" || lower_ascii(allowed) == name) return true;
    return false;
  }

  bool is_allowed_host_name(const std::string& name) const {
    return is_named_host(name) || (options.allowed_hosts.empty() && is_wildcard_address(options.host));
  }

  // A page on another site may send simple requests (a form's POST) and a rebinding DNS name may
  // point at this address: neither gets past here. Only what a browser sends is checked (it always
  // sends Origin with a POST, and Sec-Fetch-* with every request); curl and SDKs name hosts freely.
  void check_host_and_origin(const HttpRequest& head) const {
    const std::string_view host = head.header("host"), origin = head.header("origin");
    const bool is_from_browser =
        !origin.empty() || !head.header("sec-fetch-site").empty() || !head.header("sec-fetch-mode").empty();
    if (!is_from_browser) return;
    if (!is_allowed_host_name(host_name_of(host))) {
      throw ApiError(403,
                     "This server does not answer for the host '" + host_name_of(host) +
                         "' (it answers for localhost and its own address); start it with --allowed-host NAME to "
                         "serve that name.",
                     "invalid_request_error", "", "host_not_allowed");
    }
    if (origin.empty()) return;
    const size_t scheme_end = origin.find("://");
    const std::string origin_host =
        scheme_end == std::string_view::npos ? std::string() : host_name_of(origin.substr(scheme_end + 3));
    // The page's own site (the Host it asked, already checked), or a name this server answers for
    // other than by a wildcard bind ("null", from a sandboxed or file page, is neither).
    const bool is_same_site = !origin_host.empty() && !host.empty() && origin_host == host_name_of(host);
    const bool is_named = !origin_host.empty() && is_named_host(origin_host);
    if (!is_same_site && !is_named)
      throw ApiError(403,
                     "Requests from pages of another site (Origin '" + std::string(origin.substr(0, 200)) +
                         "') are refused; start the server with --allowed-host NAME to accept that site.",
                     "invalid_request_error", "", "origin_not_allowed");
  }

  // An exception a route let out, answered in the OpenAI shape.
  static void answer_error(const HttpRequest& req, HttpExchange& exchange, const std::exception& error) {
    const ApiError answer = api_error_for(error);
    if (answer.status >= 500)  // the client hears nothing of it: the details go to the log
      std::fprintf(stderr, "tensorfold: %s %s failed: %s\n", req.method.c_str(), req.path.c_str(), error.what());
    exchange.reply(error_reply(answer));
  }

  // Every route runs here: readiness, and no exception ever escapes.
  void handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
    std::smatch match;
    const Route* route = find_route(request, match);
    if (!route) return exchange->reply(no_route_reply(request));
    try {
      if (route->needs_model) check_ready();
      if (route->answer) return exchange->reply(route->answer(request, match));
    } catch (const std::exception& error) {
      return answer_error(request, *exchange, error);
    }
    // A side job (a huge /tokenize, a slot save) must not take the workers completions need.
    if (route->is_side_job && side_jobs.fetch_add(1) >= options.max_side_jobs) {
      side_jobs.fetch_sub(1);
      return exchange->reply(error_reply(ApiError(
          503, "The server is busy with other tokenize, detokenize and slot requests; retry shortly.", "server_error",
          "", "server_busy")));
    }
    transport->run_on_worker([this, route, request = std::move(request), exchange] {
      try {
        route->work(request, *exchange);
      } catch (const std::exception& error) {
        answer_error(request, *exchange, error);
      }
      if (route->is_side_job) side_jobs.fetch_sub(1);
    });
  }

  void check_api_key(const HttpRequest& req) const {
    const std::string_view header = req.header("authorization");
    const std::string_view prefix = "bearer ";  // the scheme is case-insensitive (RFC 9110)
    const std::string_view scheme = header.substr(0, prefix.size());
    const bool is_bearer = scheme.size() == prefix.size() &&
                           std::equal(scheme.begin(), scheme.end(), prefix.begin(),
                                      [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
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

  HttpReply page_file(const char* name, const char* type) const {
    const std::string path = options.web_dir + "/" + name;
    std::error_code ec;
    // The folder is the operator's to know, not a client's (this route needs no key).
    if (options.web_dir.empty() || !std::filesystem::is_regular_file(path, ec))
      throw ApiError(404, std::string("This server has no chat page (") + name + " is not in its --web-dir).",
                     "invalid_request_error", "", "not_found");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));  // ours: a 500, logged
    std::ostringstream content;
    content << in.rdbuf();
    // The page keeps an API key: only its own files run in it, and no other site may frame it.
    return HttpReply{200,
                     std::string(type) + "; charset=utf-8",
                     content.str(),
                     {{"Cache-Control", "no-cache"},
                      {"Content-Security-Policy",
                       "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
                       "form-action 'none'"},
                      {"X-Content-Type-Options", "nosniff"},
                      {"X-Frame-Options", "DENY"},
                      {"Referrer-Policy", "no-referrer"}}};
  }

  HttpReply health() const {
    switch (load_state.load()) {
      case LoadState::ready: {
        const EngineHealth engine_health = context->engine->health();
        if (engine_health.is_ok) return json_reply(200, {{"status", "ok"}});
        return json_reply(503, {{"status", "error"},
                                {"message", "The engine failed: " + engine_health.message +
                                                ". The server retries with the next request; "
                                                "restart it if this persists."}});
      }
      case LoadState::loading:
        return json_reply(503, {{"status", "loading"}, {"progress", load_fraction.load()}});
      case LoadState::failed:
        break;
    }
    return json_reply(503, {{"status", "error"}, {"message", load_error}});
  }

  // The served model and what fixes its bits: replies agree bitwise only between servers whose
  // device and numerics agree.
  HttpReply props() const {
    const ModelFacts& facts = stack->facts();
    return json_reply(200, {{"model", facts.model_id}, {"device", facts.device}, {"numerics", facts.numerics}});
  }

  json model_card() const {
    return {{"id", context->limits.model_id},
            {"object", "model"},
            {"created", started_at},
            {"owned_by", "tensorfold"},
            {"max_model_len", context->n_ctx}};  // the most positions (prompt + reply) a request may use
  }

  HttpReply list_models() const {
    return json_reply(200, {{"object", "list"}, {"data", json::array({model_card()})}});
  }

  HttpReply show_model(const std::string& path_id) const {
    const std::string id = percent_decoded(path_id);
    const auto& aliases = context->limits.model_aliases;
    if (id != context->limits.model_id && std::find(aliases.begin(), aliases.end(), id) == aliases.end())
      throw ApiError(404, "The model '" + id + "' does not exist.", "invalid_request_error", "model",
                     "model_not_found");
    return json_reply(200, model_card());
  }

  HttpReply metrics() const {
    return HttpReply{200, "text/plain; version=0.0.4; charset=utf-8", prometheus_text(context->engine->stats()), {}};
  }

  HttpReply tokenize(const HttpRequest& req) const {
    return json_reply(200, tokenize_reply(*context, req.body));
  }

  HttpReply detokenize(const HttpRequest& req) const {
    const std::vector<int32_t> tokens = parse_detokenize_request(parse_body(req.body));
    for (int32_t token : tokens)
      if (token >= context->tokenizer->n_tokens())
        throw ApiError(400, "Invalid 'tokens': token id " + std::to_string(token) +
                                " is outside the vocabulary.",
                       "invalid_request_error", "tokens");
    return json_reply(200, {{"content", context->tokenizer->decode(tokens)}});
  }

  // Thrown from the progress report when the server stops while loading: the load unwinds.
  struct LoadCancelled {};

  void load_in_background() {
    loader = std::thread([this] {
      try {
        auto loaded = options.load_stack([this](size_t done, size_t total) {
          if (total > 0) load_fraction = double(done) / double(total);
          if (is_stopping) throw LoadCancelled{};
        });
        ContextSettings settings;
        settings.served_model_names = options.served_model_names;
        settings.max_tokens_limit = options.max_tokens_limit;
        settings.default_max_tokens = options.default_max_tokens;
        settings.allow_bench_extensions = options.allow_bench_extensions;
        settings.is_special_in_user_text = options.is_special_in_user_text;
        const auto serving = make_serving_context(*loaded, settings);
        stack = loaded;
        context = serving;
        load_state = LoadState::ready;
        std::fprintf(stderr, "tensorfold: model %s ready\n", serving->limits.model_id.c_str());
      } catch (const LoadCancelled&) {
        std::fprintf(stderr, "tensorfold: loading stopped by the shutdown\n");
      } catch (const std::exception& error) {
        load_error = error.what();
        is_load_error_internal = dynamic_cast<const Error*>(&error) == nullptr;
        load_state = LoadState::failed;
        std::fprintf(stderr, "tensorfold: loading the model failed: %s\n", error.what());
        request_stop();
      }
      loader_finished.set_value();
    });
  }

  void request_stop() {
    std::lock_guard<std::mutex> lock(stop_mutex);
    is_stop_requested = true;
    is_stopping = true;
    stop_wake.notify_all();
  }

  // Stop admitting, end every reply in flight with its terminal event, give them the shutdown
  // timeout to reach their clients, then close everything.
  void shut_down_gracefully() {
    const auto deadline = std::chrono::steady_clock::now() + options.shutdown_timeout;
    transport->stop_admitting();
    const int64_t n_cancelled = in_flight.cancel_all();
    if (!transport->wait_for_exchanges(deadline))
      std::fprintf(stderr, "tensorfold: replies still in flight after %lld ms; closing them\n",
                   static_cast<long long>(options.shutdown_timeout.count()));
    else if (n_cancelled > 0)
      std::fprintf(stderr, "tensorfold: ended %lld replies in flight\n", static_cast<long long>(n_cancelled));
    transport->shut_down();
  }
};

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() {
  impl_->transport->shut_down();
  if (impl_->loader.joinable()) impl_->loader.join();
}

void HttpServer::run() {
  Impl& impl = *impl_;
  if (const int64_t n_removed = remove_interrupted_saves(impl.options.slot_save_path))
    std::fprintf(stderr, "tensorfold: removed %lld temporary slot files of saves cut short\n",
                 static_cast<long long>(n_removed));
  const int port = impl.transport->listen();
  std::fprintf(stderr, "tensorfold: listening on http://%s:%d (model loading)\n", impl.options.host.c_str(), port);
  impl.load_in_background();
  impl.transport->start();
  {
    std::unique_lock<std::mutex> lock(impl.stop_mutex);
    impl.stop_wake.wait(lock, [&] { return impl.is_stop_requested; });
  }
  const auto deadline = std::chrono::steady_clock::now() + impl.options.shutdown_timeout;
  impl.shut_down_gracefully();
  // A load that reports no progress (random weights, a GPU upload) cannot be stopped midway; the
  // shutdown does not wait past its timeout for it: nothing is served, nothing is lost.
  if (impl.loader_finished.get_future().wait_until(deadline) != std::future_status::ready) {
    std::fprintf(stderr, "tensorfold: the model is still loading after %lld ms; exiting without it\n",
                 static_cast<long long>(impl.options.shutdown_timeout.count()));
    std::fflush(nullptr);
    std::_Exit(0);
  }
  impl.loader.join();
  if (impl.load_state.load() == LoadState::failed) {
    const std::string message = "could not load the model: " + impl.load_error;
    if (impl.is_load_error_internal) fail_internal(message);
    fail(message);
  }
}

void HttpServer::stop() { impl_->request_stop(); }

}  // namespace tf::server
