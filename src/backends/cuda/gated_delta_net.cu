// Gated DeltaNet kernels. Every row's convolution, normalisations, decay and beta run first, in
// parallel over rows (prepare_rows_kernel); then per (value head, lane) two threads own each column
// of the head's [key][value] state in registers, so a chain of rows (a prefill chunk, a 256-row copy
// chain) never leaves the block, and only the delta rule itself runs row after row.
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

// The prepared row (what the recurrence reads of a row): L2-normalised q of every key head (also
// divided by sqrt(key_head_dim)), L2-normalised k, v after the convolution and silu, then decay =
// exp(g) and beta of every value head; record_floats() wide, in prepared_offset order.
// One block per prepared row (grid-stride over the pass's rows, then every lane's replay rows): the
// convolution over the row's window with silu, the normalisations, decay and beta.
constexpr int kPrepareThreads = 256;
constexpr int kPrepareBlocksPerLane = 64;
__global__ void prepare_rows_kernel(const float* __restrict__ projection, DeltaNetShape shape, DeltaNetLayer layer,
                                    DeltaNetPass pass) {
  extern __shared__ float channels[];  // [conv_dim] after the convolution and silu
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int n_replay_total = *pass.n_replay_total;
  const int32_t* replay_lanes = pass.replay_rows + n_replay_total;
  const int history = shape.history(), conv_dim = shape.conv_dim(), dk = shape.key_head_dim;
  const int warp = threadIdx.x / 32, warp_lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  const int64_t stride = shape.projection_floats();
  for (int i = blockIdx.x; i < pass.n_rows + n_replay_total; i += gridDim.x) {
    const float* window[kMaxHistory + 1];
    const bool is_replay = i >= pass.n_rows;
    const DeltaNetLane lane = pass.lanes[is_replay ? replay_lanes[i - pass.n_rows] : pass.lane_of_row[i]];
    const Timeline timeline{lane.history + layer.linear_index * shape.history_floats_per_layer(),
                            lane.records + layer.linear_index * lane.record_capacity * shape.record_floats(),
                            pass.replay_rows + lane.replay_offset, history, conv_dim, shape.record_floats()};
    if (is_replay) {
      const int t = i - pass.n_rows - lane.replay_offset;
      for (int j = 0; j <= history; ++j) window[j] = timeline.at(t + j);
    } else {
      for (int j = 0; j < history; ++j) {
        const int source = pass.conv_sources[i * history + (history - j) - 1];
        window[j] = source >= 0 ? projection + source * stride : timeline.at(lane.n_replay + (-1 - source));
      }
      window[history] = projection + i * stride;
    }
    const float* record = window[history];
    float* out = pass.prepared + int64_t(i) * shape.record_floats();
    __syncthreads();  // the previous row is done with `channels`
    for (int c = threadIdx.x; c < conv_dim; c += blockDim.x) {
      float sum = 0.0f;
      for (int j = 0; j <= history; ++j)
        sum = __fadd_rn(sum, __fmul_rn(layer.conv[c * (history + 1) + j], window[j][c]));
      channels[c] = silu_of(sum);
    }
    __syncthreads();
    // q heads then k heads, one warp per head vector.
    for (int v = warp; v < 2 * shape.n_key_heads; v += n_warps) {
      const float* x = channels + v * dk;
      const float inverse_norm = __fdiv_rn(1.0f, sqrtf(__fadd_rn(warp_sum_of_squares(x, dk, warp_lane), 1e-6f)));
      const float divisor = v < shape.n_key_heads ? sqrtf(float(dk)) : 1.0f;
      for (int e = warp_lane; e < dk; e += 32) out[v * dk + e] = __fdiv_rn(__fmul_rn(x[e], inverse_norm), divisor);
    }
    for (int c = 2 * shape.key_dim() + threadIdx.x; c < conv_dim; c += blockDim.x) out[c] = channels[c];
    for (int h = threadIdx.x; h < shape.n_value_heads; h += blockDim.x) {
      const float b = record[conv_dim + h];
      const float a = record[conv_dim + shape.n_value_heads + h];
      const float x = __fadd_rn(a, layer.dt_bias[h]);
      // PyTorch's softplus: x itself above its threshold of 20, log1p(exp(x)) below.
      const float softplus = x > 20.0f ? x : log1pf(expf(x));
      out[conv_dim + h] = expf(-__fmul_rn(expf(layer.a_log[h]), softplus));
      out[conv_dim + shape.n_value_heads + h] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-b)));
    }
  }
}

// What the recurrence block of one value head reads of a prepared row, item by item: its key head's
// q and k, its v, its decay and beta.
struct HeadItems {
  int dk, dv, key_q, key_k, value, decay, beta;

  __device__ HeadItems(const DeltaNetShape& shape, int head) {
    dk = shape.key_head_dim;
    dv = shape.value_head_dim;
    const int key_head = head / (shape.n_value_heads / shape.n_key_heads);
    key_q = key_head * dk;
    key_k = shape.key_dim() + key_head * dk;
    value = 2 * shape.key_dim() + head * dv;
    decay = shape.conv_dim() + head;
    beta = shape.conv_dim() + shape.n_value_heads + head;
  }
  __device__ int count() const { return 2 * dk + dv + 2; }
  __device__ int offset(int e) const {
    return e < dk ? key_q + e : e < 2 * dk ? key_k + (e - dk) : e < 2 * dk + dv ? value + (e - 2 * dk) : e == 2 * dk + dv ? decay : beta;
  }
};
constexpr int kMaxItemsPerThread = 2;

// A row's items in shared memory: q [dk], k [dk], v [dv], decay, beta.
struct RowScratch {
  const float* q;
  const float* k;
  const float* v;
  float decay, beta;
};

// Thread t of the block owns quarter t % 4 of column t / 4 of the head's state: key rows
// [begin, begin + length) of it, in registers. The quarters' partial sums are added as
// (q0 + q1) + (q2 + q3), the same in each of the four threads.
constexpr int kThreadsPerColumn = 4;
struct ColumnPart {
  int column, quarter, begin, length;
  bool owns;
};

__device__ __forceinline__ ColumnPart column_part(int dk, int dv) {
  const int column = threadIdx.x / kThreadsPerColumn, quarter = threadIdx.x % kThreadsPerColumn;
  const int base = dk / kThreadsPerColumn, extra = dk % kThreadsPerColumn;
  return {column, quarter, quarter * base + min(quarter, extra), base + (quarter < extra ? 1 : 0), column < dv};
}

__device__ __forceinline__ float add_parts(float partial, int quarter) {
  const float neighbour = __shfl_xor_sync(0xffffffffu, partial, 1);
  const float pair = quarter % 2 == 0 ? __fadd_rn(partial, neighbour) : __fadd_rn(neighbour, partial);
  const float other_pair = __shfl_xor_sync(0xffffffffu, pair, 2);
  return quarter < 2 ? __fadd_rn(pair, other_pair) : __fadd_rn(other_pair, pair);
}

// One delta-rule step of a column: S *= exp(g); d = (v - S^T k) * beta; S += k d^T; returns (S^T q)
// of the column. Every thread of the block calls it (the quarters meet through shuffles).
template <int kMaxPart>
__device__ __forceinline__ float delta_step(float (&s)[kMaxPart], const RowScratch& row, const ColumnPart& part) {
  const float* k = row.k + part.begin;
  const float* q = row.q + part.begin;
  float remembered = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPart; ++i)
    if (i < part.length && part.owns) {
      s[i] = __fmul_rn(s[i], row.decay);
      remembered = __fadd_rn(remembered, __fmul_rn(s[i], k[i]));
    }
  remembered = add_parts(remembered, part.quarter);
  const float delta = part.owns ? __fmul_rn(__fsub_rn(row.v[part.column], remembered), row.beta) : 0.0f;
  float out = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPart; ++i)
    if (i < part.length && part.owns) {
      s[i] = __fadd_rn(s[i], __fmul_rn(k[i], delta));
      out = __fadd_rn(out, __fmul_rn(s[i], q[i]));
    }
  return add_parts(out, part.quarter);
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

// grid (value heads, lanes); block: four threads per value column rounded up to warps, at least two.
// The lane's rows run in order: replay rows (folded into the committed state), then the pass's rows.
// The next row's items are loaded into registers while the current row computes.
template <int kMaxPart>
__global__ void __launch_bounds__(1024 / 2) delta_rule_kernel(const float* __restrict__ projection, DeltaNetShape shape, DeltaNetLayer layer,
                                  DeltaNetPass pass, float eps, uint16_t* __restrict__ out) {
  extern __shared__ float shared[];  // two row buffers of items, then the warps' partial sums
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int head = blockIdx.x, dk = shape.key_head_dim, dv = shape.value_head_dim;
  const ColumnPart part = column_part(dk, dv);
  const HeadItems items(shape, head);
  const int n_items = items.count();
  float* buffers[2] = {shared, shared + n_items};
  float* partials = shared + 2 * n_items;
  const DeltaNetLane lane = pass.lanes[blockIdx.y];
  const int64_t head_state = int64_t(head) * dk * dv;
  float* committed = lane.state + layer.linear_index * shape.state_floats_per_layer() + head_state;
  const int n_steps = lane.n_replay + lane.n_rows;
  // Prepared row of step u: replay rows sit after the pass's rows.
  auto prepared_of = [&](int u) -> const float* {
    const int64_t index = u < lane.n_replay ? pass.n_rows + lane.replay_offset + u
                                            : pass.lane_rows[lane.row_offset + (u - lane.n_replay)];
    return pass.prepared + index * shape.record_floats();
  };
  float next[kMaxItemsPerThread];
  auto fetch = [&](int u) {
    const float* from = prepared_of(u);
#pragma unroll
    for (int j = 0; j < kMaxItemsPerThread; ++j) {
      const int e = int(threadIdx.x) + j * int(blockDim.x);
      if (e < n_items) next[j] = from[items.offset(e)];
    }
  };

  float s[kMaxPart];
  load_state(s, committed, part, dv);
  if (n_steps > 0) fetch(0);
  const int warp = threadIdx.x / 32, warp_lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  for (int u = 0; u < n_steps; ++u) {
    float* buffer = buffers[u % 2];
#pragma unroll
    for (int j = 0; j < kMaxItemsPerThread; ++j) {
      const int e = int(threadIdx.x) + j * int(blockDim.x);
      if (e < n_items) buffer[e] = next[j];
    }
    __syncthreads();  // this row's items are in; the other buffer's row is done
    if (u + 1 < n_steps) fetch(u + 1);
    const RowScratch row{buffer, buffer + dk, buffer + 2 * dk, buffer[2 * dk + dv], buffer[2 * dk + dv + 1]};
    if (u < lane.n_replay) {
      delta_step(s, row, part);
      if (u + 1 == lane.n_replay) store_state(s, committed, part, dv);
      continue;
    }
    const int lane_row = lane.row_offset + (u - lane.n_replay);
    const int r = pass.lane_rows[lane_row];
    const int load = pass.load_from[lane_row];
    if (load >= 0) load_state(s, pass.saved_states + int64_t(load) * shape.state_floats_per_layer() + head_state, part, dv);
    const float y = delta_step(s, row, part);
    const int save = pass.save_to[lane_row];
    if (save >= 0) store_state(s, pass.saved_states + int64_t(save) * shape.state_floats_per_layer() + head_state, part, dv);

    // Gated RMSNorm over the head's values (one thread of each column counts): warps' sums in warp order.
    float sum = part.owns && part.quarter == 0 ? __fmul_rn(y, y) : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
    if (warp_lane == 0) partials[warp] = sum;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < n_warps; ++w) total = __fadd_rn(total, partials[w]);
    const float inverse_rms = __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(total, float(dv)), eps)));
    if (part.owns && part.quarter == 0) {
      const int j = part.column;
      const float normed = __fmul_rn(__fmul_rn(y, inverse_rms), layer.gated_norm[j]);
      const float z = projection[int64_t(r) * shape.projection_floats() + shape.record_floats() + head * dv + j];
      out[int64_t(r) * shape.value_dim() + head * dv + j] = f32_to_bf16_bits(__fmul_rn(normed, silu_of(z)));
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
  TF_CUDA_REQUIRE(shape.value_head_dim > 0 && shape.value_head_dim <= 128,
                  "gated_delta_net: value_head_dim must be 1..128");
  TF_CUDA_REQUIRE(shape.conv_kernel >= 2 && shape.conv_kernel <= kMaxHistory + 1,
                  "gated_delta_net: conv_kernel must be 2..8");
}

}  // namespace

void gated_delta_net(const float* projection, const DeltaNetShape& shape, const DeltaNetLayer& layer,
                     const DeltaNetPass& pass, float eps, uint16_t* out, cudaStream_t stream) {
  check_shape(shape);
  if (pass.n_lanes == 0) return;
  // A block per row and kPrepareBlocksPerLane per lane for its replay rows (which loop over them):
  // the grid depends on the launch shape alone, as a captured graph needs.
  const size_t prepare_shared = size_t(shape.conv_dim()) * sizeof(float);
  if (prepare_shared > 48 * 1024)
    TF_CUDA_CHECK(cudaFuncSetAttribute(prepare_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(prepare_shared)));
  launch_overlapped("prepare_rows_kernel", prepare_rows_kernel,
                    dim3(unsigned(pass.n_rows + kPrepareBlocksPerLane * pass.n_lanes)),
                    dim3(kPrepareThreads), prepare_shared, stream, projection, shape, layer, pass);

  // Four threads a value column, and enough threads to fetch a row's items two apiece.
  const int n_items = 2 * shape.key_head_dim + shape.value_head_dim + 2;
  const int threads = std::max({64, (kThreadsPerColumn * shape.value_head_dim + 31) / 32 * 32,
                                (n_items + kMaxItemsPerThread * 32 - 1) / (kMaxItemsPerThread * 32) * 32});
  TF_CUDA_REQUIRE(n_items <= kMaxItemsPerThread * threads, "gated_delta_net: too many items per thread");
  const size_t shared_bytes = size_t(2 * n_items + 32) * sizeof(float);
  const dim3 grid(unsigned(shape.n_value_heads), unsigned(pass.n_lanes));
  const int part = (shape.key_head_dim + kThreadsPerColumn - 1) / kThreadsPerColumn;
  if (part <= 8) {
    launch_overlapped("delta_rule_kernel", delta_rule_kernel<8>, grid, dim3(threads), shared_bytes, stream, projection,
                      shape, layer, pass, eps, out);
  } else if (part <= 16) {
    launch_overlapped("delta_rule_kernel", delta_rule_kernel<16>, grid, dim3(threads), shared_bytes, stream, projection,
                      shape, layer, pass, eps, out);
  } else {
    launch_overlapped("delta_rule_kernel", delta_rule_kernel<32>, grid, dim3(threads), shared_bytes, stream, projection,
                      shape, layer, pass, eps, out);
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
