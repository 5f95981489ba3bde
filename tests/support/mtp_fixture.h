// A hybrid fixture with an MTP head: a temporary copy of tests/fixtures/models/NAME whose
// model.safetensors also holds mtp.* tensors (the fixtures were made without them), written with the
// project's own safetensors writer.
#pragma once
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "loader/model_config.h"
#include "loader/safetensors.h"
#include "support/fixtures.h"
#include "support/random_drafter.h"

namespace tf::test {

enum class MtpWeights {
  random,  // random values: drafts are drafts, rarely the target's choice
  // fc reads only the hidden half, and the layer's output projections are zero, so the head's output
  // is the target's final-normed hidden state again: it predicts the token the target chose at t,
  // which is accepted wherever the target repeats a token.
  echo_hidden,
};

// Writes the fixture NAME with an MTP head into dir. `change` may edit the mtp tensors before they
// are written (by name: values and shape), to make a malformed or incomplete head.
struct MtpTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
inline void write_fixture_with_mtp(const std::string& name, const std::string& dir, MtpWeights kind, uint32_t seed,
                                   void (*change)(std::map<std::string, MtpTensor>&) = nullptr) {
  namespace fs = std::filesystem;
  const std::string source = fixture_model(name);
  for (const char* file : {"config.json", "generation_config.json"})
    if (fs::exists(source + "/" + file)) fs::copy_file(source + "/" + file, dir + "/" + file);
  const ModelConfig config = ModelConfig::load(source);
  const int64_t h = config.hidden_size, inter = config.intermediate_size;

  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::map<std::string, MtpTensor> mtp;
  auto add = [&](const std::string& tensor, std::vector<int64_t> shape, float scale) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    MtpTensor t{shape, std::vector<float>(size_t(n))};
    for (float& x : t.values) x = scale * normal(rng);
    mtp[tensor] = std::move(t);
  };
  add("mtp.fc.weight", {h, 2 * h}, 0.2f);
  add("mtp.pre_fc_norm_embedding.weight", {h}, 0.1f);  // zero-centred: the gain is 1 + w
  add("mtp.pre_fc_norm_hidden.weight", {h}, 0.1f);
  add("mtp.norm.weight", {h}, 0.1f);
  const std::string l = "mtp.layers.0.";
  add(l + "input_layernorm.weight", {h}, 0.1f);
  add(l + "post_attention_layernorm.weight", {h}, 0.1f);
  add(l + "self_attn.q_proj.weight", {2 * config.q_dim(), h}, 0.2f);
  add(l + "self_attn.k_proj.weight", {config.kv_dim(), h}, 0.2f);
  add(l + "self_attn.v_proj.weight", {config.kv_dim(), h}, 0.2f);
  add(l + "self_attn.o_proj.weight", {h, config.q_dim()}, 0.2f);
  add(l + "self_attn.q_norm.weight", {config.head_dim}, 0.1f);
  add(l + "self_attn.k_norm.weight", {config.head_dim}, 0.1f);
  add(l + "mlp.gate_proj.weight", {inter, h}, 0.2f);
  add(l + "mlp.up_proj.weight", {inter, h}, 0.2f);
  add(l + "mlp.down_proj.weight", {h, inter}, 0.2f);
  if (kind == MtpWeights::echo_hidden) {
    std::vector<float>& fc = mtp["mtp.fc.weight"].values;
    std::fill(fc.begin(), fc.end(), 0.0f);
    for (int64_t i = 0; i < h; ++i) fc[size_t(i * 2 * h + h + i)] = 1.0f;  // [0 | I]
    for (const char* zero : {"self_attn.o_proj.weight", "mlp.down_proj.weight"})
      std::fill(mtp[l + zero].values.begin(), mtp[l + zero].values.end(), 0.0f);
    for (const char* unit : {"mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"})
      std::fill(mtp[unit].values.begin(), mtp[unit].values.end(), 0.0f);  // gain 1
  }
  if (change) change(mtp);

  auto file = SafetensorsFile::open(source + "/model.safetensors");
  std::vector<TensorToWrite> tensors;
  for (const auto& [tensor_name, view] : file->tensors())
    tensors.push_back({tensor_name, view.dtype, view.shape, view.data, view.n_bytes});
  for (const auto& [tensor_name, t] : mtp)
    tensors.push_back({tensor_name, DType::f32, t.shape, t.values.data(), t.values.size() * sizeof(float)});
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
}

}  // namespace tf::test
