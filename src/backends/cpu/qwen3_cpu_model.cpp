

#include "backends/cpu/qwen3_cpu_model.h"

#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_dflash_drafter.h"
#include "backends/cpu/kernels/activation.h"
#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/linear.h"
#include "backends/cpu/kernels/norm.h"
#include "backends/cpu/kernels/rope.h"
#include "backends/cpu/scratch.h"
#include "core/error.h"
#include "models/rope_frequencies.h"
#include "runtime/kv_cache.h"

namespace tf {

Qwen3CpuModel::Qwen3CpuModel(ModelConfig config, Qwen3Weights weights,
                             std::shared_ptr<const void> storage, int n_threads)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      storage_(std::move(storage)),
      pool_(n_threads),
      inverse_frequencies_(rope_inverse_frequencies(config_.head_dim, config_.rope_theta)) {}

int64_t Qwen3CpuModel::weight_bytes_per_step() const {
  int64_t total = weights_.lm_head.n_stored_bytes();
  for (const auto& l : weights_.layers)
    for (const WeightMatrix* w : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj,
                                  &l.up_proj, &l.down_proj})
      total += w->n_stored_bytes();
  return total;
}

void Qwen3CpuModel::set_tap_layers(std::vector<int> layers) { taps_.set_layers(std::move(layers), config_.n_layers); }

std::shared_ptr<DFlashDrafter> Qwen3CpuModel::load_drafter(const std::string& drafter_dir, int n_threads) const {
  return std::make_shared<CpuDFlashDrafter>(drafter_dir, config_, weights_.embed_tokens, weights_.lm_head, n_threads);
}

std::unique_ptr<KvStorage> Qwen3CpuModel::make_kv_storage(int64_t n_slots) const {
  return std::make_unique<HostKvStorage>(config_.n_layers, config_.n_kv_heads, config_.head_dim, n_slots);
}

// Calls fn(begin, end) over row ranges of [0, n_rows): split across the pool for a prefill chunk,
// in one piece for a few rows (a decode step is not worth a wake-up). Every row's result depends
// on that row alone.
template <class Fn>
void Qwen3CpuModel::for_rows(int64_t n_rows, const Fn& fn) {
  constexpr int64_t kMinRowsToSplit = 16;
  if (n_rows < kMinRowsToSplit) {
    fn(int64_t(0), n_rows);
  } else {
    pool_.parallel_for(n_rows, fn);
  }
}

void Qwen3CpuModel::attention_block(int64_t layer, const Batch& batch, HostKvStorage& kv) {
  const auto& w = weights_.layers[size_t(layer)];
  const int64_t n_rows = int64_t(batch.rows.size());
  const int64_t hidden = config_.hidden_size, head_dim = config_.head_dim;
  const int64_t q_dim = config_.q_dim(), kv_dim = config_.kv_dim();
  const int64_t n_heads = config_.n_heads, n_kv_heads = config_.n_kv_heads;
  const float eps = config_.rms_norm_eps;

  for_rows(n_rows, [&](int64_t begin, int64_t end) {
    cpu::rms_norm(hidden_.data() + begin * hidden, end - begin, hidden, w.input_norm, eps,
                  normed_.data() + begin * hidden);
  });
  const cpu::LinearOutput qkv[] = {{&w.q_proj, q_.data()}, {&w.k_proj, k_.data()}, {&w.v_proj, v_.data()}};
  cpu::linear_many(normed_.data(), n_rows, hidden, qkv, 3, pool_);
  // Keys and values go to the cache first; attention reads every key from there, including
  // this round's own rows, so a row sees the same numbers whatever shares its round.
  for_rows(n_rows, [&](int64_t begin, int64_t end) {
    float* q = q_.data() + begin * q_dim;
    float* k = k_.data() + begin * kv_dim;
    cpu::rms_norm(q, (end - begin) * n_heads, head_dim, w.q_norm, eps, q);
    cpu::rms_norm(k, (end - begin) * n_kv_heads, head_dim, w.k_norm, eps, k);
    cpu::rope_apply(q, end - begin, n_heads, head_dim, positions_.data() + begin, inverse_frequencies_);
    cpu::rope_apply(k, end - begin, n_kv_heads, head_dim, positions_.data() + begin, inverse_frequencies_);
    for (int64_t r = begin; r < end; ++r)
      kv.store(layer, batch.rows[size_t(r)].kv_slot, k_.data() + r * kv_dim, v_.data() + r * kv_dim);
  });
  cpu::AttentionShape shape{n_heads, n_kv_heads, head_dim, float(1.0 / std::sqrt(double(head_dim)))};
  cpu::attention(q_.data(), n_rows, kv.slice(layer), key_slot_lists_.data(), key_slots_.n_keys.data(), shape,
                 attn_out_.data(), pool_);
  cpu::linear(attn_out_.data(), n_rows, w.o_proj, proj_.data(), pool_);
}

// The residual add of the attention block's output, then the MLP block.
void Qwen3CpuModel::mlp_block(int64_t layer, int64_t n_rows) {
  const auto& w = weights_.layers[size_t(layer)];
  const int64_t hidden = config_.hidden_size, inter = config_.intermediate_size;
  for_rows(n_rows, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * hidden; i < end * hidden; ++i) hidden_[size_t(i)] += proj_[size_t(i)];
    cpu::rms_norm(hidden_.data() + begin * hidden, end - begin, hidden, w.post_attention_norm, config_.rms_norm_eps,
                  normed_.data() + begin * hidden);
  });
  const cpu::LinearOutput gate_up[] = {{&w.gate_proj, gate_.data()}, {&w.up_proj, up_.data()}};
  cpu::linear_many(normed_.data(), n_rows, hidden, gate_up, 2, pool_);
  for_rows(n_rows, [&](int64_t begin, int64_t end) {
    cpu::swiglu(gate_.data() + begin * inter, up_.data() + begin * inter, (end - begin) * inter,
                gate_.data() + begin * inter);
  });
  cpu::linear(gate_.data(), n_rows, w.down_proj, proj_.data(), pool_);
  for_rows(n_rows, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * hidden; i < end * hidden; ++i) hidden_[size_t(i)] += proj_[size_t(i)];
  });
}

void Qwen3CpuModel::forward(const Batch& batch, KvCache& kv, float* logits) {
  const int64_t n_rows = int64_t(batch.rows.size());
  if (n_rows == 0) return;
  const int64_t hidden = config_.hidden_size;
  cpu::grow_to(hidden_, size_t(n_rows * hidden));
  cpu::grow_to(normed_, size_t(n_rows * hidden));
  cpu::grow_to(proj_, size_t(n_rows * hidden));
  cpu::grow_to(q_, size_t(n_rows * config_.q_dim()));
  cpu::grow_to(attn_out_, size_t(n_rows * config_.q_dim()));
  cpu::grow_to(k_, size_t(n_rows * config_.kv_dim()));
  cpu::grow_to(v_, size_t(n_rows * config_.kv_dim()));
  cpu::grow_to(gate_, size_t(n_rows * config_.intermediate_size));
  cpu::grow_to(up_, size_t(n_rows * config_.intermediate_size));

  batch.check_token_ids(config_.vocab_size);
  HostKvStorage& storage = kv.storage_as<HostKvStorage>();
  positions_.resize(size_t(n_rows));
  std::vector<int32_t> tokens(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    tokens[size_t(r)] = batch.rows[size_t(r)].token;
    positions_[size_t(r)] = batch.rows[size_t(r)].pos;
  }
  resolve_key_slots(batch, kv, key_slots_);
  key_slot_lists_.resize(size_t(n_rows));
  for (int64_t r = 0; r < n_rows; ++r)
    key_slot_lists_[size_t(r)] = key_slots_.slots.data() + key_slots_.offsets[size_t(r)];
  cpu::embedding_rows(weights_.embed_tokens, tokens.data(), n_rows, hidden_.data());

  taps_.begin(n_rows, hidden);
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    attention_block(layer, batch, storage);
    mlp_block(layer, n_rows);
    taps_.after_layer(layer, hidden_.data(), n_rows);
  }

  // Only rows that asked for logits pay for the final norm and the LM head.
  int64_t n_out = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    if (!batch.rows[size_t(r)].wants_logits) continue;
    if (n_out != r)
      std::memcpy(hidden_.data() + n_out * hidden, hidden_.data() + r * hidden,
                  size_t(hidden) * sizeof(float));
    ++n_out;
  }
  if (n_out == 0) return;
  cpu::rms_norm(hidden_.data(), n_out, hidden, weights_.final_norm, config_.rms_norm_eps,
                normed_.data());
  cpu::linear(normed_.data(), n_out, weights_.lm_head, logits, pool_);
}

}  // namespace tf
