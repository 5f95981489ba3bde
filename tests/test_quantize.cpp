// `tensorfold quantize`: MLX affine quantization round trips through Checkpoint and Qwen3 binding.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "core/error.h"
#include "loader/checkpoint.h"
#include "loader/model_config.h"
#include "loader/quantize.h"
#include "models/qwen3_weights.h"
#include "support/expect_error.h"
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using tf::DType;

const std::string kTinyA = std::string(TF_SOURCE_DIR) + "/tests/fixtures/models/qwen3-tiny-a";

struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tf_quantize_XXXXXX").string();
    path = mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// The test's own reading of the MLX layout: code of element (row, col), and its group's scale and bias.
struct Dequantized {
  uint32_t code;
  float scale, bias;
  float value() const { return scale * float(code) + bias; }
};

Dequantized dequantize(const tf::WeightMatrix& m, int64_t row, int64_t col) {
  const int64_t n_words_per_row = m.n_cols * m.bits / 32;
  const int64_t per_word = 32 / m.bits;
  const uint32_t word = static_cast<const uint32_t*>(m.data)[row * n_words_per_row + col / per_word];
  const uint32_t code = (word >> ((col % per_word) * m.bits)) & ((1u << m.bits) - 1);
  const int64_t group = row * m.n_groups_per_row() + col / m.group_size;
  return {code, tf::load_as_f32(m.scales, m.scale_dtype, group), tf::load_as_f32(m.biases, m.scale_dtype, group)};
}

// Every element within half a step of its original, plus the rounding of the stored scale and
// bias; the top code may be one step off because MLX snaps the scale to make 0.0 exact, which
// can shrink the range by up to one step. The largest-magnitude element of each group is the
// bias itself and must come back exactly.
void expect_close_to_dense(const tf::WeightMatrix& quantized, const tf::WeightMatrix& dense, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(quantized.is_quantized());
  ASSERT_EQ(quantized.n_rows, dense.n_rows);
  ASSERT_EQ(quantized.n_cols, dense.n_cols);
  EXPECT_EQ(quantized.scale_dtype, dense.dtype);
  const float storage_epsilon = dense.dtype == DType::f32 ? 1e-6f : 1.0f / 256;  // relative rounding
  const uint32_t top_code = (1u << quantized.bits) - 1;
  for (int64_t r = 0; r < dense.n_rows; r++) {
    for (int64_t g = 0; g < quantized.n_groups_per_row(); g++) {
      float w_min = INFINITY, w_max = -INFINITY;
      for (int64_t c = g * quantized.group_size; c < (g + 1) * quantized.group_size; c++) {
        const float w = tf::load_as_f32(dense.data, dense.dtype, r * dense.n_cols + c);
        w_min = std::min(w_min, w);
        w_max = std::max(w_max, w);
      }
      const float edge = std::abs(w_min) > std::abs(w_max) ? w_min : w_max;
      for (int64_t c = g * quantized.group_size; c < (g + 1) * quantized.group_size; c++) {
        const float w = tf::load_as_f32(dense.data, dense.dtype, r * dense.n_cols + c);
        const Dequantized d = dequantize(quantized, r, c);
        ASSERT_LE(d.code, top_code);
        const float step = std::abs(d.scale);
        const float allowed = (d.code == top_code ? 1.0f : 0.5f) * step * (1 + storage_epsilon) +
                              float(d.code) * step * storage_epsilon + std::abs(d.bias) * storage_epsilon + 1e-7f;
        ASSERT_LE(std::abs(d.value() - w), allowed) << "row " << r << " col " << c << " code " << d.code;
        if (w == edge) {
          ASSERT_EQ(d.value(), w) << "row " << r << " col " << c;
        }
      }
    }
  }
}

void expect_same_vector(const tf::WeightVector& a, const tf::WeightVector& b) {
  ASSERT_EQ(a.n, b.n);
  ASSERT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(std::memcmp(a.data, b.data, size_t(a.n) * tf::dtype_size(a.dtype)), 0);
}

// Quantizes `in_dir`, reloads the result, and compares every weight with the dense original.
void check_round_trip(const std::string& in_dir, int bits, int group_size) {
  SCOPED_TRACE(in_dir + " bits " + std::to_string(bits) + " group " + std::to_string(group_size));
  TempDir out;
  size_t last_done = 0, last_total = 1;
  tf::quantize_model_dir(in_dir, out.path, {bits, group_size}, [&](size_t done, size_t total) {
    last_done = done;
    last_total = total;
  });
  EXPECT_EQ(last_done, last_total);

  const tf::ModelConfig dense_config = tf::ModelConfig::load(in_dir);
  const tf::ModelConfig config = tf::ModelConfig::load(out.path);
  EXPECT_EQ(config.quantization.bits, bits);
  EXPECT_EQ(config.quantization.group_size, group_size);
  EXPECT_EQ(config.hidden_size, dense_config.hidden_size);
  EXPECT_EQ(config.eos_token_ids, dense_config.eos_token_ids);
  EXPECT_EQ(fs::exists(in_dir + "/generation_config.json"), fs::exists(out / "generation_config.json"));

  const tf::Checkpoint dense_checkpoint = tf::Checkpoint::open(in_dir);
  const tf::Checkpoint checkpoint = tf::Checkpoint::open(out.path);
  EXPECT_EQ(checkpoint.get("model.embed_tokens.weight").dtype, DType::u32);
  const tf::Qwen3Weights dense = tf::bind_qwen3_weights(dense_checkpoint, dense_config);
  const tf::Qwen3Weights weights = tf::bind_qwen3_weights(checkpoint, config);

  expect_close_to_dense(weights.embed_tokens, dense.embed_tokens, "embed_tokens");
  if (config.tie_word_embeddings) {
    EXPECT_EQ(weights.lm_head.data, weights.embed_tokens.data);
  } else {
    EXPECT_NE(weights.lm_head.data, weights.embed_tokens.data);
    expect_close_to_dense(weights.lm_head, dense.lm_head, "lm_head");
  }
  expect_same_vector(weights.final_norm, dense.final_norm);
  for (size_t i = 0; i < weights.layers.size(); i++) {
    const tf::Qwen3LayerWeights& q = weights.layers[i];
    const tf::Qwen3LayerWeights& d = dense.layers[i];
    const std::string layer = "layer " + std::to_string(i) + " ";
    expect_close_to_dense(q.q_proj, d.q_proj, layer + "q_proj");
    expect_close_to_dense(q.k_proj, d.k_proj, layer + "k_proj");
    expect_close_to_dense(q.v_proj, d.v_proj, layer + "v_proj");
    expect_close_to_dense(q.o_proj, d.o_proj, layer + "o_proj");
    expect_close_to_dense(q.gate_proj, d.gate_proj, layer + "gate_proj");
    expect_close_to_dense(q.up_proj, d.up_proj, layer + "up_proj");
    expect_close_to_dense(q.down_proj, d.down_proj, layer + "down_proj");
    expect_same_vector(q.input_norm, d.input_norm);
    expect_same_vector(q.post_attention_norm, d.post_attention_norm);
    expect_same_vector(q.q_norm, d.q_norm);
    expect_same_vector(q.k_norm, d.k_norm);
  }
}

// An untied f32 model whose dimensions divide every group size (no fixture's do for 64 and 128).
void write_synthetic_model(const std::string& dir) {
  const int64_t hidden = 128, intermediate = 256, n_heads = 2, n_kv_heads = 1, head_dim = 64, vocab = 96;
  nlohmann::json config = {
      {"architectures", {"Qwen3ForCausalLM"}}, {"hidden_size", hidden}, {"intermediate_size", intermediate},
      {"num_hidden_layers", 1}, {"num_attention_heads", n_heads}, {"num_key_value_heads", n_kv_heads},
      {"head_dim", head_dim}, {"vocab_size", vocab}, {"rms_norm_eps", 1e-6}, {"max_position_embeddings", 512},
      {"rope_theta", 1e6}, {"tie_word_embeddings", false}, {"eos_token_id", 95}};
  std::ofstream(dir + "/config.json") << config.dump(2);

  static std::vector<std::vector<float>> storage;  // outlives the write below
  storage.clear();
  std::vector<tf::TensorToWrite> tensors;
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    storage.emplace_back(size_t(n));
    for (float& v : storage.back()) v = normal(random);
    if (n > 0 && shape.size() == 2) storage.back()[0] = 0.0f;  // a group that holds exact zero
    tensors.push_back({name, DType::f32, shape, storage.back().data(), size_t(n) * 4});
  };
  storage.reserve(16);
  add("model.embed_tokens.weight", {vocab, hidden});
  add("lm_head.weight", {vocab, hidden});
  add("model.norm.weight", {hidden});
  const std::string layer = "model.layers.0.";
  add(layer + "input_layernorm.weight", {hidden});
  add(layer + "post_attention_layernorm.weight", {hidden});
  add(layer + "self_attn.q_proj.weight", {n_heads * head_dim, hidden});
  add(layer + "self_attn.k_proj.weight", {n_kv_heads * head_dim, hidden});
  add(layer + "self_attn.v_proj.weight", {n_kv_heads * head_dim, hidden});
  add(layer + "self_attn.o_proj.weight", {hidden, n_heads * head_dim});
  add(layer + "self_attn.q_norm.weight", {head_dim});
  add(layer + "self_attn.k_norm.weight", {head_dim});
  add(layer + "mlp.gate_proj.weight", {intermediate, hidden});
  add(layer + "mlp.up_proj.weight", {intermediate, hidden});
  add(layer + "mlp.down_proj.weight", {hidden, intermediate});
  tf::write_safetensors(dir + "/model.safetensors", tensors);
}

TEST(Quantize, TinyFixtureRoundTrips) {
  check_round_trip(kTinyA, 4, 32);
  check_round_trip(kTinyA, 8, 32);
}

TEST(Quantize, UntiedF32ModelRoundTripsAtLargerGroups) {
  TempDir model;
  write_synthetic_model(model.path);
  check_round_trip(model.path, 8, 64);
  check_round_trip(model.path, 4, 128);
}

TEST(Quantize, ZeroStaysZero) {
  TempDir model;
  write_synthetic_model(model.path);
  TempDir out;
  tf::quantize_model_dir(model.path, out.path, {8, 64});
  const tf::Checkpoint checkpoint = tf::Checkpoint::open(out.path);
  const tf::ModelConfig config = tf::ModelConfig::load(out.path);
  const tf::Qwen3Weights weights = tf::bind_qwen3_weights(checkpoint, config);
  // The element set to 0.0 in write_synthetic_model: MLX's scale snapping makes zero exact.
  for (const tf::WeightMatrix* m : {&weights.layers[0].q_proj, &weights.embed_tokens, &weights.lm_head}) {
    const Dequantized zero = dequantize(*m, 0, 0);
    EXPECT_LE(std::abs(zero.value()), std::abs(zero.bias) * 1e-6f);  // only the float rounding of scale * code
    EXPECT_LT(std::abs(zero.value()), std::abs(zero.scale) * 1e-3f);
  }
}

using tf::test::expect_error_naming;

TEST(Quantize, RejectsBadOptionsAndInputs) {
  TempDir out;
  // tiny-a's hidden size 96 is not a multiple of 64; the first tensor in name order is the embedding.
  expect_error_naming([&] { tf::quantize_model_dir(kTinyA, out.path, {8, 64}); },
                      {"model.embed_tokens.weight", "model.safetensors", "96", "64"});
  expect_error_naming([&] { tf::quantize_model_dir(kTinyA, out.path, {3, 32}); }, {"bits", "3"});
  expect_error_naming([&] { tf::quantize_model_dir(kTinyA, out.path, {4, 48}); }, {"group size", "48"});
  expect_error_naming([&] { tf::quantize_model_dir(kTinyA, kTinyA, {4, 32}); }, {"input directory"});

  TempDir quantized;
  tf::quantize_model_dir(kTinyA, quantized.path, {4, 32});
  expect_error_naming([&] { tf::quantize_model_dir(quantized.path, out.path, {4, 32}); },
                      {quantized.path, "already quantized"});
}

}  // namespace
