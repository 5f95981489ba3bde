// linear_bf16 on the GPU: parity with cpu::linear, and rows bitwise independent of M and neighbours.
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/linear_bf16.cuh"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "gpu_test.h"
#include "kernels/cpu/linear.h"

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
};

Weights make_weights(int64_t n_out, int64_t n_in, std::mt19937& rng) {
  Weights w{n_out, n_in, random_bf16(size_t(n_out * n_in), rng, 0.05f), DeviceBuffer<uint16_t>(size_t(n_out * n_in))};
  w.device.copy_from_host(w.host);
  return w;
}

// Runs the GPU kernel on host rows x ([n_rows][n_in] bf16) and returns y as f32, poisoning y first.
std::vector<float> run_gpu_f32(const Weights& w, const std::vector<uint16_t>& x, int64_t n_rows) {
  DeviceBuffer<uint16_t> x_device(x.size());
  x_device.copy_from_host(x);
  DeviceBuffer<float> y(size_t(n_rows * w.n_out));
  y.fill_bytes(0xff);
  cuda::linear_bf16(x_device.data(), n_rows, w.device.data(), w.n_out, w.n_in, y.data(), LinearOutput::f32);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  return y.to_host();
}

std::vector<uint16_t> run_gpu_bf16(const Weights& w, const std::vector<uint16_t>& x, int64_t n_rows) {
  DeviceBuffer<uint16_t> x_device(x.size());
  x_device.copy_from_host(x);
  DeviceBuffer<uint16_t> y(size_t(n_rows * w.n_out));
  y.fill_bytes(0xff);
  cuda::linear_bf16(x_device.data(), n_rows, w.device.data(), w.n_out, w.n_in, y.data(), LinearOutput::bf16);
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
    std::vector<float> y = run_gpu_f32(w, x, n_rows);
    const double error = relative_error(y, reference);
    char what[160];
    std::snprintf(what, sizeof what, "linear parity with cpu M=%lld N=%lld K=%lld rel_err=%s", (long long)n_rows,
                  (long long)n_out, (long long)n_in, format_error(error).c_str());
    check(error < 1e-4, what);
    // The bf16 output is the f32 result rounded once.
    std::vector<uint16_t> y_bf16 = run_gpu_bf16(w, x, n_rows);
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
    alone[t] = run_gpu_f32(w, std::vector<uint16_t>(targets.begin() + t * n_in, targets.begin() + (t + 1) * n_in), 1);
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
    std::vector<float> y = run_gpu_f32(w, x, n_rows);
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
  } catch (const std::exception& e) {
    check(false, std::string("exception: ") + e.what());
  }
  return finish("test_linear_bf16");
}
