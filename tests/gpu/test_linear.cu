// linear() on the GPU: parity with cpu::linear, rows bitwise independent of M and neighbours, every
// tile configuration bitwise equal to the original one, and MLX-quantized weights bitwise equal to
// bf16 weights holding their dequantized values (the embedding gather too).
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/cpu/kernels/linear.h"
#include "backends/cuda/activation.cuh"
#include "backends/cuda/affine_layout.h"
#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/embedding.cuh"
#include "backends/cuda/linear.cuh"
#include "backends/cuda/linear_configs.cuh"
#include "backends/cuda/qwen3_cuda_weights.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "gpu_test.h"

using namespace tf;
using namespace tf::gpu_test;
using tf::cuda::DeviceBuffer;
using tf::cuda::LinearOutput;

namespace {

// TF_GPU_TEST_QUICK=1 (under compute-sanitizer) leaves out the largest cases.
bool is_quick() { return std::getenv("TF_GPU_TEST_QUICK") != nullptr; }

struct Weights {
  int64_t n_out, n_in;
  std::vector<uint16_t> host;
  DeviceBuffer<uint16_t> device;

  cuda::LinearWeights view() const { return bf16_weights(device.data()); }
  static cuda::LinearWeights bf16_weights(const uint16_t* rows) {
    cuda::LinearWeights w;
    w.bf16 = rows;
    return w;
  }
};

Weights make_weights(int64_t n_out, int64_t n_in, std::mt19937& rng) {
  Weights w{n_out, n_in, random_bf16(size_t(n_out * n_in), rng, 0.05f), DeviceBuffer<uint16_t>(size_t(n_out * n_in))};
  w.device.copy_from_host(w.host);
  return w;
}

// Runs the GPU kernel on host rows x ([n_rows][n_in] bf16) and returns y (f32 or bf16 bits), poisoning
// y first.
template <class T>
std::vector<T> run_gpu(const Weights& w, const std::vector<uint16_t>& x, int64_t n_rows, LinearOutput output) {
  DeviceBuffer<uint16_t> x_device(x.size());
  x_device.copy_from_host(x);
  DeviceBuffer<T> y(size_t(n_rows * w.n_out));
  y.fill_bytes(0xff);
  cuda::linear(x_device.data(), n_rows, w.view(), w.n_out, w.n_in, y.data(), output);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  return y.to_host();
}

void test_parity(int64_t n_out, int64_t n_in, std::mt19937& rng, ThreadPool& pool) {
  Weights w = make_weights(n_out, n_in, rng);
  WeightMatrix matrix;
  matrix.n_rows = n_out;
  matrix.n_cols = n_in;
  matrix.dtype = DType::bf16;
  matrix.data = w.host.data();
  for (int64_t n_rows : {1, 7, 16, 33, 100}) {
    std::vector<uint16_t> x = random_bf16(size_t(n_rows * n_in), rng);
    std::vector<float> x_f32 = bf16_to_f32(x);
    std::vector<float> reference(size_t(n_rows * n_out));
    cpu::linear(x_f32.data(), n_rows, matrix, reference.data(), pool);
    std::vector<float> y = run_gpu<float>(w, x, n_rows, LinearOutput::f32);
    const double error = relative_error(y, reference);
    char what[160];
    std::snprintf(what, sizeof what, "linear parity with cpu M=%lld N=%lld K=%lld rel_err=%s", (long long)n_rows,
                  (long long)n_out, (long long)n_in, format_error(error).c_str());
    check(error < 1e-4, what);
    // The bf16 output is the f32 result rounded once.
    std::vector<uint16_t> y_bf16 = run_gpu<uint16_t>(w, x, n_rows, LinearOutput::bf16);
    bool is_rounded_f32 = true;
    for (size_t i = 0; i < y.size(); ++i) is_rounded_f32 &= y_bf16[i] == f32_to_bf16(y[i]);
    std::snprintf(what, sizeof what, "linear bf16 output = rounded f32 output M=%lld N=%lld K=%lld", (long long)n_rows,
                  (long long)n_out, (long long)n_in);
    check(is_rounded_f32, what);
  }
}

// A few target rows, each computed alone, must come out bitwise the same at random places among
// random neighbours for every M.
void test_invariance(int64_t n_out, int64_t n_in, std::mt19937& rng) {
  Weights w = make_weights(n_out, n_in, rng);
  constexpr int kTargets = 3;
  std::vector<uint16_t> targets = random_bf16(size_t(kTargets * n_in), rng);
  std::vector<std::vector<float>> alone(kTargets);
  for (int t = 0; t < kTargets; ++t)
    alone[t] = run_gpu<float>(w, std::vector<uint16_t>(targets.begin() + t * n_in, targets.begin() + (t + 1) * n_in), 1,
                              LinearOutput::f32);
  std::vector<int64_t> row_counts;
  for (int64_t m = 1; m <= 64; ++m) row_counts.push_back(m);
  row_counts.push_back(257);
  if (!is_quick()) row_counts.push_back(4096);
  int n_bad = 0;
  for (int64_t n_rows : row_counts) {
    std::vector<uint16_t> x = random_bf16(size_t(n_rows * n_in), rng);
    std::vector<int64_t> places(static_cast<size_t>(n_rows));
    for (int64_t i = 0; i < n_rows; ++i) places[size_t(i)] = i;
    std::shuffle(places.begin(), places.end(), rng);
    const int n_placed = int(std::min<int64_t>(kTargets, n_rows));
    for (int t = 0; t < n_placed; ++t)
      std::copy(targets.begin() + t * n_in, targets.begin() + (t + 1) * n_in, x.begin() + places[size_t(t)] * n_in);
    std::vector<float> y = run_gpu<float>(w, x, n_rows, LinearOutput::f32);
    bool ok = true;
    for (int t = 0; t < n_placed; ++t) ok &= bitwise_equal(y.data() + places[size_t(t)] * n_out, alone[t].data(), size_t(n_out));
    if (!ok) {
      ++n_bad;
      std::printf("  linear rows differ at M=%lld\n", (long long)n_rows);
    }
  }
  char what[160];
  std::snprintf(what, sizeof what, "linear rows bitwise equal alone and among neighbours, M=1..64,257%s N=%lld K=%lld",
                is_quick() ? "" : ",4096", (long long)n_out, (long long)n_in);
  check(n_bad == 0, what);
}

// The configuration the original dispatcher used for n_rows: the reference for every other one.
int original_config(int64_t n_rows) {
  const char* name = n_rows <= 8 ? "r1c1u8-lo" : n_rows <= 16 ? "r1c1u4" : n_rows <= 32 ? "r2c1u2" : "r4c2u1";
  for (int id = 0; id < cuda::linear_config_count(); ++id)
    if (std::string(cuda::linear_config(id).name) == name) return id;
  check(false, std::string("original configuration missing: ") + name);
  return 0;
}

// Every configuration that fits M must give every output element bitwise as the original one, in
// f32 and in bf16, on ragged shapes (N not a multiple of any column tile, a partial last K block).
void test_configs_bitwise(int64_t n_out, int64_t n_in, std::mt19937& rng) {
  Weights w = make_weights(n_out, n_in, rng);
  const std::vector<int64_t> row_counts = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 70, 128, 257};
  DeviceBuffer<uint16_t> x_device(size_t(257 * n_in));
  DeviceBuffer<float> y_f32(size_t(257 * n_out));
  DeviceBuffer<uint16_t> y_bf16(size_t(257 * n_out));
  auto run = [&](int id, int64_t n_rows, bool is_f32) {
    if (is_f32) {
      y_f32.fill_bytes(0xff);
      cuda::linear_with_config(id, x_device.data(), n_rows, w.view(), n_out, n_in, y_f32.data(), LinearOutput::f32);
    } else {
      y_bf16.fill_bytes(0xff);
      cuda::linear_with_config(id, x_device.data(), n_rows, w.view(), n_out, n_in, y_bf16.data(), LinearOutput::bf16);
    }
    TF_CUDA_CHECK(cudaDeviceSynchronize());
  };
  std::vector<std::string> bad;
  int n_compared = 0;
  for (int64_t n_rows : row_counts) {
    const std::vector<uint16_t> x = random_bf16(size_t(n_rows * n_in), rng);
    x_device.copy_from_host(x);
    const size_t n = size_t(n_rows * n_out);
    const int reference_id = original_config(n_rows);
    run(reference_id, n_rows, true);
    const std::vector<float> reference_f32 = y_f32.to_host();
    run(reference_id, n_rows, false);
    const std::vector<uint16_t> reference_bf16 = y_bf16.to_host();
    for (int id = 0; id < cuda::linear_config_count(); ++id) {
      if (!cuda::linear_config_fits(id, n_rows, 0)) continue;
      run(id, n_rows, true);
      const bool is_f32_equal = bitwise_equal(y_f32.to_host().data(), reference_f32.data(), n);
      run(id, n_rows, false);
      const bool is_bf16_equal = bitwise_equal(y_bf16.to_host().data(), reference_bf16.data(), n);
      ++n_compared;
      if (!is_f32_equal || !is_bf16_equal)
        bad.push_back(std::string(cuda::linear_config(id).name) + "@M=" + std::to_string(n_rows));
    }
  }
  std::string what = "every linear configuration bitwise equal to the original (" + std::to_string(n_compared) +
                     " config x M, M=1..257) N=" + std::to_string(n_out) + " K=" + std::to_string(n_in);
  for (size_t i = 0; i < bad.size() && i < 12; ++i) what += (i == 0 ? "; differ: " : ", ") + bad[i];
  check(bad.empty(), what);
}

// MLX affine weights of random codes, bf16 scales and biases, with their dequantized bf16 rows
// (what the GPU computes in registers).
struct QuantizedWeights {
  int64_t n_out, n_in;
  int bits, group_size;
  std::vector<uint32_t> packed;
  std::vector<uint16_t> scales, biases;
  WeightMatrix matrix;
  DeviceBuffer<uint32_t> packed_device, scale_bias_device;
  Weights dequantized;

  cuda::LinearWeights view() const { return {bits, group_size, nullptr, packed_device.data(), scale_bias_device.data()}; }
};

// +-(1 + m/128) * 2^e for e uniform in [lowest, highest]: below -126, bf16 subnormals.
std::vector<uint16_t> spread_bf16(size_t n, int lowest, int highest, std::mt19937& rng) {
  std::uniform_int_distribution<int> exponent(lowest, highest), mantissa(0, 127), sign(0, 1);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(float(std::ldexp((sign(rng) ? -1.0 : 1.0) * (1.0 + mantissa(rng) / 128.0), exponent(rng))));
  return v;
}

// Scales about 0.01 and biases about 0.05 (Normal), or (spread) over every binade the kernels can
// pack, subnormal to the largest that fits (gpu_scale_fits), and biases as widely; a scale that
// would not fit is divided by 16.
QuantizedWeights make_quantized(int64_t n_out, int64_t n_in, int bits, int group_size, std::mt19937& rng,
                                bool is_spread = false) {
  QuantizedWeights q{n_out, n_in, bits, group_size, std::vector<uint32_t>(size_t(n_out * n_in * bits / 32)),
                     {}, {}, {}, {}, {}, {}};
  for (uint32_t& word : q.packed) word = uint32_t(rng());
  const size_t n_groups = size_t(n_out * (n_in / group_size));
  q.scales = is_spread ? spread_bf16(n_groups, -133, -2, rng) : random_bf16(n_groups, rng, 0.01f);
  q.biases = is_spread ? spread_bf16(n_groups, -140, 0, rng) : random_bf16(n_groups, rng, 0.05f);
  for (uint16_t& scale : q.scales)  // a sixteenth of it (test_unpackable_scales tests the others)
    if (!cuda::gpu_scale_fits(scale, bits)) scale = uint16_t(scale - (4 << 7));
  if (is_spread) {
    q.scales[0] = bits == 4 ? 0x3effu : 0x3cffu;  // 0.498..., 0.0311...: the largest that fit
    q.scales[1] = 0x0001u;                        // the smallest subnormal
  }
  q.matrix.n_rows = n_out;
  q.matrix.n_cols = n_in;
  q.matrix.dtype = DType::u32;
  q.matrix.data = q.packed.data();
  q.matrix.bits = bits;
  q.matrix.group_size = group_size;
  q.matrix.scale_dtype = DType::bf16;
  q.matrix.scales = q.scales.data();
  q.matrix.biases = q.biases.data();
  const cuda::AffineRowsOnGpu on_gpu =
      cuda::to_gpu_affine_layout(q.packed.data(), q.scales.data(), q.biases.data(), n_out, n_in, bits, group_size);
  q.packed_device = DeviceBuffer<uint32_t>(on_gpu.words.size());
  q.packed_device.copy_from_host(on_gpu.words);
  q.scale_bias_device = DeviceBuffer<uint32_t>(on_gpu.scale_bias.size());
  q.scale_bias_device.copy_from_host(on_gpu.scale_bias);
  std::vector<uint16_t> rows(size_t(n_out * n_in));
  const int64_t codes_per_word = 32 / bits;
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t i = 0; i < n_in; ++i) {
      const int64_t index = r * n_in + i, group = r * (n_in / group_size) + i / group_size;
      const uint32_t code = (q.packed[size_t(index / codes_per_word)] >> (bits * (index % codes_per_word))) & ((1u << bits) - 1);
      rows[size_t(index)] = cuda::affine_bf16_rounded_once(bf16_to_f32(q.scales[size_t(group)]), code,
                                                           bf16_to_f32(q.biases[size_t(group)]));
    }
  q.dequantized = Weights{n_out, n_in, rows, DeviceBuffer<uint16_t>(rows.size())};
  q.dequantized.device.copy_from_host(rows);
  return q;
}

// Every configuration compiled for quantized weights, at every M, gives bit for bit what the
// original bf16 configuration gives on the dequantized rows, in f32 and bf16; the embedding gather
// gives the dequantized rows; and the result is close to cpu::linear on the quantized matrix
// (which keeps the dequantized values in f32, not rounded to bf16). The dequantized rows are made
// on the host from the codes, so a wrong unpacking or rounding on the GPU shows.
void test_quantized(int64_t n_out, int64_t n_in, int bits, int group_size, std::mt19937& rng, ThreadPool& pool,
                    bool is_spread = false) {
  const QuantizedWeights q = make_quantized(n_out, n_in, bits, group_size, rng, is_spread);
  const std::string shape = std::to_string(bits) + "-bit group " + std::to_string(group_size) + " N=" +
                            std::to_string(n_out) + " K=" + std::to_string(n_in) + (is_spread ? " spread scales" : "");
  {
    const std::vector<int32_t> ids = {0, int32_t(n_out - 1), 3 % int32_t(n_out), -1, int32_t(n_out)};
    DeviceBuffer<int32_t> ids_device(ids.size());
    ids_device.copy_from_host(ids);
    DeviceBuffer<uint16_t> rows(ids.size() * size_t(n_in));
    rows.fill_bytes(0xff);
    cuda::embedding(q.view(), n_out, n_in, ids_device.data(), int64_t(ids.size()), rows.data());
    TF_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = rows.to_host();
    bool ok = true;
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool is_valid = ids[i] >= 0 && ids[i] < n_out;
      for (int64_t k = 0; k < n_in; ++k)
        ok &= got[i * size_t(n_in) + size_t(k)] == (is_valid ? q.dequantized.host[size_t(ids[i] * n_in + k)] : 0);
    }
    check(ok, "quantized embedding rows = dequantized bf16 rows bit for bit (bad ids give zeros), " + shape);
  }
  const std::vector<int64_t> row_counts = {1, 3, 8, 9, 16, 17, 33, 64, 65, 130};
  DeviceBuffer<uint16_t> x_device(size_t(130 * n_in));
  DeviceBuffer<float> y_f32(size_t(130 * n_out));
  DeviceBuffer<uint16_t> y_bf16(size_t(130 * n_out));
  std::vector<std::string> bad;
  int n_compared = 0;
  double worst_cpu_error = 0.0;
  for (int64_t n_rows : row_counts) {
    const std::vector<uint16_t> x = random_bf16(size_t(n_rows * n_in), rng);
    x_device.copy_from_host(x);
    const size_t n = size_t(n_rows * n_out);
    auto run = [&](int id, const cuda::LinearWeights& w, bool is_f32) {
      if (is_f32) {
        y_f32.fill_bytes(0xff);
        cuda::linear_with_config(id, x_device.data(), n_rows, w, n_out, n_in, y_f32.data(), LinearOutput::f32);
      } else {
        y_bf16.fill_bytes(0xff);
        cuda::linear_with_config(id, x_device.data(), n_rows, w, n_out, n_in, y_bf16.data(), LinearOutput::bf16);
      }
      TF_CUDA_CHECK(cudaDeviceSynchronize());
    };
    const int reference_id = original_config(n_rows);
    run(reference_id, q.dequantized.view(), true);
    const std::vector<float> reference_f32 = y_f32.to_host();
    run(reference_id, q.dequantized.view(), false);
    const std::vector<uint16_t> reference_bf16 = y_bf16.to_host();
    for (int id = 0; id < cuda::linear_config_count(); ++id) {
      if (!cuda::linear_config_fits(id, n_rows, bits)) continue;
      run(id, q.view(), true);
      const bool is_f32_equal = bitwise_equal(y_f32.to_host().data(), reference_f32.data(), n);
      run(id, q.view(), false);
      const bool is_bf16_equal = bitwise_equal(y_bf16.to_host().data(), reference_bf16.data(), n);
      ++n_compared;
      if (!is_f32_equal || !is_bf16_equal)
        bad.push_back(std::string(cuda::linear_config(id).name) + "@M=" + std::to_string(n_rows));
    }
    std::vector<float> x_f32 = bf16_to_f32(x), cpu_y(n);
    cpu::linear(x_f32.data(), n_rows, q.matrix, cpu_y.data(), pool);
    worst_cpu_error = std::max(worst_cpu_error, relative_error(reference_f32, cpu_y));
  }
  std::string what = "every quantized configuration bitwise equal to bf16 on the dequantized rows (" +
                     std::to_string(n_compared) + " config x M) " + shape;
  for (size_t i = 0; i < bad.size() && i < 12; ++i) what += (i == 0 ? "; differ: " : ", ") + bad[i];
  check(bad.empty(), what);
  check(worst_cpu_error < 1e-2, "quantized linear close to cpu::linear (f32 dequantization), rel_err=" +
                                    format_error(worst_cpu_error) + " " + shape);
}

// A matrix with a scale the kernels cannot pack (gpu_scale_fits) is uploaded as bf16 rows holding
// the values the packed kernels would have computed.
void test_unpackable_scales(int bits, std::mt19937& rng) {
  QuantizedWeights q = make_quantized(48, 256, bits, 64, rng);
  q.scales[7] = bits == 4 ? 0x3f00u : 0x3d00u;  // 0.5, 2^-5: just too large
  const int64_t codes_per_word = 32 / bits, groups_per_row = q.n_in / 64;
  for (int64_t index = 0; index < q.n_out * q.n_in; ++index) {
    const int64_t group = (index / q.n_in) * groups_per_row + (index % q.n_in) / 64;
    const uint32_t code = (q.packed[size_t(index / codes_per_word)] >> (bits * (index % codes_per_word))) & ((1u << bits) - 1);
    q.dequantized.host[size_t(index)] =
        cuda::affine_bf16_rounded_once(bf16_to_f32(q.scales[size_t(group)]), code, bf16_to_f32(q.biases[size_t(group)]));
  }
  const cuda::CudaMatrix uploaded = cuda::upload_matrix(q.matrix);
  check(uploaded.bits == 0 && uploaded.bf16.to_host() == q.dequantized.host,
        std::to_string(bits) + "-bit matrix with a scale too large to pack: uploaded as bf16 rows of its values");
}

// The SwiGLU output of a gate/up linear (rows interleaved gate, up) against its bf16 output split
// into gate and up columns and put through swiglu_bf16: bitwise, for every configuration and M.
void test_swiglu_output(const cuda::LinearWeights& w, int bits, int64_t n_out, int64_t n_in, const std::string& what,
                        std::mt19937& rng) {
  const std::vector<int64_t> row_counts = {1, 5, 9, 16, 33, 130};
  const int64_t width = n_out / 2;
  DeviceBuffer<uint16_t> x_device(size_t(130 * n_in)), y(size_t(130 * n_out)), fused(size_t(130 * width));
  DeviceBuffer<uint16_t> gate(size_t(130 * width)), up(size_t(130 * width)), expected(size_t(130 * width));
  std::vector<std::string> bad;
  int n_compared = 0;
  for (int64_t n_rows : row_counts) {
    x_device.copy_from_host(random_bf16(size_t(n_rows * n_in), rng, 2.0f));
    for (int id = 0; id < cuda::linear_config_count(); ++id) {
      if (!cuda::linear_config_fits(id, n_rows, bits)) continue;
      cuda::linear_with_config(id, x_device.data(), n_rows, w, n_out, n_in, y.data(), LinearOutput::bf16);
      fused.fill_bytes(0xff);
      cuda::linear_with_config(id, x_device.data(), n_rows, w, n_out, n_in, fused.data(), LinearOutput::swiglu_bf16);
      TF_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<uint16_t> both = y.to_host();
      std::vector<uint16_t> gates(size_t(n_rows * width)), ups(size_t(n_rows * width));
      for (int64_t i = 0; i < n_rows * width; ++i) {
        gates[size_t(i)] = both[size_t(2 * i)];
        ups[size_t(i)] = both[size_t(2 * i + 1)];
      }
      gate.copy_from_host(gates);
      up.copy_from_host(ups);
      cuda::swiglu_bf16(gate.data(), up.data(), n_rows * width, expected.data());
      TF_CUDA_CHECK(cudaDeviceSynchronize());
      ++n_compared;
      if (!bitwise_equal(fused.to_host().data(), expected.to_host().data(), size_t(n_rows * width)))
        bad.push_back(std::string(cuda::linear_config(id).name) + "@M=" + std::to_string(n_rows));
    }
  }
  std::string message = "SwiGLU output = bf16 output through swiglu_bf16, bitwise (" + std::to_string(n_compared) +
                        " config x M) " + what;
  for (size_t i = 0; i < bad.size() && i < 12; ++i) message += (i == 0 ? "; differ: " : ", ") + bad[i];
  check(bad.empty(), message);
}

}  // namespace

int main() {
  std::mt19937 rng(20240611);
  ThreadPool pool(0);
  try {
    test_parity(192, 4096, rng, pool);
    test_parity(100, 136, rng, pool);    // partial column tile and a partial last K block
    test_parity(24, 12288, rng, pool);
    test_invariance(200, 4104, rng);
    if (!is_quick()) test_invariance(64, 12288, rng);
    test_configs_bitwise(200, 136, rng);   // N not a multiple of 16/32/64 columns; K: 4 full blocks + 8
    test_configs_bitwise(72, 4104, rng);   // a partial last K block, fewer columns than one wide tile
    if (!is_quick()) {
      test_configs_bitwise(1000, 1064, rng);
      test_configs_bitwise(40, 12288, rng);
      test_configs_bitwise(4, 264, rng);   // fewer columns than one n8 tile
    }
    {
      const Weights w = make_weights(208, 264, rng);  // 104 gate/up pairs; K with a partial block
      test_swiglu_output(w.view(), 0, 208, 264, "bf16 N=208 K=264", rng);
      const QuantizedWeights q = make_quantized(136, 512, 4, 64, rng);
      test_swiglu_output(q.view(), 4, 136, 512, "4-bit N=136 K=512", rng);
    }
    test_quantized(200, 512, 4, 64, rng, pool);  // N not a multiple of the wide tiles
    test_quantized(72, 4096, 4, 32, rng, pool);
    test_quantized(40, 1024, 4, 128, rng, pool);
    test_quantized(136, 768, 8, 64, rng, pool);
    test_quantized(96, 1024, 4, 64, rng, pool, /*is_spread=*/true);
    test_quantized(96, 1024, 8, 32, rng, pool, /*is_spread=*/true);
    test_unpackable_scales(4, rng);
    test_unpackable_scales(8, rng);
    if (!is_quick()) test_quantized(64, 12288, 4, 64, rng, pool);
  } catch (const std::exception& e) {
    check(false, std::string("exception: ") + e.what());
  }
  return finish("test_linear");
}
