// Qwen3 weights in GPU memory, with the projections that read the same input fused into one
// matrix: q/k/v (one after another) and gate/up (rows interleaved, for the linear's SwiGLU output). The linear kernel reduces every output column over K in an order that
// depends on K alone, so a fused matrix gives bitwise the columns the separate ones would.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/linear_weights.h"
#include "loader/model_config.h"
#include "models/qwen3_weights.h"

namespace tf::cuda {

// One weight matrix on the GPU: bf16 rows, or MLX affine rows kept packed (the kernels dequantize
// them in registers; see weight_rows.cuh).
struct CudaMatrix {
  int64_t n_rows = 0, n_cols = 0;
  int bits = 0;        // 0: bf16; 4 or 8: MLX affine
  int group_size = 0;  // when quantized
  DeviceBuffer<uint16_t> bf16;    // [n_rows][n_cols]
  DeviceBuffer<uint32_t> packed;      // [n_rows][n_cols * bits / 32]
  DeviceBuffer<uint32_t> scale_bias;  // [n_rows][n_cols / group_size] (pack_scale_bias)

  LinearWeights view() const { return {bits, group_size, bf16.data(), packed.data(), scale_bias.data()}; }
  // What one pass over the matrix reads.
  int64_t n_bytes() const { return int64_t(bf16.n_bytes() + packed.n_bytes() + scale_bias.n_bytes()); }
};

struct Qwen3CudaLayerWeights {
  DeviceBuffer<uint16_t> input_norm;           // [hidden]
  CudaMatrix qkv_proj;                         // [q_dim + 2 * kv_dim][hidden]: q rows, k rows, v rows
  DeviceBuffer<uint16_t> q_norm;               // [head_dim]
  DeviceBuffer<uint16_t> k_norm;               // [head_dim]
  CudaMatrix o_proj;                           // [hidden][q_dim]
  DeviceBuffer<uint16_t> post_attention_norm;  // [hidden]
  CudaMatrix gate_up_proj;                     // [2 * intermediate][hidden]: gate row c, then up row c, for every c
  CudaMatrix down_proj;                        // [hidden][intermediate]
};

struct Qwen3CudaWeights {
  CudaMatrix embed_tokens;  // [vocab][hidden]
  std::vector<Qwen3CudaLayerWeights> layers;
  DeviceBuffer<uint16_t> final_norm;  // [hidden]
  CudaMatrix untied_lm_head;          // [vocab][hidden]; empty when tied to the embedding

  const CudaMatrix& lm_head() const { return untied_lm_head.n_rows ? untied_lm_head : embed_tokens; }
};

// Copies bound checkpoint weights to the GPU. bf16 goes as is and f32/f16 is rounded to bf16.
// MLX-quantized matrices stay packed when their scales are bf16 and the parts of a fused matrix
// share one format; otherwise they are dequantized as the CPU does (scale * q + bias in f32) and
// rounded to bf16, which agrees with the packed form's single rounding to within one bf16 step.
Qwen3CudaWeights upload_qwen3_weights(const Qwen3Weights& weights, const ModelConfig& config);

// Decoder layers of `shape` (hidden, intermediate and head sizes) on the GPU, as the model's are: a
// block drafter's layers.
std::vector<Qwen3CudaLayerWeights> upload_qwen3_layers(const std::vector<Qwen3LayerWeights>& layers,
                                                       const ModelConfig& shape);
// One matrix (bf16, or packed MLX) and one gain vector (bf16), as upload_qwen3_weights stores them.
CudaMatrix upload_matrix(const WeightMatrix& weights);
DeviceBuffer<uint16_t> upload_vector(const WeightVector& weights);
// A vector as f32 (f32 values as they are).
DeviceBuffer<float> upload_f32(const float* values, int64_t n);

class WeightUploader;
// Many uploads through one pinned staging buffer and thread pool (a whole model's).
class WeightUploads {
 public:
  WeightUploads();
  ~WeightUploads();
  // Matrices that read the same input as one: the parts' rows one after another, or interleaved (row
  // r of part i at row r * n_parts + i); packed when every part is MLX-quantized alike.
  CudaMatrix fused_matrix(std::initializer_list<const WeightMatrix*> parts, bool is_interleaved = false);
  DeviceBuffer<uint16_t> vector(const WeightVector& weights);

 private:
  std::unique_ptr<WeightUploader> uploader_;
};

// A matrix made on the GPU as synthetic_qwen3_cuda_weights makes its matrices (bits 0: bf16), with
// seeds from *seed onwards (advanced past the ones it used).
CudaMatrix random_cuda_matrix(int64_t n_rows, int64_t n_cols, int bits, int group_size, uint64_t* seed);

// Weights of the config's shape made on the GPU: bf16 matrices uniform in +-0.02 from a hash of
// their index, or (config.quantization.bits 4 or 8) random packed words with random scales and
// biases that spread the entries over about the same range; norm gains 1.
Qwen3CudaWeights synthetic_qwen3_cuda_weights(const ModelConfig& config);

}  // namespace tf::cuda
