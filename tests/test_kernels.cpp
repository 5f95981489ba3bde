// CPU kernels against double references, and the batch invariance of linear (bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/kernels/activation.h"
#include "backends/cpu/kernels/exp.h"
#include "backends/cpu/kernels/linear.h"
#include "backends/cpu/kernels/norm.h"
#include "backends/cpu/kernels/rope.h"
#include "backends/cpu/kernels/simd.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/rope_frequencies.h"

namespace tf::cpu {
namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

void store_as(DType dtype, float value, void* data, size_t i) {
  switch (dtype) {
    case DType::bf16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(value); break;
    case DType::f16: static_cast<uint16_t*>(data)[i] = f32_to_f16(value); break;
    default: static_cast<float*>(data)[i] = value; break;
  }
}

// A weight matrix with its storage and the f32 value of every weight (the kernels' dequantization).
struct TestWeights {
  std::vector<uint8_t> data, scales, biases;
  std::vector<float> values;  // [n_rows][n_cols]
  WeightMatrix matrix;
};

TestWeights make_weights(int64_t n_rows, int64_t n_cols, DType dtype, int bits, int group_size,
                         DType scale_dtype, std::mt19937& rng) {
  TestWeights t;
  WeightMatrix& m = t.matrix;
  m.n_rows = n_rows;
  m.n_cols = n_cols;
  t.values.resize(size_t(n_rows * n_cols));
  if (bits == 0) {
    m.dtype = dtype;
    t.data.resize(size_t(n_rows * n_cols) * dtype_size(dtype));
    std::vector<float> raw = random_floats(t.values.size(), rng, 0.1f);
    for (size_t i = 0; i < raw.size(); ++i) {
      store_as(dtype, raw[i], t.data.data(), i);
      t.values[i] = load_as_f32(t.data.data(), dtype, int64_t(i));
    }
  } else {
    m.dtype = DType::u32;
    m.bits = bits;
    m.group_size = group_size;
    m.scale_dtype = scale_dtype;
    const int64_t n_groups = n_cols / group_size;
    t.data.assign(size_t(n_rows * n_cols * bits / 8), 0);
    t.scales.resize(size_t(n_rows * n_groups) * dtype_size(scale_dtype));
    t.biases.resize(t.scales.size());
    std::uniform_real_distribution<float> scale_dist(0.002f, 0.02f), bias_dist(-0.1f, 0.1f);
    for (int64_t i = 0; i < n_rows * n_groups; ++i) {
      store_as(scale_dtype, scale_dist(rng), t.scales.data(), size_t(i));
      store_as(scale_dtype, bias_dist(rng), t.biases.data(), size_t(i));
    }
    std::uniform_int_distribution<uint32_t> q_dist(0, (1u << bits) - 1);
    auto* words = reinterpret_cast<uint32_t*>(t.data.data());
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t c = 0; c < n_cols; ++c) {
        const uint32_t q = q_dist(rng);
        const int64_t bit = (r * n_cols + c) * bits;
        words[bit / 32] |= q << (bit % 32);  // lowest bits first
        const int64_t g = r * n_groups + c / group_size;
        const float scale = load_as_f32(t.scales.data(), scale_dtype, g);
        const float bias = load_as_f32(t.biases.data(), scale_dtype, g);
        t.values[size_t(r * n_cols + c)] = scale * float(q) + bias;
      }
    }
    m.scales = t.scales.data();
    m.biases = t.biases.data();
  }
  m.data = t.data.data();
  return t;
}

void expect_bitwise_equal(const float* a, const float* b, int64_t n, const std::string& what) {
  ASSERT_EQ(std::memcmp(a, b, size_t(n) * sizeof(float)), 0) << what;
}

std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel level : {SimdLevel::generic, SimdLevel::avx2, SimdLevel::avx512, SimdLevel::avx512_bf16})
    if (simd_level_supported(level)) levels.push_back(level);
  return levels;
}

// Restores the dispatch level when a test that forces one ends.
struct SimdLevelGuard {
  SimdLevel saved = simd_level();
  ~SimdLevelGuard() { set_simd_level_for_testing(saved); }
};

// Whether the current level computes t's outputs with the bf16 dot product (x rounded to bf16).
bool takes_bf16_dot(const TestWeights& t) {
  return simd_level_has_bf16_dot(simd_level()) && t.matrix.bits == 0 && t.matrix.dtype == DType::bf16;
}

float rounded_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Checks one weight layout at the current SIMD level: accuracy against doubles (of the inputs the
// level multiplies: rounded to bf16 for the dot product), then every row of batches of M = 1..64
// and 257 random rows, with 1..4 threads, bitwise equal to the row alone. Returns the rows
// computed alone.
std::vector<float> check_linear_at_level(const TestWeights& t, const std::vector<float>& x, std::mt19937& rng,
                                         ThreadPool* pools) {
  const int64_t k = t.matrix.n_cols, n = t.matrix.n_rows;
  const bool rounds_inputs = takes_bf16_dot(t);
  const int64_t n_pool_rows = int64_t(x.size()) / k;
  std::vector<float> solo(static_cast<size_t>(n_pool_rows * n));
  for (int64_t i = 0; i < n_pool_rows; ++i) linear(&x[size_t(i * k)], 1, t.matrix, &solo[size_t(i * n)], pools[0]);

  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0, magnitude = 0;
      for (int64_t j = 0; j < k; ++j) {
        const float input = x[size_t(i * k + j)];
        const double product = double(rounds_inputs ? rounded_to_bf16(input) : input) * t.values[size_t(c * k + j)];
        sum += product;
        magnitude += std::fabs(product);
      }
      const double tolerance = double(k / kLanes + 6) * 1.2e-7 * magnitude + 1e-30;
      EXPECT_NEAR(solo[size_t(i * n + c)], sum, tolerance) << "row " << i << " col " << c;
      if (std::fabs(solo[size_t(i * n + c)] - sum) > tolerance) return solo;
    }
  }

  std::uniform_int_distribution<int64_t> pick(0, n_pool_rows - 1);
  std::vector<int64_t> batch_sizes;
  for (int64_t m = 1; m <= 64; ++m) batch_sizes.push_back(m);
  batch_sizes.push_back(n_pool_rows);
  for (int64_t m : batch_sizes) {
    std::vector<int64_t> ids(static_cast<size_t>(m));
    std::vector<float> batch(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
    for (int64_t r = 0; r < m; ++r) {
      ids[size_t(r)] = pick(rng);
      std::memcpy(&batch[size_t(r * k)], &x[size_t(ids[size_t(r)] * k)], size_t(k) * sizeof(float));
    }
    for (int threads = 1; threads <= 4; ++threads) {
      linear(batch.data(), m, t.matrix, y.data(), pools[threads - 1]);
      for (int64_t r = 0; r < m; ++r) {
        expect_bitwise_equal(&y[size_t(r * n)], &solo[size_t(ids[size_t(r)] * n)], n,
                             "M=" + std::to_string(m) + " threads=" + std::to_string(threads) +
                                 " row " + std::to_string(r));
        if (::testing::Test::HasFatalFailure()) return solo;
      }
    }
  }
  return solo;
}

// Checks one weight layout at every SIMD level the machine has; levels of one numerics (multiply
// then add, fused, or the bf16 dot product) must also agree with each other bit for bit.
void check_linear(const TestWeights& t, std::mt19937& rng, ThreadPool* pools) {
  constexpr int64_t kPoolRows = 257;
  const std::vector<float> x = random_floats(size_t(kPoolRows * t.matrix.n_cols), rng);
  SimdLevelGuard guard;
  std::vector<float> first_of_numerics[3];
  for (SimdLevel level : supported_levels()) {
    SCOPED_TRACE(std::string("SIMD level ") + simd_level_name(level));
    set_simd_level_for_testing(level);
    std::vector<float> solo = check_linear_at_level(t, x, rng, pools);
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<float>& reference = first_of_numerics[takes_bf16_dot(t) ? 2 : simd_level_fuses(level) ? 1 : 0];
    if (reference.empty()) {
      reference = std::move(solo);
    } else {
      expect_bitwise_equal(solo.data(), reference.data(), int64_t(solo.size()), "levels of one numerics differ");
    }
  }
}

struct Pools {
  ThreadPool pools[4] = {ThreadPool(1), ThreadPool(2), ThreadPool(3), ThreadPool(4)};
};

TEST(Linear, DenseMatchesReferenceAndIsBatchInvariant) {
  Pools p;
  std::mt19937 rng(7);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t k : {24, 40, 80, 136, 200, 1024}) {
      for (int64_t n : {37, 48}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " K=" + std::to_string(k) + " N=" + std::to_string(n));
        check_linear(make_weights(n, k, dtype, 0, 0, DType::bf16, rng), rng, p.pools);
      }
    }
  }
}

TEST(Linear, QuantizedMatchesReferenceAndIsBatchInvariant) {
  Pools p;
  std::mt19937 rng(11);
  const DType scale_dtypes[] = {DType::bf16, DType::f16, DType::f32};
  int variant = 0;
  for (int bits : {4, 8}) {
    for (int group_size : {32, 64, 128}) {
      for (int64_t k : {int64_t(group_size), int64_t(384), int64_t(1024)}) {
        const int64_t n = 37 + (variant % 2) * 11;
        const DType scale_dtype = scale_dtypes[variant++ % 3];
        SCOPED_TRACE("bits=" + std::to_string(bits) + " group=" + std::to_string(group_size) +
                     " K=" + std::to_string(k) + " N=" + std::to_string(n));
        check_linear(make_weights(n, k, DType::u32, bits, group_size, scale_dtype, rng), rng, p.pools);
      }
    }
  }
}

// Every finite f16 bit pattern, subnormals included, decodes in registers as f16_to_f32 does.
TEST(Linear, F16DecodeIsExactOnEveryLevel) {
  constexpr int64_t kCols = 16, kRows = 65536 / kCols;
  std::vector<uint16_t> bits(65536);
  for (uint32_t i = 0; i < 65536; ++i) bits[i] = (i & 0x7c00u) == 0x7c00u ? 0 : uint16_t(i);
  WeightMatrix w;
  w.n_rows = kRows;
  w.n_cols = kCols;
  w.dtype = DType::f16;
  w.data = bits.data();
  std::vector<float> one_hot(kCols * kCols, 0.0f), y(static_cast<size_t>(kCols * kRows));
  for (int64_t i = 0; i < kCols; ++i) one_hot[size_t(i * kCols + i)] = 1.0f;
  ThreadPool pool(1);
  SimdLevelGuard guard;
  for (SimdLevel level : supported_levels()) {
    set_simd_level_for_testing(level);
    linear(one_hot.data(), kCols, w, y.data(), pool);
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kCols; ++c)
        ASSERT_EQ(y[size_t(c * kRows + r)], f16_to_f32(bits[size_t(r * kCols + c)])) << r << "," << c;
  }
}

// The bf16 dot product's sums, lane by lane: x rounded to bf16, then per block of 32 inputs lane l
// adds input 2l+1's product, then input 2l's, each exact and rounded once, with bf16 subnormals
// (weights or inputs) and subnormal sums read as zero; then the one horizontal tree. Checked bit
// for bit with subnormal and tiny weights in, for row counts that take every tile shape.
TEST(Linear, Bf16DotProductIsItsLaneOrderBitForBit) {
  if (!simd_level_supported(SimdLevel::avx512_bf16)) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  SimdLevelGuard guard;
  set_simd_level_for_testing(SimdLevel::avx512_bf16);
  std::mt19937 rng(29);
  const auto flushed = [](float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; };
  for (int64_t k : {32, 40, 96, 1000}) {
    for (int64_t m : {1, 3, 4, 9}) {
      SCOPED_TRACE("K=" + std::to_string(k) + " M=" + std::to_string(m));
      const int64_t n = 21;
      TestWeights t = make_weights(n, k, DType::bf16, 0, 0, DType::bf16, rng);
      auto* bits = reinterpret_cast<uint16_t*>(t.data.data());
      std::uniform_int_distribution<int> pick(0, 7);
      for (int64_t i = 0; i < n * k; ++i) {  // some subnormal weights, some whose products underflow
        const int kind = pick(rng);
        if (kind == 0) bits[i] = uint16_t((bits[i] & 0x807f) | (pick(rng) == 0 ? 0 : 0x0080));
        if (kind == 1) bits[i] = uint16_t((bits[i] & 0x807f) | 0x0300);  // about 2^-120
      }
      std::vector<float> x = random_floats(size_t(m * k), rng);
      for (size_t i = 0; i < x.size(); i += 7) x[i] *= 1e-30f;
      std::vector<float> y(size_t(m * n));
      ThreadPool pool(2);
      linear(x.data(), m, t.matrix, y.data(), pool);
      const int64_t k_padded = (k + 31) / 32 * 32;
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < n; ++c) {
          float lanes[16] = {};
          for (int64_t b = 0; b < k_padded; b += 32) {
            for (int l = 0; l < 16; ++l) {
              for (int64_t j : {b + 2 * l + 1, b + 2 * l}) {
                if (j >= k) continue;
                const float xi = flushed(rounded_to_bf16(x[size_t(r * k + j)]));
                const float wi = flushed(bf16_to_f32(bits[size_t(c * k + j)]));
                lanes[l] = flushed(std::fma(xi, wi, lanes[l]));
              }
            }
          }
          Lanes<kGenericWidth> v = load_f32<kGenericWidth>(lanes);
          const float want = horizontal_sum(v), got = y[size_t(r * n + c)];
          ASSERT_EQ(std::memcmp(&want, &got, sizeof got), 0) << "row " << r << " col " << c << ": " << got << " vs " << want;
        }
      }
    }
  }
}

// The four-at-once horizontal sums (linear's tiles, attention's scores) are horizontal_sum's tree
// exactly, for every register width.
template <int W>
void check_horizontal_sum4(std::mt19937& rng) {
  for (int trial = 0; trial < 200; ++trial) {
    Lanes<W> v[4];
    for (auto& lanes : v) lanes = load_f32<W>(random_floats(kLanes, rng, float(1 + trial)).data());
    float four[4];
    horizontal_sum4(v, four);
    for (int j = 0; j < 4; ++j) {
      const float one = horizontal_sum(v[j]);
      ASSERT_EQ(std::memcmp(&four[j], &one, sizeof one), 0) << "W=" << W << " trial " << trial;
    }
  }
}

// The sixteen-at-once sums (linear's 4x4 tiles on AVX-512) are horizontal_sum's tree exactly.
TEST(Simd, SixteenHorizontalSumsAreTheOneTree) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 200; ++trial) {
    Lanes<16> v[16];
    for (auto& lanes : v) lanes = load_f32<16>(random_floats(kLanes, rng, float(1 + trial)).data());
    float sixteen[16];
    horizontal_sum16(v, sixteen);
    for (int j = 0; j < 16; ++j) {
      const float one = horizontal_sum(v[j]);
      ASSERT_EQ(std::memcmp(&sixteen[j], &one, sizeof one), 0) << "trial " << trial << " sum " << j;
    }
  }
}

TEST(Simd, FourHorizontalSumsAreTheOneTree) {
  std::mt19937 rng(13);
  check_horizontal_sum4<4>(rng);
  check_horizontal_sum4<8>(rng);
  check_horizontal_sum4<16>(rng);
}

TEST(Linear, EmbeddingRowsMatchDequantizedValues) {
  std::mt19937 rng(3);
  std::vector<TestWeights> tables;
  tables.push_back(make_weights(50, 40, DType::bf16, 0, 0, DType::bf16, rng));
  tables.push_back(make_weights(50, 40, DType::f16, 0, 0, DType::bf16, rng));
  tables.push_back(make_weights(50, 40, DType::f32, 0, 0, DType::bf16, rng));
  tables.push_back(make_weights(50, 256, DType::u32, 4, 64, DType::bf16, rng));
  tables.push_back(make_weights(50, 256, DType::u32, 8, 32, DType::f16, rng));
  tables.push_back(make_weights(50, 256, DType::u32, 4, 128, DType::f32, rng));
  const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
  for (const TestWeights& t : tables) {
    const int64_t k = t.matrix.n_cols;
    std::vector<float> rows(ids.size() * size_t(k)), one(static_cast<size_t>(k));
    embedding_rows(t.matrix, ids.data(), int64_t(ids.size()), rows.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      matrix_row_f32(t.matrix, ids[i], one.data());
      expect_bitwise_equal(&rows[i * size_t(k)], one.data(), k, "embedding vs matrix_row_f32");
      expect_bitwise_equal(one.data(), &t.values[size_t(ids[i] * k)], k, "matrix_row_f32 vs scale*q+bias");
    }
  }
}

TEST(RmsNorm, MatchesReferenceAndMayAlias) {
  std::mt19937 rng(5);
  for (int64_t dim : {24, 40, 128, 1000}) {
    const int64_t n_rows = 5;
    std::vector<float> x = random_floats(size_t(n_rows * dim), rng, 3.0f), y(x.size());
    std::vector<uint16_t> gain(static_cast<size_t>(dim));
    for (auto& g : gain) g = f32_to_bf16(random_floats(1, rng)[0]);
    const WeightVector gain_vector{dim, DType::bf16, gain.data()};
    const float eps = 1e-6f;
    rms_norm(x.data(), n_rows, dim, gain_vector, eps, y.data());
    for (int64_t r = 0; r < n_rows; ++r) {
      double sum = 0;
      for (int64_t i = 0; i < dim; ++i) sum += double(x[size_t(r * dim + i)]) * x[size_t(r * dim + i)];
      const double inverse_rms = 1.0 / std::sqrt(sum / double(dim) + eps);
      for (int64_t i = 0; i < dim; ++i) {
        const double expected = x[size_t(r * dim + i)] * inverse_rms * bf16_to_f32(gain[size_t(i)]);
        ASSERT_NEAR(y[size_t(r * dim + i)], expected, 1e-6 * std::fabs(expected) + 1e-7);
      }
    }
    std::vector<float> in_place = x;
    rms_norm(in_place.data(), n_rows, dim, gain_vector, eps, in_place.data());
    expect_bitwise_equal(in_place.data(), y.data(), n_rows * dim, "in-place rms_norm");
  }
}

TEST(Rope, MatchesTransformersFormula) {
  const int64_t head_dim = 64, n_heads = 3;
  const double theta = 1000000.0;
  const std::vector<float> inverse = rope_inverse_frequencies(head_dim, theta);
  ASSERT_EQ(int64_t(inverse.size()), head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i)
    ASSERT_NEAR(inverse[size_t(i)], std::pow(theta, -2.0 * double(i) / double(head_dim)),
                2e-7 * inverse[size_t(i)]);

  std::mt19937 rng(9);
  const std::vector<int32_t> positions = {0, 1, 7, 300, 4095, 40000};
  const int64_t n_rows = int64_t(positions.size());
  const std::vector<float> x = random_floats(size_t(n_rows * n_heads * head_dim), rng);
  std::vector<float> rotated = x;
  rope_apply(rotated.data(), n_rows, n_heads, head_dim, positions.data(), inverse);
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* in = &x[size_t((r * n_heads + h) * head_dim)];
      const float* out = &rotated[size_t((r * n_heads + h) * head_dim)];
      for (int64_t i = 0; i < half; ++i) {
        const double angle = float(positions[size_t(r)]) * inverse[size_t(i)];  // f32, as transformers
        const double c = std::cos(angle), s = std::sin(angle);
        ASSERT_NEAR(out[i], in[i] * c - in[i + half] * s, 1e-6);
        ASSERT_NEAR(out[i + half], in[i + half] * c + in[i] * s, 1e-6);
      }
    }
  }
  // A row's rotation depends on its own position only.
  std::vector<float> alone(x.begin() + 3 * n_heads * head_dim, x.begin() + 4 * n_heads * head_dim);
  rope_apply(alone.data(), 1, n_heads, head_dim, &positions[3], inverse);
  expect_bitwise_equal(alone.data(), &rotated[size_t(3 * n_heads * head_dim)], n_heads * head_dim, "rope row");
}

// exp_in_place at every level the machine has is std::exp bit for bit: the special values and the
// thresholds around them, then every 521st of the 2^32 bit patterns (all of them with
// TF_EXHAUSTIVE_EXP=1, a minute or so), in runs whose lengths leave scalar tails too.
TEST(Exp, EveryLevelIsStdExpBitForBit) {
  std::vector<float> inputs = {0.0f, -0.0f, 1.0f, -1.0f, HUGE_VALF, -HUGE_VALF, NAN, -NAN, 0x1p-149f, -0x1p-149f,
                               88.0f, -88.0f, 100.0f, -100.0f, 1e30f, -1e30f};
  for (float edge : {0x1.62e42ep6f, -0x1.9fe368p6f, -0x1.9d1d9ep6f, 88.0f, -88.0f, -87.33654f})
    for (int step = -3; step <= 3; ++step) {
      uint32_t bits;
      std::memcpy(&bits, &edge, sizeof bits);
      bits = uint32_t(int64_t(bits) + step);
      float value;
      std::memcpy(&value, &bits, sizeof value);
      inputs.push_back(value);
    }
  const bool is_exhaustive = std::getenv("TF_EXHAUSTIVE_EXP") != nullptr;
  const uint64_t stride = is_exhaustive ? 1 : 521;
  constexpr size_t kRun = 1 << 20;
  SimdLevelGuard guard;
  for (SimdLevel level : supported_levels()) {
    SCOPED_TRACE(std::string("SIMD level ") + simd_level_name(level));
    set_simd_level_for_testing(level);
    std::vector<float> values;
    auto check = [&](const std::vector<float>& batch) {
      values = batch;
      run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
        exp_in_place<W>(values.data(), int64_t(values.size()));
      });
      for (size_t i = 0; i < batch.size(); ++i) {
        const float expected = std::exp(batch[i]);
        ASSERT_EQ(0, std::memcmp(&values[i], &expected, sizeof expected))
            << "exp(" << std::hexfloat << batch[i] << ") = " << values[i] << ", std::exp gives " << expected;
      }
    };
    check(inputs);
    for (size_t n = 1; n <= 17; ++n) check(std::vector<float>(inputs.end() - int64_t(n), inputs.end()));  // every tail
    std::vector<float> batch;
    batch.reserve(kRun + 7);
    size_t n_runs = 0;
    for (uint64_t bits = 0; bits <= 0xffffffffu; bits += stride) {
      float value;
      const uint32_t b = uint32_t(bits);
      std::memcpy(&value, &b, sizeof value);
      batch.push_back(value);
      if (batch.size() == kRun + n_runs % 8) {
        check(batch);
        if (::testing::Test::HasFatalFailure()) return;
        batch.clear();
        ++n_runs;
      }
    }
    check(batch);
  }
}

TEST(Swiglu, MatchesReference) {
  std::mt19937 rng(13);
  const int64_t n = 1000;
  const std::vector<float> gate = random_floats(size_t(n), rng, 4.0f), up = random_floats(size_t(n), rng);
  std::vector<float> out(static_cast<size_t>(n));
  swiglu(gate.data(), up.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[size_t(i)];
    const double expected = g / (1.0 + std::exp(-g)) * up[size_t(i)];
    ASSERT_NEAR(out[size_t(i)], expected, 1e-6 * std::fabs(expected) + 1e-30);
  }
}

// Every level computes silu's f32 steps on std::exp's bits, also in place (out = gate).
TEST(Swiglu, EveryLevelIsTheScalarFormulaBitForBit) {
  std::mt19937 rng(14);
  const int64_t n = 1000;
  const std::vector<float> gate = random_floats(size_t(n), rng, 20.0f), up = random_floats(size_t(n), rng);
  SimdLevelGuard guard;
  for (SimdLevel level : supported_levels()) {
    SCOPED_TRACE(std::string("SIMD level ") + simd_level_name(level));
    set_simd_level_for_testing(level);
    std::vector<float> out(static_cast<size_t>(n)), in_place = gate;
    swiglu(gate.data(), up.data(), n, out.data());
    swiglu(in_place.data(), up.data(), n, in_place.data());
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[size_t(i)];
      const float expected = (g / (1.0f + std::exp(-g))) * up[size_t(i)];
      ASSERT_EQ(0, std::memcmp(&out[size_t(i)], &expected, sizeof expected)) << i;
    }
    expect_bitwise_equal(in_place.data(), out.data(), n, "in-place swiglu");
  }
}

}  // namespace
}  // namespace tf::cpu
