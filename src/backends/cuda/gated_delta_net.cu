// Gated DeltaNet kernels: two threads of a block own column j of its value head's [key][value] state
// in registers, so a chain of rows (a prefill chunk, a 256-row copy chain) never leaves the block.
// Every sum runs in one order, written out without fused multiply-adds (as the CPU twin writes them).
#include "backends/cuda/gated_delta_net.cuh"

#include <algorithm>

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxHistory = 7;
constexpr int kCommitThreads = 256;

// A lane's timeline of pre-conv records: its committed conv history (t < history), then the rows
// it replays. Entry history + i after a replay of n rows is entry i of the new history.
struct Timeline {
  const float* history;
  const float* records;
  const int32_t* replay_rows;
  int n_history, conv_dim, record_floats;

  __device__ const float* at(int t) const {
    return t < n_history ? history + int64_t(t) * conv_dim : records + int64_t(replay_rows[t - n_history]) * record_floats;
  }
};

__device__ __forceinline__ float silu_of(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }

// The sum of v[i]^2 over i < n by one warp: lane l takes l, l + 32, ... in order, then a butterfly.
__device__ __forceinline__ float warp_sum_of_squares(const float* v, int n, int lane) {
  float sum = 0.0f;
  for (int i = lane; i < n; i += 32) sum = __fadd_rn(sum, __fmul_rn(v[i], v[i]));
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  return sum;
}

// Shared memory of the recurrence block: q [key_head_dim], k [key_head_dim], v [value_head_dim],
// then the warps' partial sums and the row's decay and beta.
struct RowScratch {
  float* q;
  float* k;
  float* v;
  float* partials;  // [32]
  float* scalars;   // decay, beta, the output's inverse rms
};

// One row's q, k, v of the block's head (convolution over the window, silu, L2-normalised q and
// k, q also divided by sqrt(key_head_dim)) and its decay and beta, into shared memory.
__device__ void prepare_row(const float* const* window, const float* record, const DeltaNetShape& shape,
                            const DeltaNetLayer& layer, int head, const RowScratch& scratch) {
  const int dk = shape.key_head_dim, dv = shape.value_head_dim, kernel = shape.conv_kernel;
  const int key_head = head / (shape.n_value_heads / shape.n_key_heads);
  __syncthreads();  // the previous row's step is done with q, k, v
  for (int local = threadIdx.x; local < 2 * dk + dv; local += blockDim.x) {
    const int channel = local < dk       ? key_head * dk + local
                        : local < 2 * dk ? shape.key_dim() + key_head * dk + (local - dk)
                                         : 2 * shape.key_dim() + head * dv + (local - 2 * dk);
    float sum = 0.0f;
    for (int j = 0; j < kernel; ++j) sum = __fadd_rn(sum, __fmul_rn(layer.conv[channel * kernel + j], window[j][channel]));
    scratch.q[local] = silu_of(sum);  // q, k and v lie back to back
  }
  if (threadIdx.x == 0) {
    const float b = record[shape.conv_dim() + head];
    const float a = record[shape.conv_dim() + shape.n_value_heads + head];
    const float x = __fadd_rn(a, layer.dt_bias[head]);
    // PyTorch's softplus: x itself above its threshold of 20, log1p(exp(x)) below.
    const float softplus = x > 20.0f ? x : log1pf(expf(x));
    const float g = -__fmul_rn(expf(layer.a_log[head]), softplus);
    scratch.scalars[0] = expf(g);
    scratch.scalars[1] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-b)));
  }
  __syncthreads();
  // Warp 0 normalises q, warp 1 k (the block has at least two warps).
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp < 2) {
    float* x = warp == 0 ? scratch.q : scratch.k;
    const float inverse_norm = __fdiv_rn(1.0f, sqrtf(__fadd_rn(warp_sum_of_squares(x, dk, lane), 1e-6f)));
    const float divisor = warp == 0 ? sqrtf(float(dk)) : 1.0f;
    __syncwarp();
    for (int i = lane; i < dk; i += 32) x[i] = __fdiv_rn(__fmul_rn(x[i], inverse_norm), divisor);
  }
  __syncthreads();
}

// Thread t of the block owns half t % 2 of column t / 2 of the head's state: key rows
// [begin, begin + length) of it, in registers. The halves' partial sums are added lower half first.
struct ColumnPart {
  int column, half, begin, length;
  bool owns;
};

__device__ __forceinline__ ColumnPart column_part(int dk, int dv) {
  const int column = threadIdx.x / 2, half = threadIdx.x % 2, lower = (dk + 1) / 2;
  return {column, half, half ? lower : 0, half ? dk - lower : lower, column < dv};
}

__device__ __forceinline__ float add_halves(float partial, int half) {
  const float other = __shfl_xor_sync(0xffffffffu, partial, 1);
  return half == 0 ? __fadd_rn(partial, other) : __fadd_rn(other, partial);
}

// One delta-rule step of a column: S *= exp(g); d = (v - S^T k) * beta; S += k d^T; returns (S^T q)
// of the column. Every thread of the block calls it (the halves meet through shuffles).
template <int kMaxPart>
__device__ __forceinline__ float delta_step(float (&s)[kMaxPart], const RowScratch& scratch, const ColumnPart& part) {
  const float decay = scratch.scalars[0], beta = scratch.scalars[1];
  const float* k = scratch.k + part.begin;
  const float* q = scratch.q + part.begin;
  float remembered = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPart; ++i)
    if (i < part.length && part.owns) {
      s[i] = __fmul_rn(s[i], decay);
      remembered = __fadd_rn(remembered, __fmul_rn(s[i], k[i]));
    }
  remembered = add_halves(remembered, part.half);
  const float delta = part.owns ? __fmul_rn(__fsub_rn(scratch.v[part.column], remembered), beta) : 0.0f;
  float out = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPart; ++i)
    if (i < part.length && part.owns) {
      s[i] = __fadd_rn(s[i], __fmul_rn(k[i], delta));
      out = __fadd_rn(out, __fmul_rn(s[i], q[i]));
    }
  return add_halves(out, part.half);
}

// A head's [key][value] state at `head_state`: the thread's part of its column.
template <int kMaxPart>
__device__ __forceinline__ void load_state(float (&s)[kMaxPart], const float* head_state, const ColumnPart& part, int dv) {
#pragma unroll
  for (int i = 0; i < kMaxPart; ++i)
    if (i < part.length && part.owns) s[i] = head_state[(part.begin + i) * dv + part.column];
}

template <int kMaxPart>
__device__ __forceinline__ void store_state(const float (&s)[kMaxPart], float* head_state, const ColumnPart& part,
                                            int dv) {
#pragma unroll
  for (int i = 0; i < kMaxPart; ++i)
    if (i < part.length && part.owns) head_state[(part.begin + i) * dv + part.column] = s[i];
}

// grid (value heads, lanes); block: two threads per value column rounded up to warps, at least two.
template <int kMaxPart>
__global__ void gated_delta_net_kernel(const float* __restrict__ projection, DeltaNetShape shape, DeltaNetLayer layer,
                                       DeltaNetPass pass, float eps, uint16_t* __restrict__ out) {
  extern __shared__ float shared[];
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int head = blockIdx.x, dk = shape.key_head_dim, dv = shape.value_head_dim;
  const ColumnPart part = column_part(dk, dv);
  const DeltaNetLane lane = pass.lanes[blockIdx.y];
  const RowScratch scratch{shared, shared + dk, shared + 2 * dk, shared + 2 * dk + dv, shared + 2 * dk + dv + 32};
  const int64_t head_state = int64_t(head) * dk * dv;
  float* committed = lane.state + layer.linear_index * shape.state_floats_per_layer() + head_state;
  const Timeline timeline{lane.history + layer.linear_index * shape.history_floats_per_layer(),
                          lane.records + layer.linear_index * lane.record_capacity * shape.record_floats(),
                          pass.replay_rows + lane.replay_offset, shape.history(), shape.conv_dim(),
                          shape.record_floats()};
  const float* window[kMaxHistory + 1];

  float s[kMaxPart];
  load_state(s, committed, part, dv);
  for (int t = 0; t < lane.n_replay; ++t) {
    for (int i = 0; i < shape.conv_kernel; ++i) window[i] = timeline.at(t + i);
    prepare_row(window, window[shape.history()], shape, layer, head, scratch);
    delta_step(s, scratch, part);
  }
  if (lane.n_replay > 0) store_state(s, committed, part, dv);

  const int warp = threadIdx.x / 32, warp_lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  const int64_t stride = shape.projection_floats();
  for (int u = 0; u < lane.n_rows; ++u) {
    const int row = pass.lane_rows[lane.row_offset + u];
    const int load = pass.load_from[lane.row_offset + u];
    if (load >= 0) load_state(s, pass.saved_states + int64_t(load) * shape.state_floats_per_layer() + head_state, part, dv);
    const int history = shape.history();
    for (int i = 0; i < history; ++i) {
      const int source = pass.conv_sources[row * history + (history - i) - 1];
      window[i] = source >= 0 ? projection + source * stride : timeline.at(lane.n_replay + (-1 - source));
    }
    window[history] = projection + row * stride;
    prepare_row(window, window[history], shape, layer, head, scratch);
    const float y = delta_step(s, scratch, part);
    const int save = pass.save_to[lane.row_offset + u];
    if (save >= 0) store_state(s, pass.saved_states + int64_t(save) * shape.state_floats_per_layer() + head_state, part, dv);

    // Gated RMSNorm over the head's values (one thread of each column counts): warps' sums in warp order.
    float sum = part.owns && part.half == 0 ? __fmul_rn(y, y) : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
    if (warp_lane == 0) scratch.partials[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
      float total = 0.0f;
      for (int w = 0; w < n_warps; ++w) total = __fadd_rn(total, scratch.partials[w]);
      scratch.scalars[2] = __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(total, float(dv)), eps)));
    }
    __syncthreads();
    if (part.owns && part.half == 0) {
      const int j = part.column;
      const float normed = __fmul_rn(__fmul_rn(y, scratch.scalars[2]), layer.gated_norm[j]);
      const float z = projection[row * stride + shape.record_floats() + head * dv + j];
      out[int64_t(row) * shape.value_dim() + head * dv + j] = f32_to_bf16_bits(__fmul_rn(normed, silu_of(z)));
    }
  }
}

// grid (record columns / kCommitThreads, lanes): column c of a lane's history and records.
__global__ void commit_records_kernel(const float* __restrict__ projection, DeltaNetShape shape, int linear_index,
                                      DeltaNetPass pass) {
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int column = blockIdx.x * kCommitThreads + threadIdx.x;
  if (column >= shape.record_floats()) return;
  const DeltaNetLane lane = pass.lanes[blockIdx.y];
  float* history = lane.history + linear_index * shape.history_floats_per_layer();
  float* records = lane.records + linear_index * lane.record_capacity * shape.record_floats();
  const Timeline timeline{history, records, pass.replay_rows + lane.replay_offset, shape.history(), shape.conv_dim(),
                          shape.record_floats()};
  // Every read of the column comes before any write to it (this thread alone touches the column).
  if (column < shape.conv_dim()) {
    float kept[kMaxHistory];
    for (int e = 0; e < shape.history(); ++e) kept[e] = timeline.at(lane.n_replay + e)[column];
    for (int e = 0; e < shape.history(); ++e) history[e * shape.conv_dim() + column] = kept[e];
  }
  for (int u = 0; u < lane.n_rows; ++u)
    records[int64_t(u) * shape.record_floats() + column] =
        projection[int64_t(pass.lane_rows[lane.row_offset + u]) * shape.projection_floats() + column];
}

void check_shape(const DeltaNetShape& shape) {
  TF_CUDA_REQUIRE(shape.n_key_heads > 0 && shape.n_value_heads % shape.n_key_heads == 0,
                  "gated_delta_net: value heads must be a multiple of key heads");
  TF_CUDA_REQUIRE(shape.key_head_dim > 0 && shape.key_head_dim <= 128, "gated_delta_net: key_head_dim must be 1..128");
  TF_CUDA_REQUIRE(shape.value_head_dim > 0 && shape.value_head_dim <= 512,
                  "gated_delta_net: value_head_dim must be 1..512");
  TF_CUDA_REQUIRE(shape.conv_kernel >= 2 && shape.conv_kernel <= kMaxHistory + 1,
                  "gated_delta_net: conv_kernel must be 2..8");
}

}  // namespace

void gated_delta_net(const float* projection, const DeltaNetShape& shape, const DeltaNetLayer& layer,
                     const DeltaNetPass& pass, float eps, uint16_t* out, cudaStream_t stream) {
  check_shape(shape);
  if (pass.n_lanes == 0) return;
  const int threads = std::max(64, (2 * shape.value_head_dim + 31) / 32 * 32);
  const size_t shared_bytes = size_t(2 * shape.key_head_dim + shape.value_head_dim + 32 + 3) * sizeof(float);
  const dim3 grid(unsigned(shape.n_value_heads), unsigned(pass.n_lanes));
  const int part = (shape.key_head_dim + 1) / 2;
  if (part <= 16) {
    launch_overlapped("gated_delta_net_kernel", gated_delta_net_kernel<16>, grid, dim3(threads), shared_bytes, stream,
                      projection, shape, layer, pass, eps, out);
  } else if (part <= 32) {
    launch_overlapped("gated_delta_net_kernel", gated_delta_net_kernel<32>, grid, dim3(threads), shared_bytes, stream,
                      projection, shape, layer, pass, eps, out);
  } else {
    launch_overlapped("gated_delta_net_kernel", gated_delta_net_kernel<64>, grid, dim3(threads), shared_bytes, stream,
                      projection, shape, layer, pass, eps, out);
  }
}

void commit_delta_net_records(const float* projection, const DeltaNetShape& shape, int linear_index,
                              const DeltaNetPass& pass, cudaStream_t stream) {
  check_shape(shape);
  if (pass.n_lanes == 0) return;
  const dim3 grid(unsigned((shape.record_floats() + kCommitThreads - 1) / kCommitThreads), unsigned(pass.n_lanes));
  launch_overlapped("commit_records_kernel", commit_records_kernel, grid, dim3(kCommitThreads), 0, stream, projection,
                    shape, linear_index, pass);
}

}  // namespace tf::cuda
