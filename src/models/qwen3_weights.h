// Qwen3 weights bound from a checkpoint (dense or MLX-quantized), with every shape checked.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"

namespace tf {

struct Qwen3LayerWeights {
  WeightVector input_norm;          // [hidden]
  WeightMatrix q_proj;              // [n_heads * head_dim][hidden]
  WeightMatrix k_proj;              // [n_kv_heads * head_dim][hidden]
  WeightMatrix v_proj;              // [n_kv_heads * head_dim][hidden]
  WeightMatrix o_proj;              // [hidden][n_heads * head_dim]
  WeightVector q_norm;              // [head_dim]
  WeightVector k_norm;              // [head_dim]
  WeightVector post_attention_norm; // [hidden]
  WeightMatrix gate_proj;           // [intermediate][hidden]
  WeightMatrix up_proj;             // [intermediate][hidden]
  WeightMatrix down_proj;           // [hidden][intermediate]
};

struct Qwen3Weights {
  WeightMatrix embed_tokens;  // [vocab][hidden], rows gathered (dense or quantized)
  std::vector<Qwen3LayerWeights> layers;
  WeightVector final_norm;    // [hidden]
  WeightMatrix lm_head;       // [vocab][hidden]; the embedding itself when tied
};

// Binds tensor names "model.layers.{i}.self_attn.q_proj.weight" etc. A quantized linear layer has
// ".weight" (u32), ".scales" and ".biases". Throws tf::Error naming the file and tensor on a
// missing tensor, a wrong shape or dtype, and on a tensor the config does not use.
Qwen3Weights bind_qwen3_weights(const Checkpoint& checkpoint, const ModelConfig& config);

// Why a tensor a binding left unused is an error, in terms of the config field that disagrees:
// a layer at or past num_hidden_layers (layers are named LAYER_PREFIX{i}.), or else a tensor the
// architecture has no use for. `config_path` is the config.json the message names.
std::string unused_tensor_reason(const std::string& name, const std::string& layer_prefix, int64_t n_layers,
                                 const std::string& config_path, const std::string& architecture);
// The layer a tensor named LAYER_PREFIX{i}.REST belongs to, or -1.
int64_t layer_index_of(const std::string& name, const std::string& layer_prefix);

// One norm gain NAME of n floats (f32, f16 or bf16), checked for shape, dtype and alignment.
WeightVector bind_vector(const Checkpoint& checkpoint, const std::string& name, int64_t n);
// PREFIX.weight as a [n_rows][n_cols] matrix: dense, or MLX-quantized with PREFIX.scales and
// PREFIX.biases when `quantization` says so (a .scales tensor without it is an error).
WeightMatrix bind_matrix(const Checkpoint& checkpoint, const std::string& prefix, int64_t n_rows,
                         int64_t n_cols, const QuantizationConfig& quantization);

}  // namespace tf
