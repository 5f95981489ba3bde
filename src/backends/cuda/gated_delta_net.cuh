// The Gated DeltaNet of a Qwen3.5-class hybrid on the GPU, token by token in f32 in every path
// (prefill, decode, verify rows, the replay that folds committed rows into a lane's state).
//
// One warp per (eight value columns of a head, lane) runs the lane's rows in order: first the replay
// (committed rows of the lane's previous pass, whose inputs the lane keeps), which it writes back as
// the lane's state, then this pass's rows, each from its parent's state, which the lane's state never
// sees; the gated norm then runs over every row at once. A row's
// convolution, q/k normalisation, decay and delta step read only its own window and its parent's
// state, in one order, so its result never depends on how many rows or lanes share the pass.
// Hybrid_lanes.h says how the rows are planned.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// What the kernels take (the CPU backend runs any shape the loader accepts).
constexpr int kMaxDeltaNetHeadDim = 128;
constexpr int kMaxDeltaNetConvKernel = 8;

struct DeltaNetShape {
  int n_key_heads;
  int n_value_heads;    // a multiple of n_key_heads
  int key_head_dim;     // at most kMaxDeltaNetHeadDim
  int value_head_dim;   // at most kMaxDeltaNetHeadDim
  int conv_kernel;      // 2 .. kMaxDeltaNetConvKernel
  int n_linear_layers;

  __host__ __device__ int key_dim() const { return n_key_heads * key_head_dim; }
  __host__ __device__ int value_dim() const { return n_value_heads * value_head_dim; }
  __host__ __device__ int conv_dim() const { return 2 * key_dim() + value_dim(); }
  __host__ __device__ int history() const { return conv_kernel - 1; }
  // A row's record, what replay needs of it: the pre-convolution q|k|v channels, then b and a of
  // every value head.
  __host__ __device__ int record_floats() const { return conv_dim() + 2 * n_value_heads; }
  // The fused input projection's row: the record, then z (the output gate).
  __host__ __device__ int projection_floats() const { return record_floats() + value_dim(); }
  __host__ __device__ int64_t state_floats_per_layer() const {
    return int64_t(n_value_heads) * key_head_dim * value_head_dim;
  }
  __host__ __device__ int64_t history_floats_per_layer() const { return int64_t(history()) * conv_dim(); }
};

// One lane's part of a pass, in device memory. The buffers hold every DeltaNet layer.
struct DeltaNetLane {
  float* state;            // [n_linear_layers][value heads][key_head_dim][value_head_dim], committed
  float* history;          // [n_linear_layers][history][conv_dim]: committed pre-conv inputs, oldest first
  float* records;          // [n_linear_layers][record_capacity][record_floats]: the lane's last pass
  int64_t record_capacity;
  int n_replay, replay_offset;  // replay_rows[replay_offset ..]: record rows to fold in, in order
  int n_rows, row_offset;       // lane_rows etc. [row_offset ..]: this pass's rows, in batch order
};

struct DeltaNetPass {
  const DeltaNetLane* lanes;   // [n_lanes]
  int n_lanes;
  int n_rows;                  // the pass's rows (0 for a fold)
  const int32_t* n_replay_total;  // device: every lane's replay rows together
  const int32_t* replay_rows;  // [n_replay_total] record rows of every lane's replay, then [n_replay_total] their lanes
  const int32_t* lane_rows;    // [n_rows] batch rows, lane by lane
  const int32_t* load_from;    // per lane row: -1 start from the row before it (or the lane's state), else a saved state
  const int32_t* save_to;      // per lane row: -1, or the saved state its later children start from
  const int32_t* lane_of_row;  // [n_rows] per batch row, its lane's index in `lanes`
  const int32_t* conv_sources; // [n_rows][history] as HybridPassPlan::conv_sources
  float* saved_states;         // [saved][value heads][key_head_dim][value_head_dim]
  float* prepared;             // [n_rows + n_replay_total][record_floats]: the pass's rows in lane order, then the replay rows
};

struct DeltaNetLayer {
  int linear_index;
  const float* conv;        // [conv_dim][conv_kernel], oldest position first
  const float* a_log;       // [value heads]
  const float* dt_bias;     // [value heads]
  const float* gated_norm;  // [value_head_dim], a plain gain
};

// projection: [n_rows][projection_floats] f32 (null when no lane has rows: a fold). head_out:
// [n_rows][value_dim] f32 scratch. out: [n_rows][value_dim] bf16, the gated RMSNorm of each head's
// output times silu(z). Folds every lane's replay into its state.
void gated_delta_net(const float* projection, const DeltaNetShape& shape, const DeltaNetLayer& layer,
                     const DeltaNetPass& pass, float eps, float* head_out, uint16_t* out, cudaStream_t stream);

// After gated_delta_net on the layer: each lane's conv history moves past its replay, and its records
// become this pass's rows (the next pass replays the accepted ones).
void commit_delta_net_records(const float* projection, const DeltaNetShape& shape, int linear_index,
                              const DeltaNetPass& pass, cudaStream_t stream);

}  // namespace tf::cuda
