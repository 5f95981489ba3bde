// Models of real shapes with weights generated in-process, for benchmarks: speed does not depend
// on weight values, and nothing large has to be stored or downloaded.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"

namespace tf {

// The shape of a known model ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-32b",
// "qwen3.5-27b-dense").
// Throws tf::Error listing the known names for an unknown one.
ModelConfig synthetic_config(const std::string& name);
std::vector<std::string> synthetic_model_names();

// Random weights of the named shape on a device, bf16 or (bits 4/8) MLX-quantized in groups of 64;
// on "cuda" they are generated on the GPU.
std::shared_ptr<Model> make_synthetic_model(const std::string& name, int bits, const std::string& device,
                                            int n_threads);

}  // namespace tf
