// config.json (+ generation_config.json, tokenizer_config.json) of a Hugging Face model directory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tf {

// MLX affine quantization ("quantization": {"group_size", "bits"} in config.json); bits 0 = none.
struct QuantizationConfig {
  int group_size = 0;
  int bits = 0;
};

// Validated once at load; a missing or wrong field is an error naming the field and the file.
struct ModelConfig {
  std::string architecture;  // "Qwen3ForCausalLM"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rope_theta = 0;  // top-level "rope_theta" or "rope_parameters": {"rope_theta"}
  float rms_norm_eps = 0;
  bool tie_word_embeddings = false;
  std::vector<int32_t> eos_token_ids;  // union of config, generation_config and tokenizer_config
  QuantizationConfig quantization;

  // Reads DIR/config.json and the optional DIR/generation_config.json; throws tf::Error.
  static ModelConfig load(const std::string& model_dir);
  // Checks ranges and consistency (heads divide, sizes positive, ...); throws tf::Error naming `source`.
  void validate(const std::string& source) const;
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

}  // namespace tf
