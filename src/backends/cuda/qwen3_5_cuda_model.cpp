// Qwen3.5-class hybrid forward on the GPU: gated attention layers from the dense model's kernels
// (a gated q projection, partial rotary, a sigmoid output gate), Gated DeltaNet layers from
// gated_delta_net.cuh, every lane's pass planned on the host as the CPU model plans it.
#include "backends/cuda/qwen3_5_cuda_model.h"

#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_mtp_head.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/gated_attention.h"
#include "backends/cuda/linear.cuh"
#include "backends/cuda/rms_norm.cuh"
#include "core/error.h"

namespace tf::cuda {
namespace {

DeltaNetLayer delta_layer(const Qwen35CudaLayerWeights& w, int64_t linear_index) {
  return {int(linear_index), w.conv.data(), w.a_log.data(), w.dt_bias.data(), w.gated_norm.data()};
}

size_t round_up_16(size_t n) { return (n + 15) / 16 * 16; }

// The pass metadata's first ints: the replay count, then padding to 16 bytes.
constexpr int64_t kPassHeaderInts = 4;

}  // namespace

Qwen35CudaModel::Qwen35CudaModel(ModelConfig config, Qwen35CudaWeights weights, CudaModelOptions options,
                                 std::unique_ptr<Qwen35CudaMtpWeights> mtp, std::string mtp_missing)
    : Qwen3CudaModel(std::move(config), std::move(weights.head), options),
      layers_(std::move(weights.layers)),
      mtp_(std::move(mtp)),
      mtp_missing_(std::move(mtp_missing)),
      shape_(delta_net_shape(config_)) {
  if (shape_.key_head_dim > 128)
    fail("linear_key_head_dim " + std::to_string(shape_.key_head_dim) +
         " is wider than the CUDA backend's Gated DeltaNet takes (128)");
  if (config_.head_dim % 8 != 0 || config_.head_dim > 256 || shape_.value_dim() % 8 != 0)
    fail("the CUDA backend needs head_dim a multiple of 8 up to 256 and a DeltaNet value width that is a multiple of "
         "8 (head_dim " + std::to_string(config_.head_dim) + ", value width " + std::to_string(shape_.value_dim()) + ")");
}

std::unique_ptr<KvStorage> Qwen35CudaModel::make_kv_storage(int64_t n_slots) const {
  return std::make_unique<CudaHybridStorage>(config_, n_slots);
}

int64_t Qwen35CudaModel::weight_bytes_per_step() const {
  int64_t total = weights_.lm_head().n_bytes();
  for (const auto& l : layers_)
    for (const CudaMatrix* m : {&l.qkv_proj, &l.o_proj, &l.in_proj, &l.out_proj, &l.gate_up_proj, &l.down_proj})
      total += m->n_bytes();
  return total;
}

void Qwen35CudaModel::reserve_hybrid(int64_t n_rows) {
  if (n_rows <= hybrid_capacity_) return;
  drop_graphs();  // their pointers are about to move
  const size_t rows = size_t(n_rows);
  gated_qkv_ = DeviceBuffer<uint16_t>(rows * size_t(2 * config_.q_dim() + 2 * config_.kv_dim()));
  projection_ = DeviceBuffer<float>(rows * size_t(shape_.projection_floats()));
  head_out_ = DeviceBuffer<float>(rows * size_t(shape_.value_dim()));
  delta_out_ = DeviceBuffer<uint16_t>(rows * size_t(shape_.value_dim()));
  hybrid_capacity_ = n_rows;
}

// Layout: the lanes, then what sits at offsets that depend on the row and lane counts alone (a
// captured graph keeps their addresses): the replay count, lane rows, load_from, save_to, each row's
// lane, conv sources; then the replay rows and their lanes.
void Qwen35CudaModel::upload_pass(const std::vector<DeltaNetLane>& lanes, const std::vector<int32_t>& ints,
                                  int64_t n_replay, int64_t n_rows, int64_t n_saved) {
  const size_t lane_bytes = round_up_16(lanes.size() * sizeof(DeltaNetLane));
  const size_t n_bytes = lane_bytes + ints.size() * sizeof(int32_t);
  if (pass_staging_.size() < n_bytes) pass_staging_ = PinnedHostBuffer<uint8_t>(n_bytes + n_bytes / 2);
  if (pass_data_.size() < n_bytes) {
    drop_graphs();
    pass_data_ = DeviceBuffer<uint8_t>(pass_staging_.size());
  }
  const int64_t state_floats = shape_.state_floats_per_layer();
  if (int64_t(saved_states_.size()) < n_saved * state_floats) {
    drop_graphs();
    saved_states_ = DeviceBuffer<float>(size_t(n_saved * state_floats));
  }
  const int64_t prepared_floats = (n_rows + n_replay) * shape_.record_floats();
  if (int64_t(prepared_.size()) < prepared_floats) {
    drop_graphs();
    prepared_ = DeviceBuffer<float>(size_t(prepared_floats + prepared_floats / 2));
  }
  // The staging buffer may still feed the copy of the last pass enqueued without a host sync (a
  // fold for a kept state between rounds): the host must not overwrite it before that copy lands.
  stream_.synchronize();
  std::memcpy(pass_staging_.data(), lanes.data(), lanes.size() * sizeof(DeltaNetLane));
  std::memcpy(pass_staging_.data() + lane_bytes, ints.data(), ints.size() * sizeof(int32_t));
  TF_CUDA_CHECK(cudaMemcpyAsync(pass_data_.data(), pass_staging_.data(), n_bytes, cudaMemcpyHostToDevice,
                                stream_.get()));
  const auto* device_ints = reinterpret_cast<const int32_t*>(pass_data_.data() + lane_bytes);
  delta_pass_.lanes = reinterpret_cast<const DeltaNetLane*>(pass_data_.data());
  delta_pass_.n_lanes = int(lanes.size());
  delta_pass_.n_rows = int(n_rows);
  delta_pass_.n_replay_total = device_ints;
  delta_pass_.lane_rows = device_ints + kPassHeaderInts;
  delta_pass_.load_from = delta_pass_.lane_rows + n_rows;
  delta_pass_.save_to = delta_pass_.lane_rows + 2 * n_rows;
  delta_pass_.lane_of_row = delta_pass_.lane_rows + 3 * n_rows;
  delta_pass_.conv_sources = delta_pass_.lane_rows + 4 * n_rows;
  delta_pass_.replay_rows = delta_pass_.conv_sources + n_rows * shape_.history();
  delta_pass_.saved_states = saved_states_.data();
  delta_pass_.prepared = prepared_.data();
}

// Each lane's rows run in batch order in one block row; a row continues from the state of the row
// before it when that is its parent (chains), and otherwise from its parent's saved state (trees).
void Qwen35CudaModel::prepare_forward(const Batch& batch, KvCache& kv) {
  CudaHybridStorage& storage = kv.storage_as<CudaHybridStorage>();
  const int64_t n_rows = int64_t(batch.rows.size()), history = shape_.history();
  plan_hybrid_pass(batch, kv, storage.tags(), history, ++n_passes_, [&](int32_t lane) { storage.reset_lane(lane); },
                   &plan_);
  finish_hybrid_pass(batch, plan_, storage.tags());
  reserve_hybrid(n_rows);

  std::vector<DeltaNetLane> lanes;
  std::vector<int32_t> lane_rows, load_from, save_to, replay;
  std::vector<int32_t> saved_as(size_t(n_rows), -1);  // per batch row
  int64_t n_saved = 0;
  for (const HybridLanePass& pass : plan_.lanes) {
    DeltaNetLane lane = storage.lane(pass.lane, int64_t(pass.rows.size()));
    lane.n_replay = int(pass.replay.size());
    lane.replay_offset = int(replay.size());
    lane.n_rows = int(pass.rows.size());
    lane.row_offset = int(lane_rows.size());
    replay.insert(replay.end(), pass.replay.begin(), pass.replay.end());
    for (size_t u = 0; u < pass.rows.size(); ++u) {
      const int32_t parent = batch.rows[size_t(pass.rows[u])].parent;
      int32_t load = -1;
      if (u > 0 && parent != pass.rows[u - 1]) {
        if (saved_as[size_t(parent)] < 0) saved_as[size_t(parent)] = int32_t(n_saved++);
        load = saved_as[size_t(parent)];
      }
      lane_rows.push_back(pass.rows[u]);
      load_from.push_back(load);
    }
    lanes.push_back(lane);
  }
  for (int32_t row : lane_rows) save_to.push_back(saved_as[size_t(row)]);
  std::vector<int32_t> replay_lanes;
  for (size_t i = 0; i < plan_.lanes.size(); ++i) replay_lanes.insert(replay_lanes.end(), plan_.lanes[i].replay.size(), int32_t(i));

  std::vector<int32_t> ints = {int32_t(replay.size()), 0, 0, 0};
  ints.reserve(size_t(kPassHeaderInts + 4 * n_rows + n_rows * history) + 2 * replay.size());
  for (const auto* part : {&lane_rows, &load_from, &save_to, &plan_.pass_of_row, &plan_.conv_sources, &replay, &replay_lanes})
    ints.insert(ints.end(), part->begin(), part->end());
  upload_pass(lanes, ints, int64_t(replay.size()), n_rows, n_saved);
}

void Qwen35CudaModel::attention_block(const Qwen35CudaLayerWeights& w, int64_t layer, int64_t attention_index,
                                      int64_t n_rows, CudaHybridStorage& kv) {
  cudaStream_t stream = stream_.get();
  add_rms_norm_bf16(hidden_.data(), layer > 0 ? proj_.data() : nullptr, n_rows, config_.hidden_size,
                    w.input_norm.data(), config_.rms_norm_eps, normed_.data(), stream);
  if (layer > 0) keep_taps(layer - 1, n_rows);
  const DeviceAttentionRows rows{positions_, kv_slots_, key_slot_list_, key_offsets_, n_keys_, {group_starts_, n_groups_}};
  const GatedAttentionScratch scratch{gated_qkv_.data(), q_.data(), attn_out_.data(),
                                      {attention_scratch_.data(), int64_t(attention_scratch_.size())}};
  gated_attention_inputs(w, config_, inverse_frequencies_.data(), normed_.data(), n_rows, rows,
                         kv.keys(attention_index), kv.values(attention_index), scratch, stream);
  gated_attention_outputs(w, config_, 0, n_rows, rows, kv.keys(attention_index), kv.values(attention_index), scratch,
                          proj_.data(), stream);
}

void Qwen35CudaModel::delta_net_block(const Qwen35CudaLayerWeights& w, int64_t layer, int64_t linear_index,
                                      int64_t n_rows) {
  const int64_t hidden = config_.hidden_size;
  const float eps = config_.rms_norm_eps;
  cudaStream_t stream = stream_.get();
  add_rms_norm_bf16(hidden_.data(), layer > 0 ? proj_.data() : nullptr, n_rows, hidden, w.input_norm.data(), eps,
                    normed_.data(), stream);
  if (layer > 0) keep_taps(layer - 1, n_rows);
  // f32: the recurrence reads the projection as the CPU reference does, and replay reads it again.
  linear(normed_.data(), n_rows, w.in_proj.view(), shape_.projection_floats(), hidden, projection_.data(),
         LinearOutput::f32, stream);
  gated_delta_net(projection_.data(), shape_, delta_layer(w, linear_index), delta_pass_, eps, head_out_.data(),
                  delta_out_.data(), stream);
  commit_delta_net_records(projection_.data(), shape_, int(linear_index), delta_pass_, stream);
  linear(delta_out_.data(), n_rows, w.out_proj.view(), hidden, shape_.value_dim(), proj_.data(), LinearOutput::bf16,
         stream);
}

void Qwen35CudaModel::enqueue_decoder(int64_t n_rows, KvCache& kv) {
  CudaHybridStorage& storage = kv.storage_as<CudaHybridStorage>();
  int64_t attention_index = 0, linear_index = 0;
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    const Qwen35CudaLayerWeights& w = layers_[size_t(layer)];
    if (w.kind == LayerKind::full_attention) {
      attention_block(w, layer, attention_index++, n_rows, storage);
    } else {
      delta_net_block(w, layer, linear_index++, n_rows);
    }
    mlp_block(w.post_attention_norm, w.gate_up_proj, w.down_proj, n_rows);
  }
}

// Folds the committed positions up to `position` into the lane's state with the pass's own kernels
// (a pass of replay alone; the next pass replays only what follows).
CudaHybridStorage& Qwen35CudaModel::fold_recurrent_state(KvCache& kv, int32_t lane, int64_t position) {
  CudaHybridStorage& storage = kv.storage_as<CudaHybridStorage>();
  LaneProgress& progress = storage.tags().lane(lane);
  if (position < progress.position)
    fail_internal("lane " + std::to_string(lane) + "'s recurrent state is at position " +
                  std::to_string(progress.position) + ", past " + std::to_string(position) + " (it does not roll back)");
  const std::vector<int32_t> replay = committed_rows(kv, storage.tags(), lane, position);
  if (!replay.empty()) {
    DeltaNetLane fold = storage.lane(lane, 0);
    fold.n_replay = int(replay.size());
    std::vector<int32_t> ints = {int32_t(replay.size()), 0, 0, 0};
    ints.insert(ints.end(), replay.begin(), replay.end());
    ints.insert(ints.end(), replay.size(), 0);  // every replay row is lane 0's
    upload_pass({fold}, ints, int64_t(replay.size()), 0, 0);
    int64_t linear_index = 0;
    for (const Qwen35CudaLayerWeights& w : layers_) {
      if (w.kind != LayerKind::linear_attention) continue;
      gated_delta_net(nullptr, shape_, delta_layer(w, linear_index), delta_pass_, config_.rms_norm_eps, nullptr,
                      nullptr, stream_.get());
      commit_delta_net_records(nullptr, shape_, int(linear_index), delta_pass_, stream_.get());
      ++linear_index;
    }
  }
  progress.position = position;
  return storage;
}

void Qwen35CudaModel::read_recurrent_state(KvCache& kv, int32_t lane, int64_t position, uint8_t* out) {
  fold_recurrent_state(kv, lane, position).read_lane(lane, out);
}

void Qwen35CudaModel::keep_recurrent_state(KvCache& kv, int32_t lane, int64_t position) {
  fold_recurrent_state(kv, lane, position).keep_lane(lane);
}

void Qwen35CudaModel::read_kept_recurrent_state(KvCache& kv, int32_t lane, uint8_t* out) {
  kv.storage_as<CudaHybridStorage>().read_kept_lane(lane, out);
}

void Qwen35CudaModel::write_recurrent_state(KvCache& kv, int32_t lane, int64_t position, const uint8_t* in) {
  kv.storage_as<CudaHybridStorage>().write_lane(lane, position, in);
}

std::shared_ptr<MtpHead> Qwen35CudaModel::load_mtp_head(int) const {
  if (!mtp_) fail(mtp_missing_ + ": drafting with MTP needs a checkpoint that has one");
  return std::make_shared<CudaMtpHead>(config_, *mtp_, weights_);
}

std::shared_ptr<Model> make_qwen3_5_cuda_model(const ModelConfig& config, const Qwen35Weights& weights,
                                               CudaModelOptions options, bool keep_mtp_head) {
  require_hopper_gpu();
  std::unique_ptr<Qwen35CudaMtpWeights> mtp;
  std::string mtp_missing = weights.mtp_missing;
  if (weights.has_mtp && keep_mtp_head) {
    mtp = std::make_unique<Qwen35CudaMtpWeights>(upload_qwen3_5_mtp_weights(weights, config));
  } else if (weights.has_mtp) {
    mtp_missing = "the model was loaded without its MTP head (it is uploaded to the GPU only for --drafter mtp)";
  }
  return std::make_shared<Qwen35CudaModel>(config, upload_qwen3_5_weights(weights, config), options, std::move(mtp),
                                           std::move(mtp_missing));
}

std::shared_ptr<Model> make_synthetic_qwen3_5_cuda_model(const ModelConfig& config, CudaModelOptions options) {
  require_hopper_gpu();
  return std::make_shared<Qwen35CudaModel>(config, synthetic_qwen3_5_cuda_weights(config), options);
}

}  // namespace tf::cuda
