// The DFlash drafter's context and block forward on the GPU.
#include "backends/cuda/cuda_dflash_drafter.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cuda/activation.cuh"
#include "backends/cuda/add.cuh"
#include "backends/cuda/attention.cuh"
#include "backends/cuda/embedding.cuh"
#include "backends/cuda/fused_norms.cuh"
#include "backends/cuda/linear.cuh"
#include "backends/cuda/rms_norm.cuh"
#include "backends/cuda/top_k.cuh"
#include "core/dtype.h"
#include "core/error.h"
#include "loader/checkpoint.h"
#include "loader/config_fields.h"
#include "models/rope_frequencies.h"

namespace tf::cuda {
namespace {

// The drafter's layers in the shape upload_qwen3_layers reads.
ModelConfig layer_shape(const DFlashConfig& c) {
  ModelConfig shape;
  shape.hidden_size = c.hidden_size;
  shape.intermediate_size = c.intermediate_size;
  shape.n_layers = c.n_layers;
  shape.n_heads = c.n_heads;
  shape.n_kv_heads = c.n_kv_heads;
  shape.head_dim = c.head_dim;
  shape.vocab_size = c.vocab_size;
  return shape;
}

}  // namespace

CudaDFlashDrafter::CudaDFlashDrafter(const std::string& drafter_dir, const ModelConfig& target_config,
                                     const Qwen3CudaWeights& target_weights)
    : DFlashDrafter(DFlashConfig::load(drafter_dir)), target_(target_weights) {
  config_.validate(drafter_dir + "/config.json", target_config);
  if (config_.head_dim % 8 != 0 || config_.head_dim > 256)
    fail_field("head_dim", drafter_dir + "/config.json", "must be a multiple of 8 and at most 256 on the GPU");
  // The checkpoint is mapped only while its tensors are copied to the GPU.
  const Checkpoint checkpoint = Checkpoint::open(drafter_dir);
  const DFlashWeights weights = bind_dflash_weights(checkpoint, config_);
  fc_ = upload_matrix(weights.fc);
  hidden_norm_ = upload_vector(weights.hidden_norm);
  final_norm_ = upload_vector(weights.final_norm);
  layers_ = upload_qwen3_layers(weights.layers, layer_shape(config_));
  inverse_frequencies_ = DeviceBuffer<float>(size_t(config_.head_dim / 2));
  inverse_frequencies_.copy_from_host(rope_inverse_frequencies(config_.head_dim, config_.rope_theta));
  logits_ = DeviceBuffer<float>(size_t(n_block_logits() * config_.vocab_size));
  const size_t n_guesses = size_t(n_block_logits() * kTopGuesses);
  top_ids_ = DeviceBuffer<int32_t>(n_guesses);
  top_probabilities_ = DeviceBuffer<float>(n_guesses);
  host_top_ids_ = PinnedHostBuffer<int32_t>(n_guesses);
  host_top_probabilities_ = PinnedHostBuffer<float>(n_guesses);
}

CudaDFlashDrafter::ContextStorage& CudaDFlashDrafter::ensure_room(DrafterContext& context, int64_t n_slots) {
  ContextStorage& storage = storage_of<ContextStorage>(context);
  if (n_slots <= storage.n_slots) return storage;
  const int64_t grown = std::max(n_slots, 2 * storage.n_slots);
  const size_t row_bytes = size_t(config_.kv_dim()) * sizeof(uint16_t);
  const size_t kept_bytes = size_t(context.size()) * row_bytes;
  std::vector<DeviceBuffer<uint16_t>> keys, values;
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    keys.emplace_back(size_t(grown * config_.kv_dim()));
    values.emplace_back(size_t(grown * config_.kv_dim()));
    if (kept_bytes == 0) continue;
    TF_CUDA_CHECK(cudaMemcpyAsync(keys.back().data(), storage.keys[size_t(layer)].data(), kept_bytes,
                                  cudaMemcpyDeviceToDevice, stream_.get()));
    TF_CUDA_CHECK(cudaMemcpyAsync(values.back().data(), storage.values[size_t(layer)].data(), kept_bytes,
                                  cudaMemcpyDeviceToDevice, stream_.get()));
  }
  stream_.synchronize();  // the old buffers are freed next
  storage.keys = std::move(keys);
  storage.values = std::move(values);
  storage.n_slots = grown;
  return storage;
}

void CudaDFlashDrafter::reserve(int64_t n_rows, int64_t n_keys) {
  grow_staged_upload(row_data_, int_staging_, 5 * n_rows + n_keys, stream_.get());
  if (n_rows <= row_capacity_) return;
  stream_.synchronize();
  const int64_t rows = std::max(n_rows, 2 * row_capacity_);
  const int64_t hidden = config_.hidden_size, q_dim = config_.q_dim();
  taps_ = DeviceBuffer<uint16_t>(size_t(rows * config_.tap_width()));
  tap_staging_ = PinnedHostBuffer<uint16_t>(size_t(rows * config_.tap_width()));
  hidden_ = DeviceBuffer<uint16_t>(size_t(rows * hidden));
  normed_ = DeviceBuffer<uint16_t>(size_t(rows * hidden));
  qkv_ = DeviceBuffer<uint16_t>(size_t(rows * (q_dim + 2 * config_.kv_dim())));
  q_ = DeviceBuffer<uint16_t>(size_t(rows * q_dim));
  attn_out_ = DeviceBuffer<uint16_t>(size_t(rows * q_dim));
  proj_ = DeviceBuffer<uint16_t>(size_t(rows * hidden));
  mlp_act_ = DeviceBuffer<uint16_t>(size_t(rows * config_.intermediate_size));
  const AttentionShape shape = attention_shape_of(config_);
  attention_scratch_ = DeviceBuffer<float>(size_t(attention_scratch_floats(rows, shape)));
  row_capacity_ = rows;
}

void CudaDFlashDrafter::upload_ints(const std::vector<int32_t>& values) {
  stream_.synchronize();  // the staging buffer's last copy has landed
  std::memcpy(int_staging_.data(), values.data(), values.size() * sizeof(int32_t));
  TF_CUDA_CHECK(cudaMemcpyAsync(row_data_.data(), int_staging_.data(), values.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream_.get()));
}

void CudaDFlashDrafter::write_kv(ContextStorage& storage, int64_t layer, const uint16_t* inputs, int64_t n_rows,
                                 int64_t positions_at, int64_t slots_at) {
  const Qwen3CudaLayerWeights& w = layers_[size_t(layer)];
  const int64_t qkv_dim = config_.q_dim() + 2 * config_.kv_dim();
  linear(inputs, n_rows, w.qkv_proj.view(), qkv_dim, config_.hidden_size, qkv_.data(), LinearOutput::bf16,
         stream_.get());
  qk_norm_rope_to_cache_bf16(qkv_.data(), n_rows, {int(config_.n_heads), int(config_.n_kv_heads), int(config_.head_dim)},
                             w.q_norm.data(), w.k_norm.data(), config_.rms_norm_eps, row_data_.data() + positions_at,
                             inverse_frequencies_.data(), row_data_.data() + slots_at, q_.data(),
                             storage.keys[size_t(layer)].data(), storage.values[size_t(layer)].data(), stream_.get());
}

void CudaDFlashDrafter::append_context(DrafterContext& context, const float* taps, int64_t n_tokens) {
  if (n_tokens <= 0) return;
  const int64_t first = context.size(), hidden = config_.hidden_size, width = config_.tap_width();
  ContextStorage& storage = ensure_room(context, first + n_tokens + config_.block_size);
  reserve(n_tokens, 0);
  // An entry's slot is its position: positions and slots are the same list.
  std::vector<int32_t> positions(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) positions[size_t(i)] = int32_t(first + i);
  upload_ints(positions);
  // The target's taps were bf16 on the GPU: rounding them back is exact.
  for (int64_t i = 0; i < n_tokens * width; ++i) tap_staging_.data()[i] = f32_to_bf16(taps[i]);
  TF_CUDA_CHECK(cudaMemcpyAsync(taps_.data(), tap_staging_.data(), size_t(n_tokens * width) * sizeof(uint16_t),
                                cudaMemcpyHostToDevice, stream_.get()));
  linear(taps_.data(), n_tokens, fc_.view(), hidden, width, hidden_.data(), LinearOutput::bf16, stream_.get());
  rms_norm_bf16(hidden_.data(), n_tokens, hidden, hidden_norm_.data(), config_.rms_norm_eps, hidden_.data(),
                stream_.get());
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) write_kv(storage, layer, hidden_.data(), n_tokens, 0, 0);
  set_size(context, first + n_tokens);
}

void CudaDFlashDrafter::run_block(DrafterContext& context, int32_t last_token, int64_t position) {
  check_block(context, last_token, position);
  const int64_t n_rows = config_.block_size, n_keys = position + n_rows;
  const int64_t hidden = config_.hidden_size, q_dim = config_.q_dim(), inter = config_.intermediate_size;
  const float eps = config_.rms_norm_eps;
  cudaStream_t stream = stream_.get();
  // Block K/V live in the scratch slots just past the committed entries.
  const int64_t block_slot = context.size();
  ContextStorage& storage = ensure_room(context, block_slot + n_rows);
  reserve(n_rows, n_keys);

  // row_data_: positions, slots, tokens, key offsets, key counts (n_rows each), then the key list
  // every row shares: context 0..position-1, then the block.
  std::vector<int32_t> ints(size_t(5 * n_rows + n_keys));
  int32_t* positions = ints.data();
  int32_t* slots = positions + n_rows;
  int32_t* tokens = slots + n_rows;
  int32_t* key_offsets = tokens + n_rows;
  int32_t* key_counts = key_offsets + n_rows;
  int32_t* key_list = key_counts + n_rows;
  for (int64_t i = 0; i < n_rows; ++i) {
    positions[i] = int32_t(position + i);
    slots[i] = int32_t(block_slot + i);
    tokens[i] = i == 0 ? last_token : config_.mask_token_id;
    key_offsets[i] = 0;
    key_counts[i] = int32_t(n_keys);
  }
  for (int64_t j = 0; j < position; ++j) key_list[j] = int32_t(j);
  for (int64_t i = 0; i < n_rows; ++i) key_list[position + i] = int32_t(block_slot + i);
  upload_ints(ints);
  const int32_t* device_ints = row_data_.data();

  const AttentionShape shape = attention_shape_of(config_);
  embedding(target_.embed_tokens.view(), config_.vocab_size, hidden, device_ints + 2 * n_rows, n_rows, hidden_.data(),
            stream);
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    const Qwen3CudaLayerWeights& w = layers_[size_t(layer)];
    // The previous layer's MLP output joins the residual stream here (the first layer has none).
    add_rms_norm_bf16(hidden_.data(), layer > 0 ? proj_.data() : nullptr, n_rows, hidden, w.input_norm.data(), eps,
                      normed_.data(), stream);
    write_kv(storage, layer, normed_.data(), n_rows, 0, n_rows);
    attention_bf16(q_.data(), n_rows, storage.keys[size_t(layer)].data(), storage.values[size_t(layer)].data(),
                   device_ints + 5 * n_rows, device_ints + 3 * n_rows, device_ints + 4 * n_rows, shape,
                   attn_out_.data(), stream, {attention_scratch_.data(), int64_t(attention_scratch_.size())});
    linear(attn_out_.data(), n_rows, w.o_proj.view(), hidden, q_dim, proj_.data(), LinearOutput::bf16, stream);
    add_rms_norm_bf16(hidden_.data(), proj_.data(), n_rows, hidden, w.post_attention_norm.data(), eps, normed_.data(),
                      stream);
    linear(normed_.data(), n_rows, w.gate_up_proj.view(), 2 * inter, hidden, mlp_act_.data(),
           LinearOutput::swiglu_bf16, stream);
    linear(mlp_act_.data(), n_rows, w.down_proj.view(), hidden, inter, proj_.data(), LinearOutput::bf16, stream);
  }
  add_bf16(hidden_.data(), proj_.data(), n_rows * hidden, hidden_.data(), stream);
  // Row 0 holds the known token; only rows 1..B-1 predict.
  const int64_t n_predicting = n_block_logits();
  rms_norm_bf16(hidden_.data() + hidden, n_predicting, hidden, final_norm_.data(), eps, normed_.data(), stream);
  linear(normed_.data(), n_predicting, target_.lm_head().view(), config_.vocab_size, hidden, logits_.data(),
         LinearOutput::f32, stream);
  // A proposer reads a row's few likeliest tokens: those cross to the host, not the logits.
  top_k_softmax_f32(logits_.data(), n_predicting, config_.vocab_size, kTopGuesses, top_ids_.data(),
                    top_probabilities_.data(), stream);
  TF_CUDA_CHECK(cudaMemcpyAsync(host_top_ids_.data(), top_ids_.data(), top_ids_.n_bytes(), cudaMemcpyDeviceToHost,
                                stream));
  TF_CUDA_CHECK(cudaMemcpyAsync(host_top_probabilities_.data(), top_probabilities_.data(), top_probabilities_.n_bytes(),
                                cudaMemcpyDeviceToHost, stream));
  stream_.synchronize();
  has_block_ = true;
}

void CudaDFlashDrafter::check_row(int64_t row) const {
  if (row < 0 || row >= n_block_logits() || !has_block_)
    fail_internal("drafter block row " + std::to_string(row) + " requested without a block");
}

void CudaDFlashDrafter::block_logits(int64_t row, float* logits) {
  check_row(row);
  const size_t n_vocab = size_t(config_.vocab_size);
  TF_CUDA_CHECK(cudaMemcpy(logits, logits_.data() + size_t(row) * n_vocab, n_vocab * sizeof(float),
                           cudaMemcpyDeviceToHost));
}

std::vector<DFlashDrafter::Guess> CudaDFlashDrafter::block_top(int64_t row, int64_t k) {
  check_row(row);
  if (k > kTopGuesses) return DFlashDrafter::block_top(row, k);
  std::vector<Guess> guesses;
  for (int64_t i = 0; i < std::min<int64_t>(k, config_.vocab_size); ++i)
    guesses.push_back({host_top_ids_.data()[row * kTopGuesses + i], host_top_probabilities_.data()[row * kTopGuesses + i]});
  return guesses;
}

}  // namespace tf::cuda
