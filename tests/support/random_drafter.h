// A random DFlash drafter fitting any target (dense or hybrid) in a temporary directory: for tests
// whose drafts only need to be drafts (the equalities hold whatever a drafter proposes).
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "loader/model_config.h"
#include "loader/safetensors.h"

namespace tf::test {

struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tf_drafter_XXXXXX").string();
    path = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// A random drafter directory fitting the target `target` (f32 weights, two layers, GQA).
inline void write_random_drafter(const std::string& dir, const ModelConfig& target, uint32_t seed,
                          nlohmann::ordered_json* config_out = nullptr) {
  const int64_t hidden = target.hidden_size, inter = 128, head_dim = 32, n_heads = 3, n_kv = 1;
  const std::vector<int32_t> layer_ids = {0, int32_t(target.n_layers - 1)};
  nlohmann::ordered_json config = {{"architectures", {"DFlashDrafter"}},
                 {"block_size", 16},
                 {"target_layer_ids", layer_ids},
                 {"mask_token_id", int32_t(target.vocab_size - 2)},
                 {"hidden_size", hidden},
                 {"intermediate_size", inter},
                 {"num_hidden_layers", 2},
                 {"num_attention_heads", n_heads},
                 {"num_key_value_heads", n_kv},
                 {"head_dim", head_dim},
                 {"rms_norm_eps", 1e-6},
                 {"rope_theta", 10000.0},
                 {"target_hidden_size", hidden},
                 {"vocab_size", target.vocab_size}};
  if (config_out) *config_out = config;
  std::ofstream(dir + "/config.json") << config.dump(2);

  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> storage;
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float offset) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    storage.emplace_back(size_t(n));
    for (float& x : storage.back()) x = offset + scale * normal(rng);
    tensors.push_back({name, DType::f32, shape, storage.back().data(), size_t(n) * sizeof(float)});
  };
  storage.reserve(64);
  const int64_t n_taps = int64_t(layer_ids.size());
  add("fc.weight", {hidden, n_taps * hidden}, 0.1f, 0.0f);
  add("hidden_norm.weight", {hidden}, 0.1f, 1.0f);
  add("norm.weight", {hidden}, 0.1f, 1.0f);
  for (int i = 0; i < 2; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    add(l + "input_layernorm.weight", {hidden}, 0.1f, 1.0f);
    add(l + "self_attn.q_proj.weight", {n_heads * head_dim, hidden}, 0.1f, 0.0f);
    add(l + "self_attn.k_proj.weight", {n_kv * head_dim, hidden}, 0.1f, 0.0f);
    add(l + "self_attn.v_proj.weight", {n_kv * head_dim, hidden}, 0.1f, 0.0f);
    add(l + "self_attn.o_proj.weight", {hidden, n_heads * head_dim}, 0.1f, 0.0f);
    add(l + "self_attn.q_norm.weight", {head_dim}, 0.1f, 1.0f);
    add(l + "self_attn.k_norm.weight", {head_dim}, 0.1f, 1.0f);
    add(l + "post_attention_layernorm.weight", {hidden}, 0.1f, 1.0f);
    add(l + "mlp.gate_proj.weight", {inter, hidden}, 0.1f, 0.0f);
    add(l + "mlp.up_proj.weight", {inter, hidden}, 0.1f, 0.0f);
    add(l + "mlp.down_proj.weight", {hidden, inter}, 0.1f, 0.0f);
  }
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
}

}  // namespace tf::test
