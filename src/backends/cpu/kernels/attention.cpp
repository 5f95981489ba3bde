// Attention on the CPU: per (row, head), keys in logical order, online softmax merged per chunk.
#include "backends/cpu/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/simd.h"

namespace tf::cpu {

namespace {

struct AttentionArgs {
  const float* q;
  const float* k_cache;
  const float* v_cache;
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

// One (row, head) pair. Every operation depends only on this row's query, its keys in logical
// order and head_dim; acc is the value accumulator.
template <int W, class Accumulator>
TF_INLINE void attend_one(const AttentionArgs& a, int64_t row, int64_t head, Accumulator& acc) {
  const int64_t head_dim = a.shape.head_dim;
  const int64_t group = a.shape.n_heads / a.shape.n_kv_heads;
  const int64_t kv_offset = (head / group) * head_dim;
  const int64_t kv_stride = a.shape.n_kv_heads * head_dim;
  const float* query = a.q + (row * a.shape.n_heads + head) * head_dim;
  float* out = a.out + (row * a.shape.n_heads + head) * head_dim;
  const int32_t* slots = a.key_slots[row];
  const int64_t n_keys = a.n_keys[row];

  acc.zero(head_dim);
  float running_max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
  float scores[kAttentionChunk];
  for (int64_t chunk = 0; chunk < n_keys; chunk += kAttentionChunk) {
    const int64_t n_in_chunk = std::min(kAttentionChunk, n_keys - chunk);
    float chunk_max = -std::numeric_limits<float>::infinity();
    int64_t j = 0;
    if (head_dim % kLanes == 0) {
      // Four keys at a time: the same lane products and tree as dot_fixed_order, with the four
      // horizontal sums done together.
      for (; j + 4 <= n_in_chunk; j += 4) {
        Lanes<W> acc[4] = {zero_lanes<W>(), zero_lanes<W>(), zero_lanes<W>(), zero_lanes<W>()};
        for (int64_t d = 0; d < head_dim; d += kLanes) {
          const Lanes<W> q = load_f32<W>(query + d);
          for (int t = 0; t < 4; ++t)
            acc[t] = acc[t] + q * load_f32<W>(a.k_cache + int64_t(slots[chunk + j + t]) * kv_stride + kv_offset + d);
        }
        horizontal_sum4(acc, scores + j);
      }
    }
    for (; j < n_in_chunk; ++j) {
      const float* key = a.k_cache + int64_t(slots[chunk + j]) * kv_stride + kv_offset;
      scores[j] = dot_fixed_order<W>(query, key, head_dim);
    }
    for (j = 0; j < n_in_chunk; ++j) {
      scores[j] = scores[j] * a.shape.scale;
      chunk_max = std::max(chunk_max, scores[j]);
    }
    const float new_max = std::max(running_max, chunk_max);
    const float rescale = std::exp(running_max - new_max);  // 0 for the first chunk
    sum = sum * rescale;
    acc.scale(rescale, head_dim);
    for (j = 0; j < n_in_chunk; ++j) scores[j] = std::exp(scores[j] - new_max);
    for (j = 0; j < n_in_chunk; ++j) {
      const float* value = a.v_cache + int64_t(slots[chunk + j]) * kv_stride + kv_offset;
      const float p = scores[j];
      sum = sum + p;
      acc.add_scaled(p, value, head_dim);
    }
    running_max = new_max;
  }
  if (n_keys == 0) {
    std::fill(out, out + head_dim, 0.0f);
    return;
  }
  acc.store(out, head_dim);
  for (int64_t d = 0; d < head_dim; ++d) out[d] = out[d] / sum;
}

}  // namespace

void attention(const float* q, int64_t n_rows, const float* k_cache, const float* v_cache,
               const int32_t* const* key_slots, const int32_t* n_keys, const AttentionShape& shape,
               float* out, ThreadPool& pool) {
  const AttentionArgs args{q, k_cache, v_cache, key_slots, n_keys, shape, out};
  pool.parallel_for(n_rows * shape.n_heads, [&](int64_t begin, int64_t end) {
    run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
      const auto attend_all = [&](auto& acc) __attribute__((always_inline)) {
        for (int64_t pair = begin; pair < end; ++pair) attend_one<W>(args, pair / shape.n_heads, pair % shape.n_heads, acc);
      };
      if (shape.head_dim == 64) {
        ValueAccumulator<W, 4> acc;
        attend_all(acc);
      } else if (shape.head_dim == 128) {
        ValueAccumulator<W, 8> acc;
        attend_all(acc);
      } else {
        std::vector<float> scratch(size_t(shape.head_dim));
        ValueAccumulator<W, 0> acc{scratch.data()};
        attend_all(acc);
      }
    });
  });
}

}  // namespace tf::cpu
