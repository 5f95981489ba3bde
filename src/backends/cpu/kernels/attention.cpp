// Attention on the CPU: per (row, head), keys in logical order, online softmax merged per chunk.
#include "backends/cpu/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/attention_bf16_dot.h"
#include "backends/cpu/kernels/attention_rows.h"
#include "backends/cpu/kernels/exp.h"
#include "backends/cpu/kernels/simd.h"
#include "core/error.h"

namespace tf::cpu {

namespace {

using AttentionArgs = attention_rows::Args<float>;
using attention_rows::kBlockRows;
using attention_rows::kFewestLanes;
using attention_rows::shares_keys;


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

// Scales a chunk's scores in place and returns the largest, lane by lane first (a serial max cost
// a tenth of attention): the scores fill n_vectors whole vectors, those past the row's keys -inf.
// The order only decides between equal values (+0 and -0, whose exp is the same 1) and NaNs (whose
// rows come out NaN either way).
template <int W>
TF_INLINE float scale_and_max(float* scores, int64_t n_vectors, float scale) {
  const Lanes<W> factor = broadcast<W>(scale);
  Lanes<W> largest = broadcast<W>(-std::numeric_limits<float>::infinity());
  for (int64_t v = 0; v < n_vectors; ++v) {
    const Lanes<W> scaled = load_f32<W>(scores + v * kLanes) * factor;
    store_f32<W>(scores + v * kLanes, scaled);
#pragma GCC unroll 4
    for (int p = 0; p < Lanes<W>::kParts; ++p)  // std::max(largest, scaled), lane by lane
      largest.part[p] = largest.part[p] < scaled.part[p] ? scaled.part[p] : largest.part[p];
  }
  float lanes[kLanes];
  store_f32<W>(lanes, largest);
  float result = lanes[0];
  for (int64_t i = 1; i < kLanes; ++i) result = std::max(result, lanes[i]);
  return result;
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

// A chunk's weights for one row: the softmax numerators exp(score - max) of the keys at logical
// positions chunk .. chunk + n - 1 (n, returned, as far as the row has them) into p, for kHeads
// query heads of one row that share a key-value head (a GQA group), head0 first: they read the same
// keys, so each is loaded once for all of them. The row's running max moves to the chunk's, and
// its sum and value accumulator are rescaled to it. Every operation on a head depends only on this
// row's query for it, its keys in logical order and head_dim, exactly as for a head alone.
template <int W, int kHeads, class Accumulator>
TF_INLINE int64_t chunk_weights(const AttentionArgs& a, int64_t row, int64_t head0, int64_t chunk, HeadState* state,
                                float (*p)[kAttentionChunk]) {
  const int64_t head_dim = a.shape.head_dim;
  const int64_t group = a.shape.n_heads / a.shape.n_kv_heads;
  const int64_t kv_offset = (head0 / group) * a.layout.head_stride;
  const int64_t kv_stride = a.layout.slot_stride;
  const float* query[kHeads];
  for (int h = 0; h < kHeads; ++h) query[h] = a.q + (row * a.shape.n_heads + head0 + h) * head_dim;
  const int32_t* slots = a.key_slots[row];
  const int64_t n_in_chunk = std::min(kAttentionChunk, a.n_keys[row] - chunk);

  float (*scores)[kAttentionChunk] = p;  // scores first, then their weights in place
  int64_t j = 0;
  if constexpr (Accumulator::kVectors > 0) {
    // head_dim known at compile time: the queries stay in registers and each key is loaded once
    // for both heads. The same products and sums as below.
    constexpr int kVectors = Accumulator::kVectors;
    Lanes<W> q[kHeads][kVectors];
    for (int h = 0; h < kHeads; ++h)
      for (int i = 0; i < kVectors; ++i) q[h][i] = load_f32<W>(query[h] + i * kLanes);
    if constexpr (W == 16 && kHeads * kVectors <= 8) {
      // 16 / kHeads keys at a time, where their sums and the queries fit the register file: one
      // horizontal_sum16 (the same tree for each sum) takes half the shuffles of four sums of four.
      constexpr int kKeys = 16 / kHeads;
      for (; j + kKeys <= n_in_chunk; j += kKeys) {
        Lanes<W> dots[kHeads * kKeys];
#pragma GCC unroll 16
        for (int t = 0; t < kKeys; ++t) {
          const float* key = a.k_cache + int64_t(slots[chunk + j + t]) * kv_stride + kv_offset;
          for (int h = 0; h < kHeads; ++h) dots[h * kKeys + t] = zero_lanes<W>();
#pragma GCC unroll 8
          for (int i = 0; i < kVectors; ++i) {
            const Lanes<W> key_lanes = load_f32<W>(key + i * kLanes);
            for (int h = 0; h < kHeads; ++h) dots[h * kKeys + t] = dots[h * kKeys + t] + q[h][i] * key_lanes;
          }
        }
        float sums[kHeads * kKeys];
        horizontal_sum16(dots, sums);
        for (int h = 0; h < kHeads; ++h) std::memcpy(scores[h] + j, sums + h * kKeys, sizeof(float) * kKeys);
      }
    }
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
  // The softmax steps run on whole vectors; the lanes past the row's keys start at -inf, stay out
  // of the max and are never read after it.
  const int64_t n_vectors = (n_in_chunk + kLanes - 1) / kLanes;
  for (int h = 0; h < kHeads; ++h) {
    HeadState& head = state[h];
    std::fill(scores[h] + n_in_chunk, scores[h] + n_vectors * kLanes, -std::numeric_limits<float>::infinity());
    const float new_max = std::max(head.running_max, scale_and_max<W>(scores[h], n_vectors, a.shape.scale));
    const float rescale = std::exp(head.running_max - new_max);  // 0 for the first chunk
    head.sum = head.sum * rescale;
    Accumulator acc;
    acc.load(head.acc, head_dim);
    acc.scale(rescale, head_dim);
    acc.save(head_dim);
    const Lanes<W> shift = broadcast<W>(new_max);
    for (int64_t v = 0; v < n_vectors; ++v)
      store_f32<W>(scores[h] + v * kLanes, load_f32<W>(scores[h] + v * kLanes) - shift);
    exp_in_place<W>(scores[h], n_vectors * kLanes);
    head.running_max = new_max;
  }
  return n_in_chunk;
}

// Adds keys first .. end - 1 of a chunk's values, weighted, to the sums and accumulators of kRows
// rows (each its kHeads heads) that read the same values there: each value is loaded once for all
// of them. Each row's own operations and their order are those of the row alone.
template <int W, int kHeads, int kRows, class Accumulator>
TF_INLINE void add_chunk_values(const AttentionArgs& a, const int32_t* slots, int64_t head0, int64_t first,
                                int64_t end, HeadState* const (&states)[kRows],
                                float (*const (&p)[kRows])[kAttentionChunk]) {
  const int64_t head_dim = a.shape.head_dim;
  const int64_t group = a.shape.n_heads / a.shape.n_kv_heads;
  const int64_t kv_offset = (head0 / group) * a.layout.head_stride;
  Accumulator acc[kRows][kHeads];
  float sum[kRows][kHeads];
  for (int r = 0; r < kRows; ++r)
    for (int h = 0; h < kHeads; ++h) {
      acc[r][h].load(states[r][h].acc, head_dim);
      sum[r][h] = states[r][h].sum;
    }
  for (int64_t j = first; j < end; ++j) {
    const float* value = a.v_cache + int64_t(slots[j]) * a.layout.slot_stride + kv_offset;
    for (int r = 0; r < kRows; ++r)
      for (int h = 0; h < kHeads; ++h) {
        const float weight = p[r][h][j];
        sum[r][h] = sum[r][h] + weight;
        acc[r][h].add_scaled(weight, value, head_dim);
      }
  }
  for (int r = 0; r < kRows; ++r)
    for (int h = 0; h < kHeads; ++h) {
      states[r][h].sum = sum[r][h];
      acc[r][h].save(head_dim);
    }
}

// Whether rows r0 and r1 read the same slots at logical positions chunk .. chunk + n - 1.
TF_INLINE bool same_keys(const AttentionArgs& a, int64_t r0, int64_t r1, int64_t chunk, int64_t n) {
  const int32_t* s0 = a.key_slots[r0] + chunk;
  const int32_t* s1 = a.key_slots[r1] + chunk;
  return s0 == s1 || std::memcmp(s0, s1, size_t(n) * sizeof(int32_t)) == 0;
}

// ---- A block of rows in the lanes ----
//
// Rows of a block that read the same keys (a prefill chunk, a verify chain) can instead put their
// (row, head) pairs in the 16 lanes, lane r * kHeads + h, and run every operation above lane by
// lane: a score's 16 lane sums become 16 registers of 16 (row, head) pairs each, added in
// horizontal_sum's tree, and each element of a key or value is broadcast to all the lanes. The
// same operations in the same order for each (row, head), so the same bits, without horizontal
// shuffles, each key and value read once for the block.


template <int W>
TF_INLINE Lanes<W> lane_max(const Lanes<W>& a, const Lanes<W>& b) {  // std::max(a, b), lane by lane
  Lanes<W> result;
#pragma GCC unroll 4
  for (int p = 0; p < Lanes<W>::kParts; ++p) result.part[p] = a.part[p] < b.part[p] ? b.part[p] : a.part[p];
  return result;
}

// where ? a : b, lane by lane.
template <int W>
TF_INLINE Lanes<W> lane_select(const Lanes<W>& position, const Lanes<W>& limit, const Lanes<W>& a,
                               const Lanes<W>& b) {
  Lanes<W> result;
#pragma GCC unroll 4
  for (int p = 0; p < Lanes<W>::kParts; ++p)
    result.part[p] = position.part[p] < limit.part[p] ? a.part[p] : b.part[p];
  return result;
}

// Adds keys first .. end - 1 of a chunk's values, weighted, to the accumulators of elements
// d0 .. d0 + 15 of every lane, and the weights to *sum where given (its chain of adds then overlaps
// the values' work). With kMasked, a lane keeps its accumulator for a key it lacks (the key's weight
// there is exp(-inf) = +0, which leaves the sum as it was, but its value need not be finite).
template <int W, bool kMasked>
TF_INLINE void lane_values(const AttentionArgs& a, const int32_t* slots, int64_t kv_offset, int64_t d0, int64_t first,
                           int64_t end, const float* weights, float* accumulators, const Lanes<W>& limits,
                           int64_t chunk, Lanes<W>* sum) {
  Lanes<W> acc[kLanes];
  for (int i = 0; i < kLanes; ++i) acc[i] = load_f32<W>(accumulators + (d0 + i) * kLanes);
  Lanes<W> weight_sum = sum != nullptr ? *sum : zero_lanes<W>();  // in a register, not through *sum
  for (int64_t j = first; j < end; ++j) {
    const float* value = a.v_cache + int64_t(slots[j]) * a.layout.slot_stride + kv_offset + d0;
    const Lanes<W> p = load_f32<W>(weights + j * kLanes);
    weight_sum = weight_sum + p;
    const Lanes<W> position = broadcast<W>(float(chunk + j));
#pragma GCC unroll 16
    for (int i = 0; i < kLanes; ++i) {
      const Lanes<W> updated = add_product_broadcast<W>(acc[i], p, value + i);
      acc[i] = kMasked ? lane_select<W>(position, limits, updated, acc[i]) : updated;
    }
  }
  for (int i = 0; i < kLanes; ++i) store_f32<W>(accumulators + (d0 + i) * kLanes, acc[i]);
  if (sum != nullptr) *sum = weight_sum;
}

// The scaled scores of four keys for every lane (queries [head_dim][16]): each lane's 16 partial sums
// (element l, then l + 16, ...) added in horizontal_sum's tree, as for one key below, but walked
// depth first (parts l and l + 8, then those sums 4 apart, 2 apart, 1 apart), so only a few sums of
// each key are live at once and each query vector loaded serves the four keys. Every lane's
// operations and their order are those of one key alone.
template <int W, int kVectors>
TF_INLINE void score_four_keys_in_lanes(const float* queries, const float* const (&keys)[4], const Lanes<W>& scale,
                                        float* scores) {
  // parts l and l + 8 of each key, added (the tree's first level).
  const auto pair_sum = [&](int l, Lanes<W>(&out)[4]) __attribute__((always_inline)) {
    Lanes<W> low[4], high[4];
    for (int t = 0; t < 4; ++t) {
      low[t] = add_product_broadcast<W>(zero_lanes<W>(), load_f32<W>(queries + l * kLanes), keys[t] + l);
      high[t] = add_product_broadcast<W>(zero_lanes<W>(), load_f32<W>(queries + (l + 8) * kLanes), keys[t] + l + 8);
    }
#pragma GCC unroll 8
    for (int i = 1; i < kVectors; ++i) {
      const Lanes<W> q_low = load_f32<W>(queries + (i * kLanes + l) * kLanes);
      const Lanes<W> q_high = load_f32<W>(queries + (i * kLanes + l + 8) * kLanes);
      for (int t = 0; t < 4; ++t) {
        low[t] = add_product_broadcast<W>(low[t], q_low, keys[t] + i * kLanes + l);
        high[t] = add_product_broadcast<W>(high[t], q_high, keys[t] + i * kLanes + l + 8);
      }
    }
    for (int t = 0; t < 4; ++t) out[t] = low[t] + high[t];
  };
  const auto quad_sum = [&](int l, Lanes<W>(&out)[4]) __attribute__((always_inline)) {  // levels one and two
    Lanes<W> first[4], second[4];
    pair_sum(l, first);
    pair_sum(l + 4, second);
    for (int t = 0; t < 4; ++t) out[t] = first[t] + second[t];
  };
  Lanes<W> u0[4], u2[4], half[4], u1[4], u3[4];
  quad_sum(0, u0);
  quad_sum(2, u2);
  for (int t = 0; t < 4; ++t) half[t] = u0[t] + u2[t];
  quad_sum(1, u1);
  quad_sum(3, u3);
  for (int t = 0; t < 4; ++t) store_f32<W>(scores + t * kLanes, (half[t] + (u1[t] + u3[t])) * scale);
}

// Rows first_row .. first_row + n_rows - 1 (each with keys, each row's key list a prefix of row
// `longest`'s), heads head0 .. head0 + kHeads - 1, head_dim kVectors * 16. scratch: 2 * 16 * head_dim
// floats.
template <int W, int kHeads, int kVectors>
TF_INLINE void attend_block_in_lanes(const AttentionArgs& a, int64_t first_row, int64_t n_rows, int64_t longest,
                                     int64_t head0, float* scratch) {
  constexpr int64_t kHeadDim = kVectors * kLanes;
  const int64_t group = a.shape.n_heads / a.shape.n_kv_heads;
  const int64_t kv_offset = (head0 / group) * a.layout.head_stride;
  float* accumulators = scratch;                 // [head_dim][16]
  float* queries = scratch + kHeadDim * kLanes;  // [head_dim][16]
  std::fill(scratch, scratch + 2 * kHeadDim * kLanes, 0.0f);
  float key_counts[kLanes] = {};
  int64_t fewest_keys = a.n_keys[longest];
  for (int64_t r = 0; r < n_rows; ++r) {
    fewest_keys = std::min<int64_t>(fewest_keys, a.n_keys[first_row + r]);
    for (int h = 0; h < kHeads; ++h) {
      const int64_t lane = r * kHeads + h;
      key_counts[lane] = float(a.n_keys[first_row + r]);  // exact: far below 2^24
      const float* query = a.q + ((first_row + r) * a.shape.n_heads + head0 + h) * kHeadDim;
      for (int64_t d = 0; d < kHeadDim; ++d) queries[d * kLanes + lane] = query[d];
    }
  }
  const int32_t* slots = a.key_slots[longest];
  const int64_t most_keys = a.n_keys[longest];
  const Lanes<W> limits = load_f32<W>(key_counts), scale = broadcast<W>(a.shape.scale);
  const Lanes<W> minus_infinity = broadcast<W>(-std::numeric_limits<float>::infinity());
  Lanes<W> running_max = minus_infinity, sum = zero_lanes<W>();
  alignas(64) float weights[kAttentionChunk * kLanes];  // [key][lane]: scores, then their weights

  for (int64_t chunk = 0; chunk < most_keys; chunk += kAttentionChunk) {
    const int64_t n = std::min(kAttentionChunk, most_keys - chunk);
    const int32_t* chunk_slots = slots + chunk;
    int64_t j = 0;
    // Where a cache slot holds one head's key alone (the head-major layout): with the heads of a
    // slot interleaved, four keys' elements are four lines apart and this was slower. AVX-512 only:
    // the narrower levels keep one key at a time, which builds faster (the sanitizers' build above all).
    const bool four_keys_a_pass = W == 16 && a.layout.slot_stride == kHeadDim;
    for (; four_keys_a_pass && j + 4 <= n; j += 4) {
      const float* keys[4];
      for (int t = 0; t < 4; ++t) keys[t] = a.k_cache + int64_t(chunk_slots[j + t]) * a.layout.slot_stride + kv_offset;
      float* scores = weights + j * kLanes;
      if constexpr (W == 16) score_four_keys_in_lanes<W, kVectors>(queries, keys, scale, scores);
    }
    for (; j < n; ++j) {
      const float* key = a.k_cache + int64_t(chunk_slots[j]) * a.layout.slot_stride + kv_offset;
      // part[l]: lane l of dot_fixed_order's 16 (element l, then l + 16, ...), for every lane here.
      Lanes<W> part[kLanes];
#pragma GCC unroll 16
      for (int l = 0; l < kLanes; ++l)
        part[l] = add_product_broadcast<W>(zero_lanes<W>(), load_f32<W>(queries + l * kLanes), key + l);
#pragma GCC unroll 8
      for (int i = 1; i < kVectors; ++i)
#pragma GCC unroll 16
        for (int l = 0; l < kLanes; ++l)
          part[l] = add_product_broadcast<W>(part[l], load_f32<W>(queries + (i * kLanes + l) * kLanes),
                                             key + i * kLanes + l);
      // horizontal_sum's tree: l + 8, then + 4, + 2, + 1.
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) part[l] = part[l] + part[l + 8];
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l) part[l] = part[l] + part[l + 4];
      for (int l = 0; l < 2; ++l) part[l] = part[l] + part[l + 2];
      store_f32<W>(weights + j * kLanes, (part[0] + part[1]) * scale);
    }
    // Keys some lanes lack (the block's own last positions) score -inf there.
    const int64_t n_shared = std::clamp<int64_t>(fewest_keys - chunk, 0, n);
    for (int64_t j = n_shared; j < n; ++j)
      store_f32<W>(weights + j * kLanes, lane_select<W>(broadcast<W>(float(chunk + j)), limits,
                                                        load_f32<W>(weights + j * kLanes), minus_infinity));
    Lanes<W> chunk_max = minus_infinity;
    for (int64_t j = 0; j < n; ++j) chunk_max = lane_max<W>(chunk_max, load_f32<W>(weights + j * kLanes));
    const Lanes<W> new_max = lane_max<W>(running_max, chunk_max);
    alignas(64) float rescale[kLanes];  // exp(running max - new max): 0 for the first chunk
    store_f32<W>(rescale, running_max - new_max);
    exp_in_place<W>(rescale, kLanes);
    const Lanes<W> factor = load_f32<W>(rescale);
    sum = sum * factor;
    for (int64_t d = 0; d < kHeadDim; ++d)
      store_f32<W>(accumulators + d * kLanes, load_f32<W>(accumulators + d * kLanes) * factor);
    for (int64_t j = 0; j < n; ++j) store_f32<W>(weights + j * kLanes, load_f32<W>(weights + j * kLanes) - new_max);
    exp_in_place<W>(weights, n * kLanes);
    running_max = new_max;
    for (int64_t d0 = 0; d0 < kHeadDim; d0 += kLanes) {
      Lanes<W>* weight_sum = d0 == 0 ? &sum : nullptr;
      lane_values<W, false>(a, chunk_slots, kv_offset, d0, 0, n_shared, weights, accumulators, limits, chunk,
                            weight_sum);
      lane_values<W, true>(a, chunk_slots, kv_offset, d0, n_shared, n, weights, accumulators, limits, chunk,
                           weight_sum);
    }
  }
  float sums[kLanes];
  store_f32<W>(sums, sum);
  for (int64_t r = 0; r < n_rows; ++r)
    for (int h = 0; h < kHeads; ++h) {
      const int64_t lane = r * kHeads + h;
      float* out = a.out + ((first_row + r) * a.shape.n_heads + head0 + h) * kHeadDim;
      for (int64_t d = 0; d < kHeadDim; ++d) out[d] = accumulators[d * kLanes + lane] / sums[lane];
    }
}

// Rows first_row .. first_row + n_rows - 1, heads head0 .. head0 + kHeads - 1, chunk by chunk.
// accumulators: 2 * 16 * head_dim floats of scratch.
template <int W, int kHeads, class Accumulator>
TF_INLINE void attend_rows_one_by_one(const AttentionArgs& a, int64_t first_row, int64_t n_rows, int64_t head0,
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
  alignas(64) float weights[2][kHeads][kAttentionChunk];
  for (int64_t chunk = 0; chunk < most_keys; chunk += kAttentionChunk) {
    int64_t r = 0;
    while (r < n_rows) {
      const int64_t row = first_row + r;
      if (chunk >= a.n_keys[row]) {
        ++r;
        continue;
      }
      const int64_t n = chunk_weights<W, kHeads, Accumulator>(a, row, head0, chunk, state[r], weights[0]);
      const int32_t* slots = a.key_slots[row] + chunk;
      // Two rows take the values they share together where the register file holds both.
      if (kHeads * Accumulator::kVectors <= 8 && Accumulator::kVectors > 0 && r + 1 < n_rows &&
          chunk < a.n_keys[row + 1]) {
        const int64_t n_next =
            chunk_weights<W, kHeads, Accumulator>(a, row + 1, head0, chunk, state[r + 1], weights[1]);
        const int64_t n_shared = std::min(n, n_next);
        if (same_keys(a, row, row + 1, chunk, n_shared)) {
          add_chunk_values<W, kHeads, 2, Accumulator>(a, slots, head0, 0, n_shared, {state[r], state[r + 1]},
                                                      {weights[0], weights[1]});
          const int longer = n_next > n ? 1 : 0;
          add_chunk_values<W, kHeads, 1, Accumulator>(a, a.key_slots[row + longer] + chunk, head0, n_shared,
                                                      std::max(n, n_next), {state[r + longer]}, {weights[longer]});
        } else {
          add_chunk_values<W, kHeads, 1, Accumulator>(a, slots, head0, 0, n, {state[r]}, {weights[0]});
          add_chunk_values<W, kHeads, 1, Accumulator>(a, a.key_slots[row + 1] + chunk, head0, 0, n_next,
                                                      {state[r + 1]}, {weights[1]});
        }
        r += 2;
        continue;
      }
      add_chunk_values<W, kHeads, 1, Accumulator>(a, slots, head0, 0, n, {state[r]}, {weights[0]});
      ++r;
    }
  }
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

// A block's rows, split into runs of consecutive rows of one sequence: a run that fills kFewestLanes or
// more takes its keys in the lanes, the other rows go one by one (a block may hold the ends of
// several lanes' rows, or tree rows whose last keys differ).
template <int W, int kHeads, class Accumulator>
TF_INLINE void attend_rows(const AttentionArgs& a, int64_t first_row, int64_t n_rows, int64_t head0,
                           float* accumulators) {
  if constexpr (Accumulator::kVectors == 0) {
    attend_rows_one_by_one<W, kHeads, Accumulator>(a, first_row, n_rows, head0, accumulators);
  } else {
    // Rows outside the runs go one by one together, so they still take each chunk in turn.
    int64_t begin = first_row, alone_begin = first_row;
    const int64_t end = first_row + n_rows;
    while (begin < end) {
      int64_t run_end = begin + 1, longest = begin;
      while (run_end < end && a.n_keys[begin] > 0 && shares_keys(a, run_end, longest)) {
        if (a.n_keys[run_end] > a.n_keys[longest]) longest = run_end;
        ++run_end;
      }
      if ((run_end - begin) * kHeads >= kFewestLanes) {
        if (alone_begin < begin)
          attend_rows_one_by_one<W, kHeads, Accumulator>(a, alone_begin, begin - alone_begin, head0, accumulators);
        attend_block_in_lanes<W, kHeads, Accumulator::kVectors>(a, begin, run_end - begin, longest, head0,
                                                                accumulators);
        alone_begin = run_end;
      }
      begin = run_end;
    }
    if (alone_begin < end)
      attend_rows_one_by_one<W, kHeads, Accumulator>(a, alone_begin, end - alone_begin, head0, accumulators);
  }
}
}  // namespace

void attention(const float* q, int64_t n_rows, const float* k_cache, const float* v_cache, const KvLayout& layout,
               const int32_t* const* key_slots, const int32_t* n_keys, const AttentionShape& shape,
               float* out, ThreadPool& pool) {
  const KvSlice cache{const_cast<float*>(k_cache), const_cast<float*>(v_cache), layout, false};
  if (attention_takes_bf16_dot(shape.head_dim))
    return attention_bf16_dot(q, n_rows, cache, key_slots, n_keys, shape, out, pool);
  const AttentionArgs args{q, k_cache, v_cache, layout, key_slots, n_keys, shape, out};
  // Units of work: (block of rows, pair of heads of one group) where groups have an even number of
  // heads, else (block of rows, head).
  const int64_t group = shape.n_heads / shape.n_kv_heads;
  const int64_t heads_per_unit = group % 2 == 0 ? 2 : 1;
  const int64_t units_per_block = shape.n_heads / heads_per_unit;
  const int64_t n_blocks = (n_rows + kBlockRows - 1) / kBlockRows;
  pool.parallel_for(n_blocks * units_per_block, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> accumulators;
    accumulators.resize(size_t(2 * kLanes * shape.head_dim));
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

void attention(const float* q, int64_t n_rows, const KvSlice& cache, const int32_t* const* key_slots,
               const int32_t* n_keys, const AttentionShape& shape, float* out, ThreadPool& pool) {
  if (!cache.is_bf16)
    return attention(q, n_rows, static_cast<const float*>(cache.keys), static_cast<const float*>(cache.values),
                     cache.layout, key_slots, n_keys, shape, out, pool);
  if (!attention_takes_bf16_dot(shape.head_dim)) fail_internal("a bf16 KV cache is read at the level that made it");
  attention_bf16_dot(q, n_rows, cache, key_slots, n_keys, shape, out, pool);
}

void KvSlice::store(int64_t slot, const float* k_row, const float* v_row, int64_t n_kv_heads, int64_t head_dim) const {
  if (is_bf16) {
    store_kv_row_bf16(static_cast<uint16_t*>(keys), layout, slot, k_row, n_kv_heads, head_dim);
    store_kv_row_bf16(static_cast<uint16_t*>(values), layout, slot, v_row, n_kv_heads, head_dim);
  } else {
    store_kv_row(static_cast<float*>(keys), layout, slot, k_row, n_kv_heads, head_dim);
    store_kv_row(static_cast<float*>(values), layout, slot, v_row, n_kv_heads, head_dim);
  }
}

}  // namespace tf::cpu
