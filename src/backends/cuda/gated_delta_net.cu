// Gated DeltaNet kernels. Every row's convolution, normalisations, decay and beta run first, in
// parallel over rows (prepare_rows_kernel); then one warp per eight value columns of a head and lane
// holds those columns of the head's [key][value] state in registers, so a chain of rows (a prefill
// chunk, a 256-row copy chain) never leaves the warp, and only the delta rule itself runs row after
// row; the gated norm runs over every row at once after it (gated_norm_kernel).
// Every sum runs in one order, written out without fused multiply-adds (as the CPU twin writes them).
#include "backends/cuda/gated_delta_net.cuh"

#include <algorithm>

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxHistory = kMaxDeltaNetConvKernel - 1;
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
constexpr int kPrepareBlocksPerLane = 256;
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
    const int r = is_replay ? -1 : pass.lane_rows[i];  // prepared rows are in lane order, r its batch row
    const DeltaNetLane lane = pass.lanes[is_replay ? replay_lanes[i - pass.n_rows] : pass.lane_of_row[r]];
    const Timeline timeline{lane.history + layer.linear_index * shape.history_floats_per_layer(),
                            lane.records + layer.linear_index * lane.record_capacity * shape.record_floats(),
                            pass.replay_rows + lane.replay_offset, history, conv_dim, shape.record_floats()};
    if (is_replay) {
      const int t = i - pass.n_rows - lane.replay_offset;
      for (int j = 0; j <= history; ++j) window[j] = timeline.at(t + j);
    } else {
      for (int j = 0; j < history; ++j) {
        const int source = pass.conv_sources[r * history + (history - j) - 1];
        window[j] = source >= 0 ? projection + source * stride : timeline.at(lane.n_replay + (-1 - source));
      }
      window[history] = projection + r * stride;
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

// The recurrence. One warp owns kWarpColumns value columns of one head, four threads a column, the
// column's key rows split in quarters held in registers; warps never wait for each other, so a
// chain of rows (a prefill chunk, a 256-row copy chain) costs one warp's latency per row. A row's
// items (its key head's q and k, the warp's v, decay, beta; a pass row's load/save) are copied to
// the warp's shared memory kPrefetch rows ahead by cp.async, so a row only waits on its own math.
constexpr int kThreadsPerColumn = 4;
constexpr int kWarpColumns = 32 / kThreadsPerColumn;
constexpr int kRecurrenceWarps = 4;  // per block
constexpr int kStages = 4;           // row buffers per warp
constexpr int kPrefetch = kStages - 1;

// A key vector in a row buffer, padded by 4 floats every 32 so the four quarters' reads fall in
// different banks and every quarter of a 16-multiple dk starts 16-byte aligned.
__host__ __device__ constexpr int padded_key(int e) { return e + 4 * (e / 32); }
__host__ __device__ constexpr int padded_keys(int dk) { return padded_key(dk - 1) / 4 * 4 + 4; }

// A row buffer: q [padded dk], k [padded dk], the warp's v [kWarpColumns], decay, beta, load, save.
struct RowLayout {
  int keys, k, v, decay, beta, load, save, floats;
  __host__ __device__ explicit RowLayout(int dk) {
    keys = padded_keys(dk);
    k = keys;
    v = 2 * keys;
    decay = v + kWarpColumns;
    beta = decay + 1;
    load = beta + 1;
    save = load + 1;
    floats = (save + 1 + 3) / 4 * 4;
  }
};

__device__ __forceinline__ void copy_async_4(float* to, const void* from) {
  const unsigned address = unsigned(__cvta_generic_to_shared(to));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(address), "l"(from) : "memory");
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Every copy group but the newest kPrefetch - 1 has landed (this thread's; the warp then syncs).
__device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_group %0;" ::"n"(kPrefetch - 1) : "memory"); }

// Thread t of the warp owns quarter t % 4 of column t / 4: key rows [begin, begin + length) of it,
// in registers. The quarters' partial sums are added as (q0 + q1) + (q2 + q3), the same in each of
// the four threads.
struct ColumnPart {
  int column, quarter, begin, length;
  bool owns;
};

__device__ __forceinline__ ColumnPart column_part(int first_column, int dk, int dv) {
  const int lane = int(threadIdx.x) % 32;
  const int column = first_column + lane / kThreadsPerColumn, quarter = lane % kThreadsPerColumn;
  const int base = dk / kThreadsPerColumn, extra = dk % kThreadsPerColumn;
  return {column, quarter, quarter * base + min(quarter, extra), base + (quarter < extra ? 1 : 0), column < dv};
}

__device__ __forceinline__ float add_parts(float partial, int quarter) {
  const float neighbour = __shfl_xor_sync(0xffffffffu, partial, 1);
  const float pair = quarter % 2 == 0 ? __fadd_rn(partial, neighbour) : __fadd_rn(neighbour, partial);
  const float other_pair = __shfl_xor_sync(0xffffffffu, pair, 2);
  return quarter < 2 ? __fadd_rn(pair, other_pair) : __fadd_rn(other_pair, pair);
}

// Keys begin + i .. begin + i + 3 of a padded key vector (i a multiple of 4). kVector: one 16-byte
// read (dk % 16 == 0: every quarter's run of keys starts 16-byte aligned and no group of four
// crosses a pad); else one read each, within the part's length.
template <bool kVector>
__device__ __forceinline__ float4 read_four_keys(const float* keys, const ColumnPart& part, int i) {
  if constexpr (kVector) {
    return *reinterpret_cast<const float4*>(keys + padded_key(part.begin + i));
  } else {
    const auto at = [&](int j) { return i + j < part.length ? keys[padded_key(part.begin + i + j)] : 0.0f; };
    return make_float4(at(0), at(1), at(2), at(3));
  }
}

__device__ __forceinline__ float item(const float4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

// One delta-rule step of a column: S *= exp(g); d = (v - S^T k) * beta; S += k d^T; returns (S^T q)
// of the column. Every thread of the warp calls it (the quarters meet through shuffles). Keys are
// read from shared memory four at a time as they are used, so only the state stays in registers.
template <int kMaxPart, bool kVector>
__device__ __forceinline__ float delta_step(float (&s)[kMaxPart], const float* row, const RowLayout& layout,
                                            const ColumnPart& part, int warp_column) {
  const float decay = row[layout.decay], beta = row[layout.beta];
  float remembered = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPart; i += 4) {
    const float4 k = read_four_keys<kVector>(row + layout.k, part, i);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (i + j < part.length && part.owns) {
        s[i + j] = __fmul_rn(s[i + j], decay);
        remembered = __fadd_rn(remembered, __fmul_rn(s[i + j], item(k, j)));
      }
  }
  remembered = add_parts(remembered, part.quarter);
  const float delta = part.owns ? __fmul_rn(__fsub_rn(row[layout.v + warp_column], remembered), beta) : 0.0f;
  float out = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPart; i += 4) {
    const float4 k = read_four_keys<kVector>(row + layout.k, part, i);
    const float4 q = read_four_keys<kVector>(row, part, i);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (i + j < part.length && part.owns) {
        s[i + j] = __fadd_rn(s[i + j], __fmul_rn(item(k, j), delta));
        out = __fadd_rn(out, __fmul_rn(s[i + j], item(q, j)));
      }
  }
  return add_parts(out, part.quarter);
}

// A head's [key][value] state at `head_state`: the thread's part of its column, walked with one
// pointer (rare next to the rows: held addresses would cost registers the rows need).
template <int kMaxPart>
__device__ __forceinline__ void load_state(float (&s)[kMaxPart], const float* head_state, const ColumnPart& part, int dv) {
  const float* p = head_state + part.begin * dv + part.column;
#pragma unroll
  for (int i = 0; i < kMaxPart; ++i, p += dv)
    if (i < part.length && part.owns) s[i] = *p;
}

template <int kMaxPart>
__device__ __forceinline__ void store_state(const float (&s)[kMaxPart], float* head_state, const ColumnPart& part,
                                            int dv) {
  float* p = head_state + part.begin * dv + part.column;
#pragma unroll
  for (int i = 0; i < kMaxPart; ++i, p += dv)
    if (i < part.length && part.owns) *p = s[i];
}

// grid (warps of every head's column groups / kRecurrenceWarps, lanes). The lane's rows run in order:
// replay rows (folded into the committed state), then the pass's rows, each from its parent's state.
// A pass row's output (S^T q of each column) goes to head_out in lane order, for gated_norm_kernel.
template <int kMaxPart, bool kVector>
__global__ void __launch_bounds__(32 * kRecurrenceWarps)
    delta_rule_kernel(DeltaNetShape shape, DeltaNetPass pass, int linear_index, float* __restrict__ head_out) {
  extern __shared__ float shared[];  // per warp: kStages row buffers
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int dk = shape.key_head_dim, dv = shape.value_head_dim;
  const int groups = (dv + kWarpColumns - 1) / kWarpColumns;
  const int warp = int(threadIdx.x) / 32, warp_lane = int(threadIdx.x) % 32;
  const int warp_index = int(blockIdx.x) * kRecurrenceWarps + warp;
  if (warp_index >= shape.n_value_heads * groups) return;
  const int head = warp_index / groups, first_column = warp_index % groups * kWarpColumns;
  const ColumnPart part = column_part(first_column, dk, dv);
  const RowLayout layout(dk);
  float* buffers = shared + warp * kStages * layout.floats;

  const int key_head = head / (shape.n_value_heads / shape.n_key_heads);
  const int item_q = key_head * dk, item_k = shape.key_dim() + key_head * dk;
  const int item_v = 2 * shape.key_dim() + head * dv + first_column;
  const int item_decay = shape.conv_dim() + head, item_beta = shape.conv_dim() + shape.n_value_heads + head;
  const int n_columns = min(kWarpColumns, dv - first_column);

  const DeltaNetLane lane = pass.lanes[blockIdx.y];
  const int64_t head_state = int64_t(head) * dk * dv;
  float* committed = lane.state + linear_index * shape.state_floats_per_layer() + head_state;
  const int n_steps = lane.n_replay + lane.n_rows;
  // Step u's prepared row: the replay rows sit after the pass's rows, which are in lane order.
  const auto fetch = [&](int u) {
    if (u < n_steps) {
      const int64_t index = u < lane.n_replay ? pass.n_rows + lane.replay_offset + u : lane.row_offset + (u - lane.n_replay);
      const float* from = pass.prepared + index * shape.record_floats();
      float* to = buffers + u % kStages * layout.floats;
      for (int e = warp_lane; e < dk; e += 32) {
        copy_async_4(to + padded_key(e), from + item_q + e);
        copy_async_4(to + layout.k + padded_key(e), from + item_k + e);
      }
      if (warp_lane < n_columns) copy_async_4(to + layout.v + warp_lane, from + item_v + warp_lane);
      if (warp_lane == 30) copy_async_4(to + layout.decay, from + item_decay);
      if (warp_lane == 31) copy_async_4(to + layout.beta, from + item_beta);
      if (u >= lane.n_replay && warp_lane == 28) copy_async_4(to + layout.load, pass.load_from + lane.row_offset + (u - lane.n_replay));
      if (u >= lane.n_replay && warp_lane == 29) copy_async_4(to + layout.save, pass.save_to + lane.row_offset + (u - lane.n_replay));
    }
    commit_copies();  // empty groups too: the count of groups in flight stays kPrefetch
  };

  float s[kMaxPart];
  load_state(s, committed, part, dv);
  for (int u = 0; u < kPrefetch; ++u) fetch(u);
  for (int u = 0; u < n_steps; ++u) {
    wait_copies();
    __syncwarp();  // row u is in; every lane is done with row u - 1, whose buffer the next fetch reuses
    fetch(u + kPrefetch);
    const float* row = buffers + u % kStages * layout.floats;
    if (u < lane.n_replay) {
      delta_step<kMaxPart, kVector>(s, row, layout, part, part.column - first_column);
      if (u + 1 == lane.n_replay) store_state(s, committed, part, dv);
      continue;
    }
    const int load = __float_as_int(row[layout.load]), save = __float_as_int(row[layout.save]);
    if (load >= 0) load_state(s, pass.saved_states + int64_t(load) * shape.state_floats_per_layer() + head_state, part, dv);
    const float y = delta_step<kMaxPart, kVector>(s, row, layout, part, part.column - first_column);
    if (save >= 0) store_state(s, pass.saved_states + int64_t(save) * shape.state_floats_per_layer() + head_state, part, dv);
    if (part.owns && part.quarter == 0)
      head_out[int64_t(lane.row_offset + (u - lane.n_replay)) * shape.value_dim() + head * dv + part.column] = y;
  }
}

// grid (pass rows x value heads / kNormWarps): one warp per (lane row, value head). The gated RMSNorm
// of the head's outputs (their squares summed as warp_sum_of_squares sums) times silu(z), to the
// row's place in the batch.
constexpr int kNormWarps = 8;
__global__ void __launch_bounds__(32 * kNormWarps)
    gated_norm_kernel(const float* __restrict__ projection, DeltaNetShape shape, DeltaNetPass pass,
                      const float* __restrict__ gain, const float* __restrict__ head_out, float eps,
                      uint16_t* __restrict__ out) {
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int item = int(blockIdx.x) * kNormWarps + int(threadIdx.x) / 32, warp_lane = int(threadIdx.x) % 32;
  if (item >= pass.n_rows * shape.n_value_heads) return;
  const int i = item / shape.n_value_heads, head = item % shape.n_value_heads, dv = shape.value_head_dim;
  const float* y = head_out + int64_t(i) * shape.value_dim() + head * dv;
  const float inverse_rms =
      __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(warp_sum_of_squares(y, dv, warp_lane), float(dv)), eps)));
  const int64_t r = pass.lane_rows[i];
  const float* z = projection + r * shape.projection_floats() + shape.record_floats() + head * dv;
  for (int j = warp_lane; j < dv; j += 32) {
    const float normed = __fmul_rn(__fmul_rn(y[j], inverse_rms), gain[j]);
    out[r * shape.value_dim() + head * dv + j] = f32_to_bf16_bits(__fmul_rn(normed, silu_of(z[j])));
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
  TF_CUDA_REQUIRE(shape.key_head_dim > 0 && shape.key_head_dim <= kMaxDeltaNetHeadDim,
                  "gated_delta_net: key_head_dim must be 1..128");
  TF_CUDA_REQUIRE(shape.value_head_dim > 0 && shape.value_head_dim <= kMaxDeltaNetHeadDim,
                  "gated_delta_net: value_head_dim must be 1..128");
  TF_CUDA_REQUIRE(shape.conv_kernel >= 2 && shape.conv_kernel <= kMaxHistory + 1,
                  "gated_delta_net: conv_kernel must be 2..8");
}

}  // namespace

void gated_delta_net(const float* projection, const DeltaNetShape& shape, const DeltaNetLayer& layer,
                     const DeltaNetPass& pass, float eps, float* head_out, uint16_t* out, cudaStream_t stream) {
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

  const int groups = (shape.value_head_dim + kWarpColumns - 1) / kWarpColumns;
  const dim3 grid(unsigned((shape.n_value_heads * groups + kRecurrenceWarps - 1) / kRecurrenceWarps),
                  unsigned(pass.n_lanes));
  const size_t shared_bytes = size_t(kRecurrenceWarps * kStages * RowLayout(shape.key_head_dim).floats) * sizeof(float);
  const int part = (shape.key_head_dim + kThreadsPerColumn - 1) / kThreadsPerColumn;
  const bool vector = shape.key_head_dim % 16 == 0;
  const auto launch = [&](auto kernel) {
    launch_overlapped("delta_rule_kernel", kernel, grid, dim3(32 * kRecurrenceWarps), shared_bytes, stream, shape, pass,
                      layer.linear_index, head_out);
  };
  if (part <= 8) {
    vector ? launch(delta_rule_kernel<8, true>) : launch(delta_rule_kernel<8, false>);
  } else if (part <= 16) {
    vector ? launch(delta_rule_kernel<16, true>) : launch(delta_rule_kernel<16, false>);
  } else {
    vector ? launch(delta_rule_kernel<32, true>) : launch(delta_rule_kernel<32, false>);
  }
  if (pass.n_rows == 0) return;
  const int items = pass.n_rows * shape.n_value_heads;
  launch_overlapped("gated_norm_kernel", gated_norm_kernel, dim3(unsigned((items + kNormWarps - 1) / kNormWarps)),
                    dim3(32 * kNormWarps), 0, stream, projection, shape, pass, layer.gated_norm,
                    static_cast<const float*>(head_out), eps, out);
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
