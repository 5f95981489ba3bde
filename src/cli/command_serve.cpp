// `tensorfold serve`: the OpenAI-compatible HTTP server. Flags, their checks, and signals.
#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "app/serving_stack.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"

namespace tf::cli {
namespace {

// The chat page beside the sources (web/), as the embedded model is.
std::string default_web_dir() {
#ifdef TF_DEFAULT_WEB_DIR
  return TF_DEFAULT_WEB_DIR;
#else
  return "web";
#endif
}

constexpr int32_t max_parallel = 1024;
constexpr int32_t max_http_threads = 1024;

// The flags as given; validated_options() turns them into server options.
struct ServeFlags {
  EngineFlags engine;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  bool is_api_key_given = false;  // set, even to ""
  int32_t n_parallel = EngineOptions{}.n_parallel;
  int64_t n_ctx = EngineOptions{}.n_ctx;
  int32_t max_queue = EngineOptions{}.max_queue;
  int64_t max_body_bytes = 8 << 20;
  int64_t max_tokens_limit = 131072;
  int64_t default_max_tokens = server::ServerOptions{}.default_max_tokens;
  bool is_default_max_tokens_given = false;  // on the command line or in TF_DEFAULT_MAX_TOKENS
  int32_t max_connections = server::ServerOptions{}.max_connections;
  int32_t max_connections_per_client = server::ServerOptions{}.max_connections_per_peer;
  double head_timeout_s = 10;
  double idle_timeout_s = 15;
  double write_timeout_s = 15;
  double shutdown_timeout_s = 5;
  bool bench_extensions = false;
  std::string web_dir = default_web_dir();
  std::string slot_save_path;
  int64_t slot_save_max = server::ServerOptions{}.max_saved_slots;
  std::vector<std::string> allowed_hosts;
  std::vector<std::string> served_model_names;
  std::string chat_template = "auto";
  bool is_special_in_user_text = false;
  std::string proposer_gate = "on";
};

void require(bool is_ok, const std::string& message) {
  if (!is_ok) fail(message);
}

// Each connection is a file descriptor: with fewer open files allowed than connections, clients past
// the limit would hang unanswered instead of hearing 503. The soft limit is raised as far as the hard
// one allows; past that, fewer connections, said once.
int connections_within_open_file_limit(int max_connections) {
  constexpr rlim_t kSpare = 64;  // model files, slot files, the listener, stdio
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return max_connections;
  const rlim_t wanted = rlim_t(max_connections) + kSpare;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= wanted) return max_connections;
  const int fitting = int(std::max<rlim_t>(1, limit.rlim_cur > kSpare ? limit.rlim_cur - kSpare : 1));
  std::fprintf(stderr,
               "tensorfold: warning: the open-file limit (ulimit -n) is %llu, so at most %d connections at once "
               "(--max-connections %d)\n",
               static_cast<unsigned long long>(limit.rlim_cur), fitting, max_connections);
  return fitting;
}

// Every flag is checked here (the shared ones in serving_options), once, with a message that says
// what to change.
server::ServerOptions validated_options(const ServeFlags& flags) {
  require(flags.port >= 0 && flags.port <= 65535,
          "--port must be between 0 and 65535 (0 picks a free port); got " +
              std::to_string(flags.port) + ".");
  require(!flags.host.empty(), "--host must not be empty.");
  // An empty key (an unset variable expanded into the flag) must not quietly mean "no key".
  require(!flags.is_api_key_given || !flags.api_key.empty(),
          "--api-key (TF_API_KEY) is empty: give a key, or leave the flag and the variable out to serve without one.");
  require(flags.n_parallel >= 1 && flags.n_parallel <= max_parallel,
          "--parallel must be between 1 and " + std::to_string(max_parallel) + "; got " +
              std::to_string(flags.n_parallel) + ".");
  require(flags.max_queue >= 1, "--max-queue must be at least 1; got " +
                                    std::to_string(flags.max_queue) + ".");
  require(flags.max_body_bytes >= 1024, "--max-body-bytes must be at least 1024; got " +
                                            std::to_string(flags.max_body_bytes) + ".");
  require(flags.max_tokens_limit >= 1, "--max-tokens-limit must be at least 1; got " +
                                           std::to_string(flags.max_tokens_limit) + ".");
  require(flags.default_max_tokens >= 1, "--default-max-tokens must be at least 1; got " +
                                             std::to_string(flags.default_max_tokens) + ".");
  // Given both ways round, one of them is a mistake; left at its default, the default follows the limit.
  require(!flags.is_default_max_tokens_given || flags.default_max_tokens <= flags.max_tokens_limit,
          "--default-max-tokens (" + std::to_string(flags.default_max_tokens) + ") is above --max-tokens-limit (" +
              std::to_string(flags.max_tokens_limit) + "): a reply without max_tokens could not have that many.");
  require(flags.max_connections >= 1, "--max-connections must be at least 1; got " +
                                          std::to_string(flags.max_connections) + ".");
  require(flags.max_connections_per_client >= 1 && flags.max_connections_per_client <= flags.max_connections,
          "--max-connections-per-client must be between 1 and --max-connections (" +
              std::to_string(flags.max_connections) + "); got " + std::to_string(flags.max_connections_per_client) +
              ".");
  auto seconds = [](const char* flag, double value, double most) {
    char given[32];
    std::snprintf(given, sizeof given, "%g", value);
    require(value >= 0.05 && value <= most, std::string(flag) + " must be between 0.05 and " +
                                                std::to_string(int(most)) + " seconds; got " + given + ".");
    return std::chrono::milliseconds(int64_t(value * 1000));
  };
  EngineOptions engine;
  engine.n_parallel = flags.n_parallel;
  engine.n_ctx = flags.n_ctx;
  engine.max_queue = flags.max_queue;
  // Drafting that does not pay for itself only costs the client time; off, every proposer drafts every
  // round, so which drafts a reply gets no longer depends on the clock (the tokens never do).
  engine.speculation.gate_proposers = flags.proposer_gate == "on";
  // A synthetic model speaks through the --model directory's tokenizer and drafts without a drafter.
  ServingOptions stack_options = serving_options(flags.engine, engine);
  stack_options.chat_template = flags.chat_template;
  const ModelFacts facts = read_model_facts(stack_options);
  // The chat template is recognised (or refused) before the long load.
  if (flags.chat_template != "auto") chat_template_family_from_name(flags.chat_template, "--chat-template");
  if (stack_options.needs_tokenizer) ChatTemplate::from_model_dir(stack_options.model_dir, flags.chat_template);
  for (const std::string& name : flags.served_model_names)
    require(!name.empty(), "--served-model-name must not be empty.");
  require(flags.n_ctx >= 16 && flags.n_ctx <= facts.context_length,
          "--ctx must be between 16 and the model's context of " + std::to_string(facts.context_length) +
              " (max_position_embeddings in " +
              (flags.engine.synthetic.empty() ? flags.engine.model_dir + "/config.json"
                                              : "the synthetic shape " + flags.engine.synthetic) +
              "); got " + std::to_string(flags.n_ctx) + ".");

  server::ServerOptions options;
  options.load_stack = [stack_options](LoadProgress progress) {
    ServingOptions with_progress = stack_options;
    with_progress.load.progress = std::move(progress);
    return ServingStack::load(with_progress);
  };
  options.host = flags.host;
  options.port = flags.port;
  options.api_key = flags.api_key;
  options.max_body_bytes = size_t(flags.max_body_bytes);
  options.max_tokens_limit = flags.max_tokens_limit;
  options.default_max_tokens = flags.default_max_tokens;
  options.max_connections = flags.max_connections;
  options.max_connections_per_peer = flags.max_connections_per_client;
  options.head_timeout = seconds("--head-timeout", flags.head_timeout_s, 3600);
  options.idle_timeout = seconds("--idle-timeout", flags.idle_timeout_s, 3600);
  options.write_timeout = seconds("--write-timeout", flags.write_timeout_s, 3600);
  options.shutdown_timeout = seconds("--shutdown-timeout", flags.shutdown_timeout_s, 600);
  options.allow_bench_extensions = flags.bench_extensions;
  options.web_dir = flags.web_dir;
  if (!flags.slot_save_path.empty()) {
    std::error_code error;
    require(std::filesystem::is_directory(flags.slot_save_path, error),
            "--slot-save-path must be an existing directory; got '" + flags.slot_save_path + "'.");
    options.slot_save_path = std::filesystem::absolute(flags.slot_save_path).lexically_normal().string();
  }
  require(flags.slot_save_max >= 1, "--slot-save-max must be at least 1; got " + std::to_string(flags.slot_save_max) + ".");
  options.max_saved_slots = flags.slot_save_max;
  for (const std::string& name : flags.allowed_hosts)
    require(!name.empty() && name.find_first_of(" /:[]") == std::string::npos,
            "--allowed-host takes a host name or address without a port (or *); got '" + name + "'.");
  options.allowed_hosts = flags.allowed_hosts;
  options.served_model_names = flags.served_model_names;
  options.is_special_in_user_text = flags.is_special_in_user_text;
  // Each live or queued request may hold a worker; a few more serve /tokenize, /detokenize and slots.
  options.n_http_threads =
      std::min<int64_t>(max_http_threads, int64_t(flags.n_parallel) + flags.max_queue + options.max_side_jobs);
  options.max_connections = connections_within_open_file_limit(options.max_connections);
  options.max_connections_per_peer = std::min(options.max_connections_per_peer, options.max_connections);
  if (!server::is_loopback_name(flags.host) && flags.api_key.empty())
    std::fprintf(stderr,
                 "tensorfold: warning: listening on %s without --api-key: anyone who can reach this address can use "
                 "the model and its slots\n",
                 flags.host.c_str());
  return options;
}

// Ctrl-C / SIGTERM stop the server gracefully: signals are taken by one thread with sigwait,
// since stopping takes locks, which a signal handler may not. A second signal exits at once.
class SignalWatcher {
 public:
  explicit SignalWatcher(server::HttpServer& server) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);  // inherited by threads started later
    std::signal(SIGPIPE, SIG_IGN);                    // a client gone is a failed write, not a kill
    thread_ = std::thread([this, &server] {
      const timespec poll = {0, 200 * 1000 * 1000};
      while (!is_done_) {
        if (sigtimedwait(&signals_, nullptr, &poll) > 0) {
          if (is_stopping_) {
            std::fprintf(stderr, "tensorfold: second signal, exiting now\n");
            std::_Exit(1);
          }
          is_stopping_ = true;
          std::fprintf(stderr, "tensorfold: stopping (ending replies in flight)\n");
          server.stop();
        }
      }
    });
  }
  ~SignalWatcher() {
    is_done_ = true;
    thread_.join();
    pthread_sigmask(SIG_UNBLOCK, &signals_, nullptr);
  }

 private:
  sigset_t signals_;
  std::atomic<bool> is_done_{false};
  bool is_stopping_ = false;
  std::thread thread_;
};

void run_serve(const ServeFlags& flags) {
  server::HttpServer http_server(validated_options(flags));
  SignalWatcher signal_watcher(http_server);
  http_server.run();
}

}  // namespace

void register_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* command = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API");
  add_engine_flags(*command, flags->engine);
  command->add_option("--synthetic", flags->engine.synthetic,
                      "Serve random weights of a known shape (benchmarks: " + synthetic_names_text() +
                          "), speaking through --model's tokenizer")
      ->envname("TF_SYNTHETIC");
  command->add_option("--proposer-gate", flags->proposer_gate,
                      "Run the block drafter and n-gram proposer only while their accepted tokens pay for their "
                      "time (on), or every round (off)")
      ->check(CLI::IsMember({"on", "off"}))->envname("TF_PROPOSER_GATE")->capture_default_str();
  command->add_option("--synthetic-bits", flags->engine.synthetic_bits,
                      "Bits of the --synthetic weights: 0 (bf16), 4 or 8 (MLX affine, group 64)")
      ->check(CLI::IsMember({0, 4, 8}))->envname("TF_SYNTHETIC_BITS")->capture_default_str();
  command->add_option("--web-dir", flags->web_dir, "The chat page's files, served at / ('' serves no page)")
      ->envname("TF_WEB_DIR")->capture_default_str();
  command->add_option("--slot-save-path", flags->slot_save_path,
                      "Directory where POST /slots/{id}?action=save|restore keeps saved slots (off unless given)")
      ->envname("TF_SLOT_SAVE_PATH");
  command->add_option("--slot-save-max", flags->slot_save_max,
                      "Most saved slots kept under --slot-save-path; saving a new name past it answers 400")
      ->envname("TF_SLOT_SAVE_MAX")->capture_default_str();
  command->add_option("--host", flags->host, "Address to listen on")
      ->envname("TF_HOST")->capture_default_str();
  command->add_option("--allowed-host", flags->allowed_hosts,
                      "A host name requests may use (Host header, and the Origin of a web page) besides localhost "
                      "and the --host address, e.g. the name a reverse proxy forwards; * allows any. Repeatable")
      ->envname("TF_ALLOWED_HOST")->delimiter(',');
  command->add_option("--port", flags->port, "Port to listen on (0: any free port)")
      ->envname("TF_PORT")->capture_default_str();
  CLI::Option* api_key = command->add_option("--api-key", flags->api_key,
                      "Require 'Authorization: Bearer KEY' on every route but /health and the chat page's files "
                      "(the page asks for the key)")
      ->envname("TF_API_KEY");
  command->add_option("--parallel", flags->n_parallel, "Most requests generating at once (lanes)")
      ->envname("TF_PARALLEL")->capture_default_str();
  command->add_option("--ctx", flags->n_ctx, "Most positions (prompt + completion) per request")
      ->envname("TF_CTX")->capture_default_str();
  command->add_option("--max-queue", flags->max_queue,
                      "Most requests waiting for a lane; more answer 503 with Retry-After")
      ->envname("TF_MAX_QUEUE")->capture_default_str();
  command->add_option("--max-body-bytes", flags->max_body_bytes,
                      "Largest request body; larger ones answer 413")
      ->envname("TF_MAX_BODY_BYTES")->capture_default_str();
  command->add_option("--max-tokens-limit", flags->max_tokens_limit,
                      "Largest max_tokens a request may ask for; more answers 400")
      ->envname("TF_MAX_TOKENS_LIMIT")->capture_default_str();
  CLI::Option* default_max_tokens =
      command->add_option("--default-max-tokens", flags->default_max_tokens,
                          "Most tokens a chat reply gets when the request sets no max_tokens (at most --max-tokens-limit)")
          ->envname("TF_DEFAULT_MAX_TOKENS")
          ->capture_default_str();
  command->add_option("--max-connections", flags->max_connections,
                      "Most connections open at once; more get 503 and are closed")
      ->envname("TF_MAX_CONNECTIONS")->capture_default_str();
  command->add_option("--max-connections-per-client", flags->max_connections_per_client,
                      "Most connections open at once from one client address; more get 503")
      ->envname("TF_MAX_CONNECTIONS_PER_CLIENT")->capture_default_str();
  command->add_option("--head-timeout", flags->head_timeout_s,
                      "Seconds a request's line and headers may take to arrive; slower ones are closed")
      ->envname("TF_HEAD_TIMEOUT")->capture_default_str();
  command->add_option("--idle-timeout", flags->idle_timeout_s,
                      "Seconds a kept-alive connection may wait for its next request")
      ->envname("TF_IDLE_TIMEOUT")->capture_default_str();
  command->add_option("--write-timeout", flags->write_timeout_s,
                      "Seconds a client may take no reply bytes before it is dropped (and its request cancelled)")
      ->envname("TF_WRITE_TIMEOUT")->capture_default_str();
  command->add_option("--shutdown-timeout", flags->shutdown_timeout_s,
                      "Seconds SIGTERM/SIGINT give replies in flight to end before the server exits")
      ->envname("TF_SHUTDOWN_TIMEOUT")->capture_default_str();
  command->add_option("--served-model-name", flags->served_model_names,
                      "The model's name in the API (/v1/models and a request's \"model\"); more names are "
                      "accepted as aliases. Default: the model directory's name")
      ->envname("TF_SERVED_MODEL_NAME")->delimiter(',');
  command->add_option("--chat-template", flags->chat_template,
                      "How chats are rendered: auto (recognise the directory's template by its text), or render "
                      "as qwen3, qwen3.5 or chatml")
      ->envname("TF_CHAT_TEMPLATE")->capture_default_str();
  command->add_flag("--special-tokens-in-user-text", flags->is_special_in_user_text,
                    "Match special tokens (<|im_start|>, ...) written inside messages and tool definitions (the "
                    "system prompt's always are); by default they are encoded as plain text, so a client cannot "
                    "write the prompt's structure")
      ->envname("TF_SPECIAL_TOKENS_IN_USER_TEXT");
  command->add_flag("--bench-extensions", flags->bench_extensions,
                    "Accept \"replay\" in requests: a reply the replay proposer drafts, so benchmarks can force "
                    "acceptance lengths (tools/bench_concurrent.py --forced-accept)")
      ->envname("TF_BENCH_EXTENSIONS");
  command->callback([flags, api_key, default_max_tokens] {
    flags->is_api_key_given = api_key->count() > 0;
    flags->is_default_max_tokens_given = default_max_tokens->count() > 0;
    run_serve(*flags);
  });
}

}  // namespace tf::cli
