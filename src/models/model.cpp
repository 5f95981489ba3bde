#include "models/model.h"

#include "core/error.h"
#include "models/qwen3.h"

namespace tf {

std::shared_ptr<Model> load_model(const std::string& model_dir, const ModelLoadOptions& options) {
  ModelConfig config = ModelConfig::load(model_dir);
  if (options.device != "cpu")
    fail("device '" + options.device + "' is not available in this build (use --device cpu)");
  auto checkpoint = std::make_shared<Checkpoint>(Checkpoint::open(model_dir, options.progress));
  Qwen3Weights weights = bind_qwen3_weights(*checkpoint, config);
  return std::make_shared<Qwen3CpuModel>(config, weights, checkpoint, options.n_threads);
}

}  // namespace tf
