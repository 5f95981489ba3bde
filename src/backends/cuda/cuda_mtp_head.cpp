// The MTP head on the GPU: entries of committed positions and chained steps, one forward each.
#include "backends/cuda/cuda_mtp_head.h"

#include <algorithm>
#include <cstring>

#include "backends/cuda/add.cuh"
#include "backends/cuda/embedding.cuh"
#include "backends/cuda/linear.cuh"
#include "backends/cuda/rms_norm.cuh"
#include "backends/cuda/top_k.cuh"
#include "core/dtype.h"
#include "core/error.h"
#include "models/rope_frequencies.h"

namespace tf::cuda {
namespace {

// Chain steps a context has room for past its entries before it grows again.
constexpr int64_t kChainRoom = 16;

void require_token(int32_t token, int64_t vocab, const char* what) {
  if (token < 0 || token >= vocab)
    fail_internal(std::string("MTP ") + what + " token " + std::to_string(token) + " is outside the vocabulary");
}

}  // namespace

CudaMtpHead::CudaMtpHead(const ModelConfig& config, const Qwen35CudaMtpWeights& weights,
                         const Qwen3CudaWeights& target)
    : MtpHead(int(config.n_layers - 1), config.hidden_size),
      config_(config),
      weights_(weights),
      target_(target) {
  inverse_frequencies_ = DeviceBuffer<float>(size_t(config_.hybrid.rotary_dim / 2));
  inverse_frequencies_.copy_from_host(rope_inverse_frequencies(config_.hybrid.rotary_dim, config_.rope_theta));
  logits_ = DeviceBuffer<float>(size_t(config_.vocab_size));
  top_ids_ = DeviceBuffer<int32_t>(kTopGuesses);
  top_probabilities_ = DeviceBuffer<float>(kTopGuesses);
  host_top_ids_ = PinnedHostBuffer<int32_t>(kTopGuesses);
  host_top_probabilities_ = PinnedHostBuffer<float>(kTopGuesses);
  proj_ = DeviceBuffer<uint16_t>(size_t(config_.hidden_size));
  mlp_act_ = DeviceBuffer<uint16_t>(size_t(config_.intermediate_size));
  attention_scratch_ = DeviceBuffer<float>(size_t(attention_scratch_floats(1, attention_shape_of(config_))));
}

CudaMtpHead::ContextStorage& CudaMtpHead::ensure_room(MtpContext& context, int64_t n_slots) {
  ContextStorage& storage = storage_of<ContextStorage>(context);
  if (storage.last_output.size() == 0) {
    storage.last_output = DeviceBuffer<uint16_t>(size_t(config_.hidden_size));
    storage.chain_output = DeviceBuffer<uint16_t>(size_t(config_.hidden_size));
  }
  if (n_slots <= storage.n_slots) return storage;
  const int64_t grown = std::max(n_slots + kChainRoom, 2 * storage.n_slots);
  DeviceBuffer<uint16_t> keys(size_t(grown * config_.kv_dim())), values(size_t(grown * config_.kv_dim()));
  // Every slot moves, a chain's scratch too: a chain may grow the context between its steps.
  if (storage.n_slots > 0) {
    TF_CUDA_CHECK(cudaMemcpyAsync(keys.data(), storage.keys.data(), storage.keys.n_bytes(), cudaMemcpyDeviceToDevice,
                                  stream_.get()));
    TF_CUDA_CHECK(cudaMemcpyAsync(values.data(), storage.values.data(), storage.values.n_bytes(),
                                  cudaMemcpyDeviceToDevice, stream_.get()));
  }
  stream_.synchronize();  // the old buffers are freed next
  storage.keys = std::move(keys);
  storage.values = std::move(values);
  storage.n_slots = grown;
  return storage;
}

void CudaMtpHead::reserve(int64_t n_rows, int64_t n_keys) {
  grow_staged_upload(row_data_, int_staging_, 4 * n_rows + n_keys, stream_.get());
  if (n_rows <= row_capacity_) return;
  stream_.synchronize();
  const size_t rows = size_t(std::max(n_rows, 2 * row_capacity_));
  const size_t hidden = size_t(config_.hidden_size), q_dim = size_t(config_.q_dim());
  target_hidden_ = DeviceBuffer<uint16_t>(rows * hidden);
  tap_staging_ = PinnedHostBuffer<uint16_t>(rows * hidden);
  embedded_ = DeviceBuffer<uint16_t>(rows * hidden);
  fc_input_ = DeviceBuffer<uint16_t>(rows * 2 * hidden);
  x_ = DeviceBuffer<uint16_t>(rows * hidden);
  normed_ = DeviceBuffer<uint16_t>(rows * hidden);
  gated_qkv_ = DeviceBuffer<uint16_t>(rows * size_t(2 * config_.q_dim() + 2 * config_.kv_dim()));
  q_ = DeviceBuffer<uint16_t>(rows * q_dim);
  attended_ = DeviceBuffer<uint16_t>(rows * q_dim);
  row_capacity_ = int64_t(rows);
}

void CudaMtpHead::run_rows(ContextStorage& storage, const uint16_t* hidden, const int32_t* tokens, int64_t n,
                           int64_t first, uint16_t* output) {
  const int64_t h = config_.hidden_size, n_keys = first + n;
  const float eps = config_.rms_norm_eps;
  cudaStream_t stream = stream_.get();
  reserve(n, n_keys);

  // row_data_: positions (= slots: entry p sits at slot p), tokens, key offsets, key counts (n
  // each), then the key list every row shares: slots 0 .. first + n - 1, a row's own count a prefix.
  stream_.synchronize();  // the staging buffer's last copy has landed
  int32_t* ints = int_staging_.data();
  for (int64_t r = 0; r < n; ++r) {
    ints[r] = int32_t(first + r);
    ints[n + r] = tokens[r];
    ints[2 * n + r] = 0;
    ints[3 * n + r] = int32_t(first + r + 1);
  }
  for (int64_t j = 0; j < n_keys; ++j) ints[4 * n + j] = int32_t(j);
  TF_CUDA_CHECK(cudaMemcpyAsync(row_data_.data(), ints, size_t(4 * n + n_keys) * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream));
  const int32_t* device = row_data_.data();
  const DeviceAttentionRows rows{device, device, device + 4 * n, device + 2 * n, device + 3 * n};

  // fc over [pre_fc_norm_embedding(embed(token)), pre_fc_norm_hidden(hidden)], the order it was
  // trained on. `hidden` is read here, before anything is written: it may be `output` itself.
  const size_t row_bytes = size_t(h) * sizeof(uint16_t);
  embedding(target_.embed_tokens.view(), config_.vocab_size, h, device + n, n, embedded_.data(), stream);
  rms_norm_bf16(embedded_.data(), n, h, weights_.pre_fc_norm_embedding.data(), eps, embedded_.data(), stream);
  rms_norm_bf16(hidden, n, h, weights_.pre_fc_norm_hidden.data(), eps, normed_.data(), stream);
  TF_CUDA_CHECK(cudaMemcpy2DAsync(fc_input_.data(), 2 * row_bytes, embedded_.data(), row_bytes, row_bytes, size_t(n),
                                  cudaMemcpyDeviceToDevice, stream));
  TF_CUDA_CHECK(cudaMemcpy2DAsync(fc_input_.data() + h, 2 * row_bytes, normed_.data(), row_bytes, row_bytes, size_t(n),
                                  cudaMemcpyDeviceToDevice, stream));
  linear(fc_input_.data(), n, weights_.fc.view(), h, 2 * h, x_.data(), LinearOutput::bf16, stream);

  // Every row's K/V (later rows attend to them); the output of the last row alone.
  const Qwen35CudaLayerWeights& layer = weights_.layer;
  const GatedAttentionScratch scratch{gated_qkv_.data(), q_.data(), attended_.data(),
                                      {attention_scratch_.data(), int64_t(attention_scratch_.size())}};
  rms_norm_bf16(x_.data(), n, h, layer.input_norm.data(), eps, normed_.data(), stream);
  gated_attention_inputs(layer, config_, inverse_frequencies_.data(), normed_.data(), n, rows, storage.keys.data(),
                         storage.values.data(), scratch, stream);
  gated_attention_outputs(layer, config_, n - 1, 1, rows, storage.keys.data(), storage.values.data(), scratch,
                          proj_.data(), stream);
  uint16_t* last = x_.data() + (n - 1) * h;
  add_rms_norm_bf16(last, proj_.data(), 1, h, layer.post_attention_norm.data(), eps, normed_.data(), stream);
  linear(normed_.data(), 1, layer.gate_up_proj.view(), 2 * config_.intermediate_size, h, mlp_act_.data(),
         LinearOutput::swiglu_bf16, stream);
  linear(mlp_act_.data(), 1, layer.down_proj.view(), h, config_.intermediate_size, proj_.data(), LinearOutput::bf16,
         stream);
  add_bf16(last, proj_.data(), h, last, stream);
  rms_norm_bf16(last, 1, h, weights_.norm.data(), eps, output, stream);
}

void CudaMtpHead::append_context(MtpContext& context, const float* taps, const int32_t* next_tokens, int64_t n) {
  if (n <= 0) return;
  const int64_t h = config_.hidden_size, first = context.size();
  for (int64_t i = 0; i < n; ++i) require_token(next_tokens[i], config_.vocab_size, "entry");
  ContextStorage& storage = ensure_room(context, first + n);
  reserve(n, first + n);
  // The target's taps were bf16 on the GPU: rounding them back is exact. h_t is the target's hidden
  // state after its final norm, as the head was trained on it.
  stream_.synchronize();  // the staging buffer's last copy has landed
  for (int64_t i = 0; i < n * h; ++i) tap_staging_.data()[i] = f32_to_bf16(taps[i]);
  TF_CUDA_CHECK(cudaMemcpyAsync(target_hidden_.data(), tap_staging_.data(), size_t(n * h) * sizeof(uint16_t),
                                cudaMemcpyHostToDevice, stream_.get()));
  rms_norm_bf16(target_hidden_.data(), n, h, target_.final_norm.data(), config_.rms_norm_eps, target_hidden_.data(),
                stream_.get());
  run_rows(storage, target_hidden_.data(), next_tokens, n, first, storage.last_output.data());
  storage.last_output_entry = first + n - 1;
  set_size(context, first + n);
}

bool CudaMtpHead::begin_chain(MtpContext& context) {
  if (context.size() == 0) return false;
  ContextStorage& storage = storage_of<ContextStorage>(context);
  if (storage.last_output_entry != context.size() - 1) return false;
  TF_CUDA_CHECK(cudaMemcpyAsync(storage.chain_output.data(), storage.last_output.data(), storage.last_output.n_bytes(),
                                cudaMemcpyDeviceToDevice, stream_.get()));
  storage.chain_length = 0;
  return true;
}

std::vector<TokenGuess> CudaMtpHead::chain_top(MtpContext& context, int64_t k) {
  ContextStorage& storage = storage_of<ContextStorage>(context);
  if (storage.chain_length < 0) fail_internal("MTP chain read before begin_chain");
  const int64_t vocab = config_.vocab_size;
  cudaStream_t stream = stream_.get();
  linear(storage.chain_output.data(), 1, target_.lm_head().view(), vocab, config_.hidden_size, logits_.data(),
         LinearOutput::f32, stream);
  if (k > kTopGuesses) {
    std::vector<float> logits(static_cast<size_t>(vocab));
    TF_CUDA_CHECK(cudaMemcpyAsync(logits.data(), logits_.data(), logits_.n_bytes(), cudaMemcpyDeviceToHost, stream));
    stream_.synchronize();
    return likeliest_tokens(logits.data(), vocab, k);
  }
  top_k_softmax_f32(logits_.data(), 1, vocab, kTopGuesses, top_ids_.data(), top_probabilities_.data(), stream);
  TF_CUDA_CHECK(cudaMemcpyAsync(host_top_ids_.data(), top_ids_.data(), top_ids_.n_bytes(), cudaMemcpyDeviceToHost,
                                stream));
  TF_CUDA_CHECK(cudaMemcpyAsync(host_top_probabilities_.data(), top_probabilities_.data(), top_probabilities_.n_bytes(),
                                cudaMemcpyDeviceToHost, stream));
  stream_.synchronize();
  std::vector<TokenGuess> guesses;
  for (int64_t i = 0; i < std::min(k, vocab); ++i) guesses.push_back({host_top_ids_.data()[i], host_top_probabilities_.data()[i]});
  return guesses;
}

void CudaMtpHead::chain_step(MtpContext& context, int32_t token) {
  ContextStorage& storage = storage_of<ContextStorage>(context);
  if (storage.chain_length < 0) fail_internal("MTP chain step before begin_chain");
  require_token(token, config_.vocab_size, "chain");
  // The step's row pairs the chain's last output with its token at the next position past the
  // committed entries; its K/V lands in scratch slots that the next committed entries overwrite.
  const int64_t position = context.size() + storage.chain_length;
  ensure_room(context, position + 1);
  run_rows(storage, storage.chain_output.data(), &token, 1, position, storage.chain_output.data());
  ++storage.chain_length;
}

}  // namespace tf::cuda
