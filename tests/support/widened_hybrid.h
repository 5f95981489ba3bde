// A hybrid fixture with the real models' DeltaNet heads: the transformers fixtures are too small to
// have 128-key, 128-value heads (the kernels' widest variant), so this copies tests/fixtures/models/
// NAME with its DeltaNet widened to key_head_dim x value_head_dim and those tensors filled at random
// (written with the project's own safetensors writer); everything else is the fixture's.
#pragma once
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "support/fixtures.h"
#include "support/random_drafter.h"

namespace tf::test {

inline void write_widened_hybrid(const std::string& name, const std::string& dir, int64_t key_head_dim,
                                 int64_t value_head_dim, uint32_t seed) {
  namespace fs = std::filesystem;
  const std::string source = fixture_model(name);
  nlohmann::json config = read_json(source + "/config.json");
  nlohmann::json& text = config.contains("text_config") ? config["text_config"] : config;
  text["linear_key_head_dim"] = key_head_dim;
  text["linear_value_head_dim"] = value_head_dim;
  std::ofstream(dir + "/config.json") << config.dump(2);
  for (const auto& entry : fs::directory_iterator(source)) {
    const std::string file_name = entry.path().filename().string();
    if (file_name != "config.json" && file_name != "model.safetensors" && file_name != "reference.json")
      fs::copy_file(entry.path(), dir + "/" + file_name);
  }

  const int64_t hidden = text["hidden_size"].get<int64_t>(), kernel = text["linear_conv_kernel_dim"].get<int64_t>();
  const int64_t key_dim = text["linear_num_key_heads"].get<int64_t>() * key_head_dim;
  const int64_t value_dim = text["linear_num_value_heads"].get<int64_t>() * value_head_dim;
  const int64_t conv_dim = 2 * key_dim + value_dim;
  const auto shape_of = [&](const std::string& tensor) -> std::vector<int64_t> {
    const auto ends = [&](const char* suffix) {
      const std::string s(suffix);
      return tensor.size() >= s.size() && tensor.compare(tensor.size() - s.size(), s.size(), s) == 0;
    };
    if (ends("linear_attn.in_proj_qkv.weight")) return {conv_dim, hidden};
    if (ends("linear_attn.in_proj_z.weight")) return {value_dim, hidden};
    if (ends("linear_attn.conv1d.weight")) return {conv_dim, 1, kernel};
    if (ends("linear_attn.norm.weight")) return {value_head_dim};
    if (ends("linear_attn.out_proj.weight")) return {hidden, value_dim};
    return {};
  };

  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto file = SafetensorsFile::open(source + "/model.safetensors");
  std::vector<std::vector<float>> widened;
  widened.reserve(file->tensors().size());
  std::vector<TensorToWrite> tensors;
  for (const auto& [tensor_name, view] : file->tensors()) {
    const std::vector<int64_t> shape = shape_of(tensor_name);
    if (shape.empty()) {
      tensors.push_back({tensor_name, view.dtype, view.shape, view.data, view.n_bytes});
      continue;
    }
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    // The gated norm's gain is plain (about 1); matrices scaled like a trained layer's (1 / sqrt(fan-in)).
    const bool is_gain = shape.size() == 1;
    const float scale = is_gain ? 0.1f : 1.0f / std::sqrt(float(shape.back()));
    std::vector<float>& values = widened.emplace_back(size_t(n));
    for (float& x : values) x = (is_gain ? 1.0f : 0.0f) + scale * normal(rng);
    tensors.push_back({tensor_name, DType::f32, shape, values.data(), values.size() * sizeof(float)});
  }
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
}

// The model directory of a fixture NAME, or of kWidenedHybrid: tiny-c with the real models' 128 x 128
// DeltaNet heads, written once per process into a temporary directory.
inline const std::string kWidenedHybrid = "qwen3.5-tiny-c-widened";
inline std::string hybrid_model_dir(const std::string& name) {
  if (name != kWidenedHybrid) return fixture_model(name);
  static const TempDir dir;
  static const bool written = (write_widened_hybrid("qwen3.5-tiny-c", dir.path, 128, 128, 11), true);
  (void)written;
  return dir.path;
}

}  // namespace tf::test
