// Backend choice: the only file that names both the CPU and the CUDA backend.
#include "backends/backends.h"

#include "backends/cpu/qwen3_5_cpu_model.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/qwen3_cpu_model.h"
#include "core/error.h"
#include "models/synthetic.h"
#if TF_HAVE_CUDA
#include "backends/cuda/qwen3_5_cuda_model.h"
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

std::string device_numerics(const ModelLoadOptions& options) {
  require_device_in_build(options.device);
  if (options.device == "cuda") return "bf16 activations and KV cache, f32 accumulation";
  return cpu::cpu_numerics_description(options.cpu_bf16_dot);
}

namespace {

// The CPU's numerics as the options ask, before any CPU model computes.
void select_cpu_numerics(const ModelLoadOptions& options) {
  if (options.device == "cpu" && !options.cpu_bf16_dot) cpu::turn_off_bf16_dot();
}

#if TF_HAVE_CUDA
cuda::CudaModelOptions cuda_options(const ModelLoadOptions& options) {
  return {options.use_cuda_graphs, options.use_overlapped_launches};
}
#endif

}  // namespace

void check_model_dir(const std::string& model_dir) {
  const ModelConfig config = ModelConfig::load(model_dir);
  const Checkpoint checkpoint = Checkpoint::open(model_dir);
  if (config.is_hybrid()) {
    bind_qwen3_5_weights(checkpoint, config);
  } else {
    bind_qwen3_weights(checkpoint, config);
  }
}

std::shared_ptr<Model> load_model(const std::string& model_dir, const ModelLoadOptions& options) {
  ModelConfig config = ModelConfig::load(model_dir);
  require_device_in_build(options.device);
  select_cpu_numerics(options);
  auto checkpoint = std::make_shared<Checkpoint>(Checkpoint::open(model_dir, options.progress));
  if (config.is_hybrid()) {
    Qwen35Weights weights = bind_qwen3_5_weights(*checkpoint, config);
#if TF_HAVE_CUDA
    if (options.device == "cuda")
      return cuda::make_qwen3_5_cuda_model(config, weights, cuda_options(options), options.keep_mtp_head);
#endif
    return std::make_shared<Qwen35CpuModel>(config, std::move(weights), checkpoint, options.n_threads);
  }
  Qwen3Weights weights = bind_qwen3_weights(*checkpoint, config);
#if TF_HAVE_CUDA
  // The GPU keeps its own copy of the weights; the mapped checkpoint is released once uploaded.
  if (options.device == "cuda") return cuda::make_qwen3_cuda_model(config, weights, cuda_options(options));
#endif
  return std::make_shared<Qwen3CpuModel>(config, weights, checkpoint, options.n_threads);
}

std::shared_ptr<Model> make_synthetic_model(const std::string& name, int bits, const ModelLoadOptions& options) {
  if (bits != 0 && bits != 4 && bits != 8) fail("synthetic weights take --bits 0, 4 or 8");
  ModelConfig config = synthetic_config(name);
  require_device_in_build(options.device);
  select_cpu_numerics(options);
  if (bits) config.quantization = QuantizationConfig{64, bits};
#if TF_HAVE_CUDA
  if (config.is_hybrid() && options.device == "cuda")
    return cuda::make_synthetic_qwen3_5_cuda_model(config, cuda_options(options));
#endif
  if (config.is_hybrid()) {
    SyntheticHybridWeights synthetic = make_synthetic_hybrid_weights(config);
    return std::make_shared<Qwen35CpuModel>(config, std::move(synthetic.weights), synthetic.storage,
                                            options.n_threads);
  }
#if TF_HAVE_CUDA
  if (options.device == "cuda") return cuda::make_synthetic_qwen3_cuda_model(config, cuda_options(options));
#endif
  SyntheticWeights synthetic = make_synthetic_weights(config);
  return std::make_shared<Qwen3CpuModel>(config, synthetic.weights, synthetic.storage, options.n_threads);
}

std::shared_ptr<DFlashDrafter> load_drafter(const std::string& drafter_dir, const Model& target, int n_threads) {
  return target.load_drafter(drafter_dir, n_threads);
}

}  // namespace tf
