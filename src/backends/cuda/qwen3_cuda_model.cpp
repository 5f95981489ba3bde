

#include "backends/cuda/qwen3_cuda_model.h"

#include <cmath>
#include <cstring>

#include "backends/cuda/add.cuh"
#include "backends/cuda/argmax.cuh"
#include "backends/cuda/attention.cuh"
#include "backends/cuda/cuda_dflash_drafter.h"
#include "backends/cuda/cuda_kv_storage.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/embedding.cuh"
#include "backends/cuda/fused_norms.cuh"
#include "backends/cuda/linear.cuh"
#include "backends/cuda/overlapped_launch.cuh"
#include "backends/cuda/penalties.cuh"
#include "backends/cuda/rms_norm.cuh"
#include "models/rope_frequencies.h"

namespace tf::cuda {
namespace {

constexpr int kRowFields = 6;  // tokens, positions, kv_slots, key_offsets, n_keys, logit_rows
// Then the attention groups: their count and n_rows + 1 starts at most; then the key slots.
int64_t group_ints(int64_t n_rows) { return n_rows + 2; }

// Launches dominate small forwards; past this many rows the kernels dominate and a graph per
// row count would only cost memory.
constexpr int64_t kMaxGraphRows = 256;
// Distinct shapes kept; a workload that cycles through more starts over (capturing is cheap).
constexpr size_t kMaxGraphs = 64;
// Overlapped launches measured faster up to this many rows (decode: 170 against 166 tok/s on
// qwen3-8b) and slower for 16-row verify rounds (9.3 against 8.1 ms); h200-cuda-model-qwen3-8b.md.
constexpr int64_t kMaxOverlappedRows = 8;

}  // namespace

Qwen3CudaModel::Qwen3CudaModel(ModelConfig config, Qwen3CudaWeights weights, CudaModelOptions options)
    : config_(std::move(config)), weights_(std::move(weights)), options_(options) {
  // A hybrid turns only the first rotary_dim dimensions of each head.
  const int64_t rotary_dim = config_.is_hybrid() ? config_.hybrid.rotary_dim : config_.head_dim;
  inverse_frequencies_ = DeviceBuffer<float>(size_t(rotary_dim / 2));
  inverse_frequencies_.copy_from_host(rope_inverse_frequencies(rotary_dim, config_.rope_theta));
  prepare_linear_kernels();  // before any forward is captured
}

std::shared_ptr<DFlashDrafter> Qwen3CudaModel::load_drafter(const std::string& drafter_dir, int) const {
  return std::make_shared<CudaDFlashDrafter>(drafter_dir, config_, weights_);
}

int64_t Qwen3CudaModel::free_kv_memory_bytes() const {
  size_t free_bytes = 0, total_bytes = 0;
  TF_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return int64_t(free_bytes);
}

std::unique_ptr<KvStorage> Qwen3CudaModel::make_kv_storage(int64_t n_slots) const {
  return std::make_unique<CudaKvStorage>(config_.n_layers, config_.kv_dim(), n_slots);
}

int64_t Qwen3CudaModel::weight_bytes_per_step() const {
  int64_t total = weights_.lm_head().n_bytes();
  for (const auto& l : weights_.layers)
    total += l.qkv_proj.n_bytes() + l.o_proj.n_bytes() + l.gate_up_proj.n_bytes() + l.down_proj.n_bytes();
  return total;
}

void Qwen3CudaModel::set_tap_layers(std::vector<int> layers) {
  for (int layer : layers)
    if (layer < 0 || layer >= config_.n_layers)
      fail("tap layer " + std::to_string(layer) + " is outside the model's " + std::to_string(config_.n_layers) +
           " layers");
  tap_layers_ = std::move(layers);
  taps_.clear();
  graphs_.clear();
  tap_rows_ = DeviceBuffer<uint16_t>();
  tap_staging_ = PinnedHostBuffer<uint16_t>();
}

void Qwen3CudaModel::reserve(int64_t n_rows, int64_t n_keys) {
  const size_t n_ints = size_t(kRowFields * n_rows + group_ints(n_rows) + n_keys);
  const size_t n_taps = tap_layers_.size() * size_t(n_rows * config_.hidden_size);
  const size_t n_attention_scratch = size_t(attention_scratch_floats(n_rows, attention_shape_of(config_)));
  if (row_staging_.size() < n_ints || tap_rows_.size() < n_taps || attention_scratch_.size() < n_attention_scratch ||
      n_rows > row_capacity_)
    graphs_.clear();  // their pointers are about to move
  if (row_staging_.size() < n_ints) {
    row_staging_ = PinnedHostBuffer<int32_t>(n_ints + n_ints / 2);
    row_data_ = DeviceBuffer<int32_t>(row_staging_.size());
  }
  if (tap_rows_.size() < n_taps) {
    tap_rows_ = DeviceBuffer<uint16_t>(n_taps);
    tap_staging_ = PinnedHostBuffer<uint16_t>(n_taps);
  }
  if (attention_scratch_.size() < n_attention_scratch) attention_scratch_ = DeviceBuffer<float>(n_attention_scratch);
  if (n_rows <= row_capacity_) return;
  const size_t rows = size_t(n_rows);
  const size_t hidden = size_t(config_.hidden_size), q_dim = size_t(config_.q_dim());
  const size_t kv_dim = size_t(config_.kv_dim()), inter = size_t(config_.intermediate_size);
  hidden_ = DeviceBuffer<uint16_t>(rows * hidden);
  normed_ = DeviceBuffer<uint16_t>(rows * hidden);
  qkv_ = DeviceBuffer<uint16_t>(rows * (q_dim + 2 * kv_dim));
  q_ = DeviceBuffer<uint16_t>(rows * q_dim);
  attn_out_ = DeviceBuffer<uint16_t>(rows * q_dim);
  proj_ = DeviceBuffer<uint16_t>(rows * hidden);
  mlp_act_ = DeviceBuffer<uint16_t>(rows * inter);
  logits_ = DeviceBuffer<float>(rows * size_t(config_.vocab_size));
  argmax_ = DeviceBuffer<int32_t>(rows);
  argmax_staging_ = PinnedHostBuffer<int32_t>(rows);
  sampling_rows_ = DeviceBuffer<GpuSamplingRow>(rows);
  sampling_staging_ = PinnedHostBuffer<GpuSamplingRow>(rows);
  row_capacity_ = n_rows;
}

int64_t Qwen3CudaModel::upload_rows(const Batch& batch, const KvCache& kv) {
  const int64_t n_rows = int64_t(batch.rows.size());
  resolve_key_slots(batch, kv, key_slots_);
  reserve(n_rows, int64_t(key_slots_.slots.size()));
  int32_t* fields = row_staging_.data();
  int32_t* tokens = fields;
  int32_t* positions = fields + n_rows;
  int32_t* kv_slots = fields + 2 * n_rows;
  int32_t* logit_rows = fields + 5 * n_rows;
  int64_t n_logit_rows = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    const BatchRow& row = batch.rows[size_t(r)];
    tokens[r] = row.token;
    positions[r] = row.pos;
    kv_slots[r] = row.kv_slot;
    if (row.wants_logits) logit_rows[n_logit_rows++] = int32_t(r);
  }
  std::memcpy(fields + 3 * n_rows, key_slots_.offsets.data(), size_t(n_rows) * sizeof(int32_t));
  std::memcpy(fields + 4 * n_rows, key_slots_.n_keys.data(), size_t(n_rows) * sizeof(int32_t));
  // Attention groups: runs of chain rows (each row's parent the row before it, same lane), whose key
  // lists are each a prefix of the next, so one block serves them; their keys cut alike.
  int32_t* n_groups = fields + kRowFields * n_rows;
  int32_t* group_starts = n_groups + 1;
  const int64_t rows_per_group = attention_rows_per_group(attention_shape_of(config_));
  const std::vector<int32_t>& n_keys = key_slots_.n_keys;
  *n_groups = 0;
  for (int64_t r = 0, group_size = 0; r < n_rows; ++r, ++group_size) {
    const BatchRow& row = batch.rows[size_t(r)];
    const bool continues = r > 0 && row.parent == r - 1 && row.lane == batch.rows[size_t(r - 1)].lane &&
                           attention_chunks_per_split(n_keys[size_t(r)]) ==
                               attention_chunks_per_split(n_keys[size_t(r - 1)]) &&
                           group_size < rows_per_group;
    if (continues) continue;
    group_starts[(*n_groups)++] = int32_t(r);
    group_size = 0;
  }
  group_starts[*n_groups] = int32_t(n_rows);
  int32_t* slot_list = fields + kRowFields * n_rows + group_ints(n_rows);
  std::memcpy(slot_list, key_slots_.slots.data(), key_slots_.slots.size() * sizeof(int32_t));
  const size_t n_ints = size_t(kRowFields * n_rows + group_ints(n_rows)) + key_slots_.slots.size();
  TF_CUDA_CHECK(cudaMemcpyAsync(row_data_.data(), fields, n_ints * sizeof(int32_t), cudaMemcpyHostToDevice,
                                stream_.get()));

  const int32_t* device = row_data_.data();
  tokens_ = device;
  positions_ = device + n_rows;
  kv_slots_ = device + 2 * n_rows;
  key_offsets_ = device + 3 * n_rows;
  n_keys_ = device + 4 * n_rows;
  logit_rows_ = device + 5 * n_rows;
  n_groups_ = device + kRowFields * n_rows;
  group_starts_ = n_groups_ + 1;
  key_slot_list_ = device + kRowFields * n_rows + group_ints(n_rows);
  return n_logit_rows;
}

void Qwen3CudaModel::attention_block(int64_t layer, int64_t n_rows, CudaKvStorage& kv) {
  const auto& w = weights_.layers[size_t(layer)];
  const int64_t hidden = config_.hidden_size, q_dim = config_.q_dim(), qkv_dim = q_dim + 2 * config_.kv_dim();
  const float eps = config_.rms_norm_eps;
  cudaStream_t stream = stream_.get();

  // The previous block's output joins the residual stream here (the first layer has none).
  add_rms_norm_bf16(hidden_.data(), layer > 0 ? proj_.data() : nullptr, n_rows, hidden, w.input_norm.data(), eps,
                    normed_.data(), stream);
  if (layer > 0) keep_taps(layer - 1, n_rows);
  linear(normed_.data(), n_rows, w.qkv_proj.view(), qkv_dim, hidden, qkv_.data(), LinearOutput::bf16, stream);
  // Keys and values go to the cache first; attention reads every key from there in its bf16
  // storage type, this round's rows included, so a row sees the same numbers in any batch.
  qk_norm_rope_to_cache_bf16(qkv_.data(), n_rows,
                             {int(config_.n_heads), int(config_.n_kv_heads), int(config_.head_dim)}, w.q_norm.data(),
                             w.k_norm.data(), eps, positions_, inverse_frequencies_.data(), kv_slots_, q_.data(),
                             kv.keys(layer), kv.values(layer), stream);
  attention_bf16(q_.data(), n_rows, kv.keys(layer), kv.values(layer), key_slot_list_, key_offsets_, n_keys_,
                 attention_shape_of(config_), attn_out_.data(), stream,
                 {attention_scratch_.data(), int64_t(attention_scratch_.size())}, {group_starts_, n_groups_});
  linear(attn_out_.data(), n_rows, w.o_proj.view(), hidden, q_dim, proj_.data(), LinearOutput::bf16, stream);
}

void Qwen3CudaModel::mlp_block(const DeviceBuffer<uint16_t>& norm, const CudaMatrix& gate_up, const CudaMatrix& down,
                               int64_t n_rows) {
  const int64_t hidden = config_.hidden_size, inter = config_.intermediate_size;
  cudaStream_t stream = stream_.get();
  add_rms_norm_bf16(hidden_.data(), proj_.data(), n_rows, hidden, norm.data(), config_.rms_norm_eps, normed_.data(),
                    stream);
  linear(normed_.data(), n_rows, gate_up.view(), 2 * inter, hidden, mlp_act_.data(), LinearOutput::swiglu_bf16, stream);
  linear(mlp_act_.data(), n_rows, down.view(), hidden, inter, proj_.data(), LinearOutput::bf16, stream);
}

void Qwen3CudaModel::enqueue_decoder(int64_t n_rows, KvCache& kv) {
  CudaKvStorage& storage = kv.storage_as<CudaKvStorage>();
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    const auto& w = weights_.layers[size_t(layer)];
    attention_block(layer, n_rows, storage);
    mlp_block(w.post_attention_norm, w.gate_up_proj, w.down_proj, n_rows);
  }
}

void Qwen3CudaModel::keep_taps(int64_t layer, int64_t n_rows) {
  const size_t row_bytes = size_t(config_.hidden_size) * sizeof(uint16_t);
  for (size_t t = 0; t < tap_layers_.size(); ++t) {
    if (tap_layers_[t] != layer) continue;
    TF_CUDA_CHECK(cudaMemcpyAsync(tap_rows_.data() + int64_t(t) * n_rows * config_.hidden_size, hidden_.data(),
                                  size_t(n_rows) * row_bytes, cudaMemcpyDeviceToDevice, stream_.get()));
  }
}

void Qwen3CudaModel::unpack_taps(int64_t n_rows) {
  const int64_t hidden = config_.hidden_size, n_taps = int64_t(tap_layers_.size());
  // [n_taps][n_rows][hidden] bf16 staged from the device -> [n_rows][n_taps * hidden] f32, as the CPU model keeps them.
  taps_.resize(size_t(n_taps * n_rows * hidden));
  for (int64_t t = 0; t < n_taps; ++t)
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint16_t* from = tap_staging_.data() + (t * n_rows + r) * hidden;
      float* to = taps_.data() + (r * n_taps + t) * hidden;
      for (int64_t i = 0; i < hidden; ++i) to[i] = bf16_to_f32(from[i]);
    }
}

void Qwen3CudaModel::enqueue_layers(int64_t n_rows, int64_t n_logit_rows, KvCache& kv) {
  const int64_t hidden = config_.hidden_size;
  cudaStream_t stream = stream_.get();
  embedding(weights_.embed_tokens.view(), config_.vocab_size, hidden, tokens_, n_rows, hidden_.data(), stream);
  enqueue_decoder(n_rows, kv);
  add_bf16(hidden_.data(), proj_.data(), n_rows * hidden, hidden_.data(), stream);
  keep_taps(config_.n_layers - 1, n_rows);

  // Only rows that asked for logits pay for the final norm and the LM head: gathered first (the
  // embedding kernel is a row gather), so the LM head runs on n_logit_rows rows.
  if (n_logit_rows == 0) return;
  embedding_bf16(hidden_.data(), n_rows, hidden, logit_rows_, n_logit_rows, normed_.data(), stream);
  rms_norm_bf16(normed_.data(), n_logit_rows, hidden, weights_.final_norm.data(), config_.rms_norm_eps,
                normed_.data(), stream);
  linear(normed_.data(), n_logit_rows, weights_.lm_head().view(), config_.vocab_size, hidden, logits_.data(),
              LinearOutput::f32, stream);
  argmax_f32(logits_.data(), n_logit_rows, config_.vocab_size, argmax_.data(), stream);
}

int64_t Qwen3CudaModel::enqueue_forward(const Batch& batch, KvCache& kv) {
  const int64_t n_rows = int64_t(batch.rows.size());
  batch.check_token_ids(config_.vocab_size);
  CudaKvStorage& storage = kv.storage_as<CudaKvStorage>();
  const int64_t n_logit_rows = upload_rows(batch, kv);
  prepare_forward(batch, kv);
  cudaStream_t stream = stream_.get();
  const OverlappedLaunchScope overlap(options_.use_overlapped_launches && n_rows <= kMaxOverlappedRows);  // a captured graph keeps the choice

  if (options_.use_graphs && n_rows <= kMaxGraphRows) {
    const GraphKey key{n_rows, n_logit_rows, storage.keys(0), storage.values(0), storage.n_slots(), graph_variant()};
    auto graph = graphs_.find(key);
    if (graph == graphs_.end()) {
      if (graphs_.size() >= kMaxGraphs) graphs_.clear();
      graph = graphs_.emplace(key, CapturedGraph::capture(stream, [&] { enqueue_layers(n_rows, n_logit_rows, kv); }))
                  .first;
    }
    graph->second.launch(stream);
  } else {
    enqueue_layers(n_rows, n_logit_rows, kv);
  }

  const size_t n_tap_values = tap_layers_.size() * size_t(n_rows * config_.hidden_size);
  if (n_tap_values > 0)
    TF_CUDA_CHECK(cudaMemcpyAsync(tap_staging_.data(), tap_rows_.data(), n_tap_values * sizeof(uint16_t),
                                  cudaMemcpyDeviceToHost, stream));
  return n_logit_rows;
}

void Qwen3CudaModel::finish_forward(int64_t n_rows) {
  // The one host synchronization of a forward: the caller reads the results next, and the next
  // forward refills the row staging buffer.
  stream_.synchronize();
  if (!tap_layers_.empty()) unpack_taps(n_rows);
}

void Qwen3CudaModel::forward(const Batch& batch, KvCache& kv, float* logits) {
  const int64_t n_rows = int64_t(batch.rows.size());
  if (n_rows == 0) return;
  const int64_t n_logit_rows = enqueue_forward(batch, kv);
  if (n_logit_rows > 0)
    TF_CUDA_CHECK(cudaMemcpyAsync(logits, logits_.data(), size_t(n_logit_rows * config_.vocab_size) * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_.get()));
  finish_forward(n_rows);
}

// Every token is chosen here, on the GPU: penalties applied to the logits in place, then the argmax
// (greedy rows) or the seeded draw (sampled rows). Rows that want their logits (logprobs) get the raw
// ones copied out before the penalties, so asking for logprobs never changes a token.
void Qwen3CudaModel::forward_and_pick(const Batch& batch, KvCache& kv, const std::vector<LogitRowPick>& picks,
                                      int32_t* tokens, float* logits) {
  const int64_t n_rows = int64_t(batch.rows.size());
  if (n_rows == 0) return;
  if (int64_t(picks.size()) != batch.n_logit_rows()) fail_internal("forward_and_pick takes one pick per logit row");
  const int64_t n_logit_rows = enqueue_forward(batch, kv);
  const int64_t n_vocab = config_.vocab_size;
  const size_t row_bytes = size_t(n_vocab) * sizeof(float);
  cudaStream_t stream = stream_.get();
  // Raw logits of the rows that want them, packed; consecutive ones travel in one copy.
  std::vector<int64_t> copied_rows;
  for (int64_t i = 0; i < n_logit_rows; ++i)
    if (picks[size_t(i)].wants_logits) copied_rows.push_back(i);
  for (size_t begin = 0; begin < copied_rows.size();) {
    size_t end = begin + 1;
    while (end < copied_rows.size() && copied_rows[end] == copied_rows[end - 1] + 1) ++end;
    TF_CUDA_CHECK(cudaMemcpyAsync(logits + begin * size_t(n_vocab), logits_.data() + copied_rows[begin] * n_vocab,
                                  (end - begin) * row_bytes, cudaMemcpyDeviceToHost, stream));
    begin = end;
  }
  // The host sampler's order: logit_bias and the allowed mask, then penalties, then the choice.
  const bool has_constraints = stage_constraints(picks, n_logit_rows);
  if (has_constraints)
    apply_logit_constraints_f32(logits_.data(), n_logit_rows, n_vocab, constraint_rows_.data(), bias_entries_.data(),
                                allowed_masks_.data(), stream);
  const bool has_penalties = stage_penalties(picks, n_logit_rows);
  if (has_penalties)
    apply_penalties_f32(logits_.data(), n_logit_rows, n_vocab, penalty_rows_.data(), penalty_entries_.data(), stream);
  if (has_constraints || has_penalties)
    argmax_f32(logits_.data(), n_logit_rows, n_vocab, argmax_.data(), stream);  // greedy rows, constrained or penalized
  // Sampled rows are drawn over the argmax ids; greedy rows keep their argmax (their temperature 0
  // leaves them alone).
  bool has_sampled = false;
  for (int64_t i = 0; i < n_logit_rows; ++i) {
    const SamplingParams& sampling = *picks[size_t(i)].sampling;
    GpuSamplingRow& row = sampling_staging_.data()[i];
    row = GpuSamplingRow{0.0f, 0, 1.0f, 0.0f, 0, 0};
    if (sampling.is_greedy()) continue;
    row = GpuSamplingRow{sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p, sampling.seed,
                         uint64_t(picks[size_t(i)].position)};
    has_sampled = true;
  }
  if (has_sampled) {
    TF_CUDA_CHECK(cudaMemcpyAsync(sampling_rows_.data(), sampling_staging_.data(),
                                  size_t(n_logit_rows) * sizeof(GpuSamplingRow), cudaMemcpyHostToDevice, stream));
    sample_rows_f32(logits_.data(), n_logit_rows, n_vocab, sampling_rows_.data(), argmax_.data(), stream);
  }
  if (n_logit_rows > 0)
    TF_CUDA_CHECK(cudaMemcpyAsync(argmax_staging_.data(), argmax_.data(), size_t(n_logit_rows) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, stream));
  finish_forward(n_rows);
  std::copy_n(argmax_staging_.data(), n_logit_rows, tokens);
}

// Uploads each logit row's penalties (sampling/sampler.h penalty_counts: the same entries the host
// sampler applies); false when no row has any.
bool Qwen3CudaModel::stage_penalties(const std::vector<LogitRowPick>& picks, int64_t n_logit_rows) {
  std::vector<GpuPenaltyRow> rows(size_t(n_logit_rows), GpuPenaltyRow{0.0f, 0.0f, 0, 0});
  std::vector<int2> entries;
  bool has_penalties = false;
  for (int64_t i = 0; i < n_logit_rows; ++i) {
    const LogitRowPick& pick = picks[size_t(i)];
    const SamplingParams& sampling = *pick.sampling;
    if (sampling.presence_penalty == 0.0f && sampling.frequency_penalty == 0.0f) continue;
    penalty_counts(pick.penalties, &penalty_scratch_);
    rows[size_t(i)] = GpuPenaltyRow{sampling.presence_penalty, sampling.frequency_penalty, int32_t(entries.size()),
                                    int32_t(penalty_scratch_.size())};
    for (const auto& [token, count] : penalty_scratch_) entries.push_back(make_int2(token, count));
    has_penalties = has_penalties || !penalty_scratch_.empty();
  }
  if (!has_penalties) return false;
  if (penalty_rows_.size() < rows.size()) penalty_rows_ = DeviceBuffer<GpuPenaltyRow>(rows.size() + rows.size() / 2);
  if (penalty_entries_.size() < entries.size())
    penalty_entries_ = DeviceBuffer<int2>(entries.size() + entries.size() / 2);
  // Synchronous copies from pageable memory: penalties are rare, and the buffers are reused next round.
  TF_CUDA_CHECK(cudaMemcpyAsync(penalty_rows_.data(), rows.data(), rows.size() * sizeof(GpuPenaltyRow),
                                cudaMemcpyHostToDevice, stream_.get()));
  TF_CUDA_CHECK(cudaMemcpyAsync(penalty_entries_.data(), entries.data(), entries.size() * sizeof(int2),
                                cudaMemcpyHostToDevice, stream_.get()));
  TF_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  return true;
}

// Uploads each logit row's logit_bias and allowed mask (LogitConstraint); false when no row has any.
bool Qwen3CudaModel::stage_constraints(const std::vector<LogitRowPick>& picks, int64_t n_logit_rows) {
  const int64_t n_words = (config_.vocab_size + 31) / 32;
  std::vector<GpuConstraintRow> rows(size_t(n_logit_rows), GpuConstraintRow{0, 0, -1});
  std::vector<GpuBiasEntry> bias;
  std::vector<uint32_t> masks;
  bool has_constraints = false;
  for (int64_t i = 0; i < n_logit_rows; ++i) {
    const LogitConstraint& constraint = picks[size_t(i)].constraint;
    if (constraint.is_empty()) continue;
    has_constraints = true;
    rows[size_t(i)] = GpuConstraintRow{int32_t(bias.size()), int32_t(constraint.n_bias), -1};
    for (int64_t k = 0; k < constraint.n_bias; ++k)
      bias.push_back(GpuBiasEntry{constraint.bias[k].first, constraint.bias[k].second});
    if (constraint.allowed) {
      rows[size_t(i)].mask_offset = int64_t(masks.size());
      masks.insert(masks.end(), constraint.allowed, constraint.allowed + n_words);
    }
  }
  if (!has_constraints) return false;
  if (constraint_rows_.size() < rows.size()) constraint_rows_ = DeviceBuffer<GpuConstraintRow>(rows.size() + rows.size() / 2);
  if (bias_entries_.size() < std::max<size_t>(bias.size(), 1))
    bias_entries_ = DeviceBuffer<GpuBiasEntry>(std::max<size_t>(bias.size(), 1) * 3 / 2 + 1);
  if (allowed_masks_.size() < std::max<size_t>(masks.size(), 1))
    allowed_masks_ = DeviceBuffer<uint32_t>(std::max<size_t>(masks.size(), 1) * 3 / 2 + 1);
  cudaStream_t stream = stream_.get();
  // Synchronous copies from pageable memory, as for penalties: constrained rows are the exception.
  TF_CUDA_CHECK(cudaMemcpyAsync(constraint_rows_.data(), rows.data(), rows.size() * sizeof(GpuConstraintRow),
                                cudaMemcpyHostToDevice, stream));
  if (!bias.empty())
    TF_CUDA_CHECK(cudaMemcpyAsync(bias_entries_.data(), bias.data(), bias.size() * sizeof(GpuBiasEntry),
                                  cudaMemcpyHostToDevice, stream));
  if (!masks.empty())
    TF_CUDA_CHECK(cudaMemcpyAsync(allowed_masks_.data(), masks.data(), masks.size() * sizeof(uint32_t),
                                  cudaMemcpyHostToDevice, stream));
  TF_CUDA_CHECK(cudaStreamSynchronize(stream));
  return true;
}

std::shared_ptr<Model> make_qwen3_cuda_model(const ModelConfig& config, const Qwen3Weights& weights,
                                             CudaModelOptions options) {
  require_hopper_gpu();
  return std::make_shared<Qwen3CudaModel>(config, upload_qwen3_weights(weights, config), options);
}

std::shared_ptr<Model> make_synthetic_qwen3_cuda_model(const ModelConfig& config, CudaModelOptions options) {
  require_hopper_gpu();
  return std::make_shared<Qwen3CudaModel>(config, synthetic_qwen3_cuda_weights(config), options);
}

}  // namespace tf::cuda
