// The per-row pieces of a Qwen3.5-class decoder layer on the CPU that the hybrid model and its MTP
// head both run: gated attention over a K/V store and the SwiGLU MLP, each adding into the residual
// stream. One piece of code for both, so the MTP layer is the target's attention layer bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/cpu/kernels/attention.h"
#include "core/thread_pool.h"
#include "loader/model_config.h"
#include "models/qwen3_5_weights.h"

namespace tf::cpu {

// Scratch of the two pieces, resized per call to the rows at hand.
struct Qwen35LayerScratch {
  std::vector<float> normed;      // [n_rows][hidden]
  std::vector<float> proj;        // [n_rows][hidden]
  std::vector<float> query_gate;  // [n_rows][n_heads * 2 * head_dim]
  std::vector<float> q;           // [n_rows][n_heads * head_dim]
  std::vector<float> gate;        // [n_rows][max(n_heads * head_dim, intermediate)]
  std::vector<float> k;           // [n_rows][n_kv_heads * head_dim]
  std::vector<float> v;           // [n_rows][n_kv_heads * head_dim]
  std::vector<float> rotary;      // [n_rows][n_heads][rotary_dim]
  std::vector<float> attn_out;    // [n_rows][max(n_heads * head_dim, extra_out)]
  std::vector<float> up;          // [n_rows][intermediate]

  // extra_out: a wider attn_out for other users of it (the DeltaNet's value_dim).
  void resize(const ModelConfig& config, int64_t n_rows, int64_t extra_out = 0);
};

// Where each row's K/V goes and which keys it reads, in logical order.
struct AttentionRows {
  const int32_t* positions = nullptr;             // [n_rows] RoPE positions
  const int32_t* kv_slots = nullptr;              // [n_rows] slot each row's K/V is written to
  const int32_t* const* key_slot_lists = nullptr; // [n_rows] the slots of positions 0..pos
  const int32_t* n_keys = nullptr;                // [n_rows]
};

// hidden += o_proj(attention(...) * sigmoid(gate)): RMSNorm (1 + w), q_proj giving query and gate per
// head, QK-norm, partial RoPE over the first rotary_dim values, K/V written to their slots of
// the cache before attention reads every key from there.
void gated_attention(const Qwen35LayerWeights& w, const ModelConfig& config, const std::vector<float>& inverse_frequencies,
                     const AttentionRows& rows, int64_t n_rows, const KvSlice& cache,
                     float* hidden, Qwen35LayerScratch& scratch, ThreadPool& pool);

// hidden += down(silu(gate(x)) * up(x)), x = RMSNorm(hidden) with the post-attention gain.
void swiglu_mlp(const Qwen35LayerWeights& w, const ModelConfig& config, int64_t n_rows, float* hidden,
                Qwen35LayerScratch& scratch, ThreadPool& pool);

}  // namespace tf::cpu
