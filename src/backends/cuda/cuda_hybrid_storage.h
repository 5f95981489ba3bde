// The CUDA storage of a Qwen3.5-class hybrid: bf16 K/V of the attention layers by slot
// (CudaKvStorage), and per lane in device memory the DeltaNet layers' committed state, conv history
// and the records of the lane's last pass (hybrid_lanes.h: how accepted rows reach the state).
#pragma once
#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_kv_storage.h"
#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/gated_delta_net.cuh"
#include "loader/model_config.h"
#include "models/hybrid_lanes.h"

namespace tf::cuda {

DeltaNetShape delta_net_shape(const ModelConfig& config);

class CudaHybridStorage : public CudaKvStorage {
 public:
  CudaHybridStorage(const ModelConfig& config, int64_t n_slots);

  void copy_slot(int32_t from, int32_t to) override;
  HybridLaneTags& tags() { return tags_; }
  const DeltaNetShape& shape() const { return shape_; }

  // The lane's buffers in a pass's form (counts and offsets left for the caller), made zero on first
  // use, with room for n_rows records per layer (kept records stay).
  DeltaNetLane lane(int32_t lane, int64_t n_rows);
  // Zeroes a lane's state and conv history (a lane id reused by a new sequence).
  void reset_lane(int32_t lane);
  // The lane's state then conv history, as hybrid_lane_format lays them out; waits for the GPU.
  void read_lane(int32_t lane, uint8_t* out);
  // Copies the lane's state and conv history aside on the device, queued behind the work before it,
  // in place of the lane's last copy.
  void keep_lane(int32_t lane);
  // The copy keep_lane kept last, laid out as read_lane's; waits for the GPU.
  void read_kept_lane(int32_t lane, uint8_t* out);
  // Sets the lane's state to `in` at `position`, with no pass to replay after it.
  void write_lane(int32_t lane, int64_t position, const uint8_t* in);

 private:
  struct LaneBuffers {
    DeviceBuffer<float> state, history, records;
    DeviceBuffer<float> kept_state, kept_history;  // keep_lane's copy; empty until the first
    int64_t record_capacity = 0;
  };
  LaneBuffers& buffers(int32_t lane);

  DeltaNetShape shape_;
  HybridLaneTags tags_;
  std::vector<LaneBuffers> lanes_;
};

}  // namespace tf::cuda
