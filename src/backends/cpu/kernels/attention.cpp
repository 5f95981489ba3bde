// Attention on the CPU: per (row, head), keys in logical order, online softmax merged per chunk.
#include "backends/cpu/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/exp.h"
#include "backends/cpu/kernels/simd.h"

namespace tf::cpu {

namespace {

struct AttentionArgs {
  const float* q;
  const float* k_cache;
  const float* v_cache;
  KvLayout layout;
  const int32_t* const* key_slots;
  const int32_t* n_keys;
  AttentionShape shape;
  float* out;
};

// Rows that share a unit of work: a block of consecutive rows, one head or a pair of heads of a
// group. The block walks its keys chunk by chunk and every row takes each chunk in turn, so a
// chunk's keys and values (32 KB at head_dim 64) come from L1 for all but its first row: one row at a
// time read every key from L2 or beyond for every row. Each row's operations are the same, in the
// same order, as if it ran alone; only their interleaving with other rows changes.
constexpr int64_t kBlockRows = 8;

// The running state of one (row, head) between chunks: the value accumulator (head_dim floats),
// the largest score so far and the sum of the exponentials.
struct HeadState {
  float* acc;
  float running_max;
  float sum;
};

// The value accumulator of one (row, head) within a chunk: head_dim floats, held in registers when
// head_dim is kVectors * 16 (so the per-key update is not a store-to-load chain through memory),
// else in the state's memory. Both run the same element-wise operations in the same order.
template <int W, int kVectorCount>
struct ValueAccumulator {
  static constexpr int kVectors = kVectorCount;
  Lanes<W> v[kVectors];
  float* home;
  TF_INLINE void load(float* state, int64_t) {
    home = state;
    for (int i = 0; i < kVectors; ++i) v[i] = load_f32<W>(state + i * kLanes);
  }
  TF_INLINE void scale(float factor, int64_t) {
    const Lanes<W> f = broadcast<W>(factor);
#pragma GCC unroll 8
    for (auto& lanes : v) lanes = lanes * f;
  }
  TF_INLINE void add_scaled(float p, const float* value, int64_t) {
    const Lanes<W> f = broadcast<W>(p);
#pragma GCC unroll 8
    for (int i = 0; i < kVectors; ++i) v[i] = v[i] + f * load_f32<W>(value + i * kLanes);
  }
  TF_INLINE void save(int64_t) const {
    for (int i = 0; i < kVectors; ++i) store_f32<W>(home + i * kLanes, v[i]);
  }
};
template <int W>
struct ValueAccumulator<W, 0> {
  static constexpr int kVectors = 0;
  float* acc;
  TF_INLINE void load(float* state, int64_t) { acc = state; }
  TF_INLINE void scale(float factor, int64_t head_dim) {
    float* __restrict values = acc;  // acc never overlaps the cache: the loops run as whole vectors
    for (int64_t d = 0; d < head_dim; ++d) values[d] = values[d] * factor;
  }
  TF_INLINE void add_scaled(float p, const float* __restrict value, int64_t head_dim) {
    float* __restrict values = acc;
    for (int64_t d = 0; d < head_dim; ++d) values[d] = values[d] + p * value[d];
  }
  TF_INLINE void save(int64_t) const {}
};

// The largest of n scores, lane by lane first: a serial max cost a tenth of attention. The order
// only decides between equal values (+0 and -0, whose exp is the same 1) and NaNs (whose rows
// come out NaN either way).
TF_INLINE float chunk_max(const float* scores, int64_t n) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t i = 0; i < kLanes; ++i) lanes[i] = std::max(lanes[i], scores[j + i]);
  for (; j < n; ++j) lanes[j % kLanes] = std::max(lanes[j % kLanes], scores[j]);
  float largest = lanes[0];
  for (int64_t i = 1; i < kLanes; ++i) largest = std::max(largest, lanes[i]);
  return largest;
}

// Four keys' score sums for kHeads heads: the keys' addresses, zeroed per-lane sums, and their
// horizontal sums (the same lane products and tree as dot_fixed_order, four at a time).
template <int W, int kHeads>
struct FourKeys {
  const float* keys[4];
  Lanes<W> dots[kHeads][4];
  TF_INLINE FourKeys(const AttentionArgs& a, const int32_t* slots, int64_t kv_offset) {
    for (int t = 0; t < 4; ++t) keys[t] = a.k_cache + int64_t(slots[t]) * a.layout.slot_stride + kv_offset;
    for (int h = 0; h < kHeads; ++h)
      for (int t = 0; t < 4; ++t) dots[h][t] = zero_lanes<W>();
  }
  TF_INLINE void sum_into(float (*scores)[kAttentionChunk], int64_t j) const {
    for (int h = 0; h < kHeads; ++h) horizontal_sum4(dots[h], scores[h] + j);
  }
};

// One chunk of keys (logical positions chunk .. chunk + kAttentionChunk - 1, as far as the row has
// them) for kHeads query heads of one row that share a key-value head (a GQA group), head0 first:
// they read the same keys and values, so each key is loaded once for all of them, and their
// independent accumulators overlap. Every operation on a head depends only on this row's query
// for it, its keys in logical order and head_dim, exactly as for a head alone.
template <int W, int kHeads, class Accumulator>
TF_INLINE void attend_chunk(const AttentionArgs& a, int64_t row, int64_t head0, int64_t chunk, HeadState* state) {
  const int64_t head_dim = a.shape.head_dim;
  const int64_t group = a.shape.n_heads / a.shape.n_kv_heads;
  const int64_t kv_offset = (head0 / group) * a.layout.head_stride;
  const int64_t kv_stride = a.layout.slot_stride;
  const float* query[kHeads];
  for (int h = 0; h < kHeads; ++h) query[h] = a.q + (row * a.shape.n_heads + head0 + h) * head_dim;
  const int32_t* slots = a.key_slots[row];
  const int64_t n_in_chunk = std::min(kAttentionChunk, a.n_keys[row] - chunk);

  float scores[kHeads][kAttentionChunk];
  int64_t j = 0;
  if constexpr (Accumulator::kVectors > 0) {
    // head_dim known at compile time: the queries stay in registers and each key is loaded once
    // for both heads. The same products and sums as below.
    constexpr int kVectors = Accumulator::kVectors;
    Lanes<W> q[kHeads][kVectors];
    for (int h = 0; h < kHeads; ++h)
      for (int i = 0; i < kVectors; ++i) q[h][i] = load_f32<W>(query[h] + i * kLanes);
    for (; j + 4 <= n_in_chunk; j += 4) {
      FourKeys<W, kHeads> four(a, slots + chunk + j, kv_offset);
#pragma GCC unroll 8
      for (int i = 0; i < kVectors; ++i) {
        Lanes<W> key[4];
        for (int t = 0; t < 4; ++t) key[t] = load_f32<W>(four.keys[t] + i * kLanes);
        for (int h = 0; h < kHeads; ++h)
          for (int t = 0; t < 4; ++t) four.dots[h][t] = four.dots[h][t] + q[h][i] * key[t];
      }
      four.sum_into(scores, j);
    }
  } else if (head_dim % kLanes == 0) {
    for (; j + 4 <= n_in_chunk; j += 4) {
      FourKeys<W, kHeads> four(a, slots + chunk + j, kv_offset);
      for (int64_t d = 0; d < head_dim; d += kLanes) {
        Lanes<W> key[4];
        for (int t = 0; t < 4; ++t) key[t] = load_f32<W>(four.keys[t] + d);
        for (int h = 0; h < kHeads; ++h) {
          const Lanes<W> q = load_f32<W>(query[h] + d);
          for (int t = 0; t < 4; ++t) four.dots[h][t] = four.dots[h][t] + q * key[t];
        }
      }
      four.sum_into(scores, j);
    }
  }
  for (; j < n_in_chunk; ++j) {
    const float* key = a.k_cache + int64_t(slots[chunk + j]) * kv_stride + kv_offset;
    for (int h = 0; h < kHeads; ++h) scores[h][j] = dot_fixed_order<W>(query[h], key, head_dim);
  }
  Accumulator acc[kHeads];
  for (int h = 0; h < kHeads; ++h) {
    HeadState& head = state[h];
    for (j = 0; j < n_in_chunk; ++j) scores[h][j] = scores[h][j] * a.shape.scale;
    const float new_max = std::max(head.running_max, chunk_max(scores[h], n_in_chunk));
    const float rescale = std::exp(head.running_max - new_max);  // 0 for the first chunk
    head.sum = head.sum * rescale;
    acc[h].load(head.acc, head_dim);
    acc[h].scale(rescale, head_dim);
    for (j = 0; j < n_in_chunk; ++j) scores[h][j] = scores[h][j] - new_max;
    exp_in_place<W>(scores[h], n_in_chunk);
    head.running_max = new_max;
  }
  float sum[kHeads];
  for (int h = 0; h < kHeads; ++h) sum[h] = state[h].sum;
  for (j = 0; j < n_in_chunk; ++j) {
    const float* value = a.v_cache + int64_t(slots[chunk + j]) * kv_stride + kv_offset;
    for (int h = 0; h < kHeads; ++h) {
      const float p = scores[h][j];
      sum[h] = sum[h] + p;
      acc[h].add_scaled(p, value, head_dim);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    state[h].sum = sum[h];
    acc[h].save(head_dim);
  }
}

// Rows first_row .. first_row + n_rows - 1, heads head0 .. head0 + kHeads - 1, chunk by chunk.
// accumulators: [n_rows * kHeads][head_dim] scratch.
template <int W, int kHeads, class Accumulator>
TF_INLINE void attend_rows(const AttentionArgs& a, int64_t first_row, int64_t n_rows, int64_t head0,
                           float* accumulators) {
  const int64_t head_dim = a.shape.head_dim;
  HeadState state[kBlockRows][kHeads];
  int64_t most_keys = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    most_keys = std::max<int64_t>(most_keys, a.n_keys[first_row + r]);
    for (int h = 0; h < kHeads; ++h) {
      float* acc = accumulators + (r * kHeads + h) * head_dim;
      std::fill(acc, acc + head_dim, 0.0f);
      state[r][h] = {acc, -std::numeric_limits<float>::infinity(), 0.0f};
    }
  }
  for (int64_t chunk = 0; chunk < most_keys; chunk += kAttentionChunk)
    for (int64_t r = 0; r < n_rows; ++r)
      if (chunk < a.n_keys[first_row + r]) attend_chunk<W, kHeads, Accumulator>(a, first_row + r, head0, chunk, state[r]);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int h = 0; h < kHeads; ++h) {
      float* out = a.out + ((first_row + r) * a.shape.n_heads + head0 + h) * head_dim;
      if (a.n_keys[first_row + r] == 0) {
        std::fill(out, out + head_dim, 0.0f);
        continue;
      }
      const HeadState& head = state[r][h];
      for (int64_t d = 0; d < head_dim; ++d) out[d] = head.acc[d] / head.sum;
    }
  }
}

}  // namespace

void attention(const float* q, int64_t n_rows, const float* k_cache, const float* v_cache, const KvLayout& layout,
               const int32_t* const* key_slots, const int32_t* n_keys, const AttentionShape& shape,
               float* out, ThreadPool& pool) {
  const AttentionArgs args{q, k_cache, v_cache, layout, key_slots, n_keys, shape, out};
  // Units of work: (block of rows, pair of heads of one group) where groups have an even number of
  // heads, else (block of rows, head).
  const int64_t group = shape.n_heads / shape.n_kv_heads;
  const int64_t heads_per_unit = group % 2 == 0 ? 2 : 1;
  const int64_t units_per_block = shape.n_heads / heads_per_unit;
  const int64_t n_blocks = (n_rows + kBlockRows - 1) / kBlockRows;
  pool.parallel_for(n_blocks * units_per_block, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> accumulators;
    accumulators.resize(size_t(kBlockRows * 2 * shape.head_dim));
    run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
      const auto attend_all = [&]<class Accumulator>() __attribute__((always_inline)) {
        for (int64_t unit = begin; unit < end; ++unit) {
          const int64_t block = unit / units_per_block, head0 = (unit % units_per_block) * heads_per_unit;
          const int64_t first_row = block * kBlockRows, rows = std::min(kBlockRows, n_rows - first_row);
          if (heads_per_unit == 2) {
            attend_rows<W, 2, Accumulator>(args, first_row, rows, head0, accumulators.data());
          } else {
            attend_rows<W, 1, Accumulator>(args, first_row, rows, head0, accumulators.data());
          }
        }
      };
      if (shape.head_dim == 64) {
        attend_all.template operator()<ValueAccumulator<W, 4>>();
      } else if (shape.head_dim == 128) {
        attend_all.template operator()<ValueAccumulator<W, 8>>();
      } else {
        attend_all.template operator()<ValueAccumulator<W, 0>>();
      }
    });
  });
}

}  // namespace tf::cpu
