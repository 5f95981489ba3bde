// Models of real shapes with weights generated in-process, for benchmarks: speed does not depend
// on weight values, and nothing large has to be stored or downloaded.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "loader/model_config.h"
#include "models/qwen3_5_weights.h"
#include "models/qwen3_weights.h"

namespace tf {

// The shape of a known model ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-32b",
// "qwen3.5-27b-dense"), or of a Qwen3.5-class hybrid ("qwen3.6-27b": 48 Gated DeltaNet and 16 gated
// attention layers).
// Throws tf::Error listing the known names for an unknown one.
ModelConfig synthetic_config(const std::string& name);
std::vector<std::string> synthetic_model_names();

// Random weights of a config's shape (bf16, or MLX-quantized in groups of 64 when its
// `quantization` says so) in host memory; `storage` owns what the views point into.
struct SyntheticWeights {
  Qwen3Weights weights;
  std::shared_ptr<const void> storage;
};
SyntheticWeights make_synthetic_weights(const ModelConfig& config);

// The same for a hybrid config (config.is_hybrid()).
struct SyntheticHybridWeights {
  Qwen35Weights weights;
  std::shared_ptr<const void> storage;
};
SyntheticHybridWeights make_synthetic_hybrid_weights(const ModelConfig& config);

}  // namespace tf
