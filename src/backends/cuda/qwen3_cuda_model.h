// Qwen3 on the CUDA backend (Hopper): the CPU model's forward with bf16 weights, activations and KV
// cache, from batch-invariant kernels, so every row's logits are bitwise the same in any batch.
// Everything around the decoder layers (rows to the device, graphs, the picks, taps, the LM head) is
// shared with the hybrid (Qwen35CudaModel), which replaces the layers through the hooks below.
#pragma once
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backends/cuda/attention.cuh"
#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/qwen3_cuda_weights.h"
#include "backends/cuda/logit_constraint.cuh"
#include "backends/cuda/penalties.cuh"
#include "backends/cuda/sample.cuh"
#include "backends/cuda/stream_graph.h"
#include "models/model.h"
#include "runtime/kv_cache.h"

namespace tf::cuda {

class CudaKvStorage;

// Launch choices that never change results, only speed: off only to measure what each is worth.
struct CudaModelOptions {
  bool use_graphs = true;              // replay captured graphs for small forwards
  bool use_overlapped_launches = true;  // programmatic dependent launch where it measured faster
};

class Qwen3CudaModel : public Model {
 public:
  Qwen3CudaModel(ModelConfig config, Qwen3CudaWeights weights, CudaModelOptions options = {});

  const ModelConfig& config() const override { return config_; }
  void forward(const Batch& batch, KvCache& kv, float* logits) override;
  // Every pick is made on the GPU (penalties, argmax, seeded draw): only the ids cross to the host,
  // and the raw logits of the rows that want them.
  void forward_and_pick(const Batch& batch, KvCache& kv, const std::vector<LogitRowPick>& picks, int32_t* tokens,
                        float* logits) override;
  std::unique_ptr<KvStorage> make_kv_storage(int64_t n_slots) const override;
  int64_t free_kv_memory_bytes() const override;
  int64_t weight_bytes_per_step() const override;
  void set_tap_layers(std::vector<int> layers) override;
  const std::vector<float>& taps() const override { return taps_; }
  // The drafter on the GPU too, sharing this model's embedding and LM head there.
  std::shared_ptr<DFlashDrafter> load_drafter(const std::string& drafter_dir, int n_threads) const override;

 protected:
  // The decoder layers of one forward (after the embedding, before the last residual add), enqueued
  // on stream_: their rows and metadata are on the device (upload_rows), the graph may be capturing.
  virtual void enqueue_decoder(int64_t n_rows, KvCache& kv);
  // Host work a forward needs before anything is enqueued (outside any graph capture).
  virtual void prepare_forward(const Batch& batch, KvCache& kv) { (void)batch, (void)kv; }
  // What else than the row counts and the cache fixes a captured graph's launch shapes.
  virtual int64_t graph_variant() const { return 0; }
  // The post-norm MLP of a layer (either kind): hidden_ += proj_, then gate/up and down into proj_.
  void mlp_block(const DeviceBuffer<uint16_t>& norm, const CudaMatrix& gate_up, const CudaMatrix& down,
                 int64_t n_rows);
  void keep_taps(int64_t layer, int64_t n_rows);
  void drop_graphs() { graphs_.clear(); }

  ModelConfig config_;
  Qwen3CudaWeights weights_;  // a hybrid's has the embedding, final norm and LM head only
  DeviceBuffer<float> inverse_frequencies_;  // [rotary dimensions / 2]
  CudaStream stream_;
  // Device pointers into row_data_ for this forward (upload_rows).
  const int32_t* tokens_ = nullptr;
  const int32_t* positions_ = nullptr;
  const int32_t* kv_slots_ = nullptr;
  const int32_t* key_offsets_ = nullptr;
  const int32_t* n_keys_ = nullptr;
  const int32_t* logit_rows_ = nullptr;
  const int32_t* n_groups_ = nullptr;      // attention groups of chain rows (AttentionGroups)
  const int32_t* group_starts_ = nullptr;
  const int32_t* key_slot_list_ = nullptr;
  // Activations, bf16, sized for row_capacity_ rows.
  int64_t row_capacity_ = 0;
  DeviceBuffer<uint16_t> hidden_;    // [n_rows][hidden]   residual stream
  DeviceBuffer<uint16_t> normed_;    // [n_rows][hidden]
  DeviceBuffer<uint16_t> q_;         // [n_rows][q_dim]   normed and rotated
  DeviceBuffer<uint16_t> attn_out_;  // [n_rows][q_dim]
  DeviceBuffer<uint16_t> proj_;      // [n_rows][hidden]   a block's output, added to hidden_ by the next norm
  DeviceBuffer<float> attention_scratch_;  // partials of attention's key splits (attention_scratch_floats)

 private:
  // Which captured graph replays a forward: its launch shapes and the KV cache it writes. Every
  // other pointer it holds belongs to this model and drops the graphs when it moves (reserve).
  struct GraphKey {
    int64_t n_rows;
    int64_t n_logit_rows;
    const void* kv_keys;  // with the slot count these fix every layer's cache pointers
    const void* kv_values;
    int64_t kv_slots;
    int64_t variant;  // graph_variant()
    bool operator<(const GraphKey& other) const {
      return std::tie(n_rows, n_logit_rows, kv_keys, kv_values, kv_slots, variant) <
             std::tie(other.n_rows, other.n_logit_rows, other.kv_keys, other.kv_values, other.kv_slots, other.variant);
    }
  };

  // Scratch for n_rows rows and n_keys key slots; grows, never shrinks. Growing drops the graphs.
  void reserve(int64_t n_rows, int64_t n_keys);
  // Every kernel of one forward, enqueued on stream_ (directly, or while a graph is captured).
  void enqueue_layers(int64_t n_rows, int64_t n_logit_rows, KvCache& kv);
  // Packs the rows' ids, positions, slots and key lists into one staging buffer and copies it to
  // the device in one transfer; returns the number of logit rows.
  int64_t upload_rows(const Batch& batch, const KvCache& kv);
  void attention_block(int64_t layer, int64_t n_rows, CudaKvStorage& kv);
  // Enqueues a whole forward (graph or eager) and the copy of its taps; returns its logit rows.
  int64_t enqueue_forward(const Batch& batch, KvCache& kv);
  // Waits for the forward's copies, then unpacks the taps.
  void finish_forward(int64_t n_rows);
  void unpack_taps(int64_t n_rows);
  bool stage_penalties(const std::vector<LogitRowPick>& picks, int64_t n_logit_rows);
  bool stage_constraints(const std::vector<LogitRowPick>& picks, int64_t n_logit_rows);

  std::vector<int> tap_layers_;
  std::vector<float> taps_;  // [n_rows][tap_layers_.size() * hidden]

  // Forwards of up to kMaxGraphRows rows (decode and verify rounds, where launches dominate) are
  // captured once per shape and replayed; without use_graphs every forward runs eagerly.
  CudaModelOptions options_;
  std::map<GraphKey, CapturedGraph> graphs_;

  // Row metadata: the host staging buffer and its device copy, both laid out as
  // [tokens][positions][kv_slots][key_offsets][n_keys][logit_rows] (n_rows each), the attention
  // groups (count, then starts), then the key slots.
  KeySlots key_slots_;
  PinnedHostBuffer<int32_t> row_staging_;
  DeviceBuffer<int32_t> row_data_;
  DeviceBuffer<uint16_t> qkv_;       // [n_rows][q_dim + 2 * kv_dim]
  DeviceBuffer<uint16_t> mlp_act_;   // [n_rows][intermediate]
  DeviceBuffer<float> logits_;       // [n_rows][vocab]
  DeviceBuffer<int32_t> argmax_;     // [n_rows] each logit row's argmax, then its pick (forward_and_pick)
  PinnedHostBuffer<int32_t> argmax_staging_;
  DeviceBuffer<GpuSamplingRow> sampling_rows_;  // [n_rows] forward_and_pick's sampled picks
  PinnedHostBuffer<GpuSamplingRow> sampling_staging_;
  DeviceBuffer<GpuPenaltyRow> penalty_rows_;  // [logit rows] forward_and_pick's penalties
  DeviceBuffer<int2> penalty_entries_;        // (token, count) of every penalized row
  std::vector<std::pair<int32_t, int32_t>> penalty_scratch_;
  DeviceBuffer<GpuConstraintRow> constraint_rows_;  // [logit rows] forward_and_pick's logit constraints
  DeviceBuffer<GpuBiasEntry> bias_entries_;         // logit_bias of every constrained row
  DeviceBuffer<uint32_t> allowed_masks_;            // [masked rows][vocab words]
  DeviceBuffer<uint16_t> tap_rows_;  // [n_tap_layers][n_rows][hidden]
  PinnedHostBuffer<uint16_t> tap_staging_;
};

// Uploads a checkpoint's bound weights (see upload_qwen3_weights).
std::shared_ptr<Model> make_qwen3_cuda_model(const ModelConfig& config, const Qwen3Weights& weights,
                                             CudaModelOptions options = {});
// A model of the config's shape with weights generated on the GPU.
std::shared_ptr<Model> make_synthetic_qwen3_cuda_model(const ModelConfig& config, CudaModelOptions options = {});

}  // namespace tf::cuda
