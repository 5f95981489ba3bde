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

// One (row, head) pair. Every operation depends only on this row's query, its keys in logical
// order and head_dim; acc is scratch of head_dim floats.
template <int W>
TF_INLINE void attend_one(const AttentionArgs& a, int64_t row, int64_t head, float* acc) {
  const int64_t head_dim = a.shape.head_dim;
  const int64_t group = a.shape.n_heads / a.shape.n_kv_heads;
  const int64_t kv_offset = (head / group) * head_dim;
  const int64_t kv_stride = a.shape.n_kv_heads * head_dim;
  const float* query = a.q + (row * a.shape.n_heads + head) * head_dim;
  float* out = a.out + (row * a.shape.n_heads + head) * head_dim;
  const int32_t* slots = a.key_slots[row];
  const int64_t n_keys = a.n_keys[row];

  std::fill(acc, acc + head_dim, 0.0f);
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
    // acc never overlaps the cache, which lets the loops below run as whole vectors.
    float* __restrict acc_values = acc;
    for (int64_t d = 0; d < head_dim; ++d) acc_values[d] = acc_values[d] * rescale;
    for (j = 0; j < n_in_chunk; ++j) scores[j] = std::exp(scores[j] - new_max);
    for (j = 0; j < n_in_chunk; ++j) {
      const float* __restrict value = a.v_cache + int64_t(slots[chunk + j]) * kv_stride + kv_offset;
      const float p = scores[j];
      sum = sum + p;
      for (int64_t d = 0; d < head_dim; ++d) acc_values[d] = acc_values[d] + p * value[d];
    }
    running_max = new_max;
  }
  for (int64_t d = 0; d < head_dim; ++d) out[d] = n_keys > 0 ? acc[d] / sum : 0.0f;
}

}  // namespace

void attention(const float* q, int64_t n_rows, const float* k_cache, const float* v_cache,
               const int32_t* const* key_slots, const int32_t* n_keys, const AttentionShape& shape,
               float* out, ThreadPool& pool) {
  const AttentionArgs args{q, k_cache, v_cache, key_slots, n_keys, shape, out};
  pool.parallel_for(n_rows * shape.n_heads, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(size_t(shape.head_dim));
    run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
      for (int64_t pair = begin; pair < end; ++pair)
        attend_one<W>(args, pair / shape.n_heads, pair % shape.n_heads, acc.data());
    });
  });
}

}  // namespace tf::cpu
