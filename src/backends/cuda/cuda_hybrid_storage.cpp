// Per-lane DeltaNet state of a hybrid in device memory. Every copy here runs on the legacy default
// stream, which orders with the model's (blocking) stream as the K/V slot copies do.
#include "backends/cuda/cuda_hybrid_storage.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tf::cuda {

DeltaNetShape delta_net_shape(const ModelConfig& config) {
  const HybridConfig& h = config.hybrid;
  // Refused when the model is made, naming the field, not at the kernel's first launch.
  const auto require = [](bool is_in_range, const char* field, int64_t value, const std::string& range) {
    if (!is_in_range)
      fail("the model's " + std::string(field) + " (" + std::to_string(value) +
           ") is outside what the CUDA backend's Gated DeltaNet kernel runs (" + range + "); run it with --device cpu");
  };
  require(h.conv_kernel >= 2 && h.conv_kernel <= kMaxDeltaNetConvKernel, "linear_conv_kernel_dim", h.conv_kernel,
          "2 to " + std::to_string(kMaxDeltaNetConvKernel));
  require(h.linear_key_head_dim <= kMaxDeltaNetHeadDim, "linear_key_head_dim", h.linear_key_head_dim,
          "at most " + std::to_string(kMaxDeltaNetHeadDim));
  require(h.linear_value_head_dim <= kMaxDeltaNetHeadDim, "linear_value_head_dim", h.linear_value_head_dim,
          "at most " + std::to_string(kMaxDeltaNetHeadDim));
  return {int(h.linear_n_key_heads), int(h.linear_n_value_heads), int(h.linear_key_head_dim),
          int(h.linear_value_head_dim), int(h.conv_kernel), int(h.n_layers_of(LayerKind::linear_attention))};
}

CudaHybridStorage::CudaHybridStorage(const ModelConfig& config, int64_t n_slots)
    : CudaKvStorage(config.hybrid.n_layers_of(LayerKind::full_attention), config.kv_dim(), n_slots),
      shape_(delta_net_shape(config)),
      tags_(n_slots) {}

void CudaHybridStorage::copy_slot(int32_t from, int32_t to) {
  CudaKvStorage::copy_slot(from, to);
  tags_.copy_slot(from, to);
}

CudaHybridStorage::LaneBuffers& CudaHybridStorage::buffers(int32_t lane) {
  if (lane >= int32_t(lanes_.size())) lanes_.resize(size_t(lane) + 1);
  LaneBuffers& b = lanes_[size_t(lane)];
  if (b.state.size() == 0) {
    b.state = DeviceBuffer<float>(size_t(shape_.n_linear_layers * shape_.state_floats_per_layer()));
    b.history = DeviceBuffer<float>(size_t(shape_.n_linear_layers * shape_.history_floats_per_layer()));
    b.state.fill_bytes(0);
    b.history.fill_bytes(0);
  }
  return b;
}

DeltaNetLane CudaHybridStorage::lane(int32_t lane, int64_t n_rows) {
  LaneBuffers& b = buffers(lane);
  if (n_rows > b.record_capacity) {
    // Room for this pass, rounded up; the kept records move along, layer by layer.
    const int64_t capacity = std::max<int64_t>((n_rows + 15) / 16 * 16, 2 * b.record_capacity);
    const size_t record_bytes = size_t(shape_.record_floats()) * sizeof(float);
    DeviceBuffer<float> grown(size_t(shape_.n_linear_layers * capacity * shape_.record_floats()));
    if (b.record_capacity > 0)
      TF_CUDA_CHECK(cudaMemcpy2D(grown.data(), size_t(capacity) * record_bytes, b.records.data(),
                                 size_t(b.record_capacity) * record_bytes, size_t(b.record_capacity) * record_bytes,
                                 size_t(shape_.n_linear_layers), cudaMemcpyDeviceToDevice));
    b.records = std::move(grown);
    b.record_capacity = capacity;
  }
  return {b.state.data(), b.history.data(), b.records.data(), b.record_capacity, 0, 0, 0, 0};
}

void CudaHybridStorage::reset_lane(int32_t lane) {
  LaneBuffers& b = buffers(lane);
  b.state.fill_bytes(0);
  b.history.fill_bytes(0);
}

namespace {

// A state and its conv history to the host, back to back.
void copy_to_host(const DeviceBuffer<float>& state, const DeviceBuffer<float>& history, uint8_t* out) {
  TF_CUDA_CHECK(cudaDeviceSynchronize());  // the fold or copy that precedes the read may still run
  TF_CUDA_CHECK(cudaMemcpy(out, state.data(), state.n_bytes(), cudaMemcpyDeviceToHost));
  TF_CUDA_CHECK(cudaMemcpy(out + state.n_bytes(), history.data(), history.n_bytes(), cudaMemcpyDeviceToHost));
}

}  // namespace

void CudaHybridStorage::read_lane(int32_t lane, uint8_t* out) {
  LaneBuffers& b = buffers(lane);
  copy_to_host(b.state, b.history, out);
}

void CudaHybridStorage::keep_lane(int32_t lane) {
  LaneBuffers& b = buffers(lane);
  if (b.kept_state.size() == 0) {
    b.kept_state = DeviceBuffer<float>(b.state.size());
    b.kept_history = DeviceBuffer<float>(b.history.size());
  }
  TF_CUDA_CHECK(cudaMemcpyAsync(b.kept_state.data(), b.state.data(), b.state.n_bytes(), cudaMemcpyDeviceToDevice));
  TF_CUDA_CHECK(
      cudaMemcpyAsync(b.kept_history.data(), b.history.data(), b.history.n_bytes(), cudaMemcpyDeviceToDevice));
}

void CudaHybridStorage::read_kept_lane(int32_t lane, uint8_t* out) {
  LaneBuffers& b = buffers(lane);
  if (b.kept_state.size() == 0) fail_internal("lane " + std::to_string(lane) + " has kept no recurrent state");
  copy_to_host(b.kept_state, b.kept_history, out);
}

void CudaHybridStorage::write_lane(int32_t lane, int64_t position, const uint8_t* in) {
  LaneBuffers& b = buffers(lane);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  TF_CUDA_CHECK(cudaMemcpy(b.state.data(), in, b.state.n_bytes(), cudaMemcpyHostToDevice));
  TF_CUDA_CHECK(cudaMemcpy(b.history.data(), in + b.state.n_bytes(), b.history.n_bytes(), cudaMemcpyHostToDevice));
  tags_.lane(lane) = {position, 0};
}

}  // namespace tf::cuda
