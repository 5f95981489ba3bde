// Binds Hugging Face Qwen3 tensor names to weight views, checking every shape and dtype.
#include "models/qwen3_weights.h"

#include "core/error.h"
#include "loader/file_helpers.h"

namespace tf {

namespace {

bool is_float_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

// Kernels read these bytes as typed arrays, so a misaligned tensor would be undefined behaviour.
void check_dtype_and_alignment(const Checkpoint& checkpoint, const TensorView& tensor, bool want_float) {
  if (want_float ? !is_float_dtype(tensor.dtype) : tensor.dtype != DType::u32)
    fail("tensor \"" + tensor.name + "\" in " + checkpoint.file_of(tensor.name) + " has dtype " +
         dtype_name(tensor.dtype) + ", expected " + (want_float ? "f32, f16 or bf16" : "u32"));
  if (reinterpret_cast<uintptr_t>(tensor.data) % dtype_size(tensor.dtype) != 0)
    fail("tensor \"" + tensor.name + "\" in " + checkpoint.file_of(tensor.name) +
         " is not aligned to its element size");
}

}  // namespace

int64_t layer_index_of(const std::string& name, const std::string& layer_prefix) {
  if (!name.starts_with(layer_prefix)) return -1;
  const size_t dot = name.find('.', layer_prefix.size());
  const std::string digits = name.substr(layer_prefix.size(), dot - layer_prefix.size());
  if (dot == std::string::npos || digits.empty() || digits.size() >= 10 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(digits);
}

std::string unused_tensor_reason(const std::string& name, const std::string& layer_prefix, int64_t n_layers,
                                 const std::string& config_path, const std::string& architecture) {
  if (const int64_t layer = layer_index_of(name, layer_prefix); layer >= n_layers)
    return "it belongs to layer " + std::to_string(layer) + " but \"num_hidden_layers\" in " + config_path + " is " +
           std::to_string(n_layers) + " (the checkpoint has more layers than the config uses)";
  return "a " + architecture + " of the shape in " + config_path + " (\"architectures\", \"num_hidden_layers\", "
         "\"tie_word_embeddings\", \"quantization\") has no tensor of that name";
}

WeightVector bind_vector(const Checkpoint& checkpoint, const std::string& name, int64_t n) {
  const TensorView& tensor = checkpoint.get(name, {n});
  check_dtype_and_alignment(checkpoint, tensor, /*want_float=*/true);
  return WeightVector{n, tensor.dtype, tensor.data};
}

// PREFIX.weight, dense [n_rows][n_cols] or MLX-quantized with PREFIX.scales and PREFIX.biases.
WeightMatrix bind_matrix(const Checkpoint& checkpoint, const std::string& prefix, int64_t n_rows,
                         int64_t n_cols, const QuantizationConfig& quantization) {
  const std::string weight_name = prefix + ".weight";
  const std::string scales_name = prefix + ".scales";
  const std::string biases_name = prefix + ".biases";
  WeightMatrix matrix;
  matrix.n_rows = n_rows;
  matrix.n_cols = n_cols;
  if (!checkpoint.has(scales_name)) {
    const TensorView& weight = checkpoint.get(weight_name, {n_rows, n_cols});
    check_dtype_and_alignment(checkpoint, weight, /*want_float=*/true);
    matrix.dtype = weight.dtype;
    matrix.data = weight.data;
    return matrix;
  }

  const std::string& file = checkpoint.file_of(scales_name);
  if (quantization.bits == 0)
    fail("tensor \"" + scales_name + "\" in " + file +
         " is quantized but config.json has no \"quantization\"");
  if (n_cols % quantization.group_size != 0)
    fail("tensor \"" + weight_name + "\" in " + file + " has " + std::to_string(n_cols) +
         " inputs, not a multiple of the quantization group size " +
         std::to_string(quantization.group_size));
  if (!checkpoint.has(biases_name))
    fail("tensor \"" + biases_name + "\" is missing beside \"" + scales_name + "\" in " + file);
  const int64_t n_groups = n_cols / quantization.group_size;
  const TensorView& weight = checkpoint.get(weight_name, {n_rows, n_cols * quantization.bits / 32});
  const TensorView& scales = checkpoint.get(scales_name, {n_rows, n_groups});
  const TensorView& biases = checkpoint.get(biases_name, {n_rows, n_groups});
  check_dtype_and_alignment(checkpoint, weight, /*want_float=*/false);
  check_dtype_and_alignment(checkpoint, scales, /*want_float=*/true);
  check_dtype_and_alignment(checkpoint, biases, /*want_float=*/true);
  if (scales.dtype != biases.dtype)
    fail("tensors \"" + scales_name + "\" (" + dtype_name(scales.dtype) + ") and \"" + biases_name +
         "\" (" + dtype_name(biases.dtype) + ") in " + file + " must have the same dtype");
  matrix.dtype = DType::u32;
  matrix.data = weight.data;
  matrix.bits = quantization.bits;
  matrix.group_size = quantization.group_size;
  matrix.scale_dtype = scales.dtype;
  matrix.scales = scales.data;
  matrix.biases = biases.data;
  return matrix;
}

Qwen3Weights bind_qwen3_weights(const Checkpoint& checkpoint, const ModelConfig& config) {
  const QuantizationConfig& quantization = config.quantization;
  const int64_t hidden = config.hidden_size;
  const int64_t intermediate = config.intermediate_size;
  Qwen3Weights weights;
  weights.embed_tokens =
      bind_matrix(checkpoint, "model.embed_tokens", config.vocab_size, hidden, quantization);
  weights.final_norm = bind_vector(checkpoint, "model.norm.weight", hidden);
  weights.lm_head = config.tie_word_embeddings
                        ? weights.embed_tokens
                        : bind_matrix(checkpoint, "lm_head", config.vocab_size, hidden, quantization);

  for (int64_t i = 0; i < config.n_layers; i++) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    const std::string attention = layer + "self_attn.";
    const std::string mlp = layer + "mlp.";
    Qwen3LayerWeights w;
    w.input_norm = bind_vector(checkpoint, layer + "input_layernorm.weight", hidden);
    w.q_proj = bind_matrix(checkpoint, attention + "q_proj", config.q_dim(), hidden, quantization);
    w.k_proj = bind_matrix(checkpoint, attention + "k_proj", config.kv_dim(), hidden, quantization);
    w.v_proj = bind_matrix(checkpoint, attention + "v_proj", config.kv_dim(), hidden, quantization);
    w.o_proj = bind_matrix(checkpoint, attention + "o_proj", hidden, config.q_dim(), quantization);
    w.q_norm = bind_vector(checkpoint, attention + "q_norm.weight", config.head_dim);
    w.k_norm = bind_vector(checkpoint, attention + "k_norm.weight", config.head_dim);
    w.post_attention_norm = bind_vector(checkpoint, layer + "post_attention_layernorm.weight", hidden);
    w.gate_proj = bind_matrix(checkpoint, mlp + "gate_proj", intermediate, hidden, quantization);
    w.up_proj = bind_matrix(checkpoint, mlp + "up_proj", intermediate, hidden, quantization);
    w.down_proj = bind_matrix(checkpoint, mlp + "down_proj", hidden, intermediate, quantization);
    weights.layers.push_back(w);
  }
  const std::string config_path = checkpoint.dir() + "/config.json";
  checkpoint.check_all_used([&](const std::string& name) {
    if (name == "lm_head.weight" && config.tie_word_embeddings)
      return "\"tie_word_embeddings\" in " + config_path + " is true, so the embedding is the LM head";
    if ((name.ends_with(".scales") || name.ends_with(".biases")) && config.quantization.bits != 0)
      return "it has no quantized \".weight\" beside it, yet \"quantization\" in " + config_path +
             " is set (a stray " + name.substr(name.rfind('.')) + " tensor)";
    return unused_tensor_reason(name, "model.layers.", config.n_layers, config_path, config.architecture);
  });
  return weights;
}

}  // namespace tf
