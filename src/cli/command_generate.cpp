// `tensorfold generate`: one reply from the command line, through the same serving stack as the
// server (drafter, gating and stop strings included), so it runs what `serve` ships.
#include <cmath>
#include <cstdio>
#include <future>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/serving_stack.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {
namespace {

constexpr size_t max_stop_strings = 4;  // as the server allows

struct GenerateFlags {
  EngineFlags engine;
  std::string prompt;
  std::string prompt_ids;
  int64_t n_tokens = 32;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  std::string seed = "0";  // read whole here: CLI11 wraps "-1" and saturates past 2^64
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool json = false;
};

std::vector<int32_t> prompt_tokens(const GenerateFlags& flags, const ServingStack& stack) {
  if (!flags.prompt_ids.empty()) return parse_id_list(flags.prompt_ids, "--prompt-ids");
  if (!stack.tokenizer()) fail("--prompt needs " + flags.engine.model_dir + "/tokenizer.json; use --prompt-ids");
  if (!is_valid_utf8(flags.prompt)) fail("--prompt is not valid UTF-8");
  return stack.tokenizer()->encode(flags.prompt);
}

void run_generate(const GenerateFlags& flags) {
  if (!flags.prompt.empty() && !flags.prompt_ids.empty()) fail("give one of --prompt and --prompt-ids, not both");
  if (flags.prompt.empty() && flags.prompt_ids.empty())
    fail("the prompt is empty: give a non-empty --prompt or --prompt-ids");
  if (flags.stop.size() > max_stop_strings)
    fail("--stop takes at most " + std::to_string(max_stop_strings) + " strings; got " + std::to_string(flags.stop.size()));
  for (const std::string& stop : flags.stop)
    if (stop.empty() || !is_valid_utf8(stop)) fail("--stop strings must be non-empty UTF-8 text");
  // NaN passes every range check (its comparisons are all false).
  for (const auto& [value, flag] : {std::pair{flags.temperature, "--temp"}, std::pair{flags.top_p, "--top-p"},
                                    std::pair{flags.min_p, "--min-p"}})
    if (!std::isfinite(value)) fail(std::string(flag) + " must be a number; got " + std::to_string(value));
  const bool is_seed_digits = !flags.seed.empty() && flags.seed.size() <= 20 &&
                              flags.seed.find_first_not_of("0123456789") == std::string::npos;
  if (!is_seed_digits || (flags.seed.size() == 20 && flags.seed > "18446744073709551615"))
    fail("--seed must be an integer from 0 to 18446744073709551615; got '" + flags.seed + "'");
  const uint64_t seed = std::stoull(flags.seed);

  EngineOptions engine_options;
  engine_options.n_parallel = 1;
  engine_options.n_ctx = 16;  // sized to the prompt below; the engine checks the pool against that size
  engine_options.speculation.gate_proposers = true;  // as the server drafts
  ServingOptions options = serving_options(flags.engine, engine_options);
  engine_options = *options.engine;
  options.engine.reset();  // the context is sized to the prompt, known only after tokenizing
  options.needs_tokenizer = false;
  options.load.progress = stderr_progress("loading " + flags.engine.model_dir);
  auto stack = ServingStack::load(options);

  // Stop strings are matched in the decoded text: without a tokenizer they could only be ignored.
  if (!flags.stop.empty() && !stack->tokenizer())
    fail("--stop needs the model's tokenizer.json (" + flags.engine.model_dir + " has none)");
  GenerationRequest request;
  request.prompt = prompt_tokens(flags, *stack);
  request.max_tokens = flags.n_tokens;
  request.stop = flags.stop;
  request.ignore_eos = flags.ignore_eos;
  request.sampling.temperature = flags.temperature;
  request.sampling.top_k = flags.top_k;
  request.sampling.top_p = flags.top_p;
  request.sampling.min_p = flags.min_p;
  request.sampling.seed = seed;
  engine_options.n_ctx = int64_t(request.prompt.size()) + request.max_tokens;
  if (engine_options.n_ctx > stack->facts().context_length)
    fail("the prompt (" + std::to_string(request.prompt.size()) + " tokens) plus -n " + std::to_string(flags.n_tokens) +
         " exceeds the model's context of " + std::to_string(stack->facts().context_length) + " tokens");
  auto engine = stack->make_engine(engine_options);

  std::vector<int32_t> ids;
  std::string text;
  std::promise<GenerationUpdate> final_update;
  SubmitResult submitted = engine->submit(request, [&](const GenerationUpdate& update) {
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
  } else if (!stack->tokenizer()) {  // no text to have printed: the ids are the reply
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
    std::cout << "\n";
  } else {
    std::cout << "\n";
  }
}

}  // namespace

void register_generate_command(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a reply to a prompt (greedy with --temp 0)");
  add_engine_flags(*cmd, flags->engine);
  cmd->add_option("--prompt", flags->prompt, "Prompt text (tokenized as is, no chat template)");
  cmd->add_option("--prompt-ids", flags->prompt_ids, "Prompt as comma-separated token ids");
  cmd->add_option("-n,--n-tokens", flags->n_tokens, "Most tokens to generate")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))->capture_default_str();
  cmd->add_option("--temp", flags->temperature, "Sampling temperature, 0 to 2 as on the server; 0 is greedy")
      ->check(CLI::Range(0.0f, 2.0f))->capture_default_str();
  cmd->add_option("--top-k", flags->top_k, "Keep the k most likely tokens; 0 is off")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--top-p", flags->top_p, "Nucleus sampling mass")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd->add_option("--min-p", flags->min_p, "Drop tokens below min-p times the best")
      ->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Seed of the sampler")->capture_default_str();
  cmd->add_option("--stop", flags->stop,
                  "Stop before this text (up to 4, repeat the flag); the text from it on is not printed");
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "Keep going past end-of-sequence tokens");
  cmd->add_flag("--json", flags->json, "Print {\"ids\": [...], \"text\": \"...\"}");
  cmd->callback([flags] { run_generate(*flags); });
}

}  // namespace tf::cli
