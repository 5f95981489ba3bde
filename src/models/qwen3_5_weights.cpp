// Binds Qwen3.5-class hybrid tensor names to weight views, checking every shape and dtype.
#include "models/qwen3_5_weights.h"

#include "core/error.h"
#include "models/qwen3_weights.h"

namespace tf {

namespace {

// Where the text model's tensors live; the first whose embedding is present wins.
struct TensorPrefixes {
  std::string text;     // "model.language_model." / "language_model.model." / "model."
  std::string lm_head;  // "lm_head" / "language_model.lm_head"
};

TensorPrefixes find_prefixes(const Checkpoint& checkpoint) {
  const TensorPrefixes candidates[] = {{"model.language_model.", "lm_head"},
                                       {"language_model.model.", "language_model.lm_head"},
                                       {"model.", "lm_head"}};
  for (const auto& candidate : candidates)
    if (checkpoint.has(candidate.text + "embed_tokens.weight")) return candidate;
  fail("no text-model embedding in " + checkpoint.dir() +
       " (looked for model.language_model.embed_tokens.weight, language_model.model.embed_tokens.weight and "
       "model.embed_tokens.weight)");
}

std::vector<float> as_f32(const WeightVector& v) {
  std::vector<float> out(size_t(v.n));
  for (int64_t i = 0; i < v.n; ++i) out[size_t(i)] = load_as_f32(v.data, v.dtype, i);
  return out;
}

struct Binder {
  const Checkpoint& checkpoint;
  const QuantizationConfig& quantization;
  Qwen35Weights& weights;
  bool norms_are_shifted;  // mlx-lm stores 1 + w already

  WeightVector f32_vector(std::vector<float> values) {
    float* data = weights.own(int64_t(values.size()));
    std::copy(values.begin(), values.end(), data);
    return WeightVector{int64_t(values.size()), DType::f32, data};
  }
  // A zero-centred RMSNorm gain as the kernel multiplies by it: 1 + w, formed in f32 as transformers does.
  WeightVector centred_norm(const std::string& name, int64_t n) {
    std::vector<float> values = as_f32(bind_vector(checkpoint, name, n));
    if (!norms_are_shifted)
      for (float& value : values) value = 1.0f + value;
    return f32_vector(std::move(values));
  }
  WeightMatrix matrix(const std::string& prefix, int64_t n_rows, int64_t n_cols) {
    return bind_matrix(checkpoint, prefix, n_rows, n_cols, quantization);
  }
};

// The depthwise convolution [C][1][K] (transformers) or [C][K][1] (mlx-lm): the same bytes either way.
bool conv_is_mlx_layout(const Checkpoint& checkpoint, const std::string& name, int64_t channels, int64_t kernel) {
  const TensorView& tensor = checkpoint.get(name);
  const std::vector<int64_t> hf = {channels, 1, kernel}, mlx = {channels, kernel, 1};
  if (tensor.shape != hf && tensor.shape != mlx) checkpoint.get(name, hf);  // the shape error, naming both
  return tensor.shape == mlx && kernel != 1;
}

// A gated attention layer's tensors under `layer` ("...layers.N."): q_proj gives query and gate.
void bind_attention(Binder& bind, const ModelConfig& config, const std::string& layer, Qwen35LayerWeights& w) {
  const int64_t hidden = config.hidden_size;
  const std::string attention = layer + "self_attn.";
  w.q_proj = bind.matrix(attention + "q_proj", 2 * config.q_dim(), hidden);
  w.k_proj = bind.matrix(attention + "k_proj", config.kv_dim(), hidden);
  w.v_proj = bind.matrix(attention + "v_proj", config.kv_dim(), hidden);
  w.o_proj = bind.matrix(attention + "o_proj", hidden, config.q_dim());
  w.q_norm = bind.centred_norm(attention + "q_norm.weight", config.head_dim);
  w.k_norm = bind.centred_norm(attention + "k_norm.weight", config.head_dim);
}

void bind_mlp(Binder& bind, const ModelConfig& config, const std::string& layer, Qwen35LayerWeights& w) {
  const int64_t hidden = config.hidden_size, intermediate = config.intermediate_size;
  const std::string mlp = layer + "mlp.";
  w.gate_proj = bind.matrix(mlp + "gate_proj", intermediate, hidden);
  w.up_proj = bind.matrix(mlp + "up_proj", intermediate, hidden);
  w.down_proj = bind.matrix(mlp + "down_proj", hidden, intermediate);
}

// The MTP head when the checkpoint has one (mtp.fc.weight marks it): then every tensor of it must be
// there with its shape, and a missing or malformed one is an error naming it. One MTP layer is what
// Qwen3.5-class checkpoints ship (mtp_num_hidden_layers 1); a second is refused rather than ignored.
void bind_mtp(const Checkpoint& checkpoint, const ModelConfig& config, Binder& bind, Qwen35Weights& weights) {
  const int64_t hidden = config.hidden_size;
  if (!checkpoint.has("mtp.fc.weight") && !checkpoint.has("mtp.fc.scales")) {
    weights.mtp_missing = checkpoint.dir() + " has no MTP head (tensor mtp.fc.weight is missing)";
    return;
  }
  if (checkpoint.has("mtp.layers.1.input_layernorm.weight"))
    fail("tensor \"mtp.layers.1.input_layernorm.weight\" in " + checkpoint.file_of("mtp.layers.1.input_layernorm.weight") +
         ": an MTP head of more than one layer is not supported");
  Qwen35MtpWeights& mtp = weights.mtp;
  mtp.fc = bind.matrix("mtp.fc", hidden, 2 * hidden);
  mtp.pre_fc_norm_embedding = bind.centred_norm("mtp.pre_fc_norm_embedding.weight", hidden);
  mtp.pre_fc_norm_hidden = bind.centred_norm("mtp.pre_fc_norm_hidden.weight", hidden);
  mtp.norm = bind.centred_norm("mtp.norm.weight", hidden);
  const std::string layer = "mtp.layers.0.";
  mtp.layer.kind = LayerKind::full_attention;
  mtp.layer.input_norm = bind.centred_norm(layer + "input_layernorm.weight", hidden);
  mtp.layer.post_attention_norm = bind.centred_norm(layer + "post_attention_layernorm.weight", hidden);
  bind_attention(bind, config, layer, mtp.layer);
  bind_mlp(bind, config, layer, mtp.layer);
  weights.has_mtp = true;
}

}  // namespace

Qwen35Weights bind_qwen3_5_weights(const Checkpoint& checkpoint, const ModelConfig& config) {
  if (!config.is_hybrid()) fail_internal("bind_qwen3_5_weights called for a model without layer_types");
  const HybridConfig& h = config.hybrid;
  const int64_t hidden = config.hidden_size;
  const TensorPrefixes prefixes = find_prefixes(checkpoint);

  // The convolution's layout tells whose conventions the file follows; every layer must agree.
  bool is_mlx_layout = false;
  std::string first_conv;
  const auto layout_name = [](bool is_mlx) { return is_mlx ? "mlx-lm's [C][K][1]" : "transformers' [C][1][K]"; };
  for (int64_t i = 0; i < config.n_layers; ++i) {
    if (h.layer_kinds[size_t(i)] != LayerKind::linear_attention) continue;
    const std::string name = prefixes.text + "layers." + std::to_string(i) + ".linear_attn.conv1d.weight";
    const bool is_mlx = conv_is_mlx_layout(checkpoint, name, h.conv_dim(), h.conv_kernel);
    if (!first_conv.empty() && is_mlx != is_mlx_layout)
      fail("the convolutions in " + checkpoint.dir() + " disagree on their layout: \"" + first_conv + "\" has " +
           layout_name(is_mlx_layout) + ", \"" + name + "\" (in " + checkpoint.file_of(name) + ") has " +
           layout_name(is_mlx));
    if (first_conv.empty()) first_conv = name;
    is_mlx_layout = is_mlx;
  }

  Qwen35Weights weights;
  Binder bind{checkpoint, config.quantization, weights, is_mlx_layout};
  weights.embed_tokens = bind.matrix(prefixes.text + "embed_tokens", config.vocab_size, hidden);
  weights.final_norm = bind.centred_norm(prefixes.text + "norm.weight", hidden);
  weights.lm_head = config.tie_word_embeddings ? weights.embed_tokens
                                               : bind.matrix(prefixes.lm_head, config.vocab_size, hidden);
  for (int64_t i = 0; i < config.n_layers; ++i) {
    const std::string layer = prefixes.text + "layers." + std::to_string(i) + ".";
    Qwen35LayerWeights w;
    w.kind = h.layer_kinds[size_t(i)];
    w.input_norm = bind.centred_norm(layer + "input_layernorm.weight", hidden);
    w.post_attention_norm = bind.centred_norm(layer + "post_attention_layernorm.weight", hidden);
    if (w.kind == LayerKind::full_attention) {
      bind_attention(bind, config, layer, w);
    } else {
      const std::string linear = layer + "linear_attn.";
      w.in_proj_qkv = bind.matrix(linear + "in_proj_qkv", h.conv_dim(), hidden);
      w.in_proj_z = bind.matrix(linear + "in_proj_z", h.linear_value_dim(), hidden);
      w.in_proj_b = bind.matrix(linear + "in_proj_b", h.linear_n_value_heads, hidden);
      w.in_proj_a = bind.matrix(linear + "in_proj_a", h.linear_n_value_heads, hidden);
      w.out_proj = bind.matrix(linear + "out_proj", hidden, h.linear_value_dim());
      w.gated_norm = bind.f32_vector(as_f32(bind_vector(checkpoint, linear + "norm.weight", h.linear_value_head_dim)));
      const std::string conv_name = linear + "conv1d.weight";
      const TensorView& conv = checkpoint.get(conv_name);
      if (conv.dtype != DType::f32 && conv.dtype != DType::f16 && conv.dtype != DType::bf16)
        fail("tensor \"" + conv_name + "\" in " + checkpoint.file_of(conv_name) + " has dtype " +
             dtype_name(conv.dtype) + ", expected f32, f16 or bf16 (the convolution is never quantized)");
      float* conv_values = weights.own(h.conv_dim() * h.conv_kernel);
      for (int64_t j = 0; j < h.conv_dim() * h.conv_kernel; ++j) conv_values[j] = load_as_f32(conv.data, conv.dtype, j);
      w.conv = conv_values;
      w.a_log = static_cast<const float*>(
          bind.f32_vector(as_f32(bind_vector(checkpoint, linear + "A_log", h.linear_n_value_heads))).data);
      w.dt_bias = static_cast<const float*>(
          bind.f32_vector(as_f32(bind_vector(checkpoint, linear + "dt_bias", h.linear_n_value_heads))).data);
    }
    bind_mlp(bind, config, layer, w);
    weights.layers.push_back(w);
  }
  bind_mtp(checkpoint, config, bind, weights);
  // Every tensor is used but the vision tower's: a stray one means the config and the checkpoint
  // disagree (say, on num_hidden_layers or layer_types), and loading on would compute another model.
  const std::string config_path = checkpoint.dir() + "/config.json";
  const std::string layers = prefixes.text + "layers.";
  checkpoint.check_all_used([&](const std::string& name) -> std::string {
    for (const char* vision : {"model.visual.", "visual.", "vision_tower.", "model.vision_tower."})
      if (name.starts_with(vision)) return "";
    if (name == prefixes.lm_head + ".weight" && config.tie_word_embeddings)
      return "\"tie_word_embeddings\" in " + config_path + " is true, so the embedding is the LM head";
    if (const int64_t layer = layer_index_of(name, layers); layer >= 0 && layer < config.n_layers) {
      const std::string rest = name.substr(name.find('.', layers.size()) + 1);
      if (rest.starts_with("self_attn.") || rest.starts_with("linear_attn."))
        return "layer " + std::to_string(layer) + " is " +
               (h.layer_kinds[size_t(layer)] == LayerKind::full_attention ? "\"full_attention\"" : "\"linear_attention\"") +
               " in \"layer_types\" of " + config_path + ", which has no tensor of that name";
    }
    return unused_tensor_reason(name, layers, config.n_layers, config_path, config.architecture);
  });
  return weights;
}

}  // namespace tf
