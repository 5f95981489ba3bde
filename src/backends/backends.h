// The one place that names every backend: a model directory (or a synthetic shape) becomes a Model
// on the device asked for. Everything above it sees only the Model interface.
#pragma once
#include <memory>
#include <string>

#include "loader/checkpoint.h"
#include "models/model.h"

namespace tf {

struct ModelLoadOptions {
  std::string device = "cpu";  // "cpu" or "cuda"
  int n_threads = 0;           // CPU worker threads; 0 = one per core
  // CUDA: replay captured graphs for small forwards, and overlap kernel launches (programmatic
  // dependent launch); off only to measure what each is worth.
  bool use_cuda_graphs = true;
  bool use_overlapped_launches = true;
  // CPU: bf16 weights meet bf16-rounded inputs in the AVX-512 BF16 dot product where the machine
  // has it (other bits than f32 inputs, twice the multiply rate). Off turns it off for the whole
  // process, for good: one process computes with one numerics.
  bool cpu_bf16_dot = true;
  // CUDA: upload the checkpoint's MTP head (mtp.*) with the model, for Model::load_mtp_head (on the
  // CPU the mapped checkpoint holds it anyway); off, its weights take no GPU memory.
  bool keep_mtp_head = false;
  LoadProgress progress;
};

// What fixes the bits of a forward on options.device in this process once a model loads with
// these options, e.g. "avx512, fused multiply-add" on the CPU: chosen once at start-up from the
// machine, the same for every batch. Two machines with different numerics may give different (each
// self-consistent) replies.
std::string device_numerics(const ModelLoadOptions& options);

// Fails unless `device` is "cpu", or "cuda" in a build with the CUDA backend.
void require_device_in_build(const std::string& device);

// Loads config.json and the weights of a model directory for the chosen backend; a device this
// build lacks is an error that says so.
std::shared_ptr<Model> load_model(const std::string& model_dir, const ModelLoadOptions& options);

// What load_model would refuse in model_dir's config and weights (binding every tensor, on no
// device), as the tf::Error load_model would throw: for tools that read a checkpoint another way.
void check_model_dir(const std::string& model_dir);

// Random weights of a known shape (models/synthetic.h) on a device, bf16 or (bits 4/8)
// MLX-quantized in groups of 64; on "cuda" they are generated on the GPU.
std::shared_ptr<Model> make_synthetic_model(const std::string& name, int bits, const ModelLoadOptions& options);

// The block drafter in drafter_dir beside a loaded target, on the target's backend.
std::shared_ptr<DFlashDrafter> load_drafter(const std::string& drafter_dir, const Model& target, int n_threads);

}  // namespace tf
