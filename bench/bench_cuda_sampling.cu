// Times sample_rows_f32 (seeded sampling on the GPU) at Qwen's vocabulary for 1, 16 and 64 rows and
// several parameter sets, on language-model-shaped logits, and prints microseconds per call and per
// row as medians with [min, max] over the repetitions, each row split over clusters of 8 and of 16
// blocks.
// Usage: bench_cuda_sampling [repetitions (default 25)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/sample.cuh"

using tf::cuda::DeviceBuffer;
using tf::cuda::GpuSamplingRow;

namespace {

constexpr int64_t kVocab = 151936;
constexpr int kMaxRows = 64;
constexpr int kWarmup = 3;
// Each row split over 8 and over 16 blocks (sample_rows_f32 itself takes 16 for calls of few rows).
constexpr int kClusterBlocks[] = {8, 16};

// A broad normal tail with a few tokens well above it, as an LM head gives (never all zeros).
std::vector<float> lm_like_logits(int n_rows, std::mt19937& rng) {
  std::normal_distribution<float> tail(0.0f, 2.0f);
  std::uniform_real_distribution<float> head_lift(10.0f, 24.0f);
  std::vector<float> logits(size_t(n_rows) * size_t(kVocab));
  for (float& logit : logits) logit = tail(rng);
  for (int r = 0; r < n_rows; ++r) {
    const int n_head = 1 + int(rng() % 24);
    for (int i = 0; i < n_head; ++i) logits[size_t(r) * size_t(kVocab) + rng() % uint64_t(kVocab)] = head_lift(rng);
  }
  return logits;
}

}  // namespace

int main(int argc, char** argv) {
  const int n_repetitions = argc > 1 ? std::max(3, std::atoi(argv[1])) : 25;
  std::mt19937 rng(1);
  std::mt19937_64 rng64(2);
  const std::vector<float> logits = lm_like_logits(kMaxRows, rng);
  DeviceBuffer<float> logits_device(logits.size());
  logits_device.copy_from_host(logits);
  DeviceBuffer<int32_t> ids(size_t{kMaxRows});
  struct Setting {
    const char* name;
    GpuSamplingRow row;
  };
  const Setting settings[] = {
      {"T=1", {1.0f, 0, 1.0f, 0.0f, 0, 0}},
      {"T=1 top_p=0.9", {1.0f, 0, 0.9f, 0.0f, 0, 0}},
      {"T=0.7 top_k=40 top_p=0.9 min_p=0.05", {0.7f, 40, 0.9f, 0.05f, 0, 0}},
      {"T=1.5 top_p=0.95", {1.5f, 0, 0.95f, 0.0f, 0, 0}},
      {"T=0.6 top_k=20 top_p=0.95 (Qwen's advice)", {0.6f, 20, 0.95f, 0.0f, 0, 0}},
      {"T=1 top_k=256", {1.0f, 256, 1.0f, 0.0f, 0, 0}},
      {"T=1 top_k=1000 top_p=0.9", {1.0f, 1000, 0.9f, 0.0f, 0, 0}},
  };
  cudaEvent_t start, stop;
  TF_CUDA_CHECK(cudaEventCreate(&start));
  TF_CUDA_CHECK(cudaEventCreate(&stop));
  std::printf("sample_rows_f32, vocab %lld, median [min, max] of %d calls (one launch each, %d warm-up)\n",
              static_cast<long long>(kVocab), n_repetitions, kWarmup);
  std::printf("| rows | parameters |");
  for (const int cluster_blocks : kClusterBlocks) std::printf(" us per call, %d blocks a row | us per row |", cluster_blocks);
  std::printf("\n|---|---|");
  for (size_t i = 0; i < std::size(kClusterBlocks); ++i) std::printf("---|---|");
  std::printf("\n");
  for (const int n_rows : {1, 16, 64}) {
    for (const Setting& setting : settings) {
      std::vector<GpuSamplingRow> rows(size_t(n_rows), setting.row);
      for (size_t r = 0; r < rows.size(); ++r) {
        rows[r].seed = rng64();
        rows[r].position = r;
      }
      DeviceBuffer<GpuSamplingRow> rows_device(rows.size());
      rows_device.copy_from_host(rows);
      std::string line = "| " + std::to_string(n_rows) + " | " + setting.name + " |";
      for (const int cluster_blocks : kClusterBlocks) {
        std::vector<double> times_us;
        for (int i = 0; i < kWarmup + n_repetitions; ++i) {
          TF_CUDA_CHECK(cudaEventRecord(start));
          tf::cuda::sample_rows_f32(logits_device.data(), n_rows, kVocab, rows_device.data(), ids.data(), nullptr,
                                    cluster_blocks);
          TF_CUDA_CHECK(cudaEventRecord(stop));
          TF_CUDA_CHECK(cudaEventSynchronize(stop));
          float milliseconds = 0.0f;
          TF_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
          if (i >= kWarmup) times_us.push_back(1000.0 * milliseconds);
        }
        std::sort(times_us.begin(), times_us.end());
        const double median = times_us[times_us.size() / 2];
        char cell[96];
        std::snprintf(cell, sizeof cell, " %.1f [%.1f, %.1f] | %.2f |", median, times_us.front(), times_us.back(),
                      median / n_rows);
        line += cell;
      }
      std::printf("%s\n", line.c_str());
    }
  }
  TF_CUDA_CHECK(cudaEventDestroy(start));
  TF_CUDA_CHECK(cudaEventDestroy(stop));
  return 0;
}
