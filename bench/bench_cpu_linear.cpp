// CPU linear layers at the embedded model's shapes, one thread, timed in that thread's CPU time
// (so a shared machine's other load does not count), the fastest of 7 batches, at every SIMD level this machine has.
// Prints GFLOP/s and weight GB/s per core for bf16 and MLX 4-bit weights, M = 1 .. 512.
// Usage: bench_cpu_linear [LEVEL]   (generic, avx2, avx512 or avx512-bf16: that level alone)
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/linear.h"
#include "backends/cpu/kernels/simd.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace {

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Matrix {
  std::vector<uint16_t> dense;
  std::vector<uint32_t> packed;
  std::vector<uint16_t> scales, biases;
  tf::WeightMatrix w;
  int64_t bytes = 0;
};

Matrix make_matrix(int64_t n, int64_t k, int bits, std::mt19937& rng) {
  Matrix m;
  m.w.n_rows = n;
  m.w.n_cols = k;
  std::uniform_int_distribution<uint32_t> any;
  if (bits == 0) {
    m.dense.resize(size_t(n * k));
    for (auto& v : m.dense) v = tf::f32_to_bf16(float(int(any(rng) % 2001) - 1000) * 1e-4f);
    m.w.dtype = tf::DType::bf16;
    m.w.data = m.dense.data();
    m.bytes = n * k * 2;
  } else {
    m.packed.resize(size_t(n * k * bits / 32));
    for (auto& v : m.packed) v = any(rng);
    m.scales.assign(size_t(n * k / 64), tf::f32_to_bf16(0.01f));
    m.biases.assign(size_t(n * k / 64), tf::f32_to_bf16(-0.05f));
    m.w.dtype = tf::DType::u32;
    m.w.bits = bits;
    m.w.group_size = 64;
    m.w.scale_dtype = tf::DType::bf16;
    m.w.data = m.packed.data();
    m.w.scales = m.scales.data();
    m.w.biases = m.biases.data();
    m.bytes = n * k * bits / 8 + 2 * 2 * (n * k / 64);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tf;
  const std::string only_level = argc > 1 ? argv[1] : "";  // e.g. avx512-bf16: that level alone
  std::mt19937 rng(1);
  ThreadPool pool(1);
  // (n, k): q, k/v, o, gate/up, down, LM head of the embedded model.
  const std::pair<int64_t, int64_t> shapes[] = {{512, 512}, {256, 512}, {1408, 512}, {512, 1408}, {15360, 512}};
  for (cpu::SimdLevel level : {cpu::SimdLevel::generic, cpu::SimdLevel::avx2, cpu::SimdLevel::avx512, cpu::SimdLevel::avx512_bf16}) {
    if (!cpu::simd_level_supported(level) || (!only_level.empty() && only_level != cpu::simd_level_name(level))) continue;
    cpu::set_simd_level_for_testing(level);
    for (int bits : {0, 4}) {
      std::vector<Matrix> matrices;
      for (auto [n, k] : shapes) matrices.push_back(make_matrix(n, k, bits, rng));
      for (int64_t m_rows : {1, 4, 16, 64, 512}) {
        double seconds = 0, flops = 0, bytes = 0;
        for (const Matrix& m : matrices) {
          std::vector<float> x(size_t(m_rows * m.w.n_cols)), y(size_t(m_rows * m.w.n_rows));
          for (auto& v : x) v = float(int(rng() % 200) - 100) * 0.01f;
          cpu::linear(x.data(), m_rows, m.w, y.data(), pool);  // warm-up
          // The fastest of several timed batches: other load on a shared machine only ever adds time.
          const int repeats = int(std::max<int64_t>(1, 4000000 / (m_rows * m.w.n_rows * m.w.n_cols)));
          double best = 1e30;
          for (int trial = 0; trial < 7; ++trial) {
            const double start = thread_seconds();
            for (int i = 0; i < repeats; ++i) cpu::linear(x.data(), m_rows, m.w, y.data(), pool);
            best = std::min(best, (thread_seconds() - start) / repeats);
          }
          seconds += best;
          flops += 2.0 * double(m_rows * m.w.n_rows * m.w.n_cols);
          bytes += double(m.bytes);
        }
        std::printf("%-8s %-5s M=%-4lld %8.1f GFLOP/s  %7.2f weight GB/s  %9.3f ms for the five shapes\n",
                    cpu::simd_level_name(level), bits == 0 ? "bf16" : "4-bit", (long long)m_rows,
                    flops / seconds * 1e-9, bytes / seconds * 1e-9, seconds * 1e3);
      }
    }
  }
  return 0;
}
