// A Qwen3.5-class gated full-attention block on the GPU, in two halves so a caller that needs only
// some rows' outputs (the MTP head: every entry's K/V, one row's output) pays for those alone:
// inputs (the fused query+gate|k|v projection, q/k norms, partial rotary, K/V to the cache) for
// every row, then outputs (attention, the sigmoid output gate, o_proj) for a run of rows.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/attention.cuh"
#include "backends/cuda/qwen3_5_cuda_weights.h"
#include "loader/model_config.h"

namespace tf::cuda {

// One pass's rows on the device: each row's position and cache slot, and the keys it reads
// (attention_bf16's slot list, offsets and counts; groups as attention_bf16 takes them).
struct DeviceAttentionRows {
  const int32_t* positions;
  const int32_t* kv_slots;
  const int32_t* key_slot_list;
  const int32_t* key_offsets;
  const int32_t* n_keys;
  AttentionGroups groups = {};
};

// Caller-owned buffers for n_rows rows: gated_qkv [n][2 q_dim + 2 kv_dim], q and attended [n][q_dim].
struct GatedAttentionScratch {
  uint16_t* gated_qkv;
  uint16_t* q;
  uint16_t* attended;
  AttentionScratch attention;
};

// normed: [n_rows][hidden], the block's input after its norm.
void gated_attention_inputs(const Qwen35CudaLayerWeights& w, const ModelConfig& config, const float* inverse_frequencies,
                            const uint16_t* normed, int64_t n_rows, const DeviceAttentionRows& rows, uint16_t* k_cache,
                            uint16_t* v_cache, const GatedAttentionScratch& scratch, cudaStream_t stream);

// Rows first .. first + n_rows - 1 of the pass gated_attention_inputs prepared: out [n_rows][hidden].
// Groups are used only for a whole pass (first 0), as they number rows from the pass's first.
void gated_attention_outputs(const Qwen35CudaLayerWeights& w, const ModelConfig& config, int64_t first, int64_t n_rows,
                             const DeviceAttentionRows& rows, const uint16_t* k_cache, const uint16_t* v_cache,
                             const GatedAttentionScratch& scratch, uint16_t* out, cudaStream_t stream);

}  // namespace tf::cuda
