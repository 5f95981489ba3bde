// Qwen3.5-class hybrid forward on the CPU. The Gated DeltaNet recurrence runs token by token in f32
// in every path, parallel over value heads only; see hybrid_state_storage.h for how accepted rows
// reach a lane's state.
#include "backends/cpu/qwen3_5_cpu_model.h"

#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_dflash_drafter.h"
#include "backends/cpu/cpu_mtp_head.h"
#include "backends/cpu/qwen3_5_layers.h"
#include "backends/cpu/kernels/activation.h"
#include "backends/cpu/kernels/gated_delta_net.h"
#include "backends/cpu/kernels/linear.h"
#include "backends/cpu/kernels/norm.h"
#include "core/error.h"
#include "models/rope_frequencies.h"

namespace tf {

namespace {

// One token's DeltaNet inputs as the recurrence reads them: the convolution over the token and its
// conv_kernel - 1 predecessors (window, oldest first), silu, then L2-normalised q (also divided by
// sqrt(key_head_dim)) and k of every key head. The pass and the replay both call this.
void prepare_token(const Qwen35LayerWeights& w, const HybridConfig& h, const float* const* window, float* out) {
  cpu::causal_conv_silu(window, w.conv, h.conv_dim(), h.conv_kernel, out);
  const int64_t dk = h.linear_key_head_dim;
  const float q_divisor = float(std::sqrt(double(dk)));
  for (int64_t head = 0; head < h.linear_n_key_heads; ++head) {
    cpu::l2_normalize(out + head * dk, dk, q_divisor);
    cpu::l2_normalize(out + h.linear_key_dim() + head * dk, dk, 1.0f);
  }
}

// Per-row record kept for replay: pre-conv channels, then g and beta of every value head.
int64_t input_stride(const HybridConfig& h) { return h.conv_dim() + 2 * h.linear_n_value_heads; }

}  // namespace

Qwen35CpuModel::Qwen35CpuModel(ModelConfig config, Qwen35Weights weights, std::shared_ptr<const void> storage,
                               int n_threads)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      storage_(std::move(storage)),
      pool_(n_threads),
      inverse_frequencies_(rope_inverse_frequencies(config_.hybrid.rotary_dim, config_.rope_theta)) {
  if (config_.hybrid.linear_value_head_dim > cpu::kMaxValueHeadDim)
    fail("linear_value_head_dim " + std::to_string(config_.hybrid.linear_value_head_dim) +
         " is wider than the CPU backend's Gated DeltaNet takes (" + std::to_string(cpu::kMaxValueHeadDim) + ")");
}

int64_t Qwen35CpuModel::weight_bytes_per_step() const {
  int64_t total = weights_.lm_head.n_stored_bytes();
  for (const auto& l : weights_.layers)
    for (const WeightMatrix* w : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.in_proj_qkv, &l.in_proj_z,
                                  &l.in_proj_b, &l.in_proj_a, &l.out_proj, &l.gate_proj, &l.up_proj, &l.down_proj})
      total += w->n_stored_bytes();
  return total;
}

void Qwen35CpuModel::set_tap_layers(std::vector<int> layers) { taps_.set_layers(std::move(layers), config_.n_layers); }

std::shared_ptr<DFlashDrafter> Qwen35CpuModel::load_drafter(const std::string& drafter_dir, int n_threads) const {
  return std::make_shared<CpuDFlashDrafter>(drafter_dir, config_, weights_.embed_tokens, weights_.lm_head, n_threads);
}

std::shared_ptr<MtpHead> Qwen35CpuModel::load_mtp_head(int n_threads) const {
  if (!weights_.has_mtp) fail(weights_.mtp_missing + ": drafting with MTP needs a checkpoint that has one");
  return std::make_shared<CpuMtpHead>(config_, weights_, storage_, n_threads);
}

std::unique_ptr<KvStorage> Qwen35CpuModel::make_kv_storage(int64_t n_slots) const {
  return std::make_unique<HybridStateStorage>(config_, n_slots);
}

int64_t Qwen35CpuModel::recurrent_state_bytes() const { return hybrid_lane_bytes(config_); }

std::string Qwen35CpuModel::recurrent_state_format() const { return hybrid_lane_format(config_); }

// Folds the committed positions up to `position` into the lane's state with the pass's own
// kernels (the next pass replays only what follows).
HybridStateStorage& Qwen35CpuModel::fold_recurrent_state(KvCache& kv, int32_t lane, int64_t position) {
  HybridStateStorage& storage = kv.storage_as<HybridStateStorage>();
  LaneRecurrence& state = storage.lane(lane);
  LaneProgress& progress = storage.tags().lane(lane);
  if (position < progress.position)
    fail_internal("lane " + std::to_string(lane) + "'s recurrent state is at position " +
                  std::to_string(progress.position) + ", past " + std::to_string(position) + " (it does not roll back)");
  const std::vector<int32_t> replay = committed_rows(kv, storage.tags(), lane, position);
  int64_t linear_index = 0;
  for (const Qwen35LayerWeights& w : weights_.layers)
    if (w.kind == LayerKind::linear_attention) replay_lane(w, linear_index++, replay, state);
  progress.position = position;
  return storage;
}

void Qwen35CpuModel::read_recurrent_state(KvCache& kv, int32_t lane, int64_t position, uint8_t* out) {
  fold_recurrent_state(kv, lane, position).read_lane(lane, out);
}

void Qwen35CpuModel::keep_recurrent_state(KvCache& kv, int32_t lane, int64_t position) {
  fold_recurrent_state(kv, lane, position).keep_lane(lane);
}

void Qwen35CpuModel::read_kept_recurrent_state(KvCache& kv, int32_t lane, uint8_t* out) {
  kv.storage_as<HybridStateStorage>().read_kept_lane(lane, out);
}

void Qwen35CpuModel::write_recurrent_state(KvCache& kv, int32_t lane, int64_t position, const uint8_t* in) {
  kv.storage_as<HybridStateStorage>().write_lane(lane, position, in);
}

void Qwen35CpuModel::attention_block(int64_t layer, int64_t attention_index, HybridStateStorage& kv) {
  const cpu::AttentionRows rows{positions_.data(), row_slots_.data(), key_slot_lists_.data(), key_slots_.n_keys.data()};
  cpu::gated_attention(weights_.layers[size_t(layer)], config_, inverse_frequencies_, rows, int64_t(positions_.size()),
                       kv.slice(attention_index), hidden_.data(), scratch_, pool_);
}

// Folds the lane's committed rows of its previous pass into its state and conv history, token by
// token, with the same kernels as the pass.
void Qwen35CpuModel::replay_lane(const Qwen35LayerWeights& w, int64_t linear_index, const std::vector<int32_t>& replay,
                                 LaneRecurrence& state) {
  const HybridConfig& h = config_.hybrid;
  const int64_t n = int64_t(replay.size());
  if (n == 0) return;
  const int64_t channels = h.conv_dim(), history = h.conv_kernel - 1, stride = input_stride(h);
  float* conv_history = state.conv.data() + linear_index * history * channels;
  const std::vector<float>& inputs = state.inputs[size_t(linear_index)];
  // The timeline: the history, then the replayed rows' pre-conv channels.
  auto timeline = [&](int64_t t) -> const float* {
    return t < history ? conv_history + t * channels : inputs.data() + replay[size_t(t - history)] * stride;
  };
  std::vector<float> prepared(static_cast<size_t>(n * channels));
  pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
    std::vector<const float*> window(static_cast<size_t>(h.conv_kernel));
    for (int64_t j = begin; j < end; ++j) {
      for (int64_t i = 0; i < h.conv_kernel; ++i) window[size_t(i)] = timeline(j + i);
      prepare_token(w, h, window.data(), prepared.data() + j * channels);
    }
  });
  std::vector<float> new_history(static_cast<size_t>(history * channels));
  for (int64_t i = 0; i < history; ++i)
    std::memcpy(new_history.data() + i * channels, timeline(n + i), size_t(channels) * sizeof(float));
  std::memcpy(conv_history, new_history.data(), new_history.size() * sizeof(float));

  const int64_t dk = h.linear_key_head_dim, dv = h.linear_value_head_dim;
  const int64_t heads_per_key = h.linear_n_value_heads / h.linear_n_key_heads;
  pool_.parallel_for(h.linear_n_value_heads, [&](int64_t begin, int64_t end) {
    std::vector<float> out(static_cast<size_t>(dv));
    for (int64_t head = begin; head < end; ++head) {
      float* s = state.state.data() + (linear_index * h.linear_n_value_heads + head) * dk * dv;
      const int64_t key_head = head / heads_per_key;
      for (int64_t j = 0; j < n; ++j) {
        const float* token = prepared.data() + j * channels;
        const float* record = inputs.data() + replay[size_t(j)] * stride + channels;
        cpu::gated_delta_step(s, token + key_head * dk, token + h.linear_key_dim() + key_head * dk,
                              token + 2 * h.linear_key_dim() + head * dv, record[head],
                              record[h.linear_n_value_heads + head], dk, dv, out.data());
      }
    }
  });
}

// Every row's recurrence from its parent's state (or its lane's), parallel over value heads. A row's
// state buffer passes to its last child in place and is copied for the others, so a chain of any
// length holds one buffer per head and a tree one per open branch.
void Qwen35CpuModel::recurrence(int64_t linear_index, const Batch& batch, HybridStateStorage& storage) {
  const HybridConfig& h = config_.hybrid;
  const int64_t n_rows = int64_t(batch.rows.size());
  const int64_t dk = h.linear_key_head_dim, dv = h.linear_value_head_dim, channels = h.conv_dim();
  const int64_t heads_per_key = h.linear_n_value_heads / h.linear_n_key_heads;
  const int64_t state_size = dk * dv;
  pool_.parallel_for(h.linear_n_value_heads, [&](int64_t begin, int64_t end) {
    std::vector<std::vector<float>> live(static_cast<size_t>(n_rows));
    std::vector<std::vector<float>> spare;
    for (int64_t head = begin; head < end; ++head) {
      const int64_t key_head = head / heads_per_key;
      for (int64_t r = 0; r < n_rows; ++r) {
        const BatchRow& row = batch.rows[size_t(r)];
        std::vector<float> s;
        if (row.parent >= 0 && plan_.last_child[size_t(row.parent)] == int32_t(r)) {
          s = std::move(live[size_t(row.parent)]);
        } else {
          if (!spare.empty()) {
            s = std::move(spare.back());
            spare.pop_back();
          }
          const float* from = row.parent >= 0
                                  ? live[size_t(row.parent)].data()
                                  : storage.lane(row.lane).state.data() +
                                        (linear_index * h.linear_n_value_heads + head) * state_size;
          s.assign(from, from + state_size);
        }
        const float* token = conv_out_.data() + r * channels;
        const float* g_beta = decay_beta_.data() + r * 2 * h.linear_n_value_heads;
        cpu::gated_delta_step(s.data(), token + key_head * dk, token + h.linear_key_dim() + key_head * dk,
                              token + 2 * h.linear_key_dim() + head * dv, g_beta[head],
                              g_beta[h.linear_n_value_heads + head], dk, dv,
                              scratch_.attn_out.data() + r * h.linear_value_dim() + head * dv);
        if (plan_.last_child[size_t(r)] >= 0) {
          live[size_t(r)] = std::move(s);
        } else {
          spare.push_back(std::move(s));
        }
      }
      for (auto& buffer : live)
        if (!buffer.empty()) spare.push_back(std::move(buffer));
    }
  });
}

void Qwen35CpuModel::delta_net_block(int64_t layer, int64_t linear_index, const Batch& batch,
                                     HybridStateStorage& storage) {
  const auto& w = weights_.layers[size_t(layer)];
  const HybridConfig& h = config_.hybrid;
  const int64_t n_rows = int64_t(batch.rows.size());
  const int64_t hidden = config_.hidden_size, channels = h.conv_dim(), n_value_heads = h.linear_n_value_heads;
  const int64_t history = h.conv_kernel - 1, stride = input_stride(h);

  cpu::rms_norm(hidden_.data(), n_rows, hidden, w.input_norm, config_.rms_norm_eps, scratch_.normed.data());
  cpu::linear(scratch_.normed.data(), n_rows, w.in_proj_qkv, mixed_.data(), pool_);
  cpu::linear(scratch_.normed.data(), n_rows, w.in_proj_z, z_.data(), pool_);
  cpu::linear(scratch_.normed.data(), n_rows, w.in_proj_b, b_.data(), pool_);
  cpu::linear(scratch_.normed.data(), n_rows, w.in_proj_a, a_.data(), pool_);
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t head = 0; head < n_value_heads; ++head) {
      float* g_beta = decay_beta_.data() + r * 2 * n_value_heads;
      g_beta[head] = cpu::delta_decay(a_[size_t(r * n_value_heads + head)], w.a_log[head], w.dt_bias[head]);
      g_beta[n_value_heads + head] = cpu::delta_beta(b_[size_t(r * n_value_heads + head)]);
    }

  // Each lane's state catches up with its committed positions, then keeps this pass's inputs.
  for (const HybridLanePass& pass : plan_.lanes) {
    LaneRecurrence& state = storage.lane(pass.lane);
    replay_lane(w, linear_index, pass.replay, state);
    std::vector<float>& inputs = state.inputs[size_t(linear_index)];
    inputs.resize(pass.rows.size() * size_t(stride));
    for (size_t i = 0; i < pass.rows.size(); ++i) {
      const int64_t r = pass.rows[i];
      std::memcpy(inputs.data() + i * size_t(stride), mixed_.data() + r * channels, size_t(channels) * sizeof(float));
      std::memcpy(inputs.data() + i * size_t(stride) + size_t(channels), decay_beta_.data() + r * 2 * n_value_heads,
                  size_t(2 * n_value_heads) * sizeof(float));
    }
  }

  pool_.parallel_for(n_rows, [&](int64_t begin, int64_t end) {
    std::vector<const float*> window(static_cast<size_t>(h.conv_kernel));
    for (int64_t r = begin; r < end; ++r) {
      const float* conv_history = storage.lane(batch.rows[size_t(r)].lane).conv.data() +
                                  linear_index * history * channels;
      for (int64_t i = 0; i < history; ++i) {
        const int32_t source = plan_.conv_sources[size_t(r * history + (history - i) - 1)];
        window[size_t(i)] = source >= 0 ? mixed_.data() + source * channels : conv_history + (-1 - source) * channels;
      }
      window[size_t(history)] = mixed_.data() + r * channels;
      prepare_token(w, h, window.data(), conv_out_.data() + r * channels);
    }
  });
  recurrence(linear_index, batch, storage);

  // Gated RMSNorm per value head (a plain gain), times silu(z), then the output projection.
  const int64_t value_dim = h.linear_value_dim();
  cpu::rms_norm(scratch_.attn_out.data(), n_rows * n_value_heads, h.linear_value_head_dim, w.gated_norm,
                config_.rms_norm_eps, scratch_.attn_out.data());
  for (int64_t i = 0; i < n_rows * value_dim; ++i)
    scratch_.attn_out[size_t(i)] = scratch_.attn_out[size_t(i)] * cpu::silu(z_[size_t(i)]);
  cpu::linear(scratch_.attn_out.data(), n_rows, w.out_proj, scratch_.proj.data(), pool_);
  for (int64_t i = 0; i < n_rows * hidden; ++i) hidden_[size_t(i)] += scratch_.proj[size_t(i)];
}

void Qwen35CpuModel::forward(const Batch& batch, KvCache& kv, float* logits) {
  const int64_t n_rows = int64_t(batch.rows.size());
  if (n_rows == 0) return;
  const HybridConfig& h = config_.hybrid;
  const int64_t hidden = config_.hidden_size;
  const size_t rows = size_t(n_rows);
  hidden_.resize(rows * size_t(hidden));
  scratch_.resize(config_, n_rows, h.linear_value_dim());
  mixed_.resize(rows * size_t(h.conv_dim()));
  conv_out_.resize(rows * size_t(h.conv_dim()));
  z_.resize(rows * size_t(h.linear_value_dim()));
  b_.resize(rows * size_t(h.linear_n_value_heads));
  a_.resize(rows * size_t(h.linear_n_value_heads));
  decay_beta_.resize(rows * size_t(2 * h.linear_n_value_heads));

  batch.check_token_ids(config_.vocab_size);
  HybridStateStorage& storage = kv.storage_as<HybridStateStorage>();
  positions_.resize(rows);
  row_slots_.resize(rows);
  std::vector<int32_t> tokens(rows);
  for (size_t r = 0; r < rows; ++r) {
    tokens[r] = batch.rows[r].token;
    positions_[r] = batch.rows[r].pos;
    row_slots_[r] = batch.rows[r].kv_slot;
  }
  resolve_key_slots(batch, kv, key_slots_);  // also checks every parent
  key_slot_lists_.resize(rows);
  for (size_t r = 0; r < rows; ++r) key_slot_lists_[r] = key_slots_.slots.data() + key_slots_.offsets[r];
  plan_hybrid_pass(batch, kv, storage.tags(), h.conv_kernel - 1, ++n_passes_,
                   [&](int32_t lane) {
                     storage.lane(lane);
                     storage.reset_lane(lane);
                   }, &plan_);
  cpu::embedding_rows(weights_.embed_tokens, tokens.data(), n_rows, hidden_.data());

  int64_t attention_index = 0, linear_index = 0;
  taps_.begin(n_rows, hidden);
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    if (weights_.layers[size_t(layer)].kind == LayerKind::full_attention) {
      attention_block(layer, attention_index++, storage);
    } else {
      delta_net_block(layer, linear_index++, batch, storage);
    }
    cpu::swiglu_mlp(weights_.layers[size_t(layer)], config_, n_rows, hidden_.data(), scratch_, pool_);
    taps_.after_layer(layer, hidden_.data(), n_rows);
  }
  finish_hybrid_pass(batch, plan_, storage.tags());

  // Only rows that asked for logits pay for the final norm and the LM head.
  int64_t n_out = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    if (!batch.rows[size_t(r)].wants_logits) continue;
    if (n_out != r)
      std::memcpy(hidden_.data() + n_out * hidden, hidden_.data() + r * hidden, size_t(hidden) * sizeof(float));
    ++n_out;
  }
  if (n_out == 0) return;
  cpu::rms_norm(hidden_.data(), n_out, hidden, weights_.final_norm, config_.rms_norm_eps, scratch_.normed.data());
  cpu::linear(scratch_.normed.data(), n_out, weights_.lm_head, logits, pool_);
}

}  // namespace tf
