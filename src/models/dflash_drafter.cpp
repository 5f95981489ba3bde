// DFlash drafter: config and weights of a drafter directory, and what every backend shares.

#include "models/dflash_drafter.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "loader/config_fields.h"
#include "loader/file_helpers.h"

namespace tf {

namespace {

using Json = nlohmann::json;

// The drafter is exported in bf16: its matrices are dense.
const QuantizationConfig kDense{};

}  // namespace

DFlashWeights bind_dflash_weights(const Checkpoint& checkpoint, const DFlashConfig& config) {
  const int64_t hidden = config.hidden_size, intermediate = config.intermediate_size;
  DFlashWeights weights;
  weights.fc = bind_matrix(checkpoint, "fc", hidden, config.tap_width(), kDense);
  weights.hidden_norm = bind_vector(checkpoint, "hidden_norm.weight", hidden);
  weights.final_norm = bind_vector(checkpoint, "norm.weight", hidden);
  for (int64_t i = 0; i < config.n_layers; ++i) {
    const std::string layer = "layers." + std::to_string(i) + ".";
    const std::string attention = layer + "self_attn.";
    const std::string mlp = layer + "mlp.";
    Qwen3LayerWeights w;
    w.input_norm = bind_vector(checkpoint, layer + "input_layernorm.weight", hidden);
    w.q_proj = bind_matrix(checkpoint, attention + "q_proj", config.q_dim(), hidden, kDense);
    w.k_proj = bind_matrix(checkpoint, attention + "k_proj", config.kv_dim(), hidden, kDense);
    w.v_proj = bind_matrix(checkpoint, attention + "v_proj", config.kv_dim(), hidden, kDense);
    w.o_proj = bind_matrix(checkpoint, attention + "o_proj", hidden, config.q_dim(), kDense);
    w.q_norm = bind_vector(checkpoint, attention + "q_norm.weight", config.head_dim);
    w.k_norm = bind_vector(checkpoint, attention + "k_norm.weight", config.head_dim);
    w.post_attention_norm = bind_vector(checkpoint, layer + "post_attention_layernorm.weight", hidden);
    w.gate_proj = bind_matrix(checkpoint, mlp + "gate_proj", intermediate, hidden, kDense);
    w.up_proj = bind_matrix(checkpoint, mlp + "up_proj", intermediate, hidden, kDense);
    w.down_proj = bind_matrix(checkpoint, mlp + "down_proj", hidden, intermediate, kDense);
    weights.layers.push_back(w);
  }
  checkpoint.check_all_used([&](const std::string& name) {
    return unused_tensor_reason(name, "layers.", config.n_layers, checkpoint.dir() + "/config.json", "DFlashDrafter");
  });
  return weights;
}

DFlashConfig DFlashConfig::load(const std::string& drafter_dir) {
  std::string path;
  const Json json = read_config_object(drafter_dir, "drafter", &path);
  const std::string architecture = config_architecture(json, path);
  if (architecture != "DFlashDrafter")
    fail("unsupported drafter architecture " + architecture + " in " + path +
         " (supported: DFlashDrafter)");

  DFlashConfig config;
  config.block_size = required_int(json, "block_size", path);
  const Json& layer_ids = required_field(json, "target_layer_ids", path);
  if (!layer_ids.is_array() || layer_ids.empty())
    fail_field("target_layer_ids", path, "must be a non-empty list of layer indices");
  for (const Json& id : layer_ids) config.target_layer_ids.push_back(read_index(id, "target_layer_ids", path));
  config.mask_token_id = read_index(required_field(json, "mask_token_id", path), "mask_token_id", path);
  config.hidden_size = required_int(json, "hidden_size", path);
  config.intermediate_size = required_int(json, "intermediate_size", path);
  config.n_layers = required_int(json, "num_hidden_layers", path);
  config.n_heads = required_int(json, "num_attention_heads", path);
  config.n_kv_heads = required_int(json, "num_key_value_heads", path);
  config.head_dim = required_int(json, "head_dim", path);
  config.rms_norm_eps = float(required_number(json, "rms_norm_eps", path));
  config.rope_theta = required_number(json, "rope_theta", path);
  config.target_hidden_size = required_int(json, "target_hidden_size", path);
  config.vocab_size = required_int(json, "vocab_size", path);
  return config;
}

void DFlashConfig::validate(const std::string& source, const ModelConfig& target) const {
  auto require_positive = [&](int64_t value, const char* field) {
    if (value <= 0)
      fail_field(field, source, "must be positive, got " + std::to_string(value));
  };
  require_positive(hidden_size, "hidden_size");
  require_positive(intermediate_size, "intermediate_size");
  require_positive(n_layers, "num_hidden_layers");
  require_positive(n_heads, "num_attention_heads");
  require_positive(n_kv_heads, "num_key_value_heads");
  require_positive(head_dim, "head_dim");
  require_positive(target_hidden_size, "target_hidden_size");
  require_positive(vocab_size, "vocab_size");
  if (block_size < 2)
    fail_field("block_size", source, "must be at least 2, got " + std::to_string(block_size));
  // Far above any real drafter; they keep products of sizes (q_dim, tap_width) inside int64.
  require_in_range(block_size, "block_size", source, 2, 1024);
  require_in_range(hidden_size, "hidden_size", source, 1, 1 << 20);
  require_in_range(intermediate_size, "intermediate_size", source, 1, 1 << 22);
  require_in_range(n_layers, "num_hidden_layers", source, 1, 4096);
  require_in_range(n_heads, "num_attention_heads", source, 1, 4096);
  require_in_range(n_kv_heads, "num_key_value_heads", source, 1, 4096);
  require_in_range(head_dim, "head_dim", source, 1, 4096);
  require_in_range(n_taps(), "target_layer_ids", source, 1, 4096);
  if (head_dim % 2 != 0) fail_field("head_dim", source, "must be even (RoPE rotates pairs)");
  if (!(rope_theta > 0)) fail_field("rope_theta", source, "must be positive");
  if (!(rms_norm_eps > 0)) fail_field("rms_norm_eps", source, "must be positive");
  if (n_heads % n_kv_heads != 0)
    fail_field("num_attention_heads", source, "must be a multiple of num_key_value_heads");
  // The drafter shares the target's embedding and LM head, so it works in the target's width.
  if (hidden_size != target.hidden_size)
    fail_field("hidden_size", source, "is " + std::to_string(hidden_size) + " but the target's is " +
                                          std::to_string(target.hidden_size));
  if (target_hidden_size != target.hidden_size)
    fail_field("target_hidden_size", source, "is " + std::to_string(target_hidden_size) +
                                                 " but the target's hidden_size is " +
                                                 std::to_string(target.hidden_size));
  if (vocab_size != target.vocab_size)
    fail_field("vocab_size", source, "is " + std::to_string(vocab_size) + " but the target's is " +
                                         std::to_string(target.vocab_size));
  if (mask_token_id < 0 || mask_token_id >= vocab_size)
    fail_field("mask_token_id", source, "is outside the vocabulary of " + std::to_string(vocab_size));
  for (int32_t id : target_layer_ids)
    if (id < 0 || id >= target.n_layers)
      fail_field("target_layer_ids", source, "names layer " + std::to_string(id) + " but the target has " +
                                                 std::to_string(target.n_layers) + " layers");
}

void DFlashDrafter::propose_block(DrafterContext& context, int32_t last_token, int64_t position,
                                  float* logits) {
  run_block(context, last_token, position);
  for (int64_t j = 0; j < n_block_logits(); ++j) block_logits(j, logits + j * config_.vocab_size);
}

std::vector<DFlashDrafter::Guess> DFlashDrafter::block_top(int64_t row, int64_t k) {
  row_logits_.resize(size_t(config_.vocab_size));
  block_logits(row, row_logits_.data());
  return likeliest_tokens(row_logits_.data(), config_.vocab_size, k);
}

void DFlashDrafter::check_block(const DrafterContext& context, int32_t last_token, int64_t position) const {
  if (position < 0 || position > context.size())
    fail_internal("drafter block at position " + std::to_string(position) + " but the context holds " +
         std::to_string(context.size()) + " entries");
  if (last_token < 0 || last_token >= config_.vocab_size)
    fail("token id " + std::to_string(last_token) + " is outside the drafter's vocabulary");
}

std::vector<int32_t> top_k_tokens(const float* logits, int64_t n_vocab, int64_t k) {
  k = std::max<int64_t>(0, std::min(k, n_vocab));
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::vector<int32_t> ids;
  if (k > 16) {  // a sort of every id; the few a proposer asks for take one pass below
    ids.resize(size_t(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) ids[size_t(i)] = int32_t(i);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
    ids.resize(size_t(k));
    return ids;
  }
  // The best k so far, best first. Ids come in ascending order, so a logit equal to one kept ranks
  // after it, as the sort's tie rule says.
  ids.reserve(size_t(k));
  for (int64_t i = 0; i < n_vocab && k > 0; ++i) {
    if (int64_t(ids.size()) == k && !(logits[i] > logits[ids.back()])) continue;
    if (int64_t(ids.size()) == k) ids.pop_back();
    auto at = std::upper_bound(ids.begin(), ids.end(), int32_t(i), better);
    ids.insert(at, int32_t(i));
  }
  return ids;
}

int32_t argmax_token(const float* logits, int64_t n_vocab) {
  int32_t best = 0;
  for (int64_t i = 1; i < n_vocab; ++i)
    if (logits[i] > logits[best]) best = int32_t(i);
  return best;
}

}  // namespace tf
