// `tensorfold quantize`: writes the MLX affine-quantized layout from a bf16/f16/f32 checkpoint.
#pragma once
#include <string>

#include "loader/checkpoint.h"

namespace tf {

struct QuantizeOptions {
  int bits = 4;          // 4 or 8
  int group_size = 64;   // 32, 64 or 128
};

// Quantizes every linear layer and the embedding (as mlx-lm does), copies norms unchanged,
// writes config.json with "quantization", and copies tokenizer and generation files.
void quantize_model_dir(const std::string& in_dir, const std::string& out_dir,
                        const QuantizeOptions& options, const LoadProgress& progress = {});

}  // namespace tf
