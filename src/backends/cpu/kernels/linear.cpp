// y = x W^T on the CPU: register tiles of rows x columns over weights decoded in registers.
#include "backends/cpu/kernels/linear.h"

#include <algorithm>
#include <string>

#include "backends/cpu/kernels/simd.h"
#include "core/error.h"

namespace tf::cpu {
namespace {

// Rows that share one pass over the weights: decode (M <= 64) streams each weight row once,
// while a prefill chunk's activations stay in L2.
constexpr int64_t kRowChunk = 64;

// Decoders of one weight layout. group(col, k) prepares column col from input k on (a quantized
// group, or the whole row when dense); block<W>(group, k) returns inputs k..k+15 as f32 lanes.
template <class Element, class Decode>
struct DenseWeights {
  const Element* data;
  int64_t n_cols;

  struct Group {
    const Element* row;
  };
  int64_t span(int64_t n_full_cols) const { return n_full_cols; }
  TF_INLINE Group group(int64_t col, int64_t) const { return {data + col * n_cols}; }
  template <int W>
  TF_INLINE Lanes<W> block(const Group& group, int64_t k) const {
    return Decode::template load<W>(group.row + k);
  }
  // The last n < 16 inputs, zero-padded in the encoded form so every path decodes them alike.
  template <int W>
  TF_INLINE Lanes<W> tail(const Group& group, int64_t k, int n) const {
    Element buffer[kLanes] = {};
    for (int i = 0; i < n; ++i) buffer[i] = group.row[k + i];
    return Decode::template load<W>(buffer);
  }
};

struct DecodeF32 {
  template <int W>
  TF_INLINE static Lanes<W> load(const float* p) { return load_f32<W>(p); }
};
struct DecodeBf16 {
  template <int W>
  TF_INLINE static Lanes<W> load(const uint16_t* p) { return load_bf16<W>(p); }
};
struct DecodeF16 {
  template <int W>
  TF_INLINE static Lanes<W> load(const uint16_t* p) { return load_f16<W>(p); }
};

using F32Weights = DenseWeights<float, DecodeF32>;
using Bf16Weights = DenseWeights<uint16_t, DecodeBf16>;
using F16Weights = DenseWeights<uint16_t, DecodeF16>;

// MLX affine-quantized rows: whole groups of group_size (a multiple of 16) inputs.
template <int kBits>
struct QuantizedWeights {
  const uint8_t* packed;
  int64_t n_row_bytes;
  const void* scales;
  const void* biases;
  DType scale_dtype;
  int64_t n_groups_per_row;
  int64_t group_size;

  struct Group {
    const uint8_t* row;
    float scale;
    float bias;
  };
  int64_t span(int64_t) const { return group_size; }
  TF_INLINE Group group(int64_t col, int64_t k) const {
    int64_t index = col * n_groups_per_row + k / group_size;
    return {packed + col * n_row_bytes, load_as_f32(scales, scale_dtype, index),
            load_as_f32(biases, scale_dtype, index)};
  }
  template <int W>
  TF_INLINE Lanes<W> block(const Group& group, int64_t k) const {
    Lanes<W> q = kBits == 4 ? unpack_u4<W>(group.row + k / 2) : unpack_u8<W>(group.row + k);
    return dequantize(q, broadcast<W>(group.scale), broadcast<W>(group.bias));
  }
  template <int W>
  TF_INLINE Lanes<W> tail(const Group&, int64_t, int) const {  // never called: whole groups
    return zero_lanes<W>();
  }
};

template <int kBits>
QuantizedWeights<kBits> quantized_weights(const WeightMatrix& w) {
  return {static_cast<const uint8_t*>(w.data), w.n_cols * kBits / 8, w.scales, w.biases,
          w.scale_dtype, w.n_groups_per_row(), w.group_size};
}

struct LinearArgs {
  const float* x;  // [n_rows][k]
  int64_t n_rows;
  int64_t k;
  int64_t n;
  float* y;  // [n_rows][n]
};

// One tile: kRows rows from row0 times kCols columns from col0 (columns past n repeat the last
// one and are not stored). Each output owns one accumulator, so the tile shape never matters.
template <int W, class Weights, int kRows, int kCols>
TF_INLINE void linear_tile(const LinearArgs& a, const Weights& weights, int64_t row0, int64_t col0) {
  int64_t cols[kCols];
  for (int c = 0; c < kCols; ++c) cols[c] = std::min(col0 + c, a.n - 1);
  const float* x_rows[kRows];
  for (int r = 0; r < kRows; ++r) x_rows[r] = a.x + (row0 + r) * a.k;

  Lanes<W> acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) acc[r][c] = zero_lanes<W>();
  const int64_t n_full = a.k - a.k % kLanes;
  const int64_t span = weights.span(n_full);
  for (int64_t group_begin = 0; group_begin < n_full; group_begin += span) {
    typename Weights::Group groups[kCols];
#pragma GCC unroll 8
    for (int c = 0; c < kCols; ++c) groups[c] = weights.group(cols[c], group_begin);
    for (int64_t k = group_begin; k < group_begin + span; k += kLanes) {
      Lanes<W> xv[kRows];
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) xv[r] = load_f32<W>(x_rows[r] + k);
#pragma GCC unroll 8
      for (int c = 0; c < kCols; ++c) {
        Lanes<W> wv = weights.template block<W>(groups[c], k);
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) acc[r][c] = acc[r][c] + xv[r] * wv;
      }
    }
  }
  if (n_full < a.k) {  // dense only: quantized rows are whole groups of 16s
    const int n_tail = int(a.k - n_full);
    for (int c = 0; c < kCols; ++c) {
      Lanes<W> wv = weights.template tail<W>(weights.group(cols[c], 0), n_full, n_tail);
      for (int r = 0; r < kRows; ++r)
        acc[r][c] = acc[r][c] + load_f32_partial<W>(x_rows[r] + n_full, n_tail) * wv;
    }
  }
  const int n_valid_cols = int(std::min<int64_t>(kCols, a.n - col0));
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < n_valid_cols; ++c) a.y[(row0 + r) * a.n + col0 + c] = horizontal_sum(acc[r][c]);
}

// The rows left after whole tiles, n_left <= kRows, with the tile of exactly that height.
template <int W, class Weights, int kRows, int kCols>
TF_INLINE void linear_remainder_rows(const LinearArgs& a, const Weights& weights, int64_t row0,
                                     int64_t n_left, int64_t col0) {
  if constexpr (kRows > 0) {
    if (n_left == kRows) {
      linear_tile<W, Weights, kRows, kCols>(a, weights, row0, col0);
    } else {
      linear_remainder_rows<W, Weights, kRows - 1, kCols>(a, weights, row0, n_left, col0);
    }
  }
}

// Tile shapes sized to each ISA's register file (W lanes per register); they change speed only.
struct TileShape {
  int rows;
  int cols;
};
constexpr TileShape tile_shape(int native_width) {
  return native_width == 16 ? TileShape{4, 4} : native_width == 8 ? TileShape{2, 2} : TileShape{1, 2};
}

// Column blocks [block_begin, block_end) of tile columns each, for all rows.
template <int W, class Weights>
TF_INLINE void linear_column_blocks(const LinearArgs& a, const Weights& weights, int64_t block_begin,
                                    int64_t block_end) {
  constexpr TileShape kTile = tile_shape(W);
  for (int64_t chunk = 0; chunk < a.n_rows; chunk += kRowChunk) {
    const int64_t chunk_end = std::min(a.n_rows, chunk + kRowChunk);
    for (int64_t block = block_begin; block < block_end; ++block) {
      int64_t row = chunk;
      for (; row + kTile.rows <= chunk_end; row += kTile.rows)
        linear_tile<W, Weights, kTile.rows, kTile.cols>(a, weights, row, block * kTile.cols);
      linear_remainder_rows<W, Weights, kTile.rows - 1, kTile.cols>(a, weights, row, chunk_end - row,
                                                                    block * kTile.cols);
    }
  }
}

template <class Weights>
void run_linear(const LinearArgs& a, const Weights& weights, ThreadPool& pool) {
  const SimdLevel level = simd_level();
  const int cols = tile_shape(level == SimdLevel::avx512 ? 16 : level == SimdLevel::avx2 ? 8 : 4).cols;
  const int64_t n_blocks = (a.n + cols - 1) / cols;
  pool.parallel_for(n_blocks, [&](int64_t begin, int64_t end) {
    run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
      linear_column_blocks<W>(a, weights, begin, end);
    });
  });
}

void check_weight_layout(const WeightMatrix& w) {
  if (!w.is_quantized()) {
    if (w.dtype != DType::f32 && w.dtype != DType::f16 && w.dtype != DType::bf16)
      fail(std::string("dense weights must be f32, f16 or bf16, not ") + dtype_name(w.dtype));
    return;
  }
  if (w.bits != 4 && w.bits != 8) fail("quantized weights must have 4 or 8 bits, not " + std::to_string(w.bits));
  if (w.group_size <= 0 || w.group_size % kLanes != 0 || w.n_cols % w.group_size != 0)
    fail("quantization group size " + std::to_string(w.group_size) + " must be a multiple of 16 dividing " +
         std::to_string(w.n_cols) + " inputs");
}

// Calls fn with the decoder matching w's layout.
template <class Fn>
void with_weights(const WeightMatrix& w, Fn&& fn) {
  check_weight_layout(w);
  if (w.bits == 4) return fn(quantized_weights<4>(w));
  if (w.bits == 8) return fn(quantized_weights<8>(w));
  switch (w.dtype) {
    case DType::f32: return fn(F32Weights{static_cast<const float*>(w.data), w.n_cols});
    case DType::f16: return fn(F16Weights{static_cast<const uint16_t*>(w.data), w.n_cols});
    default: return fn(Bf16Weights{static_cast<const uint16_t*>(w.data), w.n_cols});
  }
}

}  // namespace

void linear(const float* x, int64_t n_rows, const WeightMatrix& w, float* y, ThreadPool& pool) {
  if (n_rows <= 0 || w.n_rows <= 0) return;
  const LinearArgs args{x, n_rows, w.n_cols, w.n_rows, y};
  with_weights(w, [&](const auto& weights) { run_linear(args, weights, pool); });
}

void matrix_row_f32(const WeightMatrix& w, int64_t row, float* out) {
  if (row < 0 || row >= w.n_rows)
    fail("row " + std::to_string(row) + " is outside a matrix of " + std::to_string(w.n_rows) + " rows");
  if (!w.is_quantized()) {
    check_weight_layout(w);
    for (int64_t k = 0; k < w.n_cols; ++k) out[k] = load_as_f32(w.data, w.dtype, row * w.n_cols + k);
    return;
  }
  // The same in-register dequantization the linear kernel uses, stored instead of multiplied.
  with_weights(w, [&](const auto& weights) {
    for (int64_t group_begin = 0; group_begin < w.n_cols; group_begin += w.group_size) {
      const auto group = weights.group(row, group_begin);
      for (int64_t k = group_begin; k < group_begin + w.group_size; k += kLanes)
        store_f32<kGenericWidth>(out + k, weights.template block<kGenericWidth>(group, k));
    }
  });
}

void embedding_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) matrix_row_f32(table, ids[i], out + i * table.n_cols);
}

}  // namespace tf::cpu
