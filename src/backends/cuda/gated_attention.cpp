// The gated attention block's two halves, from the dense model's kernels.
#include "backends/cuda/gated_attention.h"

#include "backends/cuda/activation.cuh"
#include "backends/cuda/fused_norms.cuh"
#include "backends/cuda/linear.cuh"

namespace tf::cuda {
namespace {

int64_t gated_qkv_width(const ModelConfig& c) { return 2 * c.q_dim() + 2 * c.kv_dim(); }

}  // namespace

void gated_attention_inputs(const Qwen35CudaLayerWeights& w, const ModelConfig& c, const float* inverse_frequencies,
                            const uint16_t* normed, int64_t n_rows, const DeviceAttentionRows& rows, uint16_t* k_cache,
                            uint16_t* v_cache, const GatedAttentionScratch& scratch, cudaStream_t stream) {
  linear(normed, n_rows, w.qkv_proj.view(), gated_qkv_width(c), c.hidden_size, scratch.gated_qkv, LinearOutput::bf16,
         stream);
  const QkvShape shape{int(c.n_heads), int(c.n_kv_heads), int(c.head_dim), int(c.hybrid.rotary_dim),
                       /*gated_query=*/true};
  // Keys and values go to the cache first; attention reads every key from there in its bf16
  // storage type, this pass's rows included, so a row sees the same numbers in any batch.
  qk_norm_rope_to_cache_bf16(scratch.gated_qkv, n_rows, shape, w.q_norm.data(), w.k_norm.data(), c.rms_norm_eps,
                             rows.positions, inverse_frequencies, rows.kv_slots, scratch.q, k_cache, v_cache, stream);
}

void gated_attention_outputs(const Qwen35CudaLayerWeights& w, const ModelConfig& c, int64_t first, int64_t n_rows,
                             const DeviceAttentionRows& rows, const uint16_t* k_cache, const uint16_t* v_cache,
                             const GatedAttentionScratch& scratch, uint16_t* out, cudaStream_t stream) {
  const int64_t q_dim = c.q_dim(), head_dim = c.head_dim, width = gated_qkv_width(c);
  uint16_t* attended = scratch.attended + first * q_dim;
  attention_bf16(scratch.q + first * q_dim, n_rows, k_cache, v_cache, rows.key_slot_list, rows.key_offsets + first,
                 rows.n_keys + first, attention_shape_of(c), attended, stream, scratch.attention,
                 first == 0 ? rows.groups : AttentionGroups{});
  // Each query head's gate follows its query in the projection row.
  sigmoid_gate_bf16(attended, n_rows, c.n_heads, head_dim, scratch.gated_qkv + first * width + head_dim, width,
                    2 * head_dim, stream);
  linear(attended, n_rows, w.o_proj.view(), c.hidden_size, q_dim, out, LinearOutput::bf16, stream);
}

}  // namespace tf::cuda
