// DFlash drafter: config and weights of a drafter directory, context K/V and the block forward.
#include "models/dflash_drafter.h"

#include "models/qwen3.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
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
  for (const Json& id : layer_ids) {
    if (!id.is_number_integer()) fail_field("target_layer_ids", path, "must hold integers");
    config.target_layer_ids.push_back(id.get<int32_t>());
  }
  config.mask_token_id = int32_t(required_int(json, "mask_token_id", path));
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
  const int64_t n_vocab = config_.vocab_size;
  row_logits_.resize(size_t(n_vocab));
  block_logits(row, row_logits_.data());
  const float* logits = row_logits_.data();
  // The softmax normalised once, so each token's probability is one exp more.
  const float max_logit = *std::max_element(logits, logits + n_vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i] - max_logit));
  std::vector<Guess> guesses;
  for (int32_t token : top_k_tokens(logits, n_vocab, k))
    guesses.push_back({token, float(std::exp(double(logits[token] - max_logit)) / sum)});
  return guesses;
}

void DFlashDrafter::check_block(const DrafterContext& context, int32_t last_token, int64_t position) const {
  if (position < 0 || position > context.size())
    fail("internal: drafter block at position " + std::to_string(position) + " but the context holds " +
         std::to_string(context.size()) + " entries");
  if (last_token < 0 || last_token >= config_.vocab_size)
    fail("token id " + std::to_string(last_token) + " is outside the drafter's vocabulary");
}

CpuDFlashDrafter::CpuDFlashDrafter(const std::string& drafter_dir, const ModelConfig& target_config,
                                   const Qwen3Weights& target_weights, int n_threads)
    : DFlashDrafter(DFlashConfig::load(drafter_dir)), pool_(n_threads) {
  config_.validate(drafter_dir + "/config.json", target_config);
  checkpoint_ = std::make_shared<Checkpoint>(Checkpoint::open(drafter_dir));
  weights_ = bind_dflash_weights(*checkpoint_, config_);
  weights_.embed_tokens = target_weights.embed_tokens;
  weights_.lm_head = target_weights.lm_head;
  inverse_frequencies_ = cpu::rope_inverse_frequencies(config_.head_dim, config_.rope_theta);
}

CpuDFlashDrafter::ContextStorage& CpuDFlashDrafter::ensure_room(DrafterContext& context, int64_t n_slots) const {
  ContextStorage& storage = storage_of<ContextStorage>(context);
  const size_t n_floats = size_t(n_slots * config_.kv_dim());
  storage.keys.resize(size_t(config_.n_layers));
  storage.values.resize(size_t(config_.n_layers));
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    if (storage.keys[size_t(layer)].size() < n_floats) storage.keys[size_t(layer)].resize(n_floats);
    if (storage.values[size_t(layer)].size() < n_floats) storage.values[size_t(layer)].resize(n_floats);
  }
  return storage;
}

void CpuDFlashDrafter::write_kv(ContextStorage& storage, int64_t layer, const float* inputs,
                                int64_t n_rows, int64_t first_slot, const int32_t* positions) {
  const auto& w = weights_.layers[size_t(layer)];
  const int64_t kv_dim = config_.kv_dim();
  k_.resize(size_t(n_rows * kv_dim));
  cpu::linear(inputs, n_rows, w.k_proj, k_.data(), pool_);
  cpu::rms_norm(k_.data(), n_rows * config_.n_kv_heads, config_.head_dim, w.k_norm,
                config_.rms_norm_eps, k_.data());
  cpu::rope_apply(k_.data(), n_rows, config_.n_kv_heads, config_.head_dim, positions,
                  inverse_frequencies_);
  float* keys = storage.keys[size_t(layer)].data() + first_slot * kv_dim;
  float* values = storage.values[size_t(layer)].data() + first_slot * kv_dim;
  std::memcpy(keys, k_.data(), size_t(n_rows * kv_dim) * sizeof(float));
  // Values go straight to their slots: no norm and no rotation.
  cpu::linear(inputs, n_rows, w.v_proj, values, pool_);
}

void CpuDFlashDrafter::append_context(DrafterContext& context, const float* taps, int64_t n_tokens) {
  if (n_tokens <= 0) return;
  const int64_t hidden = config_.hidden_size;
  const int64_t first = context.size();
  ContextStorage& storage = ensure_room(context, first + n_tokens + config_.block_size);
  features_.resize(size_t(n_tokens * hidden));
  cpu::linear(taps, n_tokens, weights_.fc, features_.data(), pool_);
  cpu::rms_norm(features_.data(), n_tokens, hidden, weights_.hidden_norm, config_.rms_norm_eps,
                features_.data());
  std::vector<int32_t> positions(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) positions[size_t(i)] = int32_t(first + i);
  for (int64_t layer = 0; layer < config_.n_layers; ++layer)
    write_kv(storage, layer, features_.data(), n_tokens, first, positions.data());
  set_size(context, first + n_tokens);
}

void CpuDFlashDrafter::block_logits(int64_t row, float* logits) {
  if (row < 0 || row >= n_block_logits() || block_normed_.empty())
    fail("internal: drafter block row " + std::to_string(row) + " requested without a block");
  cpu::linear(block_normed_.data() + row * config_.hidden_size, 1, weights_.lm_head, logits, pool_);
}

void CpuDFlashDrafter::run_block(DrafterContext& context, int32_t last_token, int64_t position) {
  check_block(context, last_token, position);
  const int64_t n_rows = config_.block_size;
  const int64_t hidden = config_.hidden_size, inter = config_.intermediate_size;
  const int64_t q_dim = config_.q_dim();
  const float eps = config_.rms_norm_eps;
  // Block K/V live in the scratch slots just past the committed entries.
  const int64_t block_slot = context.size();
  ContextStorage& storage = ensure_room(context, block_slot + n_rows);

  std::vector<int32_t> tokens(size_t(n_rows), config_.mask_token_id);
  tokens[0] = last_token;
  std::vector<int32_t> positions(static_cast<size_t>(n_rows));
  for (int64_t i = 0; i < n_rows; ++i) positions[size_t(i)] = int32_t(position + i);
  // Every block row sees the same keys in logical order: context 0..position-1, then the block.
  key_slots_.resize(size_t(position + n_rows));
  for (int64_t j = 0; j < position; ++j) key_slots_[size_t(j)] = int32_t(j);
  for (int64_t i = 0; i < n_rows; ++i) key_slots_[size_t(position + i)] = int32_t(block_slot + i);
  std::vector<const int32_t*> slot_lists(size_t(n_rows), key_slots_.data());
  std::vector<int32_t> n_keys(size_t(n_rows), int32_t(position + n_rows));

  features_.resize(size_t(n_rows * hidden));
  normed_.resize(size_t(n_rows * hidden));
  proj_.resize(size_t(n_rows * hidden));
  q_.resize(size_t(n_rows * q_dim));
  attn_out_.resize(size_t(n_rows * q_dim));
  gate_.resize(size_t(n_rows * inter));
  up_.resize(size_t(n_rows * inter));
  cpu::embedding_rows(weights_.embed_tokens, tokens.data(), n_rows, features_.data());
  const cpu::AttentionShape shape{config_.n_heads, config_.n_kv_heads, config_.head_dim,
                                  float(1.0 / std::sqrt(double(config_.head_dim)))};

  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    const auto& w = weights_.layers[size_t(layer)];
    cpu::rms_norm(features_.data(), n_rows, hidden, w.input_norm, eps, normed_.data());
    cpu::linear(normed_.data(), n_rows, w.q_proj, q_.data(), pool_);
    cpu::rms_norm(q_.data(), n_rows * config_.n_heads, config_.head_dim, w.q_norm, eps, q_.data());
    cpu::rope_apply(q_.data(), n_rows, config_.n_heads, config_.head_dim, positions.data(),
                    inverse_frequencies_);
    write_kv(storage, layer, normed_.data(), n_rows, block_slot, positions.data());
    cpu::attention(q_.data(), n_rows, storage.keys[size_t(layer)].data(),
                   storage.values[size_t(layer)].data(), slot_lists.data(), n_keys.data(), shape,
                   attn_out_.data(), pool_);
    cpu::linear(attn_out_.data(), n_rows, w.o_proj, proj_.data(), pool_);
    for (int64_t i = 0; i < n_rows * hidden; ++i) features_[size_t(i)] += proj_[size_t(i)];

    cpu::rms_norm(features_.data(), n_rows, hidden, w.post_attention_norm, eps, normed_.data());
    cpu::linear(normed_.data(), n_rows, w.gate_proj, gate_.data(), pool_);
    cpu::linear(normed_.data(), n_rows, w.up_proj, up_.data(), pool_);
    cpu::swiglu(gate_.data(), up_.data(), n_rows * inter, gate_.data());
    cpu::linear(gate_.data(), n_rows, w.down_proj, proj_.data(), pool_);
    for (int64_t i = 0; i < n_rows * hidden; ++i) features_[size_t(i)] += proj_[size_t(i)];
  }

  // Row 0 holds the known token; only rows 1..B-1 predict.
  block_normed_.resize(size_t((n_rows - 1) * hidden));
  cpu::rms_norm(features_.data() + hidden, n_rows - 1, hidden, weights_.final_norm, eps, block_normed_.data());
}

std::vector<int32_t> top_k_tokens(const float* logits, int64_t n_vocab, int64_t k) {
  k = std::max<int64_t>(0, std::min(k, n_vocab));
  std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) ids[size_t(i)] = int32_t(i);
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
  ids.resize(size_t(k));
  return ids;
}

int32_t argmax_token(const float* logits, int64_t n_vocab) {
  int32_t best = 0;
  for (int64_t i = 1; i < n_vocab; ++i)
    if (logits[i] > logits[best]) best = int32_t(i);
  return best;
}

std::shared_ptr<DFlashDrafter> load_drafter(const std::string& drafter_dir, const Model& target,
                                            int n_threads) {
  return target.load_drafter(drafter_dir, n_threads);
}

std::shared_ptr<DFlashDrafter> load_cpu_drafter(const std::string& drafter_dir, const Model& target,
                                                int n_threads) {
  const Qwen3Weights* weights = target.host_weights();
  if (!weights)
    fail("the drafter in " + drafter_dir + " needs the target's checkpoint weights on the host (a synthetic "
         "target has none)");
  return std::make_shared<CpuDFlashDrafter>(drafter_dir, target.config(), *weights, n_threads);
}

}  // namespace tf
