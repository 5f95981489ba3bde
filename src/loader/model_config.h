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

// A decoder layer's token mixer in a Qwen3.5-class hybrid ("layer_types" in config.json).
enum class LayerKind : uint8_t { full_attention, linear_attention };

// The Gated DeltaNet and gated-attention fields of a Qwen3.5-class hybrid; absent for dense Qwen3.
struct HybridConfig {
  std::vector<LayerKind> layer_kinds;  // [n_layers]
  int64_t linear_n_key_heads = 0;      // "linear_num_key_heads"
  int64_t linear_n_value_heads = 0;    // "linear_num_value_heads"; a multiple of the key heads
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t conv_kernel = 0;             // "linear_conv_kernel_dim"
  int64_t rotary_dim = 0;              // head_dim * partial_rotary_factor, even

  int64_t linear_key_dim() const { return linear_n_key_heads * linear_key_head_dim; }
  int64_t linear_value_dim() const { return linear_n_value_heads * linear_value_head_dim; }
  // Channels of the depthwise convolution: q, k and v of the DeltaNet.
  int64_t conv_dim() const { return 2 * linear_key_dim() + linear_value_dim(); }
  int64_t n_layers_of(LayerKind kind) const {
    int64_t n = 0;
    for (LayerKind k : layer_kinds) n += k == kind;
    return n;
  }
};

// Validated once at load; a missing or wrong field is an error naming the field and the file.
struct ModelConfig {
  // "Qwen3ForCausalLM", or a hybrid: "Qwen3_5ForConditionalGeneration" (text model under
  // "text_config", weights under model.language_model.*) or "Qwen3_5ForCausalLM" (flat)
  std::string architecture;
  std::string model_type;  // "qwen3", "qwen3_5" or "qwen3_5_text"
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
  HybridConfig hybrid;  // layer_kinds empty: dense Qwen3

  // Reads DIR/config.json and the optional DIR/generation_config.json; throws tf::Error.
  static ModelConfig load(const std::string& model_dir);
  // Checks ranges and consistency (heads divide, sizes positive, ...); throws tf::Error naming `source`.
  void validate(const std::string& source) const;
  void validate_hybrid(const std::string& source) const;
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  bool is_hybrid() const { return !hybrid.layer_kinds.empty(); }
};

}  // namespace tf
