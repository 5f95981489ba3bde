// `tensorfold eval`: logits of a prompt in one forward, for parity checks against transformers.
#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/serving_stack.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/kv_cache.h"
#include "sampling/sampler.h"

namespace tf::cli {
namespace {

struct EvalFlags {
  std::string model_dir = default_model_dir();
  std::string prompt_ids;
  bool json = false;
  bool all_logits = false;
  int n_threads = 0;
  std::string device = "cpu";
  std::string bf16_dot = "on";
};

void run_eval(const EvalFlags& flags) {
  if (flags.all_logits && !flags.json) fail("--all-logits prints its logits in the --json output; add --json");
  std::vector<int32_t> ids = parse_id_list(flags.prompt_ids, "--prompt-ids");
  ModelLoadOptions load;
  load.device = flags.device;
  load.n_threads = flags.n_threads;
  load.cpu_bf16_dot = parse_switch(flags.bf16_dot, "--bf16-dot (TF_BF16_DOT)");
  auto model = load_model_for_cli(flags.model_dir, load);
  const ModelConfig& config = model->config();
  if (int64_t(ids.size()) > config.max_position_embeddings)
    fail("the prompt has " + std::to_string(ids.size()) + " tokens; the model's limit is " +
         std::to_string(config.max_position_embeddings));
  for (int32_t id : ids)
    if (id >= config.vocab_size) fail("token id " + std::to_string(id) + " is outside the vocabulary");
  KvCache kv = make_kv_cache(*model, kv_blocks_for(int64_t(ids.size())));
  int32_t lane = kv.lane_open();
  kv.lane_reserve(lane, int64_t(ids.size()));
  Batch batch;
  for (size_t i = 0; i < ids.size(); ++i)
    batch.rows.push_back({ids[i], int32_t(i), lane, int32_t(i) - 1, kv.slot(lane, int64_t(i)), true});
  std::vector<float> logits(ids.size() * size_t(config.vocab_size));
  model->forward(batch, kv, logits.data());

  const int64_t n_vocab = config.vocab_size;
  // Finite weights can still overflow in the forward: NaN logits would print as an argmax of 0.
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i]))
      fail("the logits of position " + std::to_string(i / size_t(n_vocab)) + " are not finite (token " +
           std::to_string(i % size_t(n_vocab)) + "): " + flags.model_dir +
           "'s weights overflow in the forward pass");
  std::vector<int32_t> argmaxes;
  for (size_t i = 0; i < ids.size(); ++i) argmaxes.push_back(argmax(logits.data() + i * n_vocab, n_vocab));
  const float* last = logits.data() + (ids.size() - 1) * n_vocab;
  nlohmann::json out = {{"last_logits", std::vector<float>(last, last + n_vocab)}, {"argmax", argmaxes}};
  if (flags.all_logits) out["logits"] = logits;
  if (!flags.json) {
    std::cout << "argmax per position:";
    for (int32_t a : argmaxes) std::cout << " " << a;
    std::cout << "\n";
    return;
  }
  std::cout << out.dump() << "\n";
}

}  // namespace

void register_eval_command(CLI::App& app) {
  auto flags = std::make_shared<EvalFlags>();
  CLI::App* cmd = app.add_subcommand("eval", "Print the logits of a prompt (one forward pass)");
  cmd->add_option("--model", flags->model_dir, "Model directory")->envname("TF_MODEL")->capture_default_str();
  cmd->add_option("--prompt-ids", flags->prompt_ids, "Prompt as comma-separated token ids")->required();
  cmd->add_flag("--json", flags->json, "Print {\"last_logits\": [...], \"argmax\": [...]}");
  cmd->add_flag("--all-logits", flags->all_logits, "Also print the logits of every position");
  add_threads_option(*cmd, flags->n_threads);
  add_device_option(*cmd, flags->device);
  add_bf16_dot_option(*cmd, flags->bf16_dot);
  cmd->callback([flags] { run_eval(*flags); });
}

}  // namespace tf::cli
