// `tensorfold generate`: one reply from the command line, through the same engine as the server.
#include <cstdio>
#include <future>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/engine.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {
namespace {

struct GenerateFlags {
  std::string model_dir = default_model_dir();
  std::string prompt;
  std::string prompt_ids;
  int64_t n_tokens = 32;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool json = false;
  int n_threads = 0;
  std::string device = "cpu";
};

void run_generate(const GenerateFlags& flags) {
  if (flags.prompt.empty() == flags.prompt_ids.empty())
    fail("give exactly one of --prompt and --prompt-ids");
  auto model = load_model_for_cli(flags.model_dir, flags.device, flags.n_threads);
  auto tokenizer = load_tokenizer_if_present(flags.model_dir);
  GenerationRequest request;
  if (!flags.prompt_ids.empty()) {
    request.prompt = parse_id_list(flags.prompt_ids, "--prompt-ids");
  } else {
    if (!tokenizer) fail("--prompt needs " + flags.model_dir + "/tokenizer.json; use --prompt-ids");
    if (!is_valid_utf8(flags.prompt)) fail("--prompt is not valid UTF-8");
    request.prompt = tokenizer->encode(flags.prompt);
  }
  request.max_tokens = flags.n_tokens;
  request.ignore_eos = flags.ignore_eos;
  request.sampling.temperature = flags.temperature;
  request.sampling.top_k = flags.top_k;
  request.sampling.top_p = flags.top_p;
  request.sampling.min_p = flags.min_p;
  request.sampling.seed = flags.seed;

  EngineOptions options;
  options.n_parallel = 1;
  options.n_ctx = int64_t(request.prompt.size()) + request.max_tokens;
  Engine engine(options, model, tokenizer);
  std::vector<int32_t> ids;
  std::string text;
  std::promise<GenerationUpdate> final_update;
  SubmitResult submitted = engine.submit(request, [&](const GenerationUpdate& update) {
    ids.insert(ids.end(), update.tokens.begin(), update.tokens.end());
    text += update.text;
    if (!flags.json && !update.text.empty()) {
      std::fwrite(update.text.data(), 1, update.text.size(), stdout);
      std::fflush(stdout);
    }
    if (update.is_final) final_update.set_value(update);
    return true;
  });
  if (submitted.status != SubmitStatus::accepted) fail(submitted.message);
  GenerationUpdate last = final_update.get_future().get();
  if (last.finish_reason == FinishReason::error) fail(last.error);
  if (flags.json) {
    nlohmann::json out = {{"ids", ids}, {"text", text}, {"finish_reason", finish_reason_name(last.finish_reason)},
                          {"token_sha", last.token_sha}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "\n";
  }
}

}  // namespace

void register_generate_command(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a reply to a prompt (greedy with --temp 0)");
  cmd->add_option("--model", flags->model_dir, "Model directory")->envname("TF_MODEL")->capture_default_str();
  cmd->add_option("--prompt", flags->prompt, "Prompt text (tokenized as is, no chat template)");
  cmd->add_option("--prompt-ids", flags->prompt_ids, "Prompt as comma-separated token ids");
  cmd->add_option("-n,--n-tokens", flags->n_tokens, "Most tokens to generate")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))->capture_default_str();
  cmd->add_option("--temp", flags->temperature, "Sampling temperature; 0 is greedy")
      ->check(CLI::Range(0.0f, 100.0f))->capture_default_str();
  cmd->add_option("--top-k", flags->top_k, "Keep the k most likely tokens; 0 is off")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--top-p", flags->top_p, "Nucleus sampling mass")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd->add_option("--min-p", flags->min_p, "Drop tokens below min-p times the best")
      ->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Seed of the sampler")->capture_default_str();
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "Keep going past end-of-sequence tokens");
  cmd->add_flag("--json", flags->json, "Print {\"ids\": [...], \"text\": \"...\"}");
  cmd->add_option("--threads", flags->n_threads, "CPU threads; 0 is one per core")
      ->envname("TF_THREADS")->check(CLI::NonNegativeNumber)->capture_default_str();
  add_device_option(*cmd, flags->device);
  cmd->callback([flags] { run_generate(*flags); });
}

}  // namespace tf::cli
