// A Qwen3.5-class checkpoint's MTP head on the GPU (models/mtp_head.h has the architecture): the CPU
// head's forward with bf16 weights, activations and K/V, from the hybrid model's kernels, beside a
// CUDA target whose embedding and LM head it reads where they sit. Each entry's K/V depends on its
// own inputs alone (batch-invariant kernels), so a context is the same however it was appended.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/gated_attention.h"
#include "backends/cuda/qwen3_5_cuda_weights.h"
#include "backends/cuda/stream_graph.h"
#include "models/mtp_head.h"

namespace tf::cuda {

class CudaMtpHead final : public MtpHead {
 public:
  // `weights` and `target` (the embedding, final norm and LM head it shares) belong to the target
  // model, which must outlive the head.
  CudaMtpHead(const ModelConfig& config, const Qwen35CudaMtpWeights& weights, const Qwen3CudaWeights& target);

  void append_context(MtpContext& context, const float* taps, const int32_t* next_tokens, int64_t n) override;
  bool begin_chain(MtpContext& context) override;
  // The LM head and a top-k on the GPU; only the k ids and probabilities come to the host (the
  // whole row for k past kTopGuesses).
  std::vector<TokenGuess> chain_top(MtpContext& context, int64_t k) override;
  void chain_step(MtpContext& context, int32_t token) override;

 private:
  static constexpr int kTopGuesses = 8;
  struct ContextStorage : MtpContext::Storage {
    int64_t n_slots = 0;
    DeviceBuffer<uint16_t> keys, values;  // [n_slots][kv_dim] bf16: entries, then a chain's scratch
    DeviceBuffer<uint16_t> last_output;   // [hidden] the last entry's output after mtp.norm
    int64_t last_output_entry = -1;       // which entry last_output belongs to
    DeviceBuffer<uint16_t> chain_output;  // [hidden] the chain's latest output after mtp.norm
    int64_t chain_length = -1;            // steps taken since begin_chain; -1: no chain
  };
  // Room for n_slots slots, keeping the entries already there.
  ContextStorage& ensure_room(MtpContext& context, int64_t n_slots);
  // Scratch for n_rows rows and a key list of n_keys slots; grows, never shrinks.
  void reserve(int64_t n_rows, int64_t n_keys);
  // Runs n rows at positions (and slots) first .. first + n - 1 over the normed target hidden states
  // `hidden` ([n][hidden] bf16 on the device, before pre_fc_norm_hidden) and `tokens`: every row's
  // K/V to its slot, the last row's output after mtp.norm to `output`.
  void run_rows(ContextStorage& storage, const uint16_t* hidden, const int32_t* tokens, int64_t n, int64_t first,
                uint16_t* output);

  ModelConfig config_;
  const Qwen35CudaMtpWeights& weights_;
  const Qwen3CudaWeights& target_;
  DeviceBuffer<float> inverse_frequencies_;  // [rotary_dim / 2]
  CudaStream stream_;

  int64_t row_capacity_ = 0;
  DeviceBuffer<uint16_t> target_hidden_;  // [n_rows][hidden] taps, then final-normed
  DeviceBuffer<uint16_t> embedded_;       // [n_rows][hidden]
  DeviceBuffer<uint16_t> fc_input_;       // [n_rows][2 * hidden]
  DeviceBuffer<uint16_t> x_;              // [n_rows][hidden] the layer's residual stream
  DeviceBuffer<uint16_t> normed_;         // [n_rows][hidden]
  DeviceBuffer<uint16_t> gated_qkv_;      // [n_rows][2 q_dim + 2 kv_dim]
  DeviceBuffer<uint16_t> q_;              // [n_rows][q_dim]
  DeviceBuffer<uint16_t> attended_;       // [n_rows][q_dim]
  DeviceBuffer<uint16_t> proj_;           // [1][hidden] the last row's attention, then its MLP output
  DeviceBuffer<uint16_t> mlp_act_;        // [1][intermediate]
  DeviceBuffer<float> attention_scratch_;
  DeviceBuffer<int32_t> row_data_;        // per call: positions, slots, tokens, key offsets, key counts, key list
  PinnedHostBuffer<int32_t> int_staging_;
  PinnedHostBuffer<uint16_t> tap_staging_;
  DeviceBuffer<float> logits_;            // [vocab]
  DeviceBuffer<int32_t> top_ids_;         // [kTopGuesses]
  DeviceBuffer<float> top_probabilities_; // [kTopGuesses]
  PinnedHostBuffer<int32_t> host_top_ids_;
  PinnedHostBuffer<float> host_top_probabilities_;
};

}  // namespace tf::cuda
