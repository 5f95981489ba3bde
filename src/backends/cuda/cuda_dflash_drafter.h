// The DFlash block drafter on the GPU, beside a CUDA target: the CPU drafter's forward (context K/V
// from the taps, one non-causal block forward) with bf16 weights, activations and context, from the
// target's own kernels, and the target's embedding and LM head as they sit on the GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/qwen3_cuda_weights.h"
#include "backends/cuda/stream_graph.h"
#include "models/dflash_drafter.h"

namespace tf::cuda {

class CudaDFlashDrafter final : public DFlashDrafter {
 public:
  // Loads DIR/config.json and DIR/model.safetensors; `target_weights` (the embedding and LM head
  // it shares) must outlive the drafter. Throws tf::Error naming the file and the field or tensor.
  CudaDFlashDrafter(const std::string& drafter_dir, const ModelConfig& target_config,
                    const Qwen3CudaWeights& target_weights);

  void append_context(DrafterContext& context, const float* taps, int64_t n_tokens) override;
  // Runs the block, the LM head over every row (on the GPU that costs about what one row does) and
  // each row's top kTopGuesses, which alone come to the host.
  void run_block(DrafterContext& context, int32_t last_token, int64_t position) override;
  void block_logits(int64_t row, float* logits) override;
  // From the GPU's top-k for k up to kTopGuesses; from the row's logits beyond.
  std::vector<Guess> block_top(int64_t row, int64_t k) override;

 private:
  struct ContextStorage : DrafterContext::Storage {
    int64_t n_slots = 0;
    std::vector<DeviceBuffer<uint16_t>> keys, values;  // [n_layers] of [n_slots][kv_dim] bf16
  };
  // Room for n_slots entries (committed and scratch), keeping the entries already there.
  static constexpr int kTopGuesses = 8;
  ContextStorage& ensure_room(DrafterContext& context, int64_t n_slots);
  void check_row(int64_t row) const;
  // Scratch for n_rows rows and a key list of n_keys slots; grows, never shrinks.
  void reserve(int64_t n_rows, int64_t n_keys);
  // Copies host ints to row_data_ (through pinned staging) in one transfer.
  void upload_ints(const std::vector<int32_t>& values);
  // K and V of `inputs` ([n_rows][hidden]) in layer `layer`, normed and rotated, into the slots at
  // row_data_ + slots_at (positions at row_data_ + positions_at); q goes to q_.
  void write_kv(ContextStorage& storage, int64_t layer, const uint16_t* inputs, int64_t n_rows,
                int64_t positions_at, int64_t slots_at);

  const Qwen3CudaWeights& target_;
  CudaMatrix fc_;                             // [hidden][tap_width]
  DeviceBuffer<uint16_t> hidden_norm_;        // [hidden]
  DeviceBuffer<uint16_t> final_norm_;         // [hidden]
  std::vector<Qwen3CudaLayerWeights> layers_;  // fused q|k|v and gate/up, as the target's
  DeviceBuffer<float> inverse_frequencies_;   // [head_dim / 2]
  CudaStream stream_;

  int64_t row_capacity_ = 0;
  DeviceBuffer<uint16_t> taps_;      // [n_rows][tap_width]
  DeviceBuffer<uint16_t> hidden_;    // [n_rows][hidden]  context features, or the block's residual stream
  DeviceBuffer<uint16_t> normed_;    // [n_rows][hidden]
  DeviceBuffer<uint16_t> qkv_;       // [n_rows][q_dim + 2 kv_dim]
  DeviceBuffer<uint16_t> q_;         // [n_rows][q_dim]
  DeviceBuffer<uint16_t> attn_out_;  // [n_rows][q_dim]
  DeviceBuffer<uint16_t> proj_;      // [n_rows][hidden]
  DeviceBuffer<uint16_t> mlp_act_;   // [n_rows][intermediate]
  DeviceBuffer<float> attention_scratch_;
  DeviceBuffer<int32_t> row_data_;   // per call: positions, slots, and for a block tokens, key lists
  PinnedHostBuffer<int32_t> int_staging_;
  PinnedHostBuffer<uint16_t> tap_staging_;
  DeviceBuffer<float> logits_;  // [B-1][vocab], the last run_block's
  DeviceBuffer<int32_t> top_ids_;               // [B-1][kTopGuesses]
  DeviceBuffer<float> top_probabilities_;       // [B-1][kTopGuesses]
  PinnedHostBuffer<int32_t> host_top_ids_;      // the same, on the host
  PinnedHostBuffer<float> host_top_probabilities_;
  bool has_block_ = false;
};

}  // namespace tf::cuda
