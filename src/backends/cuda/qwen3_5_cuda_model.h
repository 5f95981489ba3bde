// Qwen3.5-class hybrids on the CUDA backend (Hopper): the CPU reference's forward with bf16 weights,
// activations and K/V, and the Gated DeltaNet in f32 token by token (gated_delta_net.cuh). Rows,
// graphs, picks, taps and the LM head are the dense model's; only the decoder layers differ.
#pragma once
#include <memory>
#include <vector>

#include "backends/cuda/cuda_hybrid_storage.h"
#include "backends/cuda/gated_delta_net.cuh"
#include "backends/cuda/qwen3_5_cuda_weights.h"
#include "backends/cuda/qwen3_cuda_model.h"
#include "models/hybrid_lanes.h"

namespace tf::cuda {

class Qwen35CudaModel final : public Qwen3CudaModel {
 public:
  // mtp: the checkpoint's MTP head on the GPU, or null with `mtp_missing` saying why there is none.
  Qwen35CudaModel(ModelConfig config, Qwen35CudaWeights weights, CudaModelOptions options = {},
                  std::unique_ptr<Qwen35CudaMtpWeights> mtp = nullptr,
                  std::string mtp_missing = "this model has no MTP head");

  std::unique_ptr<KvStorage> make_kv_storage(int64_t n_slots) const override;
  int64_t weight_bytes_per_step() const override;
  int64_t recurrent_state_bytes() const override { return hybrid_lane_bytes(config_); }
  std::string recurrent_state_format() const override { return hybrid_lane_format(config_); }
  void read_recurrent_state(KvCache& kv, int32_t lane, int64_t position, uint8_t* out) override;
  void keep_recurrent_state(KvCache& kv, int32_t lane, int64_t position) override;
  void read_kept_recurrent_state(KvCache& kv, int32_t lane, uint8_t* out) override;
  void write_recurrent_state(KvCache& kv, int32_t lane, int64_t position, const uint8_t* in) override;
  // The head uploaded with the model (CudaMtpHead); an error saying why when there is none.
  std::shared_ptr<MtpHead> load_mtp_head(int n_threads) const override;

 private:
  void enqueue_decoder(int64_t n_rows, KvCache& kv) override;
  // Plans the lane passes, makes room in each lane's buffers and uploads the pass's metadata.
  void prepare_forward(const Batch& batch, KvCache& kv) override;
  // The DeltaNet kernels' grid has a block row per lane.
  int64_t graph_variant() const override { return delta_pass_.n_lanes; }

  void attention_block(const Qwen35CudaLayerWeights& w, int64_t layer, int64_t attention_index, int64_t n_rows,
                       CudaHybridStorage& kv);
  void delta_net_block(const Qwen35CudaLayerWeights& w, int64_t layer, int64_t linear_index, int64_t n_rows);
  // The pass's metadata to the device (laid out as upload_pass's comment says) and delta_pass_
  // pointed at it; grows the saved-state and prepared-row scratch to what the pass needs.
  void upload_pass(const std::vector<DeltaNetLane>& lanes, const std::vector<int32_t>& ints, int64_t n_replay,
                   int64_t n_rows, int64_t n_saved);
  void reserve_hybrid(int64_t n_rows);
  // The lane's state brought to `position` (read_recurrent_state's contract); its storage.
  CudaHybridStorage& fold_recurrent_state(KvCache& kv, int32_t lane, int64_t position);

  std::vector<Qwen35CudaLayerWeights> layers_;
  std::unique_ptr<Qwen35CudaMtpWeights> mtp_;
  std::string mtp_missing_;
  DeltaNetShape shape_;
  uint64_t n_passes_ = 0;
  HybridPassPlan plan_;
  DeltaNetPass delta_pass_{};

  PinnedHostBuffer<uint8_t> pass_staging_;
  DeviceBuffer<uint8_t> pass_data_;
  DeviceBuffer<float> saved_states_;  // [saved][value heads][key dim][value dim]
  DeviceBuffer<float> prepared_;      // [rows + replay rows][record floats] (DeltaNetPass::prepared)

  int64_t hybrid_capacity_ = 0;
  DeviceBuffer<uint16_t> gated_qkv_;   // [n_rows][2 * q_dim + 2 * kv_dim]
  DeviceBuffer<float> projection_;     // [n_rows][projection_floats]
  DeviceBuffer<float> head_out_;       // [n_rows][value_dim]: the recurrence's outputs, in lane order
  DeviceBuffer<uint16_t> delta_out_;   // [n_rows][value_dim]
};

// Uploads a checkpoint's bound hybrid weights (see upload_qwen3_5_weights), and its MTP head when
// `keep_mtp_head` and it has one.
std::shared_ptr<Model> make_qwen3_5_cuda_model(const ModelConfig& config, const Qwen35Weights& weights,
                                               CudaModelOptions options = {}, bool keep_mtp_head = false);
// A model of the config's hybrid shape with weights generated on the GPU.
std::shared_ptr<Model> make_synthetic_qwen3_5_cuda_model(const ModelConfig& config, CudaModelOptions options = {});

}  // namespace tf::cuda
