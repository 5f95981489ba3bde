// Hybrid weights to the GPU through one set of uploads.
#include "backends/cuda/qwen3_5_cuda_weights.h"

#include <string>
#include <vector>

#include "core/error.h"

namespace tf::cuda {
namespace {

// Rows of the fused DeltaNet input projection: q|k|v, b, a, z.
int64_t delta_net_projection_rows(const ModelConfig& c) {
  const HybridConfig& h = c.hybrid;
  return h.conv_dim() + 2 * h.linear_n_value_heads + h.linear_value_dim();
}

// What a layer's matrices will take on the GPU: as stored when quantized, bf16 otherwise.
int64_t layer_upload_bytes(const Qwen35LayerWeights& l) {
  int64_t total = 0;
  for (const WeightMatrix* w : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.in_proj_qkv, &l.in_proj_z, &l.in_proj_b,
                                &l.in_proj_a, &l.out_proj, &l.gate_proj, &l.up_proj, &l.down_proj})
    total += w->is_quantized() ? w->n_stored_bytes() : w->n_rows * w->n_cols * 2;
  return total;
}

int64_t upload_bytes(const Qwen35Weights& weights) {
  int64_t total = weights.embed_tokens.n_stored_bytes() + weights.lm_head.n_stored_bytes();
  for (const auto& l : weights.layers) total += layer_upload_bytes(l);
  return total;
}

void require_free_memory(int64_t needed) {
  size_t free_bytes = 0, total_bytes = 0;
  TF_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (size_t(needed) > free_bytes)
    fail("the model's weights need about " + std::to_string(needed >> 20) + " MiB of GPU memory, but only " +
         std::to_string(free_bytes >> 20) + " MiB are free");
}

DeviceBuffer<uint16_t> bf16_ones(int64_t n) {
  DeviceBuffer<uint16_t> gain{size_t(n)};
  gain.copy_from_host(std::vector<uint16_t>(size_t(n), f32_to_bf16(1.0f)));
  return gain;
}

// n values in [-scale, scale] from a fixed sequence.
DeviceBuffer<float> spread_values(int64_t n, float scale, uint64_t seed) {
  std::vector<float> values(static_cast<size_t>(n));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& v : values) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = scale * (float(int64_t(x % 2001) - 1000) * 1e-3f);
  }
  return upload_f32(values.data(), n);
}

Qwen35CudaLayerWeights upload_layer(WeightUploads& upload, const Qwen35LayerWeights& from, const HybridConfig& h) {
  Qwen35CudaLayerWeights to;
  to.kind = from.kind;
  to.input_norm = upload.vector(from.input_norm);
  to.post_attention_norm = upload.vector(from.post_attention_norm);
  if (from.kind == LayerKind::full_attention) {
    to.qkv_proj = upload.fused_matrix({&from.q_proj, &from.k_proj, &from.v_proj});
    to.q_norm = upload.vector(from.q_norm);
    to.k_norm = upload.vector(from.k_norm);
    to.o_proj = upload.fused_matrix({&from.o_proj});
  } else {
    to.in_proj = upload.fused_matrix({&from.in_proj_qkv, &from.in_proj_b, &from.in_proj_a, &from.in_proj_z});
    to.out_proj = upload.fused_matrix({&from.out_proj});
    to.conv = upload_f32(from.conv, h.conv_dim() * h.conv_kernel);
    to.a_log = upload_f32(from.a_log, h.linear_n_value_heads);
    to.dt_bias = upload_f32(from.dt_bias, h.linear_n_value_heads);
    std::vector<float> gain(static_cast<size_t>(from.gated_norm.n));
    for (int64_t i = 0; i < from.gated_norm.n; ++i) gain[size_t(i)] = load_as_f32(from.gated_norm.data, from.gated_norm.dtype, i);
    to.gated_norm = upload_f32(gain.data(), int64_t(gain.size()));
  }
  to.gate_up_proj = upload.fused_matrix({&from.gate_proj, &from.up_proj}, /*is_interleaved=*/true);
  to.down_proj = upload.fused_matrix({&from.down_proj});
  return to;
}

}  // namespace

Qwen35CudaWeights synthetic_qwen3_5_cuda_weights(const ModelConfig& c) {
  const HybridConfig& h = c.hybrid;
  const int bits = c.quantization.bits, group = c.quantization.group_size;
  auto matrix_bytes = [&](int64_t rows, int64_t cols) { return bits ? rows * cols * bits / 8 + rows * cols / group * 4 : rows * cols * 2; };
  int64_t needed = matrix_bytes(c.vocab_size, c.hidden_size) * (c.tie_word_embeddings ? 1 : 2);
  for (LayerKind kind : h.layer_kinds)
    needed += (kind == LayerKind::full_attention
                   ? matrix_bytes(2 * c.q_dim() + 2 * c.kv_dim(), c.hidden_size) + matrix_bytes(c.hidden_size, c.q_dim())
                   : matrix_bytes(delta_net_projection_rows(c), c.hidden_size) +
                         matrix_bytes(c.hidden_size, h.linear_value_dim())) +
              3 * matrix_bytes(c.intermediate_size, c.hidden_size);
  require_free_memory(needed);

  uint64_t seed = 1;
  Qwen35CudaWeights w;
  w.head.embed_tokens = random_cuda_matrix(c.vocab_size, c.hidden_size, bits, group, &seed);
  w.head.final_norm = bf16_ones(c.hidden_size);
  if (!c.tie_word_embeddings) w.head.untied_lm_head = random_cuda_matrix(c.vocab_size, c.hidden_size, bits, group, &seed);
  for (LayerKind kind : h.layer_kinds) {
    Qwen35CudaLayerWeights& l = w.layers.emplace_back();
    l.kind = kind;
    l.input_norm = bf16_ones(c.hidden_size);
    l.post_attention_norm = bf16_ones(c.hidden_size);
    if (kind == LayerKind::full_attention) {
      l.qkv_proj = random_cuda_matrix(2 * c.q_dim() + 2 * c.kv_dim(), c.hidden_size, bits, group, &seed);
      l.q_norm = bf16_ones(c.head_dim);
      l.k_norm = bf16_ones(c.head_dim);
      l.o_proj = random_cuda_matrix(c.hidden_size, c.q_dim(), bits, group, &seed);
    } else {
      l.in_proj = random_cuda_matrix(delta_net_projection_rows(c), c.hidden_size, bits, group, &seed);
      l.out_proj = random_cuda_matrix(c.hidden_size, h.linear_value_dim(), bits, group, &seed);
      l.conv = spread_values(h.conv_dim() * h.conv_kernel, 0.5f, seed++);
      l.a_log = spread_values(h.linear_n_value_heads, 1.0f, seed++);
      l.dt_bias = spread_values(h.linear_n_value_heads, 1.0f, seed++);
      std::vector<float> ones(static_cast<size_t>(h.linear_value_head_dim), 1.0f);
      l.gated_norm = upload_f32(ones.data(), h.linear_value_head_dim);
    }
    l.gate_up_proj = random_cuda_matrix(2 * c.intermediate_size, c.hidden_size, bits, group, &seed);
    l.down_proj = random_cuda_matrix(c.hidden_size, c.intermediate_size, bits, group, &seed);
  }
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

Qwen35CudaWeights upload_qwen3_5_weights(const Qwen35Weights& weights, const ModelConfig& c) {
  require_free_memory(upload_bytes(weights));

  WeightUploads upload;
  Qwen35CudaWeights w;
  w.head.embed_tokens = upload.fused_matrix({&weights.embed_tokens});
  w.head.final_norm = upload.vector(weights.final_norm);
  if (!c.tie_word_embeddings) w.head.untied_lm_head = upload.fused_matrix({&weights.lm_head});
  for (const Qwen35LayerWeights& from : weights.layers) w.layers.push_back(upload_layer(upload, from, c.hybrid));
  return w;
}

Qwen35CudaMtpWeights upload_qwen3_5_mtp_weights(const Qwen35Weights& weights, const ModelConfig& c) {
  if (!weights.has_mtp) fail_internal("upload_qwen3_5_mtp_weights called for weights without an MTP head");
  const Qwen35MtpWeights& from = weights.mtp;
  require_free_memory(from.fc.n_rows * from.fc.n_cols * 2 + layer_upload_bytes(from.layer));
  WeightUploads upload;
  Qwen35CudaMtpWeights w;
  w.fc = upload.fused_matrix({&from.fc});
  w.pre_fc_norm_embedding = upload.vector(from.pre_fc_norm_embedding);
  w.pre_fc_norm_hidden = upload.vector(from.pre_fc_norm_hidden);
  w.norm = upload.vector(from.norm);
  w.layer = upload_layer(upload, from.layer, c.hybrid);
  return w;
}

}  // namespace tf::cuda
