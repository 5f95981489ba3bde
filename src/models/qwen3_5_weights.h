// Qwen3.5-class hybrid weights (Gated DeltaNet and gated attention layers) bound from a checkpoint in
// any of its layouts, dense or MLX-quantized, with every shape checked.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"

namespace tf {

struct Qwen35LayerWeights {
  LayerKind kind = LayerKind::full_attention;
  WeightVector input_norm;           // [hidden], the gain the kernel multiplies by: (1 + w) in f32
  WeightVector post_attention_norm;  // [hidden], (1 + w)
  // Gated attention (full_attention layers).
  WeightMatrix q_proj;  // [n_heads * 2 * head_dim][hidden]: per head, head_dim query rows then head_dim gate rows
  WeightMatrix k_proj;  // [n_kv_heads * head_dim][hidden]
  WeightMatrix v_proj;  // [n_kv_heads * head_dim][hidden]
  WeightMatrix o_proj;  // [hidden][n_heads * head_dim]
  WeightVector q_norm;  // [head_dim], (1 + w)
  WeightVector k_norm;  // [head_dim], (1 + w)
  // Gated DeltaNet (linear_attention layers).
  WeightMatrix in_proj_qkv;  // [conv_dim][hidden]: q (key_dim), k (key_dim), v (value_dim)
  WeightMatrix in_proj_z;    // [value_dim][hidden], the output gate
  WeightMatrix in_proj_b;    // [n_value_heads][hidden], beta = sigmoid(b)
  WeightMatrix in_proj_a;    // [n_value_heads][hidden], the decay's input
  WeightMatrix out_proj;     // [hidden][value_dim]
  WeightVector gated_norm;   // [value_head_dim], a plain gain w (not 1 + w)
  const float* conv = nullptr;     // [conv_dim][conv_kernel], oldest position first
  const float* a_log = nullptr;    // [n_value_heads]
  const float* dt_bias = nullptr;  // [n_value_heads]
  // MLP.
  WeightMatrix gate_proj;  // [intermediate][hidden]
  WeightMatrix up_proj;    // [intermediate][hidden]
  WeightMatrix down_proj;  // [hidden][intermediate]
};

// The checkpoint's own multi-token-prediction head (mtp.*): from the target's final-normed hidden
// state at t and the embedding of token t+1 it predicts token t+2 through the shared LM head.
struct Qwen35MtpWeights {
  WeightMatrix fc;                     // [hidden][2 * hidden]: over [normed embedding, normed hidden]
  WeightVector pre_fc_norm_embedding;  // [hidden], (1 + w)
  WeightVector pre_fc_norm_hidden;     // [hidden], (1 + w)
  Qwen35LayerWeights layer;            // one gated full-attention layer of the target's shapes, with its MLP
  WeightVector norm;                   // [hidden], (1 + w), before the shared LM head
};

struct Qwen35Weights {
  WeightMatrix embed_tokens;  // [vocab][hidden]
  std::vector<Qwen35LayerWeights> layers;
  WeightVector final_norm;    // [hidden], (1 + w)
  WeightMatrix lm_head;       // [vocab][hidden]; the embedding when tied
  bool has_mtp = false;       // the checkpoint holds mtp.fc.weight
  Qwen35MtpWeights mtp;       // bound when has_mtp
  std::string mtp_missing = "this model has no MTP head";  // when !has_mtp: why (a checkpoint names its directory and the tensor)
  // f32 values made at bind time (shifted gains, the convolution, A_log, dt_bias); views point here.
  std::shared_ptr<std::vector<std::vector<float>>> owned = std::make_shared<std::vector<std::vector<float>>>();

  // An owned f32 buffer of n values; its address stays valid as more are added.
  float* own(int64_t n) { return owned->emplace_back(size_t(n)).data(); }
};

// Binds a hybrid's tensors. Names: "model.language_model.*" (Qwen3_5ForConditionalGeneration as
// transformers saves it; the vision tower is ignored), "language_model.model.*" (as mlx-lm saves it)
// or "model.*" (Qwen3_5ForCausalLM); the MTP head, when present, under "mtp.*" in every layout. A convolution stored [C][K][1] marks a checkpoint
// written by mlx-lm, whose zero-centred norms are already shifted to 1 + w; [C][1][K] is transformers'
// layout. Throws tf::Error naming the file and tensor on a missing tensor, a wrong shape or dtype.
Qwen35Weights bind_qwen3_5_weights(const Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace tf
