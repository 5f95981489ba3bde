

#include "models/synthetic.h"

#include <cstring>

#include "core/error.h"

namespace tf {
namespace {

struct SyntheticShape {
  const char* name;
  int64_t hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim;
  bool tied;
  int64_t vocab = 151936;
};

constexpr SyntheticShape kShapes[] = {
    {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 128, true},
    {"qwen3-1.7b", 2048, 6144, 28, 16, 8, 128, true},
    {"qwen3-4b", 2560, 9728, 36, 32, 8, 128, true},
    {"qwen3-8b", 4096, 12288, 36, 32, 8, 128, false},
    {"qwen3-32b", 5120, 25600, 64, 64, 8, 128, false},
    // Qwen3.5-27B's widths (64 layers of 5120, MLP 17408, 24 query and 4 KV heads of 256, 248k
    // vocabulary) as a dense Qwen3: every layer full attention, since the engine has no Gated
    // DeltaNet layers yet. A 27B-class read per token for the bandwidth figures.
    {"qwen3.5-27b-dense", 5120, 17408, 64, 24, 4, 256, false, 248320},
};

// Qwen3.6-27B: 64 layers of 5120 (three Gated DeltaNet layers to one gated attention layer), MLP
// 17408, attention 24 query / 4 KV heads of 256, DeltaNet 16 key heads and 48 value heads of 128.
struct SyntheticHybridShape {
  SyntheticShape base;
  int64_t linear_key_heads, linear_value_heads, linear_head_dim;
};

constexpr SyntheticHybridShape kHybridShapes[] = {
    {{"qwen3.6-27b", 5120, 17408, 64, 24, 4, 256, false, 248320}, 16, 48, 128},
};

// xorshift: cheap, and the values only need to look like weights.
struct FastRandom {
  uint64_t state;
  uint32_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return uint32_t(state >> 32);
  }
};

// Owns every synthetic buffer; the weight views point into it.
struct SyntheticStorage {
  std::vector<std::vector<uint32_t>> buffers;
  FastRandom random{0x9e3779b97f4a7c15ull};

  // n elements of u16/u32 storage, filled with small random bf16 values (two per word).
  void* random_words(size_t n_words) {
    auto& b = buffers.emplace_back(n_words);
    for (auto& word : b) {
      uint32_t lo = f32_to_bf16((float(int32_t(random.next() % 2001) - 1000)) * 2e-5f);
      uint32_t hi = f32_to_bf16((float(int32_t(random.next() % 2001) - 1000)) * 2e-5f);
      word = lo | hi << 16;
    }
    return b.data();
  }

  WeightMatrix matrix(int64_t rows, int64_t cols, int bits) {
    WeightMatrix w;
    w.n_rows = rows;
    w.n_cols = cols;
    if (bits == 0) {
      w.dtype = DType::bf16;
      w.data = random_words(size_t(rows * cols + 1) / 2);
      return w;
    }
    w.dtype = DType::u32;
    w.bits = bits;
    w.group_size = 64;
    auto& packed = buffers.emplace_back(size_t(rows * cols * bits / 32));
    for (auto& word : packed) word = random.next();
    w.data = packed.data();
    w.scale_dtype = DType::bf16;
    w.scales = random_words(size_t(rows * (cols / 64) + 1) / 2);
    w.biases = random_words(size_t(rows * (cols / 64) + 1) / 2);
    return w;
  }

  WeightVector ones(int64_t n) {
    auto& b = buffers.emplace_back(size_t(n + 1) / 2, 0x3f803f80u);  // bf16 1.0 twice
    return WeightVector{n, DType::bf16, b.data()};
  }
};

const SyntheticShape& find_shape(const std::string& name) {
  for (const auto& s : kShapes)
    if (name == s.name) return s;
  for (const auto& s : kHybridShapes)
    if (name == s.base.name) return s.base;
  std::string known;
  for (const auto& s : kShapes) known += std::string(known.empty() ? "" : ", ") + s.name;
  for (const auto& s : kHybridShapes) known += std::string(", ") + s.base.name;
  fail("unknown synthetic model '" + name + "'; known shapes: " + known);
}

}  // namespace

std::vector<std::string> synthetic_model_names() {
  std::vector<std::string> names;
  for (const auto& s : kShapes) names.push_back(s.name);
  for (const auto& s : kHybridShapes) names.push_back(s.base.name);
  return names;
}

ModelConfig synthetic_config(const std::string& name) {
  const SyntheticShape& s = find_shape(name);
  ModelConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.n_layers = s.n_layers;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.head_dim = s.head_dim;
  c.vocab_size = s.vocab;
  c.max_position_embeddings = 40960;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6f;
  c.tie_word_embeddings = s.tied;
  c.eos_token_ids = {151645, 151643};
  for (const auto& hybrid : kHybridShapes) {
    if (name != hybrid.base.name) continue;
    c.architecture = "Qwen3_5ForConditionalGeneration";
    c.model_type = "qwen3_5";
    c.rope_theta = 10000000.0;
    for (int64_t i = 0; i < c.n_layers; ++i)
      c.hybrid.layer_kinds.push_back(i % 4 == 3 ? LayerKind::full_attention : LayerKind::linear_attention);
    c.hybrid.linear_n_key_heads = hybrid.linear_key_heads;
    c.hybrid.linear_n_value_heads = hybrid.linear_value_heads;
    c.hybrid.linear_key_head_dim = hybrid.linear_head_dim;
    c.hybrid.linear_value_head_dim = hybrid.linear_head_dim;
    c.hybrid.conv_kernel = 4;
    c.hybrid.rotary_dim = c.head_dim / 4;
    c.eos_token_ids = {248044, 248046};
  }
  return c;
}

SyntheticWeights make_synthetic_weights(const ModelConfig& c) {
  const int bits = c.quantization.bits;
  auto storage = std::make_shared<SyntheticStorage>();
  Qwen3Weights w;
  w.embed_tokens = storage->matrix(c.vocab_size, c.hidden_size, bits);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    Qwen3LayerWeights l;
    l.input_norm = storage->ones(c.hidden_size);
    l.post_attention_norm = storage->ones(c.hidden_size);
    l.q_norm = storage->ones(c.head_dim);
    l.k_norm = storage->ones(c.head_dim);
    l.q_proj = storage->matrix(c.q_dim(), c.hidden_size, bits);
    l.k_proj = storage->matrix(c.kv_dim(), c.hidden_size, bits);
    l.v_proj = storage->matrix(c.kv_dim(), c.hidden_size, bits);
    l.o_proj = storage->matrix(c.hidden_size, c.q_dim(), bits);
    l.gate_proj = storage->matrix(c.intermediate_size, c.hidden_size, bits);
    l.up_proj = storage->matrix(c.intermediate_size, c.hidden_size, bits);
    l.down_proj = storage->matrix(c.hidden_size, c.intermediate_size, bits);
    w.layers.push_back(l);
  }
  w.final_norm = storage->ones(c.hidden_size);
  w.lm_head = c.tie_word_embeddings ? w.embed_tokens : storage->matrix(c.vocab_size, c.hidden_size, bits);
  return {w, storage};
}

SyntheticHybridWeights make_synthetic_hybrid_weights(const ModelConfig& c) {
  if (!c.is_hybrid()) fail_internal("make_synthetic_hybrid_weights needs a hybrid config");
  const int bits = c.quantization.bits;
  const HybridConfig& h = c.hybrid;
  auto storage = std::make_shared<SyntheticStorage>();
  Qwen35Weights w;
  // Small values with some spread for the f32 parameters (convolution, A_log, dt_bias).
  auto f32_values = [&](int64_t n, float scale) {
    float* values = w.own(n);
    for (int64_t i = 0; i < n; ++i) values[i] = scale * (float(int32_t(storage->random.next() % 2001) - 1000) * 1e-3f);
    return values;
  };
  w.embed_tokens = storage->matrix(c.vocab_size, c.hidden_size, bits);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    Qwen35LayerWeights l;
    l.kind = h.layer_kinds[size_t(i)];
    l.input_norm = storage->ones(c.hidden_size);
    l.post_attention_norm = storage->ones(c.hidden_size);
    if (l.kind == LayerKind::full_attention) {
      l.q_proj = storage->matrix(2 * c.q_dim(), c.hidden_size, bits);
      l.k_proj = storage->matrix(c.kv_dim(), c.hidden_size, bits);
      l.v_proj = storage->matrix(c.kv_dim(), c.hidden_size, bits);
      l.o_proj = storage->matrix(c.hidden_size, c.q_dim(), bits);
      l.q_norm = storage->ones(c.head_dim);
      l.k_norm = storage->ones(c.head_dim);
    } else {
      l.in_proj_qkv = storage->matrix(h.conv_dim(), c.hidden_size, bits);
      l.in_proj_z = storage->matrix(h.linear_value_dim(), c.hidden_size, bits);
      l.in_proj_b = storage->matrix(h.linear_n_value_heads, c.hidden_size, bits);
      l.in_proj_a = storage->matrix(h.linear_n_value_heads, c.hidden_size, bits);
      l.out_proj = storage->matrix(c.hidden_size, h.linear_value_dim(), bits);
      l.gated_norm = storage->ones(h.linear_value_head_dim);
      l.conv = f32_values(h.conv_dim() * h.conv_kernel, 0.5f);
      l.a_log = f32_values(h.linear_n_value_heads, 1.0f);
      l.dt_bias = f32_values(h.linear_n_value_heads, 1.0f);
    }
    l.gate_proj = storage->matrix(c.intermediate_size, c.hidden_size, bits);
    l.up_proj = storage->matrix(c.intermediate_size, c.hidden_size, bits);
    l.down_proj = storage->matrix(c.hidden_size, c.intermediate_size, bits);
    w.layers.push_back(l);
  }
  w.final_norm = storage->ones(c.hidden_size);
  w.lm_head = c.tie_word_embeddings ? w.embed_tokens : storage->matrix(c.vocab_size, c.hidden_size, bits);
  return {w, storage};
}

}  // namespace tf
