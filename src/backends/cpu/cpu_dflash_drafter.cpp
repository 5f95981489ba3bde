// The DFlash drafter on the CPU: context K/V from the taps and the block forward, in f32.
#include "backends/cpu/cpu_dflash_drafter.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/activation.h"
#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/linear.h"
#include "backends/cpu/kernels/norm.h"
#include "backends/cpu/kernels/rope.h"
#include "backends/cpu/scratch.h"
#include "core/error.h"
#include "models/rope_frequencies.h"
#include "models/token_guess.h"

namespace tf {

CpuDFlashDrafter::CpuDFlashDrafter(const std::string& drafter_dir, const ModelConfig& target_config,
                                   const WeightMatrix& target_embed_tokens, const WeightMatrix& target_lm_head,
                                   int n_threads)
    : DFlashDrafter(DFlashConfig::load(drafter_dir)), pool_(n_threads) {
  config_.validate(drafter_dir + "/config.json", target_config);
  checkpoint_ = std::make_shared<Checkpoint>(Checkpoint::open(drafter_dir));
  weights_ = bind_dflash_weights(*checkpoint_, config_);
  weights_.embed_tokens = target_embed_tokens;
  weights_.lm_head = target_lm_head;
  inverse_frequencies_ = rope_inverse_frequencies(config_.head_dim, config_.rope_theta);
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
  cpu::grow_to(k_, size_t(n_rows * kv_dim));
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
  const float* row_logits = head_row(row);
  std::copy_n(row_logits, config_.vocab_size, logits);
}

std::vector<DFlashDrafter::Guess> CpuDFlashDrafter::block_top(int64_t row, int64_t k) {
  return likeliest_tokens(head_row(row), config_.vocab_size, k, cpu::sum_of_exps);
}

// The LM head reads its whole matrix for one row as for a few (memory-bound), so a row that is
// needed brings the next ones with it: four, then as many again as are computed, while the
// proposer's chain goes on. The rows are independent, so how they are batched changes no bit.
const float* CpuDFlashDrafter::head_row(int64_t row) {
  if (row < 0 || row >= n_block_logits() || block_normed_.empty())
    fail_internal("drafter block row " + std::to_string(row) + " requested without a block");
  const int64_t vocab = config_.vocab_size;
  if (row >= n_head_rows_) {
    constexpr int64_t kFirstRows = 4;
    const int64_t wanted = n_head_rows_ + std::max(kFirstRows, n_head_rows_);
    const int64_t end = std::min(n_block_logits(), std::max(row + 1, wanted));
    head_logits_.resize(size_t(n_block_logits() * vocab));
    cpu::linear(block_normed_.data() + n_head_rows_ * config_.hidden_size, end - n_head_rows_, weights_.lm_head,
                head_logits_.data() + n_head_rows_ * vocab, pool_);
    n_head_rows_ = end;
  }
  return head_logits_.data() + row * vocab;
}

void CpuDFlashDrafter::run_block(DrafterContext& context, int32_t last_token, int64_t position) {
  check_block(context, last_token, position);
  n_head_rows_ = 0;
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

  cpu::grow_to(features_, size_t(n_rows * hidden));
  cpu::grow_to(normed_, size_t(n_rows * hidden));
  cpu::grow_to(proj_, size_t(n_rows * hidden));
  cpu::grow_to(q_, size_t(n_rows * q_dim));
  cpu::grow_to(attn_out_, size_t(n_rows * q_dim));
  cpu::grow_to(gate_, size_t(n_rows * inter));
  cpu::grow_to(up_, size_t(n_rows * inter));
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
    cpu::attention(q_.data(), n_rows, storage.keys[size_t(layer)].data(), storage.values[size_t(layer)].data(),
                   cpu::KvLayout::interleaved(config_.n_kv_heads, config_.head_dim), slot_lists.data(), n_keys.data(),
                   shape, attn_out_.data(), pool_);
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

}  // namespace tf
