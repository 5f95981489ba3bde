// y = x W^T on the CPU: register tiles of rows x columns over weights decoded in registers.
//
// The order of every sum is fixed by K: inputs go in blocks of 32, and lane l (of 16) takes input
// 2l of a block, then input 2l+1, as one multiply-add each (fused where the level has FMA; see
// simd.h). Pairs rather than k % 16 because a pair is what one 32-bit word of bf16 weights (or one
// byte of 4-bit ones) holds: a shift or a mask decodes it, with no shuffle. The rows of x are put
// into that order once per call (even inputs of a block, then odd ones), shared by every column.
//
// Where the machine has the AVX-512 BF16 dot product (the avx512_bf16 level), bf16 weights meet
// the rows of x rounded to bf16 instead: one vdpbf16ps per 32 inputs, in which lane l adds the
// exact product of input 2l+1, then that of input 2l, each rounded once (bf16 subnormals read as
// zero, as the instruction does). Same lanes and pairs, K alone fixes the order; the rounded
// inputs make it a numerics of its own (simd.h).
#include "backends/cpu/kernels/linear.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/simd.h"
#include "core/error.h"

// Vector arguments only cross always_inline calls, so the vector-ABI notes do not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tf::cpu {
namespace {

constexpr int64_t kBlock = 2 * kLanes;  // inputs per block: a pair in each lane

// Rows that share one pass over the weights: decode (M <= 60) streams each weight row once,
// while a prefill chunk's activations stay in L2. A whole number of every tile height, so chunks
// start the bf16 tiles' groups of rows.
constexpr int64_t kRowChunk = 60;

// Columns per unit of work a thread takes; every tile width divides it.
constexpr int64_t kColumnBlock = 8;

// Decoders of one weight layout. group(col, k) prepares column col from input k on (a quantized
// group, or the whole row when dense); block<W>(group, k, even, odd) decodes inputs k..k+31 of a
// block into the lanes' first (even) and second (odd) inputs.
template <class Element, class Decode>
struct DenseWeights {
  static constexpr bool kIsQuantized = false;
  const Element* data;
  int64_t n_cols;

  struct Group {
    const Element* row;
  };
  int64_t span(int64_t n_full_cols) const { return n_full_cols; }
  TF_INLINE Group group(int64_t col, int64_t) const { return {data + col * n_cols}; }
  // The cache line holding inputs k..k+31 of column col, asked for ahead of its use.
  TF_INLINE void prefetch(int64_t col, int64_t k) const { __builtin_prefetch(data + col * n_cols + k); }
  template <int W>
  TF_INLINE void block(const Group& group, int64_t k, Lanes<W>& even, Lanes<W>& odd) const {
    Decode::template load<W>(group.row + k, even, odd);
  }
  // The last n < 32 inputs, zero-padded in the encoded form so every path decodes them alike.
  template <int W>
  TF_INLINE void tail(const Group& group, int64_t k, int n, Lanes<W>& even, Lanes<W>& odd) const {
    Element buffer[kBlock] = {};
    for (int i = 0; i < n; ++i) buffer[i] = group.row[k + i];
    Decode::template load<W>(buffer, even, odd);
  }
};

struct DecodeF32 {
  template <int W>
  TF_INLINE static void load(const float* p, Lanes<W>& even, Lanes<W>& odd) {
    using V = typename Native<W>::f32;
    for (int i = 0; i < Lanes<W>::kParts; ++i) {
      const V a = load_vector<V>(p + 2 * i * W), b = load_vector<V>(p + 2 * i * W + W);
      even.part[i] = even_elements(a, b, std::make_index_sequence<W>());
      odd.part[i] = odd_elements(a, b, std::make_index_sequence<W>());
    }
  }
};
// A 32-bit word holds a pair of bf16 weights: the even one in its low half, the odd in its high.
struct DecodeBf16 {
  template <int W>
  TF_INLINE static void load(const uint16_t* p, Lanes<W>& even, Lanes<W>& odd) {
    using N = Native<W>;
    for (int i = 0; i < Lanes<W>::kParts; ++i) {
      const auto words = load_vector<typename N::u32>(p + 2 * i * W);
      even.part[i] = __builtin_bit_cast(typename N::f32, words << 16);
      odd.part[i] = __builtin_bit_cast(typename N::f32, words & 0xffff0000u);
    }
  }
};
struct DecodeF16 {
  template <int W>
  TF_INLINE static void load(const uint16_t* p, Lanes<W>& even, Lanes<W>& odd) {
    using N = Native<W>;
    for (int i = 0; i < Lanes<W>::kParts; ++i) {
      const auto words = load_vector<typename N::u32>(p + 2 * i * W);
      even.part[i] = f16_bits_to_f32<W>(words & 0xffffu);
      odd.part[i] = f16_bits_to_f32<W>(words >> 16);
    }
  }
};

using F32Weights = DenseWeights<float, DecodeF32>;
using Bf16Weights = DenseWeights<uint16_t, DecodeBf16>;
using F16Weights = DenseWeights<uint16_t, DecodeF16>;

// MLX affine-quantized rows: whole groups of group_size (a multiple of 32) inputs, each weight
// dequantized in f32 as scale * q, then + bias, before it meets x.
template <int kBits>
struct QuantizedWeights {
  static constexpr bool kIsQuantized = true;
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
  TF_INLINE void prefetch(int64_t col, int64_t k) const { __builtin_prefetch(packed + col * n_row_bytes + k * kBits / 8); }
  TF_INLINE Group group(int64_t col, int64_t k) const {
    int64_t index = col * n_groups_per_row + k / group_size;
    return {packed + col * n_row_bytes, load_as_f32(scales, scale_dtype, index),
            load_as_f32(biases, scale_dtype, index)};
  }
  // 4-bit: a byte holds a pair (the even weight in its low nibble); 8-bit: two bytes do.
  template <int W>
  TF_INLINE void block(const Group& group, int64_t k, Lanes<W>& even, Lanes<W>& odd) const {
    using N = Native<W>;
    const Lanes<W> scale = broadcast<W>(group.scale), bias = broadcast<W>(group.bias);
    if constexpr (kBits == 4 && W == 16) {
      // The 16 values a nibble stands for, dequantized by the same operations as below; each weight
      // is then one lookup (vpermps reads an index's low 4 bits, so the low nibble needs no mask).
      const Lanes<W> table = dequantize(Lanes<W>{{typename N::f32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}},
                                        scale, bias);
      const auto bytes = widen_u8<W>(group.row + k / 2);
      even.part[0] = lookup16<W>(table.part[0], bytes);
      odd.part[0] = lookup16<W>(table.part[0], bytes >> 4);
      return;
    }
    for (int i = 0; i < Lanes<W>::kParts; ++i) {
      typename N::u32 low, high;
      if constexpr (kBits == 4) {
        const auto bytes = widen_u8<W>(group.row + k / 2 + i * W);
        low = bytes & 0xfu;
        high = bytes >> 4;
      } else {
        const auto pairs = widen_u16<W>(group.row + k + 2 * i * W);
        low = pairs & 0xffu;
        high = pairs >> 8;
      }
      small_u32_to_f32<W>(low, &even.part[i]);
      small_u32_to_f32<W>(high, &odd.part[i]);
    }
    even = dequantize(even, scale, bias);
    odd = dequantize(odd, scale, bias);
  }
  template <int W>
  TF_INLINE void tail(const Group&, int64_t, int, Lanes<W>& even, Lanes<W>& odd) const {
    even = odd = zero_lanes<W>();  // never called: whole groups
  }
};

template <int kBits>
QuantizedWeights<kBits> quantized_weights(const WeightMatrix& w) {
  return {static_cast<const uint8_t*>(w.data), w.n_cols * kBits / 8, w.scales, w.biases,
          w.scale_dtype, w.n_groups_per_row(), w.group_size};
}

// Weights of a few columns already dequantized to f32 in the kernel's order (per block: the 16
// even inputs, then the 16 odd ones): exactly what block() produces, so a tile reading them runs the
// same multiply-adds on the same values. Row c of data is column first_col + c.
struct DecodedWeights {
  static constexpr bool kIsQuantized = false;
  const float* data;  // [n_cols][k]
  int64_t k;
  int64_t first_col;

  struct Group {
    const float* row;
  };
  int64_t span(int64_t n_full_cols) const { return n_full_cols; }
  TF_INLINE Group group(int64_t col, int64_t) const { return {data + (col - first_col) * k}; }
  TF_INLINE void prefetch(int64_t, int64_t) const {}
  template <int W>
  TF_INLINE void block(const Group& group, int64_t kk, Lanes<W>& even, Lanes<W>& odd) const {
    even = load_f32<W>(group.row + kk);
    odd = load_f32<W>(group.row + kk + kLanes);
  }
  template <int W>
  TF_INLINE void tail(const Group&, int64_t, int, Lanes<W>& even, Lanes<W>& odd) const {
    even = odd = zero_lanes<W>();  // never called: dequantized rows are whole groups of 32s
  }
};

// Dequantizes columns first_col .. first_col + n_cols - 1 (those past the last repeat it) of
// quantized weights into out [n_cols][k] through the same block() the tiles call.
template <int W, class Weights>
TF_INLINE void dequantize_columns(const Weights& weights, int64_t k, int64_t n, int64_t first_col, int n_cols,
                                  float* out) {
  for (int c = 0; c < n_cols; ++c) {
    const int64_t col = std::min(first_col + c, n - 1);
    float* row = out + c * k;
    for (int64_t group_begin = 0; group_begin < k; group_begin += weights.span(k)) {
      const auto group = weights.group(col, group_begin);
      for (int64_t kk = group_begin; kk < group_begin + weights.span(k); kk += kBlock) {
        Lanes<W> even, odd;
        weights.template block<W>(group, kk, even, odd);
        store_f32<W>(row + kk, even);
        store_f32<W>(row + kk + kLanes, odd);
      }
    }
  }
}

struct LinearArgs {
  const float* x;  // [n_rows][k_padded]: each block's even inputs, then its odd ones; zero past k
  const uint16_t* x_bf16;  // x rounded to bf16 in input order, zero past k, in groups of rows (bf16_row_start)
  int64_t n_rows;
  int64_t k;
  int64_t k_padded;  // k rounded up to a whole block
  int64_t n;
  float* y;  // [n_rows][n]
};

// A tile's sums into y: each accumulator's one horizontal tree, columns past n not stored. Every
// loop has compile-time bounds, so the accumulators are read from registers: an index known only
// at run time would make the compiler keep the whole tile in memory.
template <int W, int kRows, int kCols>
TF_INLINE void store_tile(const LinearArgs& a, const Lanes<W> (&acc)[kRows][kCols], int64_t row0, int64_t col0) {
  float sums[kRows][kCols];
  constexpr int kGrouped = W == 16 && kCols == 4 ? kRows / 4 * 4 : 0;  // rows summed 4 at a time
  if constexpr (kGrouped > 0) {
#pragma GCC unroll 8
    for (int r = 0; r < kGrouped; r += 4) horizontal_sum16(&acc[r][0], &sums[r][0]);
  }
#pragma GCC unroll 8
  for (int r = kGrouped; r < kRows; ++r) {
    if constexpr (kCols % 4 == 0) {
#pragma GCC unroll 8
      for (int c = 0; c < kCols; c += 4) horizontal_sum4(&acc[r][c], &sums[r][c]);
    } else {
#pragma GCC unroll 8
      for (int c = 0; c < kCols; ++c) sums[r][c] = horizontal_sum(acc[r][c]);
    }
  }
  const int n_valid_cols = int(std::min<int64_t>(kCols, a.n - col0));
  for (int r = 0; r < kRows; ++r) {
    float* y = a.y + (row0 + r) * a.n + col0;
    if (n_valid_cols == kCols) {
      std::memcpy(y, sums[r], sizeof sums[r]);  // a fixed size: one store, where a counted loop became a call
    } else {
      for (int c = 0; c < n_valid_cols; ++c) y[c] = sums[r][c];
    }
  }
}

// One tile: kRows rows from row0 times kCols columns from col0 (columns past n repeat the last
// one and are not stored). Each output owns one accumulator, so the tile shape never matters.
template <bool kFused, int W, class Weights, int kRows, int kCols>
TF_INLINE void linear_tile(const LinearArgs& a, const Weights& weights, int64_t row0, int64_t col0) {
  int64_t cols[kCols];
  for (int c = 0; c < kCols; ++c) cols[c] = std::min(col0 + c, a.n - 1);
  const float* x_rows[kRows];
  for (int r = 0; r < kRows; ++r) x_rows[r] = a.x + (row0 + r) * a.k_padded;

  Lanes<W> acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) acc[r][c] = zero_lanes<W>();
  const int64_t n_full = a.k - a.k % kBlock;
  const int64_t span = weights.span(n_full);
  for (int64_t group_begin = 0; group_begin < n_full; group_begin += span) {
    typename Weights::Group groups[kCols];
#pragma GCC unroll 8
    for (int c = 0; c < kCols; ++c) groups[c] = weights.group(cols[c], group_begin);
    for (int64_t k = group_begin; k < group_begin + span; k += kBlock) {
      Lanes<W> x_even[kRows], x_odd[kRows];
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        x_even[r] = load_f32<W>(x_rows[r] + k);
        x_odd[r] = load_f32<W>(x_rows[r] + k + kLanes);
      }
      // The weight rows of the next tile (the next columns) are short streams the hardware
      // prefetcher barely learns, so each block asks for the next tile's lines at this k.
#pragma GCC unroll 8
      for (int c = 0; c < kCols; ++c) weights.prefetch(std::min(col0 + kCols + c, a.n - 1), k);
#pragma GCC unroll 8
      for (int c = 0; c < kCols; ++c) {
        Lanes<W> w_even, w_odd;
        weights.template block<W>(groups[c], k, w_even, w_odd);
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r)
          acc[r][c] = madd<kFused>(madd<kFused>(acc[r][c], x_even[r], w_even), x_odd[r], w_odd);
      }
    }
  }
  if (n_full < a.k) {  // dense only: quantized rows are whole groups of 32s
    const int n_tail = int(a.k - n_full);
    for (int c = 0; c < kCols; ++c) {
      Lanes<W> w_even, w_odd;
      weights.template tail<W>(weights.group(cols[c], 0), n_full, n_tail, w_even, w_odd);
      for (int r = 0; r < kRows; ++r)
        acc[r][c] = madd<kFused>(madd<kFused>(acc[r][c], load_f32<W>(x_rows[r] + n_full), w_even),
                                 load_f32<W>(x_rows[r] + n_full + kLanes), w_odd);
    }
  }
  store_tile<W, kRows, kCols>(a, acc, row0, col0);
}

// The bf16 dot-product tiles read x in groups of kBf16GroupRows rows (a tile's height), block by
// block: a group's rows' inputs k..k+31 lie next to each other, so a tile addresses its rows from
// one pointer (with a row per pointer, six rows, eight weight streams and the loop's index did not
// fit in the general registers, and the loop reloaded spilled pointers every block).
constexpr int64_t kBf16GroupRows = 6;
constexpr int64_t kBf16GroupBlock = kBf16GroupRows * kBlock;  // elements of one block of a group
// Where row `row`'s first block starts; its next blocks follow every kBf16GroupBlock elements.
TF_INLINE int64_t bf16_row_start(int64_t row, int64_t k_padded) {
  return row / kBf16GroupRows * kBf16GroupRows * k_padded + row % kBf16GroupRows * kBlock;
}

// The bf16 dot-product tile: rows of x in bf16, weights as stored, no decoding; its target function
// is bf16_dot_column_blocks. row0 is a group's first row (or a chunk's, and chunks start groups).
template <int kRows, int kCols>
TF_INLINE void bf16_dot_tile(const LinearArgs& a, const Bf16Weights& weights, int64_t row0, int64_t col0) {
  using Words = Native<16>::u32;
  static_assert(kRows <= kBf16GroupRows);
  const uint16_t* w_rows[kCols];
  const uint16_t* next_w_rows[kCols];  // the next tile's, prefetched as linear_tile does
  for (int c = 0; c < kCols; ++c) {
    w_rows[c] = weights.data + std::min(col0 + c, a.n - 1) * weights.n_cols;
    next_w_rows[c] = weights.data + std::min(col0 + kCols + c, a.n - 1) * weights.n_cols;
  }
  const uint16_t* x = a.x_bf16 + bf16_row_start(row0, a.k_padded);

  Lanes<16> acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) acc[r][c] = zero_lanes<16>();
  // One block: inputs k..k+31 of the tile's rows (x) times those of its columns (w[c] + k).
  const auto add_block = [&](const uint16_t* x_block, const uint16_t* const (&w)[kCols], int64_t k)
                             __attribute__((always_inline)) {
    Words x_words[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) x_words[r] = load_vector<Words>(x_block + r * kBlock);
#pragma GCC unroll 8
    for (int c = 0; c < kCols; ++c) {
      const Words w_words = load_vector<Words>(w[c] + k);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) acc[r][c].part[0] = bf16_dot_add(acc[r][c].part[0], x_words[r], w_words);
    }
  };
  const int64_t n_full = a.k - a.k % kBlock;
  for (int64_t k = 0; k < n_full; k += kBlock, x += kBf16GroupBlock) {
#pragma GCC unroll 8
    for (int c = 0; c < kCols; ++c) __builtin_prefetch(next_w_rows[c] + k);
    add_block(x, w_rows, k);
  }
  if (n_full < a.k) {  // the last inputs of each weight row, zero-padded like x
    uint16_t tails[kCols][kBlock];
    const uint16_t* tail_rows[kCols];
    for (int c = 0; c < kCols; ++c) {
      std::copy(w_rows[c] + n_full, w_rows[c] + a.k, tails[c]);
      std::fill(tails[c] + (a.k - n_full), tails[c] + kBlock, uint16_t(0));
      tail_rows[c] = tails[c];
    }
    add_block(x, tail_rows, 0);
  }
  store_tile<16, kRows, kCols>(a, acc, row0, col0);
}

// Tile shapes sized to each ISA's register file (W lanes per register); they change speed only.
// `single` is for one row (decode): more columns, so more weight rows stream at once.
struct TileShape {
  int rows;
  int cols;
};
constexpr TileShape tile_shape(int native_width) {
  return native_width == 16 ? TileShape{4, 4} : native_width == 8 ? TileShape{1, 4} : TileShape{1, 2};
}
constexpr int single_row_cols(int native_width) { return native_width == 16 ? 8 : native_width == 8 ? 4 : 2; }
// Chunks of up to this many rows stream their columns as one row does (a verify round of a few
// rows reads the weights once, as decode does), where the single-row tile's width times the rows
// still fits the register file.
constexpr int streamed_rows(int native_width) { return native_width == 16 ? 2 : 1; }

// How a tile is computed: multiply-adds on weights decoded to f32 (fused where the level has FMA),
// or the bf16 dot product. The loops over tiles below are the same for both.
template <bool kFused, int W>
struct DecodedTiles {
  static constexpr int kWidth = W;
  static constexpr TileShape kTile = tile_shape(W);
  static constexpr int kSingleCols = single_row_cols(W);
  static constexpr int kStreamedRows = streamed_rows(W);
  template <class Weights, int kRows, int kCols>
  TF_INLINE static void run(const LinearArgs& a, const Weights& weights, int64_t row0, int64_t col0) {
    linear_tile<kFused, W, Weights, kRows, kCols>(a, weights, row0, col0);
  }
};
struct Bf16DotTiles {
  static constexpr int kWidth = 16;
  // Undecoded weights leave registers for more rows: each tile of columns is read from L1 once per 6 rows.
  static constexpr TileShape kTile = {int(kBf16GroupRows), 4};
  static_assert(kRowChunk % kBf16GroupRows == 0, "chunks must start the tiles' groups of rows");
  static constexpr int kSingleCols = 8;
  static constexpr int kStreamedRows = 3;  // 24 accumulators, 3 rows of x and a weight register
  template <class Weights, int kRows, int kCols>
  TF_INLINE static void run(const LinearArgs& a, const Weights& weights, int64_t row0, int64_t col0) {
    bf16_dot_tile<kRows, kCols>(a, weights, row0, col0);
  }
};

// The rows left after whole tiles, n_left <= kRows, with the tile of exactly that height.
template <class Tiles, class Weights, int kRows, int kCols>
TF_INLINE void linear_remainder_rows(const LinearArgs& a, const Weights& weights, int64_t row0,
                                     int64_t n_left, int64_t col0) {
  if constexpr (kRows > 0) {
    if (n_left == kRows) {
      Tiles::template run<Weights, kRows, kCols>(a, weights, row0, col0);
    } else {
      linear_remainder_rows<Tiles, Weights, kRows - 1, kCols>(a, weights, row0, n_left, col0);
    }
  }
}

// Column blocks [block_begin, block_end) of kColumnBlock columns each, for all rows.
template <class Tiles, class Weights>
TF_INLINE void linear_column_blocks(const LinearArgs& a, const Weights& weights, int64_t block_begin,
                                    int64_t block_end) {
  constexpr int W = Tiles::kWidth;
  constexpr TileShape kTile = Tiles::kTile;
  constexpr int kSingleCols = Tiles::kSingleCols;
  static_assert(kColumnBlock % kTile.cols == 0 && kColumnBlock % kSingleCols == 0);
  for (int64_t chunk = 0; chunk < a.n_rows; chunk += kRowChunk) {
    const int64_t chunk_end = std::min(a.n_rows, chunk + kRowChunk);
    if (chunk_end - chunk <= Tiles::kStreamedRows) {
      for (int64_t block = block_begin; block < block_end; ++block) {
        const int64_t block_end_col = std::min(a.n, (block + 1) * kColumnBlock);
        for (int64_t col = block * kColumnBlock; col < block_end_col; col += kSingleCols)
          linear_remainder_rows<Tiles, Weights, Tiles::kStreamedRows, kSingleCols>(a, weights, chunk,
                                                                                  chunk_end - chunk, col);
      }
      continue;
    }
    // Each tile of columns takes every row tile of the chunk in turn: its weights come from memory
    // once and then from L1, while the next tile's prefetches have all the row tiles' time to
    // arrive (bench/receipts/cpu-linear-columns-outer.md).
    const auto row_tiles = [&]<class ColumnWeights>(const ColumnWeights& columns, int64_t col)
                               __attribute__((always_inline)) {
      int64_t row = chunk;
      for (; row + kTile.rows <= chunk_end; row += kTile.rows)
        Tiles::template run<ColumnWeights, kTile.rows, kTile.cols>(a, columns, row, col);
      linear_remainder_rows<Tiles, ColumnWeights, kTile.rows - 1, kTile.cols>(a, columns, row, chunk_end - row, col);
    };
    const int64_t col_begin = block_begin * kColumnBlock, col_end = std::min(a.n, block_end * kColumnBlock);
    for (int64_t col = col_begin; col < col_end; col += kTile.cols) {
      if constexpr (Weights::kIsQuantized) {
        // Quantized columns are dequantized once into f32 (L1) for all the chunk's row tiles instead
        // of once per tile (a multiply and an add per weight, and a tile's scales and biases would
        // not fit in registers beside its accumulators).
        thread_local std::vector<float> dequantized;
        dequantized.resize(size_t(kTile.cols * a.k));
        dequantize_columns<W>(weights, a.k, a.n, col, kTile.cols, dequantized.data());
        row_tiles(DecodedWeights{dequantized.data(), a.k, col}, col);
      } else {
        row_tiles(weights, col);
      }
    }
  }
}

template <class Weights>
void run_column_blocks(const LinearArgs& a, const Weights& weights, int64_t begin, int64_t end) {
  run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
    linear_column_blocks<DecodedTiles<W != kGenericWidth, W>>(a, weights, begin, end);
  });
}

__attribute__((target("avx512f,avx512bf16"))) void bf16_dot_column_blocks(const LinearArgs& a,
                                                                          const Bf16Weights& weights,
                                                                          int64_t begin, int64_t end) {
  linear_column_blocks<Bf16DotTiles>(a, weights, begin, end);
}

void check_weight_layout(const WeightMatrix& w) {
  if (!w.is_quantized()) {
    if (w.dtype != DType::f32 && w.dtype != DType::f16 && w.dtype != DType::bf16)
      fail(std::string("dense weights must be f32, f16 or bf16, not ") + dtype_name(w.dtype));
    return;
  }
  if (w.bits != 4 && w.bits != 8) fail("quantized weights must have 4 or 8 bits, not " + std::to_string(w.bits));
  if (w.group_size <= 0 || w.group_size % kBlock != 0 || w.n_cols % w.group_size != 0)
    fail("quantization group size " + std::to_string(w.group_size) + " must be a multiple of 32 dividing " +
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

// x [n_rows][k] into the kernel's order, [n_rows][k_padded]: per block, inputs 0, 2, ..., 30,
// then 1, 3, ..., 31, zero past k.
void order_rows(const float* x, int64_t n_rows, int64_t k, int64_t k_padded, float* out, ThreadPool& pool,
                bool split_rows) {
  const auto order = [&](int64_t begin, int64_t end) {
    run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
      for (int64_t r = begin; r < end; ++r) {
        const float* in = x + r * k;
        float* row = out + r * k_padded;
        int64_t b = 0;
        if constexpr (W == 16) {  // a permutation: two-source shuffles where the ISA has them
          using V = Native<16>::f32;
          for (; b + kBlock <= k; b += kBlock) {
            const V first = load_vector<V>(in + b), second = load_vector<V>(in + b + kLanes);
            const V even = even_elements(first, second, std::make_index_sequence<16>());
            const V odd = odd_elements(first, second, std::make_index_sequence<16>());
            std::memcpy(row + b, &even, sizeof even);
            std::memcpy(row + b + kLanes, &odd, sizeof odd);
          }
        }
        for (; b + kBlock <= k; b += kBlock) {
          for (int i = 0; i < kLanes; ++i) row[b + i] = in[b + 2 * i];
          for (int i = 0; i < kLanes; ++i) row[b + kLanes + i] = in[b + 2 * i + 1];
        }
        if (b < k) {
          float block[kBlock] = {};
          std::copy(in + b, in + k, block);
          for (int i = 0; i < kLanes; ++i) row[b + i] = block[2 * i];
          for (int i = 0; i < kLanes; ++i) row[b + kLanes + i] = block[2 * i + 1];
        }
      }
    });
  };
  if (split_rows) {
    pool.parallel_for(n_rows, order);
  } else {
    order(0, n_rows);
  }
}

// x [n_rows][k] rounded to bf16 in input order, zero past k, in the tiles' groups of rows
// (bf16_row_start): what the bf16 dot-product tiles read.
__attribute__((target("avx512f"))) void round_rows_to_bf16(const float* x, int64_t begin, int64_t end, int64_t k,
                                                           int64_t k_padded, uint16_t* out) {
  using Words = Native<16>::u32;
  for (int64_t r = begin; r < end; ++r) {
    const float* in = x + r * k;
    uint16_t* row = out + bf16_row_start(r, k_padded);
    int64_t i = 0;
    for (; i + kBlock <= k; i += kBlock, row += kBf16GroupBlock) {
      const Words pairs = bf16_pairs(in + i);
      std::memcpy(row, &pairs, sizeof pairs);
    }
    if (i < k) {
      for (int64_t j = 0; j < kBlock; ++j) row[j] = i + j < k ? f32_to_bf16(in[i + j]) : uint16_t(0);
    }
  }
}

// Whether w's outputs come from the bf16 dot product at this level.
bool uses_bf16_dot(const WeightMatrix& w, SimdLevel level) {
  return simd_level_has_bf16_dot(level) && !w.is_quantized() && w.dtype == DType::bf16;
}

}  // namespace

void linear_many(const float* x, int64_t n_rows, int64_t k, const LinearOutput* outputs, int n_outputs,
                 ThreadPool& pool) {
  if (n_rows <= 0 || n_outputs <= 0) return;
  for (int i = 0; i < n_outputs; ++i) {
    check_weight_layout(*outputs[i].w);
    if (outputs[i].w->n_cols != k)
      fail_internal("linear_many: a matrix of " + std::to_string(outputs[i].w->n_cols) + " inputs given " +
                    std::to_string(k));
  }
  const int64_t k_padded = (k + kBlock - 1) / kBlock * kBlock;
  const SimdLevel level = simd_level();
  bool any_decoded = false, any_bf16_dot = false;
  for (int i = 0; i < n_outputs; ++i) (uses_bf16_dot(*outputs[i].w, level) ? any_bf16_dot : any_decoded) = true;
  // The caller's buffers: inside the lambdas the names would be each worker's.
  thread_local std::vector<float> ordered_rows;
  thread_local std::vector<uint16_t> bf16_rows;
  float* ordered = nullptr;
  uint16_t* rounded = nullptr;
  // Preparing a prefill chunk's rows is worth splitting; a decode row is not worth a wake-up.
  const bool split_rows = n_rows * k >= (int64_t(1) << 16);
  if (any_decoded) {
    ordered_rows.resize(size_t(n_rows * k_padded));
    ordered = ordered_rows.data();
    order_rows(x, n_rows, k, k_padded, ordered, pool, split_rows);
  }
  if (any_bf16_dot) {
    bf16_rows.resize(size_t((n_rows + kBf16GroupRows - 1) / kBf16GroupRows * kBf16GroupRows * k_padded));
    rounded = bf16_rows.data();
    const auto round = [&](int64_t begin, int64_t end) { round_rows_to_bf16(x, begin, end, k, k_padded, rounded); };
    if (split_rows) {
      pool.parallel_for(n_rows, round);
    } else {
      round(0, n_rows);
    }
  }

  // One parallel_for over the column blocks of every matrix: each block is one matrix's.
  std::vector<int64_t> first_block(size_t(n_outputs) + 1, 0);
  for (int i = 0; i < n_outputs; ++i)
    first_block[size_t(i) + 1] = first_block[size_t(i)] + (outputs[i].w->n_rows + kColumnBlock - 1) / kColumnBlock;
  pool.parallel_for(first_block.back(), [&](int64_t begin, int64_t end) {
    for (int i = 0; i < n_outputs; ++i) {
      const int64_t lo = std::max(begin, first_block[size_t(i)]), hi = std::min(end, first_block[size_t(i) + 1]);
      if (lo >= hi) continue;
      const WeightMatrix& w = *outputs[i].w;
      const LinearArgs args{ordered, rounded, n_rows, k, k_padded, w.n_rows, outputs[i].y};
      if (uses_bf16_dot(w, level)) {
        bf16_dot_column_blocks(args, Bf16Weights{static_cast<const uint16_t*>(w.data), w.n_cols},
                               lo - first_block[size_t(i)], hi - first_block[size_t(i)]);
        continue;
      }
      with_weights(w, [&](const auto& weights) {
        run_column_blocks(args, weights, lo - first_block[size_t(i)], hi - first_block[size_t(i)]);
      });
    }
  });
}

void linear(const float* x, int64_t n_rows, const WeightMatrix& w, float* y, ThreadPool& pool) {
  if (w.n_rows <= 0) return;
  const LinearOutput output{&w, y};
  linear_many(x, n_rows, w.n_cols, &output, 1, pool);
}

void matrix_row_f32(const WeightMatrix& w, int64_t row, float* out) {
  if (row < 0 || row >= w.n_rows)
    fail("row " + std::to_string(row) + " is outside a matrix of " + std::to_string(w.n_rows) + " rows");
  if (!w.is_quantized()) {
    check_weight_layout(w);
    for (int64_t k = 0; k < w.n_cols; ++k) out[k] = load_as_f32(w.data, w.dtype, row * w.n_cols + k);
    return;
  }
  // The same in-register dequantization the linear kernel uses, stored in input order.
  with_weights(w, [&](const auto& weights) {
    for (int64_t group_begin = 0; group_begin < w.n_cols; group_begin += w.group_size) {
      const auto group = weights.group(row, group_begin);
      for (int64_t k = group_begin; k < group_begin + w.group_size; k += kBlock) {
        Lanes<kGenericWidth> even, odd;
        weights.template block<kGenericWidth>(group, k, even, odd);
        float even_values[kLanes], odd_values[kLanes];
        store_f32<kGenericWidth>(even_values, even);
        store_f32<kGenericWidth>(odd_values, odd);
        for (int i = 0; i < kLanes; ++i) {
          out[k + 2 * i] = even_values[i];
          out[k + 2 * i + 1] = odd_values[i];
        }
      }
    }
  });
}

void embedding_rows(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) matrix_row_f32(table, ids[i], out + i * table.n_cols);
}

}  // namespace tf::cpu
