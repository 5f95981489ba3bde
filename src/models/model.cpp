#include "models/model.h"

#include <algorithm>

#include "core/error.h"
#include "models/dflash_drafter.h"
#include "models/qwen3.h"
#if TF_HAVE_CUDA
#include "backends/cuda/qwen3_cuda_model.h"
#endif

namespace tf {

void require_device_in_build(const std::string& device) {
  if (device != "cpu" && device != "cuda") fail("unknown device '" + device + "' (use cpu or cuda)");
#if !TF_HAVE_CUDA
  if (device == "cuda")
    fail("device 'cuda' is not available: this build has no CUDA backend (configure with -DTF_CUDA=ON, or use "
         "--device cpu)");
#endif
}

namespace {

// The token a pick with sampling set chooses from its row's logits, on the host.
int32_t pick_on_host(const float* row_logits, int64_t n_vocab, const LogitRowPick& pick) {
  thread_local Sampler sampler;
  static const TokenCounts no_history;
  return sampler.sample(row_logits, n_vocab, *pick.sampling, pick.position, no_history);
}

}  // namespace

void Model::forward_and_pick(const Batch& batch, KvCache& kv, const std::vector<LogitRowPick>& picks, int32_t* tokens,
                             float* logits) {
  const int64_t n_vocab = config().vocab_size;
  if (int64_t(picks.size()) != batch.n_logit_rows()) fail("forward_and_pick: one pick per logit row");
  all_logits_.resize(picks.size() * size_t(n_vocab));
  forward(batch, kv, all_logits_.data());
  int64_t n_unpicked = 0;
  for (size_t i = 0; i < picks.size(); ++i) {
    const float* row = all_logits_.data() + int64_t(i) * n_vocab;
    if (picks[i].sampling != nullptr) {
      tokens[i] = pick_on_host(row, n_vocab, picks[i]);
    } else {
      tokens[i] = -1;
      std::copy_n(row, n_vocab, logits + n_unpicked++ * n_vocab);
    }
  }
}

std::shared_ptr<DFlashDrafter> Model::load_drafter(const std::string& drafter_dir, int n_threads) const {
  return load_cpu_drafter(drafter_dir, *this, n_threads);
}

std::shared_ptr<Model> load_model(const std::string& model_dir, const ModelLoadOptions& options) {
  require_device_in_build(options.device);
  ModelConfig config = ModelConfig::load(model_dir);
  auto checkpoint = std::make_shared<Checkpoint>(Checkpoint::open(model_dir, options.progress));
  Qwen3Weights weights = bind_qwen3_weights(*checkpoint, config);
#if TF_HAVE_CUDA
  // The GPU keeps its own copy of the weights; the mapped checkpoint stays for a CPU-side drafter.
  if (options.device == "cuda") return cuda::make_qwen3_cuda_model(config, weights, checkpoint);
#endif
  return std::make_shared<Qwen3CpuModel>(config, weights, checkpoint, options.n_threads);
}

}  // namespace tf
