// The MTP head on the CPU: entries of committed positions and chained steps, one forward each.
#include "backends/cpu/cpu_mtp_head.h"

#include <cstring>

#include "backends/cpu/kernels/activation.h"
#include "backends/cpu/kernels/linear.h"
#include "backends/cpu/kernels/norm.h"
#include "core/error.h"
#include "models/rope_frequencies.h"

namespace tf {

CpuMtpHead::CpuMtpHead(const ModelConfig& config, const Qwen35Weights& weights, std::shared_ptr<const void> keep_alive,
                       int n_threads)
    : MtpHead(int(config.n_layers - 1), config.hidden_size),
      config_(config),
      mtp_(weights.mtp),
      embed_tokens_(weights.embed_tokens),
      final_norm_(weights.final_norm),
      lm_head_(weights.lm_head),
      keep_alive_(std::move(keep_alive)),
      owned_(weights.owned),
      pool_(n_threads),
      inverse_frequencies_(rope_inverse_frequencies(config.hybrid.rotary_dim, config.rope_theta)) {
  if (!weights.has_mtp) fail_internal("CpuMtpHead made for weights without an MTP head");
}

void CpuMtpHead::run_rows(ContextStorage& storage, const float* hidden, const int32_t* tokens, int64_t n,
                          int64_t first, float* last_output) {
  const int64_t h = config_.hidden_size, kv_dim = config_.kv_dim();
  const float eps = config_.rms_norm_eps;
  const size_t n_slots = size_t((first + n) * kv_dim);
  if (storage.keys.size() < n_slots) {
    // Room for a chain past these rows too, so a round's steps do not reallocate.
    storage.keys.resize(n_slots + size_t(16 * kv_dim));
    storage.values.resize(n_slots + size_t(16 * kv_dim));
  }
  scratch_.resize(config_, n);
  normed_hidden_.resize(size_t(n * h));
  fc_input_.resize(size_t(n * 2 * h));
  x_.resize(size_t(n * h));

  // [pre_fc_norm_embedding(embed(token)), pre_fc_norm_hidden(hidden)], the order fc was trained on.
  cpu::embedding_rows(embed_tokens_, tokens, n, x_.data());
  cpu::rms_norm(x_.data(), n, h, mtp_.pre_fc_norm_embedding, eps, x_.data());
  cpu::rms_norm(hidden, n, h, mtp_.pre_fc_norm_hidden, eps, normed_hidden_.data());
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(fc_input_.data() + r * 2 * h, x_.data() + r * h, size_t(h) * sizeof(float));
    std::memcpy(fc_input_.data() + r * 2 * h + h, normed_hidden_.data() + r * h, size_t(h) * sizeof(float));
  }
  cpu::linear(fc_input_.data(), n, mtp_.fc, x_.data(), pool_);

  // Entry p sits at slot p; a row at position p sees slots 0..p in order.
  positions_.resize(size_t(n));
  slots_.resize(size_t(n));
  n_keys_.resize(size_t(n));
  key_lists_.resize(size_t(n));
  if (int64_t(key_slots_.size()) < first + n) {
    const int64_t from = int64_t(key_slots_.size());
    key_slots_.resize(size_t(first + n));
    for (int64_t j = from; j < first + n; ++j) key_slots_[size_t(j)] = int32_t(j);
  }
  for (int64_t r = 0; r < n; ++r) {
    positions_[size_t(r)] = int32_t(first + r);
    slots_[size_t(r)] = int32_t(first + r);
    n_keys_[size_t(r)] = int32_t(first + r + 1);
    key_lists_[size_t(r)] = key_slots_.data();
  }
  const cpu::AttentionRows rows{positions_.data(), slots_.data(), key_lists_.data(), n_keys_.data()};
  const cpu::KvSlice cache{storage.keys.data(), storage.values.data(),
                           cpu::KvLayout::interleaved(config_.n_kv_heads, config_.head_dim), false};
  cpu::gated_attention(mtp_.layer, config_, inverse_frequencies_, rows, n, cache, x_.data(), scratch_, pool_);
  cpu::swiglu_mlp(mtp_.layer, config_, n, x_.data(), scratch_, pool_);
  cpu::rms_norm(x_.data() + (n - 1) * h, 1, h, mtp_.norm, eps, last_output);
}

void CpuMtpHead::append_context(MtpContext& context, const float* taps, const int32_t* next_tokens, int64_t n) {
  if (n <= 0) return;
  const int64_t h = config_.hidden_size;
  for (int64_t i = 0; i < n; ++i)
    if (next_tokens[i] < 0 || next_tokens[i] >= config_.vocab_size)
      fail_internal("MTP entry token " + std::to_string(next_tokens[i]) + " is outside the vocabulary");
  ContextStorage& storage = storage_of<ContextStorage>(context);
  const int64_t first = context.size();
  // h_t is the target's hidden state after its final norm, as the head was trained on it.
  std::vector<float> target_hidden(size_t(n * h));
  cpu::rms_norm(taps, n, h, final_norm_, config_.rms_norm_eps, target_hidden.data());
  storage.last_output.resize(size_t(h));
  run_rows(storage, target_hidden.data(), next_tokens, n, first, storage.last_output.data());
  storage.last_output_entry = first + n - 1;
  set_size(context, first + n);
}

bool CpuMtpHead::begin_chain(MtpContext& context) {
  if (context.size() == 0) return false;
  ContextStorage& storage = storage_of<ContextStorage>(context);
  if (storage.last_output_entry != context.size() - 1) return false;
  storage.chain_output = storage.last_output;
  storage.chain_length = 0;
  return true;
}

std::vector<TokenGuess> CpuMtpHead::chain_top(MtpContext& context, int64_t k) {
  ContextStorage& storage = storage_of<ContextStorage>(context);
  if (storage.chain_output.empty()) fail_internal("MTP chain read before begin_chain");
  logits_.resize(size_t(config_.vocab_size));
  cpu::linear(storage.chain_output.data(), 1, lm_head_, logits_.data(), pool_);
  return likeliest_tokens(logits_.data(), config_.vocab_size, k, cpu::sum_of_exps);
}

void CpuMtpHead::chain_step(MtpContext& context, int32_t token) {
  ContextStorage& storage = storage_of<ContextStorage>(context);
  if (storage.chain_output.empty()) fail_internal("MTP chain step before begin_chain");
  if (token < 0 || token >= config_.vocab_size)
    fail_internal("MTP chain token " + std::to_string(token) + " is outside the vocabulary");
  // The step's row pairs the chain's last output with its token at the next position past the
  // committed entries; its K/V lands in scratch slots that the next committed entries overwrite.
  const std::vector<float> previous = storage.chain_output;
  run_rows(storage, previous.data(), &token, 1, context.size() + storage.chain_length, storage.chain_output.data());
  ++storage.chain_length;
}

}  // namespace tf
