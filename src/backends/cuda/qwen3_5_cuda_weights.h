// Qwen3.5-class hybrid weights in GPU memory, with the projections that read the same input fused
// into one matrix: the gated attention's q (query and gate per head) | k | v, the DeltaNet's
// q|k|v | b | a | z (its f32 projection row is the record replay keeps, then z), and gate/up.
#pragma once
#include <vector>

#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/qwen3_cuda_weights.h"
#include "loader/model_config.h"
#include "models/qwen3_5_weights.h"

namespace tf::cuda {

struct Qwen35CudaLayerWeights {
  LayerKind kind = LayerKind::full_attention;
  DeviceBuffer<uint16_t> input_norm;           // [hidden], (1 + w) rounded to bf16
  DeviceBuffer<uint16_t> post_attention_norm;  // [hidden]
  // Gated attention.
  CudaMatrix qkv_proj;           // [2 * q_dim + 2 * kv_dim][hidden]
  DeviceBuffer<uint16_t> q_norm;  // [head_dim]
  DeviceBuffer<uint16_t> k_norm;  // [head_dim]
  CudaMatrix o_proj;             // [hidden][q_dim]
  // Gated DeltaNet.
  CudaMatrix in_proj;              // [projection_floats][hidden]
  CudaMatrix out_proj;             // [hidden][value_dim]
  DeviceBuffer<float> conv;        // [conv_dim][conv_kernel]
  DeviceBuffer<float> a_log;       // [value heads]
  DeviceBuffer<float> dt_bias;     // [value heads]
  DeviceBuffer<float> gated_norm;  // [value_head_dim]
  // MLP.
  CudaMatrix gate_up_proj;  // [2 * intermediate][hidden], interleaved
  CudaMatrix down_proj;     // [hidden][intermediate]
};

struct Qwen35CudaWeights {
  // The embedding, final norm and LM head, laid out as a dense model's (its layers stay empty), so
  // what reads those (the block drafter) works alike beside either.
  Qwen3CudaWeights head;
  std::vector<Qwen35CudaLayerWeights> layers;
};

// A checkpoint's MTP head on the GPU (models/mtp_head.h): fc over [normed embedding, normed hidden],
// its norms, and one gated full-attention layer with its MLP, stored as the target's layers are.
struct Qwen35CudaMtpWeights {
  CudaMatrix fc;                                 // [hidden][2 * hidden]
  DeviceBuffer<uint16_t> pre_fc_norm_embedding;  // [hidden]
  DeviceBuffer<uint16_t> pre_fc_norm_hidden;     // [hidden]
  DeviceBuffer<uint16_t> norm;                   // [hidden]
  Qwen35CudaLayerWeights layer;
};

// Copies bound hybrid weights to the GPU (upload_qwen3_weights says how each matrix is stored).
// Fails, naming the sizes, when they do not fit in free GPU memory.
Qwen35CudaWeights upload_qwen3_5_weights(const Qwen35Weights& weights, const ModelConfig& config);

// Copies a bound MTP head to the GPU (weights.has_mtp), as upload_qwen3_5_weights stores the layers.
Qwen35CudaMtpWeights upload_qwen3_5_mtp_weights(const Qwen35Weights& weights, const ModelConfig& config);

// Weights of the config's hybrid shape made on the GPU, as synthetic_qwen3_cuda_weights makes a
// dense model's; the convolution, A_log and dt_bias get small spread values, gains are 1.
Qwen35CudaWeights synthetic_qwen3_5_cuda_weights(const ModelConfig& config);

}  // namespace tf::cuda
