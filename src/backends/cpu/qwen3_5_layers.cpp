// Gated attention and the MLP of a Qwen3.5-class layer, shared by the hybrid model and its MTP head.
#include "backends/cpu/qwen3_5_layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/activation.h"
#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/gated_delta_net.h"
#include "backends/cpu/kernels/linear.h"
#include "backends/cpu/kernels/norm.h"
#include "backends/cpu/kernels/rope.h"

namespace tf::cpu {

void Qwen35LayerScratch::resize(const ModelConfig& config, int64_t n_rows, int64_t extra_out) {
  const size_t rows = size_t(n_rows);
  normed.resize(rows * size_t(config.hidden_size));
  proj.resize(rows * size_t(config.hidden_size));
  query_gate.resize(rows * size_t(2 * config.q_dim()));
  q.resize(rows * size_t(config.q_dim()));
  gate.resize(rows * size_t(std::max(config.q_dim(), config.intermediate_size)));
  k.resize(rows * size_t(config.kv_dim()));
  v.resize(rows * size_t(config.kv_dim()));
  rotary.resize(rows * size_t(config.n_heads * config.hybrid.rotary_dim));
  attn_out.resize(rows * size_t(std::max(config.q_dim(), extra_out)));
  up.resize(rows * size_t(config.intermediate_size));
}

void gated_attention(const Qwen35LayerWeights& w, const ModelConfig& config, const std::vector<float>& inverse_frequencies,
                     const AttentionRows& rows, int64_t n_rows, const KvSlice& cache,
                     float* hidden, Qwen35LayerScratch& s, ThreadPool& pool) {
  const int64_t hidden_size = config.hidden_size, head_dim = config.head_dim;
  const int64_t n_heads = config.n_heads, n_kv_heads = config.n_kv_heads, kv_dim = config.kv_dim();
  const int64_t rotary_dim = config.hybrid.rotary_dim;
  const float eps = config.rms_norm_eps;

  rms_norm(hidden, n_rows, hidden_size, w.input_norm, eps, s.normed.data());
  linear(s.normed.data(), n_rows, w.q_proj, s.query_gate.data(), pool);
  linear(s.normed.data(), n_rows, w.k_proj, s.k.data(), pool);
  linear(s.normed.data(), n_rows, w.v_proj, s.v.data(), pool);
  // q_proj gives, per head, head_dim query values then head_dim gate values.
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t head = 0; head < n_heads; ++head) {
      const float* source = s.query_gate.data() + (r * n_heads + head) * 2 * head_dim;
      std::memcpy(s.q.data() + (r * n_heads + head) * head_dim, source, size_t(head_dim) * sizeof(float));
      std::memcpy(s.gate.data() + (r * n_heads + head) * head_dim, source + head_dim, size_t(head_dim) * sizeof(float));
    }
  rms_norm(s.q.data(), n_rows * n_heads, head_dim, w.q_norm, eps, s.q.data());
  rms_norm(s.k.data(), n_rows * n_kv_heads, head_dim, w.k_norm, eps, s.k.data());
  // Partial rotary: the first rotary_dim values of each head turn, the rest pass through.
  for (auto [x, n_x_heads] : {std::pair{s.q.data(), n_heads}, std::pair{s.k.data(), n_kv_heads}}) {
    for (int64_t i = 0; i < n_rows * n_x_heads; ++i)
      std::memcpy(s.rotary.data() + i * rotary_dim, x + i * head_dim, size_t(rotary_dim) * sizeof(float));
    rope_apply(s.rotary.data(), n_rows, n_x_heads, rotary_dim, rows.positions, inverse_frequencies);
    for (int64_t i = 0; i < n_rows * n_x_heads; ++i)
      std::memcpy(x + i * head_dim, s.rotary.data() + i * rotary_dim, size_t(rotary_dim) * sizeof(float));
  }

  // Keys and values go to the cache first; attention reads every key from there (see qwen3_cpu_model).
  for (int64_t r = 0; r < n_rows; ++r)
    cache.store(rows.kv_slots[r], s.k.data() + r * kv_dim, s.v.data() + r * kv_dim, n_kv_heads, head_dim);
  AttentionShape shape{n_heads, n_kv_heads, head_dim, float(1.0 / std::sqrt(double(head_dim)))};
  attention(s.q.data(), n_rows, cache, rows.key_slot_lists, rows.n_keys, shape, s.attn_out.data(), pool);
  for (int64_t i = 0; i < n_rows * n_heads * head_dim; ++i)
    s.attn_out[size_t(i)] = s.attn_out[size_t(i)] * sigmoid(s.gate[size_t(i)]);
  linear(s.attn_out.data(), n_rows, w.o_proj, s.proj.data(), pool);
  for (int64_t i = 0; i < n_rows * hidden_size; ++i) hidden[i] += s.proj[size_t(i)];
}

void swiglu_mlp(const Qwen35LayerWeights& w, const ModelConfig& config, int64_t n_rows, float* hidden,
                Qwen35LayerScratch& s, ThreadPool& pool) {
  const int64_t hidden_size = config.hidden_size, inter = config.intermediate_size;
  rms_norm(hidden, n_rows, hidden_size, w.post_attention_norm, config.rms_norm_eps, s.normed.data());
  linear(s.normed.data(), n_rows, w.gate_proj, s.gate.data(), pool);
  linear(s.normed.data(), n_rows, w.up_proj, s.up.data(), pool);
  swiglu(s.gate.data(), s.up.data(), n_rows * inter, s.gate.data());
  linear(s.gate.data(), n_rows, w.down_proj, s.proj.data(), pool);
  for (int64_t i = 0; i < n_rows * hidden_size; ++i) hidden[i] += s.proj[size_t(i)];
}

}  // namespace tf::cpu
