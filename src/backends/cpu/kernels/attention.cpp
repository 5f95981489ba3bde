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

// The value accumulator of one (row, head): head_dim floats, held in registers when head_dim is
// kVectors * 16 (so the per-key update is not a store-to-load chain through memory), else in
// memory. Both run the same element-wise operations in the same order.
template <int W, int kVectors>
struct ValueAccumulator {
  Lanes<W> v[kVectors];
  TF_INLINE void zero(int64_t) {
    for (auto& lanes : v) lanes = zero_lanes<W>();
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
  TF_INLINE void store(float* out, int64_t) const {
    for (int i = 0; i < kVectors; ++i) store_f32<W>(out + i * kLanes, v[i]);
  }
};
template <int W>
struct ValueAccumulator<W, 0> {
  float* acc;  // [head_dim] scratch
  TF_INLINE void zero(int64_t head_dim) { std::fill(acc, acc + head_dim, 0.0f); }
  TF_INLINE void scale(float factor, int64_t head_dim) {
    float* __restrict values = acc;  // acc never overlaps the cache: the loops run as whole vectors
    for (int64_t d = 0; d < head_dim; ++d) values[d] = values[d] * factor;
  }
  TF_INLINE void add_scaled(float p, const float* __restrict value, int64_t head_dim) {
    float* __restrict values = acc;
    for (int64_t d = 0; d < head_dim; ++d) values[d] = values[d] + p * value[d];
  }
  TF_INLINE void store(float* out, int64_t head_dim) const { std::copy(acc, acc + head_dim, out); }
};

// kHeads query heads of one row that share a key-value head (a GQA group), head0 first: they read
// the same keys and values, so each key is loaded once for all of them, and their independent
// accumulators overlap. Every operation on a head depends only on this row's query for it, its
// keys in logical order and head_dim, exactly as for a head alone.
template <int W, int kHeads, class Accumulator>
TF_INLINE void attend_heads(const AttentionArgs& a, int64_t row, int64_t head0, Accumulator* acc) {
  const int64_t head_dim = a.shape.head_dim;
  const int64_t group = a.shape.n_heads / a.shape.n_kv_heads;
  const int64_t kv_offset = (head0 / group) * a.layout.head_stride;
  const int64_t kv_stride = a.layout.slot_stride;
  const float* query[kHeads];
  float* out[kHeads];
  for (int h = 0; h < kHeads; ++h) {
    query[h] = a.q + (row * a.shape.n_heads + head0 + h) * head_dim;
    out[h] = a.out + (row * a.shape.n_heads + head0 + h) * head_dim;
  }
  const int32_t* slots = a.key_slots[row];
  const int64_t n_keys = a.n_keys[row];

  float running_max[kHeads], sum[kHeads];
  for (int h = 0; h < kHeads; ++h) {
    acc[h].zero(head_dim);
    running_max[h] = -std::numeric_limits<float>::infinity();
    sum[h] = 0.0f;
  }
  float scores[kHeads][kAttentionChunk];
  for (int64_t chunk = 0; chunk < n_keys; chunk += kAttentionChunk) {
    const int64_t n_in_chunk = std::min(kAttentionChunk, n_keys - chunk);
    int64_t j = 0;
    if (head_dim % kLanes == 0) {
      // Four keys at a time: the same lane products and tree as dot_fixed_order, with the four
      // horizontal sums done together.
      for (; j + 4 <= n_in_chunk; j += 4) {
        const float* keys[4];
        for (int t = 0; t < 4; ++t) keys[t] = a.k_cache + int64_t(slots[chunk + j + t]) * kv_stride + kv_offset;
        Lanes<W> dots[kHeads][4];
        for (int h = 0; h < kHeads; ++h)
          for (int t = 0; t < 4; ++t) dots[h][t] = zero_lanes<W>();
        for (int64_t d = 0; d < head_dim; d += kLanes) {
          Lanes<W> key[4];
          for (int t = 0; t < 4; ++t) key[t] = load_f32<W>(keys[t] + d);
          for (int h = 0; h < kHeads; ++h) {
            const Lanes<W> q = load_f32<W>(query[h] + d);
            for (int t = 0; t < 4; ++t) dots[h][t] = dots[h][t] + q * key[t];
          }
        }
        for (int h = 0; h < kHeads; ++h) horizontal_sum4(dots[h], scores[h] + j);
      }
    }
    for (; j < n_in_chunk; ++j) {
      const float* key = a.k_cache + int64_t(slots[chunk + j]) * kv_stride + kv_offset;
      for (int h = 0; h < kHeads; ++h) scores[h][j] = dot_fixed_order<W>(query[h], key, head_dim);
    }
    for (int h = 0; h < kHeads; ++h) {
      float chunk_max = -std::numeric_limits<float>::infinity();
      for (j = 0; j < n_in_chunk; ++j) {
        scores[h][j] = scores[h][j] * a.shape.scale;
        chunk_max = std::max(chunk_max, scores[h][j]);
      }
      const float new_max = std::max(running_max[h], chunk_max);
      const float rescale = std::exp(running_max[h] - new_max);  // 0 for the first chunk
      sum[h] = sum[h] * rescale;
      acc[h].scale(rescale, head_dim);
      for (j = 0; j < n_in_chunk; ++j) scores[h][j] = scores[h][j] - new_max;
      exp_in_place<W>(scores[h], n_in_chunk);
      running_max[h] = new_max;
    }
    for (j = 0; j < n_in_chunk; ++j) {
      const float* value = a.v_cache + int64_t(slots[chunk + j]) * kv_stride + kv_offset;
      for (int h = 0; h < kHeads; ++h) {
        const float p = scores[h][j];
        sum[h] = sum[h] + p;
        acc[h].add_scaled(p, value, head_dim);
      }
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    if (n_keys == 0) {
      std::fill(out[h], out[h] + head_dim, 0.0f);
      continue;
    }
    acc[h].store(out[h], head_dim);
    for (int64_t d = 0; d < head_dim; ++d) out[h][d] = out[h][d] / sum[h];
  }
}

}  // namespace

void attention(const float* q, int64_t n_rows, const float* k_cache, const float* v_cache, const KvLayout& layout,
               const int32_t* const* key_slots, const int32_t* n_keys, const AttentionShape& shape,
               float* out, ThreadPool& pool) {
  const AttentionArgs args{q, k_cache, v_cache, layout, key_slots, n_keys, shape, out};
  // Units of work: (row, pair of heads of one group) where groups have an even number of heads,
  // else (row, head).
  const int64_t group = shape.n_heads / shape.n_kv_heads;
  const int64_t heads_per_unit = group % 2 == 0 ? 2 : 1;
  const int64_t units_per_row = shape.n_heads / heads_per_unit;
  pool.parallel_for(n_rows * units_per_row, [&](int64_t begin, int64_t end) {
    run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
      const auto attend_all = [&](auto* acc) __attribute__((always_inline)) {
        for (int64_t unit = begin; unit < end; ++unit) {
          const int64_t row = unit / units_per_row, head0 = (unit % units_per_row) * heads_per_unit;
          if (heads_per_unit == 2) {
            attend_heads<W, 2>(args, row, head0, acc);
          } else {
            attend_heads<W, 1>(args, row, head0, acc);
          }
        }
      };
      if (shape.head_dim == 64) {
        ValueAccumulator<W, 4> acc[2];
        attend_all(acc);
      } else if (shape.head_dim == 128) {
        ValueAccumulator<W, 8> acc[2];
        attend_all(acc);
      } else {
        std::vector<float> scratch(size_t(2 * shape.head_dim));
        ValueAccumulator<W, 0> acc[2] = {{scratch.data()}, {scratch.data() + shape.head_dim}};
        attend_all(acc);
      }
    });
  });
}

}  // namespace tf::cpu
