// Attention on bf16-rounded operands with the AVX-512 BF16 dot product (attention_bf16_dot.h).
//
// Each (row, head) runs these sums, in this order, on both paths below:
// - a score: the query and the key as 16-lane vectors of bf16 pairs (elements 2i and 2i + 1 in lane
//   i % 16 of block i / 16), one vdpbf16ps per block into zeroed lanes (lane l adds pair l, then
//   l + 16, ...), horizontal_sum's tree, times the scale;
// - the weights: exp(score - running max) in f32 (softmax_exp), rounded to bf16;
//   the row's sum adds the rounded weights key by key;
// - the values: keys in pairs by logical position ((0, 1), (2, 3), ...: chunks start at even
//   positions), one vdpbf16ps per output element of (weight j, weight j + 1) with (value j,
//   value j + 1); a row's odd last key pairs with a zero weight and a zero value.
// A run of rows of one sequence puts its (row, head) pairs in the lanes, as attention.cpp does, with
// the same operands in each lane: the same bits as each row alone. Every rounding to bf16 is the
// instruction's (vcvtne2ps2bf16), so both paths round alike.
#include "backends/cpu/kernels/attention_bf16_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/attention_rows.h"
#include "backends/cpu/kernels/simd.h"

// Vector arguments only cross always_inline calls, so the vector-ABI notes do not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12's own intrinsics (_mm512_undefined_* inside the conversions) trip it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define TF_BF16_DOT_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512bf16")))
#define TF_BF16_INLINE inline TF_BF16_DOT_TARGET __attribute__((always_inline))

namespace tf::cpu {
namespace {

using attention_rows::Args;  // Element: float, or bf16 rounded from float as this path rounds on reading
using attention_rows::kBlockRows;
using attention_rows::kFewestLanes;
using attention_rows::shares_keys;
constexpr int64_t kPairsPerChunk = kAttentionChunk / 2;

alignas(64) constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                  8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
template <class Element>
alignas(64) constexpr Element kZeros[256] = {};  // the value a row's odd last key pairs with

// 32 floats as 16 words of bf16 pairs: word i holds p[2i] (low half) and p[2i + 1].
TF_BF16_INLINE __m512i bf16_pairs32(const float* p) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
}

// Two vectors of 16 floats as 16 words (a[i], b[i]).
TF_BF16_INLINE __m512i bf16_interleave(__m512 a, __m512 b) {
  const __m512i words = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // a's 16, then b's 16
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), words);
}

// A key's elements 32b .. 32b + 31 as words of bf16 pairs; two values' elements 16g .. 16g + 15 as
// words (first, second): rounded here from f32, or read as stored (the same bits).
TF_BF16_INLINE __m512i key_words(const float* key, int b) { return bf16_pairs32(key + 32 * b); }
TF_BF16_INLINE __m512i key_words(const uint16_t* key, int b) { return _mm512_loadu_si512(key + 32 * b); }
TF_BF16_INLINE __m512i value_pairs(const float* first, const float* second, int g) {
  return bf16_interleave(_mm512_loadu_ps(first + 16 * g), _mm512_loadu_ps(second + 16 * g));
}
TF_BF16_INLINE __m512i value_pairs(const uint16_t* first, const uint16_t* second, int g) {
  const __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(first + 16 * g))),
                                           _mm256_loadu_si256((const __m256i*)(second + 16 * g)), 1);
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), words);
}

// acc + each lane's pair of products (the pair's two exact products added in turn).
TF_BF16_INLINE __m512 dot_add(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

TF_BF16_INLINE __m512i broadcast_word(const uint32_t* p) { return _mm512_set1_epi32(int32_t(*p)); }

// 16 bf16 (the low or high half of a vector of words) as f32, exactly.
TF_BF16_INLINE __m512 bf16_halves_to_f32(__m256i halves) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
}

// sum + each lane's first weight, then its second where has_second (weights: words of bf16 pairs).
TF_BF16_INLINE void add_pair_to_sum(__m512& sum, __m512i weights, bool has_second) {
  sum = _mm512_add_ps(sum, bf16_halves_to_f32(_mm512_cvtepi32_epi16(weights)));
  if (has_second) sum = _mm512_add_ps(sum, bf16_halves_to_f32(_mm512_cvtepi32_epi16(_mm512_srli_epi32(weights, 16))));
}

// std::max(current, x) lane by lane: x where current < x, so a NaN x never replaces the max.
TF_BF16_INLINE __m512 max_keeping(__m512 current, __m512 x) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(current, x, _CMP_LT_OQ), current, x);
}

// exp(x) for softmax arguments (x <= 0, -inf included; NaN stays NaN), within about 2 ulp: the
// weights are rounded to bf16 next, so this path needs no more than that, and glibc's expf, which
// the f32 path reproduces, cost a fifth of this kernel. Both paths call it alike.
TF_BF16_INLINE __m512 softmax_exp(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // exp(-104) rounds to 0; max keeps a NaN x
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), x);  // x - n ln 2, ln 2 in two parts
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);  // Taylor to r^6: |r| <= ln 2 / 2
  for (const float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  return _mm512_scalef_ps(p, n);
}

TF_BF16_INLINE void softmax_exp_in_place(float* values, int64_t n) {  // n a multiple of 16
  for (int64_t i = 0; i < n; i += 16) _mm512_storeu_ps(values + i, softmax_exp(_mm512_loadu_ps(values + i)));
}

TF_BF16_INLINE float sum_tree(__m512 v) {
  Lanes<16> lanes;
  lanes.part[0] = v;
  return horizontal_sum<16>(lanes);
}

template <class Element>
TF_BF16_INLINE const Element* key_at(const Args<Element>& a, int32_t slot, int64_t kv_offset) {
  return a.k_cache + int64_t(slot) * a.layout.slot_stride + kv_offset;
}
template <class Element>
TF_BF16_INLINE const Element* value_at(const Args<Element>& a, int32_t slot, int64_t kv_offset) {
  return a.v_cache + int64_t(slot) * a.layout.slot_stride + kv_offset;
}

// ---- A row alone (kHeads heads of one group) ----

template <int kHeads, int kBlocks, class Element>
TF_BF16_INLINE void attend_row_alone(const Args<Element>& a, int64_t row, int64_t head0) {
  constexpr int64_t kHeadDim = kBlocks * 32, kGroups = kHeadDim / 16;
  const int64_t group = a.shape.n_heads / a.shape.n_kv_heads;
  const int64_t kv_offset = (head0 / group) * a.layout.head_stride;
  const int64_t n_keys = a.n_keys[row];
  float* out[kHeads];
  for (int h = 0; h < kHeads; ++h) out[h] = a.out + (row * a.shape.n_heads + head0 + h) * kHeadDim;
  if (n_keys == 0) {
    for (int h = 0; h < kHeads; ++h) std::fill(out[h], out[h] + kHeadDim, 0.0f);
    return;
  }
  __m512i query[kHeads][kBlocks];
  for (int h = 0; h < kHeads; ++h)
    for (int b = 0; b < kBlocks; ++b) query[h][b] = bf16_pairs32(a.q + (row * a.shape.n_heads + head0 + h) * kHeadDim + 32 * b);
  __m512 acc[kHeads][kGroups];
  float running_max[kHeads], sum[kHeads];
  for (int h = 0; h < kHeads; ++h) {
    for (int g = 0; g < kGroups; ++g) acc[h][g] = _mm512_setzero_ps();
    running_max[h] = -std::numeric_limits<float>::infinity();
    sum[h] = 0.0f;
  }
  const int32_t* slots = a.key_slots[row];
  alignas(64) float scores[kHeads][kAttentionChunk];
  alignas(64) uint32_t weight_pairs[kHeads][kPairsPerChunk];

  for (int64_t chunk = 0; chunk < n_keys; chunk += kAttentionChunk) {
    const int64_t n = std::min(kAttentionChunk, n_keys - chunk);
    int64_t j = 0;
    // 16 / kHeads keys at a time: their sums in one horizontal_sum16 (the same tree as one).
    constexpr int kKeys = 16 / kHeads;
    for (; j + kKeys <= n; j += kKeys) {
      Lanes<16> dots[16];
      for (int t = 0; t < kKeys; ++t) {
        const Element* key = key_at(a, slots[chunk + j + t], kv_offset);
        __m512i words[kBlocks];
        for (int b = 0; b < kBlocks; ++b) words[b] = key_words(key, b);
        for (int h = 0; h < kHeads; ++h) {
          __m512 d = _mm512_setzero_ps();
          for (int b = 0; b < kBlocks; ++b) d = dot_add(d, query[h][b], words[b]);
          dots[h * kKeys + t].part[0] = d;
        }
      }
      alignas(64) float sums[16];
      horizontal_sum16(dots, sums);
      for (int h = 0; h < kHeads; ++h)
        for (int t = 0; t < kKeys; ++t) scores[h][j + t] = sums[h * kKeys + t] * a.shape.scale;
    }
    for (; j < n; ++j) {
      const Element* key = key_at(a, slots[chunk + j], kv_offset);
      for (int h = 0; h < kHeads; ++h) {
        __m512 d = _mm512_setzero_ps();
        for (int b = 0; b < kBlocks; ++b) d = dot_add(d, query[h][b], key_words(key, b));
        scores[h][j] = sum_tree(d) * a.shape.scale;
      }
    }
    // Weights: past the row's keys -inf, so exp gives +0 (the odd last key's partner).
    const int64_t n_padded = (n + 31) / 32 * 32;
    for (int h = 0; h < kHeads; ++h) {
      std::fill(scores[h] + n, scores[h] + n_padded, -std::numeric_limits<float>::infinity());
      // Lane by lane, then across: a NaN score never becomes the max, as in the lanes' path.
      __m512 lane_max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (int64_t i = 0; i < n_padded; i += 16) lane_max = max_keeping(lane_max, _mm512_load_ps(scores[h] + i));
      const float chunk_max = _mm512_reduce_max_ps(lane_max);
      const float new_max = std::max(running_max[h], chunk_max);
      // exp(running max - new max): 0 for the first chunk.
      const float rescale = _mm512_cvtss_f32(softmax_exp(_mm512_set1_ps(running_max[h] - new_max)));
      sum[h] = sum[h] * rescale;
      const __m512 factor = _mm512_set1_ps(rescale);
      for (int g = 0; g < kGroups; ++g) acc[h][g] = _mm512_mul_ps(acc[h][g], factor);
      const __m512 shift = _mm512_set1_ps(new_max);
      for (int64_t i = 0; i < n_padded; i += 16)
        _mm512_store_ps(scores[h] + i, _mm512_sub_ps(_mm512_load_ps(scores[h] + i), shift));
      softmax_exp_in_place(scores[h], n_padded);
      for (int64_t i = 0; i < n_padded; i += 32)
        _mm512_store_si512(weight_pairs[h] + i / 2, bf16_pairs32(scores[h] + i));
      running_max[h] = new_max;
    }
    for (int64_t pair = 0; 2 * pair < n; ++pair) {
      const Element* first = value_at(a, slots[chunk + 2 * pair], kv_offset);
      const Element* second = 2 * pair + 1 < n ? value_at(a, slots[chunk + 2 * pair + 1], kv_offset) : kZeros<Element>;
      __m512i weights[kHeads];
      for (int h = 0; h < kHeads; ++h) {
        weights[h] = broadcast_word(&weight_pairs[h][pair]);
        // The sum's chain of adds, key by key, overlaps the values' work here.
        sum[h] = sum[h] + tf::bf16_to_f32(uint16_t(weight_pairs[h][pair]));
        if (2 * pair + 1 < n) sum[h] = sum[h] + tf::bf16_to_f32(uint16_t(weight_pairs[h][pair] >> 16));
      }
      for (int g = 0; g < kGroups; ++g) {
        const __m512i values = value_pairs(first, second, g);
        for (int h = 0; h < kHeads; ++h) acc[h][g] = dot_add(acc[h][g], weights[h], values);
      }
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    const __m512 divisor = _mm512_set1_ps(sum[h]);
    for (int g = 0; g < kGroups; ++g) _mm512_storeu_ps(out[h] + 16 * g, _mm512_div_ps(acc[h][g], divisor));
  }
}

// ---- A run of rows in the lanes ----

// Per thread: the run's operands as the lanes read them.
struct LaneScratch {
  std::vector<uint32_t> queries;       // [head_dim / 2 words][16 lanes]
  std::vector<uint32_t> keys;          // [chunk key][head_dim / 2 words]
  std::vector<uint32_t> values;        // [chunk pair][head_dim]: (value 2p, value 2p + 1) per element
  std::vector<uint32_t> half_values;   // [chunk pair][head_dim]: (value 2p, 0), where some lanes lack 2p + 1
  std::vector<float> accumulators;     // [head_dim][16 lanes]
  void size_for(int64_t head_dim) {
    queries.resize(size_t(head_dim / 2 * 16));
    keys.resize(size_t(kAttentionChunk * head_dim / 2));
    values.resize(size_t(kPairsPerChunk * head_dim));
    half_values.resize(values.size());
    accumulators.resize(size_t(head_dim * 16));
  }
};

// Pair sums l of four keys: words l, l + 16, ... of each lane's query against each key's.
template <int kBlocks>
TF_BF16_INLINE void pair_parts(const uint32_t* queries, const uint32_t* const (&keys)[4], int l, __m512 (&out)[4]) {
  const __m512i q0 = _mm512_loadu_si512(queries + l * 16);
  for (int t = 0; t < 4; ++t) out[t] = dot_add(_mm512_setzero_ps(), q0, broadcast_word(keys[t] + l));
  for (int b = 1; b < kBlocks; ++b) {
    const __m512i q = _mm512_loadu_si512(queries + (16 * b + l) * 16);
    for (int t = 0; t < 4; ++t) out[t] = dot_add(out[t], q, broadcast_word(keys[t] + 16 * b + l));
  }
}

// Level two of horizontal_sum's tree for part l (< 4): (l + (l + 8)) + ((l + 4) + (l + 12)).
template <int kBlocks>
TF_BF16_INLINE void quarter_sums(const uint32_t* queries, const uint32_t* const (&keys)[4], int l, __m512 (&out)[4]) {
  __m512 p0[4], p8[4], p4[4], p12[4];
  pair_parts<kBlocks>(queries, keys, l, p0);
  pair_parts<kBlocks>(queries, keys, l + 8, p8);
  pair_parts<kBlocks>(queries, keys, l + 4, p4);
  pair_parts<kBlocks>(queries, keys, l + 12, p12);
  for (int t = 0; t < 4; ++t) out[t] = _mm512_add_ps(_mm512_add_ps(p0[t], p8[t]), _mm512_add_ps(p4[t], p12[t]));
}

// The scaled scores of four keys for every lane, in horizontal_sum's tree, walked depth first.
template <int kBlocks>
TF_BF16_INLINE void score_four_keys(const uint32_t* queries, const uint32_t* const (&keys)[4], __m512 scale,
                                    float* scores) {
  __m512 s0[4], s1[4], s2[4], s3[4];
  quarter_sums<kBlocks>(queries, keys, 0, s0);
  quarter_sums<kBlocks>(queries, keys, 2, s2);
  quarter_sums<kBlocks>(queries, keys, 1, s1);
  quarter_sums<kBlocks>(queries, keys, 3, s3);
  for (int t = 0; t < 4; ++t)
    _mm512_storeu_ps(scores + t * 16,
                     _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(s0[t], s2[t]), _mm512_add_ps(s1[t], s3[t])), scale));
}

template <int kHeads, int kBlocks, class Element>
TF_BF16_INLINE void attend_run_in_lanes(const Args<Element>& a, int64_t first_row, int64_t n_rows, int64_t longest,
                                        int64_t head0, LaneScratch& s) {
  constexpr int64_t kHeadDim = kBlocks * 32, kWords = kHeadDim / 2;
  const int64_t group = a.shape.n_heads / a.shape.n_kv_heads;
  const int64_t kv_offset = (head0 / group) * a.layout.head_stride;
  uint32_t* queries = s.queries.data();
  float* accumulators = s.accumulators.data();
  std::fill(s.queries.begin(), s.queries.end(), 0u);
  std::fill(s.accumulators.begin(), s.accumulators.end(), 0.0f);
  alignas(64) float key_counts[16] = {};
  int64_t fewest_keys = a.n_keys[longest];
  for (int64_t r = 0; r < n_rows; ++r) {
    fewest_keys = std::min<int64_t>(fewest_keys, a.n_keys[first_row + r]);
    for (int h = 0; h < kHeads; ++h) {
      const int64_t lane = r * kHeads + h;
      key_counts[lane] = float(a.n_keys[first_row + r]);  // exact: far below 2^24
      const float* query = a.q + ((first_row + r) * a.shape.n_heads + head0 + h) * kHeadDim;
      for (int b = 0; b < kBlocks; ++b) {
        alignas(64) uint32_t words[16];
        _mm512_store_si512(words, bf16_pairs32(query + 32 * b));
        for (int i = 0; i < 16; ++i) queries[(16 * b + i) * 16 + lane] = words[i];
      }
    }
  }
  const int32_t* slots = a.key_slots[longest];
  const int64_t most_keys = a.n_keys[longest];
  const __m512 limits = _mm512_load_ps(key_counts), scale = _mm512_set1_ps(a.shape.scale);
  const __m512 minus_infinity = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 running_max = minus_infinity, sum = _mm512_setzero_ps();
  alignas(64) float weights[(kAttentionChunk + 1) * 16];  // [key][lane]: scores, then their weights
  alignas(64) uint32_t weight_pairs[kPairsPerChunk * 16];  // [pair][lane]

  for (int64_t chunk = 0; chunk < most_keys; chunk += kAttentionChunk) {
    const int64_t n = std::min(kAttentionChunk, most_keys - chunk), n_pairs = (n + 1) / 2;
    const int32_t* chunk_slots = slots + chunk;
    // The chunk's keys as words, and its values as pairs of keys.
    for (int64_t j = 0; j < n; ++j) {
      const Element* key = key_at(a, chunk_slots[j], kv_offset);
      for (int b = 0; b < kBlocks; ++b) _mm512_storeu_si512(s.keys.data() + j * kWords + 16 * b, key_words(key, b));
    }
    const int64_t n_shared = std::clamp<int64_t>(fewest_keys - chunk, 0, n);
    const int64_t first_partial_pair = n_shared / 2;  // pairs before it: both keys in every lane
    for (int64_t p = 0; p < n_pairs; ++p) {
      const Element* first = value_at(a, chunk_slots[2 * p], kv_offset);
      const Element* second = 2 * p + 1 < n ? value_at(a, chunk_slots[2 * p + 1], kv_offset) : kZeros<Element>;
      for (int g = 0; g < kHeadDim / 16; ++g) {
        _mm512_storeu_si512(s.values.data() + p * kHeadDim + 16 * g, value_pairs(first, second, g));
        if (p >= first_partial_pair)
          _mm512_storeu_si512(s.half_values.data() + p * kHeadDim + 16 * g, value_pairs(first, kZeros<Element>, g));
      }
    }
    // Scores, four keys a pass, then one at a time.
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const uint32_t* keys[4];
      for (int t = 0; t < 4; ++t) keys[t] = s.keys.data() + (j + t) * kWords;
      score_four_keys<kBlocks>(queries, keys, scale, weights + j * 16);
    }
    for (; j < n; ++j) {
      const uint32_t* keys[4] = {s.keys.data() + j * kWords, s.keys.data() + j * kWords, s.keys.data() + j * kWords,
                                 s.keys.data() + j * kWords};
      alignas(64) float four[4 * 16];
      score_four_keys<kBlocks>(queries, keys, scale, four);
      std::memcpy(weights + j * 16, four, sizeof(float) * 16);
    }
    // Keys some lanes lack (the run's own last positions) score -inf there.
    for (int64_t k = n_shared; k < n; ++k) {
      const __mmask16 has = _mm512_cmp_ps_mask(_mm512_set1_ps(float(chunk + k)), limits, _CMP_LT_OQ);
      _mm512_store_ps(weights + k * 16, _mm512_mask_blend_ps(has, minus_infinity, _mm512_load_ps(weights + k * 16)));
    }
    __m512 chunk_max = minus_infinity;
    for (int64_t k = 0; k < n; ++k) chunk_max = max_keeping(chunk_max, _mm512_load_ps(weights + k * 16));
    const __m512 new_max = max_keeping(running_max, chunk_max);
    const __m512 factor = softmax_exp(_mm512_sub_ps(running_max, new_max));  // 0 for the first chunk
    sum = _mm512_mul_ps(sum, factor);
    for (int64_t d = 0; d < kHeadDim; ++d)
      _mm512_storeu_ps(accumulators + d * 16, _mm512_mul_ps(_mm512_loadu_ps(accumulators + d * 16), factor));
    for (int64_t k = 0; k < n; ++k) _mm512_store_ps(weights + k * 16, _mm512_sub_ps(_mm512_load_ps(weights + k * 16), new_max));
    softmax_exp_in_place(weights, n * 16);
    running_max = new_max;
    if (n % 2 == 1) _mm512_store_ps(weights + n * 16, _mm512_setzero_ps());  // the odd last key's partner
    for (int64_t p = 0; p < n_pairs; ++p) {
      const __m512i rounded = (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(weights + (2 * p + 1) * 16),
                                                           _mm512_load_ps(weights + 2 * p * 16));
      _mm512_store_si512(weight_pairs + p * 16, _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), rounded));
    }
    // Values, 16 elements at a time with their accumulators in registers.
    for (int64_t d0 = 0; d0 < kHeadDim; d0 += 16) {
      __m512 acc[16];
      for (int i = 0; i < 16; ++i) acc[i] = _mm512_loadu_ps(accumulators + (d0 + i) * 16);
      // The sum's chain of adds, key by key, runs with the first elements' values (overlapping their work).
      const bool adds_sum = d0 == 0;
      for (int64_t p = 0; p < std::min(first_partial_pair, n_pairs); ++p) {
        const __m512i w = _mm512_load_si512(weight_pairs + p * 16);
        if (adds_sum) add_pair_to_sum(sum, w, 2 * p + 1 < n);
        const uint32_t* values = s.values.data() + p * kHeadDim + d0;
        for (int i = 0; i < 16; ++i) acc[i] = dot_add(acc[i], w, broadcast_word(values + i));
      }
      // Pairs some lanes lack a key of: a lane with only the first takes (value, 0), as that row alone
      // does; a lane with neither keeps its accumulator.
      for (int64_t p = first_partial_pair; p < n_pairs; ++p) {
        const __m512i w = _mm512_load_si512(weight_pairs + p * 16);
        if (adds_sum) add_pair_to_sum(sum, w, 2 * p + 1 < n);
        const __mmask16 has_second = _mm512_cmp_ps_mask(_mm512_set1_ps(float(chunk + 2 * p + 1)), limits, _CMP_LT_OQ);
        const __mmask16 has_first = _mm512_cmp_ps_mask(_mm512_set1_ps(float(chunk + 2 * p)), limits, _CMP_LT_OQ);
        const uint32_t* values = s.values.data() + p * kHeadDim + d0;
        const uint32_t* half_values = s.half_values.data() + p * kHeadDim + d0;
        for (int i = 0; i < 16; ++i) {
          const __m512 both = dot_add(acc[i], w, broadcast_word(values + i));
          const __m512 first_only = dot_add(acc[i], w, broadcast_word(half_values + i));
          acc[i] = _mm512_mask_blend_ps(has_second, _mm512_mask_blend_ps(has_first, acc[i], first_only), both);
        }
      }
      for (int i = 0; i < 16; ++i) _mm512_storeu_ps(accumulators + (d0 + i) * 16, acc[i]);
    }
  }
  alignas(64) float sums[16];
  _mm512_store_ps(sums, sum);
  for (int64_t r = 0; r < n_rows; ++r)
    for (int h = 0; h < kHeads; ++h) {
      const int64_t lane = r * kHeads + h;
      float* out = a.out + ((first_row + r) * a.shape.n_heads + head0 + h) * kHeadDim;
      for (int64_t d = 0; d < kHeadDim; ++d) out[d] = accumulators[d * 16 + lane] / sums[lane];
    }
}

// A block's rows: runs of one sequence that fill kFewestLanes lanes or more take them, the others go
// a row at a time.
template <int kHeads, int kBlocks, class Element>
TF_BF16_DOT_TARGET void attend_block(const Args<Element>& a, int64_t first_row, int64_t n_rows, int64_t head0, LaneScratch& s) {
  const int64_t end = first_row + n_rows;
  int64_t begin = first_row;
  while (begin < end) {
    int64_t run_end = begin + 1, longest = begin;
    while (run_end < end && a.n_keys[begin] > 0 && shares_keys(a, run_end, longest)) {
      if (a.n_keys[run_end] > a.n_keys[longest]) longest = run_end;
      ++run_end;
    }
    if ((run_end - begin) * kHeads >= kFewestLanes) {
      attend_run_in_lanes<kHeads, kBlocks>(a, begin, run_end - begin, longest, head0, s);
    } else {
      for (int64_t row = begin; row < run_end; ++row) attend_row_alone<kHeads, kBlocks>(a, row, head0);
    }
    begin = run_end;
  }
}

template <int kBlocks, class Element>
void attend_all(const Args<Element>& a, int64_t n_rows, ThreadPool& pool) {
  const int64_t group = a.shape.n_heads / a.shape.n_kv_heads;
  const int64_t heads_per_unit = group % 2 == 0 ? 2 : 1;
  const int64_t units_per_block = a.shape.n_heads / heads_per_unit;
  const int64_t n_blocks = (n_rows + kBlockRows - 1) / kBlockRows;
  pool.parallel_for(n_blocks * units_per_block, [&](int64_t begin, int64_t end) {
    thread_local LaneScratch scratch;
    scratch.size_for(kBlocks * 32);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t block = unit / units_per_block, head0 = (unit % units_per_block) * heads_per_unit;
      const int64_t first_row = block * kBlockRows, rows = std::min(kBlockRows, n_rows - first_row);
      if (heads_per_unit == 2) {
        attend_block<2, kBlocks>(a, first_row, rows, head0, scratch);
      } else {
        attend_block<1, kBlocks>(a, first_row, rows, head0, scratch);
      }
    }
  });
}

}  // namespace

bool attention_takes_bf16_dot(int64_t head_dim) {
  return simd_level_has_bf16_dot(simd_level()) && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

void attention_bf16_dot(const float* q, int64_t n_rows, const KvSlice& cache, const int32_t* const* key_slots,
                        const int32_t* n_keys, const AttentionShape& shape, float* out, ThreadPool& pool) {
  const auto run = [&]<class Element>(const Element*) {
    const Args<Element> args{q,        static_cast<const Element*>(cache.keys), static_cast<const Element*>(cache.values),
                             cache.layout, key_slots, n_keys, shape, out};
    switch (shape.head_dim) {
      case 64: attend_all<2>(args, n_rows, pool); break;
      case 128: attend_all<4>(args, n_rows, pool); break;
      default: attend_all<8>(args, n_rows, pool); break;
    }
  };
  if (cache.is_bf16) {
    run(static_cast<const uint16_t*>(nullptr));
  } else {
    run(static_cast<const float*>(nullptr));
  }
}

TF_BF16_DOT_TARGET void store_kv_row_bf16(uint16_t* cache, const KvLayout& layout, int64_t slot, const float* row,
                                          int64_t n_kv_heads, int64_t head_dim) {
  for (int64_t head = 0; head < n_kv_heads; ++head)
    for (int64_t i = 0; i < head_dim; i += 32)
      _mm512_storeu_si512(cache + slot * layout.slot_stride + head * layout.head_stride + i,
                          bf16_pairs32(row + head * head_dim + i));
}

}  // namespace tf::cpu
