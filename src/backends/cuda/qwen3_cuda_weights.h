// Qwen3 weights in GPU memory, bf16, with the projections that read the same input fused into one
// matrix: q/k/v and gate/up. The linear kernel reduces every output column over K in an order that
// depends on K alone, so a fused matrix gives bitwise the columns the separate ones would.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/cuda/device_buffer.cuh"
#include "loader/model_config.h"
#include "models/qwen3_weights.h"

namespace tf::cuda {

struct Qwen3CudaLayerWeights {
  DeviceBuffer<uint16_t> input_norm;           // [hidden]
  DeviceBuffer<uint16_t> qkv_proj;             // [q_dim + 2 * kv_dim][hidden]: q rows, k rows, v rows
  DeviceBuffer<uint16_t> q_norm;               // [head_dim]
  DeviceBuffer<uint16_t> k_norm;               // [head_dim]
  DeviceBuffer<uint16_t> o_proj;               // [hidden][q_dim]
  DeviceBuffer<uint16_t> post_attention_norm;  // [hidden]
  DeviceBuffer<uint16_t> gate_up_proj;         // [2 * intermediate][hidden]: gate rows, up rows
  DeviceBuffer<uint16_t> down_proj;            // [hidden][intermediate]
};

struct Qwen3CudaWeights {
  DeviceBuffer<uint16_t> embed_tokens;  // [vocab][hidden]
  std::vector<Qwen3CudaLayerWeights> layers;
  DeviceBuffer<uint16_t> final_norm;    // [hidden]
  DeviceBuffer<uint16_t> untied_lm_head;  // [vocab][hidden]; empty when tied to the embedding

  const uint16_t* lm_head() const { return untied_lm_head.size() ? untied_lm_head.data() : embed_tokens.data(); }
};

// Copies bound checkpoint weights to the GPU: bf16 as is, f32/f16 rounded to bf16, MLX-quantized
// matrices dequantized (scale * q + bias in f32) and rounded to bf16.
Qwen3CudaWeights upload_qwen3_weights(const Qwen3Weights& weights, const ModelConfig& config);

// Weights of the config's shape made on the GPU: matrices uniform in +-0.02 from a hash of their
// index, norm gains 1.
Qwen3CudaWeights synthetic_qwen3_cuda_weights(const ModelConfig& config);

}  // namespace tf::cuda
