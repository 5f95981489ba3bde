#include "models/model.h"

#include "core/error.h"
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
