// Times the linear layers of one qwen3-8b decode step on the GPU (synthetic bf16 weights made on
// the device) at several row counts, against the measured copy bandwidth and cuBLAS on the same
// shapes in the same run, times every tile configuration of linear() per shape and row count
// (the table to edit linear()'s dispatch from), and writes a markdown receipt.
// Usage: bench_cuda_linear [receipt.md] [--configs-only] [--rows 128,4096 (the configuration table's row counts)]
//        [--bits 4|8 (the configuration table on MLX-quantized weights, group 64; implies --configs-only)]
//        [--dispatch-only (the table times linear()'s own choice and cuBLAS only: quick at large M)]
//        [--configs s,r4c4g2u1 (only the configurations whose names start so, and cuBLAS)]
// (commit from $TF_COMMIT, command line from $TF_COMMAND; --configs-only: just the configuration table).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/affine_layout.h"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/fill_random.cuh"
#include "backends/cuda/linear.cuh"
#include "backends/cuda/linear_configs.cuh"
#include "core/dtype.h"

using tf::cuda::DeviceBuffer;
using tf::cuda::LinearOutput;

namespace {

// qwen3-8b: hidden 4096, intermediate 12288, 36 layers, 32 heads and 8 kv heads of 128, vocab 151936.
constexpr int64_t kHidden = 4096, kIntermediate = 12288, kLayers = 36, kQWidth = 32 * 128, kKvWidth = 8 * 128;
constexpr int64_t kVocab = 151936;
constexpr int64_t kMaxRows = 4096;  // a prefill chunk
constexpr int kWarmup = 3, kReps = 15;

#define CUBLAS_CHECK(call)                                                              \
  do {                                                                                  \
    const cublasStatus_t status_ = (call);                                              \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                             \
      std::fprintf(stderr, "cuBLAS error %d in %s at %s:%d\n", int(status_), #call, __FILE__, __LINE__); \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

// Random-looking bf16 in [-0.05, 0.05) from a hash of the index: never zeros (METHOD.md: zeros
// run faster than real data).
__global__ void fill_synthetic_kernel(uint16_t* data, int64_t n, uint32_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9e3779b9u ^ uint32_t(i >> 32) ^ seed;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    const float value = (float(h & 0xffffu) / 65536.0f - 0.5f) * 0.1f;
    const uint32_t bits = __float_as_uint(value);
    data[i] = uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

void fill_synthetic(DeviceBuffer<uint16_t>& buffer, uint32_t seed) {
  fill_synthetic_kernel<<<1024, 256>>>(buffer.data(), int64_t(buffer.size()), seed);
  TF_CUDA_CHECK_LAUNCH("fill_synthetic_kernel");
}

struct Matrix {
  const uint16_t* data;  // bf16 rows: cuBLAS's weights, and ours unless `quantized` is set
  int64_t n_out, n_in;
  bool is_input_wide;  // reads the intermediate-wide activations (down_proj)
  bool is_f32_out;     // the LM head writes f32 logits
  const char* name;
  tf::cuda::LinearWeights quantized = {};  // --bits: ours reads these instead

  tf::cuda::LinearWeights ours() const {
    if (quantized.bits) return quantized;
    tf::cuda::LinearWeights w;
    w.bf16 = data;
    return w;
  }
  double bytes() const {
    if (!quantized.bits) return double(n_out * n_in) * 2.0;
    return double(n_out * n_in) * quantized.bits / 8.0 + double(n_out * (n_in / quantized.group_size)) * 4.0;
  }
};

struct Stats {
  double median_ms, min_ms, max_ms;
};

Stats stats_of(std::vector<float> times) {
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front(), times.back()};
}

enum class Impl { ours, cublas };

struct Bench {
  std::vector<Matrix> step;  // every linear of one decode step, in order
  DeviceBuffer<uint16_t> x_hidden, x_wide, y_bf16;
  DeviceBuffer<float> y_f32;
  cublasHandle_t handle;
  cudaStream_t stream;  // graphs cannot capture the legacy default stream
  int config_id = -1;   // Impl::ours: a given tile configuration, or -1 for linear()'s own choice

  void run_one(const Matrix& m, int64_t n_rows, Impl impl) {
    const uint16_t* x = m.is_input_wide ? x_wide.data() : x_hidden.data();
    void* y = m.is_f32_out ? static_cast<void*>(y_f32.data()) : static_cast<void*>(y_bf16.data());
    if (impl == Impl::ours && config_id >= 0) {
      tf::cuda::linear_with_config(config_id, x, n_rows, m.ours(), m.n_out, m.n_in, y,
                                   m.is_f32_out ? LinearOutput::f32 : LinearOutput::bf16, stream);
      return;
    }
    if (impl == Impl::ours) {
      tf::cuda::linear(x, n_rows, m.ours(), m.n_out, m.n_in, y, m.is_f32_out ? LinearOutput::f32 : LinearOutput::bf16,
                       stream);
      return;
    }
    // Row-major y[M][N] = x[M][K] W[N][K]^T is column-major y^T = W^T(op T on W) x^T.
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(m.n_out), int(n_rows), int(m.n_in), &alpha, m.data,
                              CUDA_R_16BF, int(m.n_in), x, CUDA_R_16BF, int(m.n_in), &beta, y,
                              m.is_f32_out ? CUDA_R_32F : CUDA_R_16BF, int(m.n_out), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  }

  // Times `matrices` back to back between two events: warm-up, then kReps timed repetitions;
  // with is_graph, the launches are captured once and each repetition replays the graph.
  Stats time(const std::vector<const Matrix*>& matrices, int64_t n_rows, Impl impl, bool is_graph = false) {
    cudaEvent_t start, stop;
    TF_CUDA_CHECK(cudaEventCreate(&start));
    TF_CUDA_CHECK(cudaEventCreate(&stop));
    cudaGraphExec_t graph_exec = nullptr;
    if (is_graph) {
      for (const Matrix* m : matrices) run_one(*m, n_rows, impl);  // cuBLAS picks its kernels outside the capture
      cudaGraph_t graph;
      TF_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      for (const Matrix* m : matrices) run_one(*m, n_rows, impl);
      TF_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      TF_CUDA_CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));
      TF_CUDA_CHECK(cudaGraphDestroy(graph));
    }
    std::vector<float> times;
    for (int rep = 0; rep < kWarmup + kReps; ++rep) {
      TF_CUDA_CHECK(cudaEventRecord(start, stream));
      if (is_graph) {
        TF_CUDA_CHECK(cudaGraphLaunch(graph_exec, stream));
      } else {
        for (const Matrix* m : matrices) run_one(*m, n_rows, impl);
      }
      TF_CUDA_CHECK(cudaEventRecord(stop, stream));
      TF_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.0f;
      TF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (rep >= kWarmup) times.push_back(ms);
    }
    TF_CUDA_CHECK(cudaEventDestroy(start));
    TF_CUDA_CHECK(cudaEventDestroy(stop));
    if (graph_exec) TF_CUDA_CHECK(cudaGraphExecDestroy(graph_exec));
    return stats_of(times);
  }
};

// Device-to-device copy of a buffer far larger than L2; bytes read plus bytes written.
double measure_copy_gbps() {
  const size_t n_bytes = size_t(2) << 30;
  DeviceBuffer<uint8_t> a(n_bytes), b(n_bytes);
  TF_CUDA_CHECK(cudaMemset(a.data(), 1, n_bytes));
  cudaEvent_t start, stop;
  TF_CUDA_CHECK(cudaEventCreate(&start));
  TF_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int rep = 0; rep < 3 + 20; ++rep) {
    TF_CUDA_CHECK(cudaEventRecord(start));
    TF_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), n_bytes, cudaMemcpyDeviceToDevice));
    TF_CUDA_CHECK(cudaEventRecord(stop));
    TF_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms;
    TF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (rep >= 3) times.push_back(ms);
  }
  return 2.0 * double(n_bytes) / (stats_of(times).median_ms * 1e-3) / 1e9;
}

// ||ours - cublas|| / ||cublas|| on one shape, as a sanity check that both compute the same thing.
double compare_with_cublas(Bench& bench, const Matrix& m, int64_t n_rows) {
  const size_t n = size_t(n_rows * m.n_out);
  bench.run_one(m, n_rows, Impl::ours);
  TF_CUDA_CHECK(cudaStreamSynchronize(bench.stream));
  std::vector<uint16_t> ours = bench.y_bf16.to_host();
  bench.run_one(m, n_rows, Impl::cublas);
  TF_CUDA_CHECK(cudaStreamSynchronize(bench.stream));
  std::vector<uint16_t> theirs = bench.y_bf16.to_host();
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double a = tf::bf16_to_f32(ours[i]), b = tf::bf16_to_f32(theirs[i]);
    diff += (a - b) * (a - b);
    norm += b * b;
  }
  return std::sqrt(diff / norm);
}

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

// One fused qwen3-8b shape: its matrices over the 36 layers (the LM head once).
struct ShapeSet {
  const char* name;         // column title
  const char* matrix_name;  // Matrix::name of its matrices
  std::vector<const Matrix*> matrices;
};

bool has_any_prefix(const std::string& name, const std::vector<std::string>& prefixes) {
  if (prefixes.empty()) return true;
  for (const std::string& prefix : prefixes)
    if (name.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

// For each row count, µs per call and GB/s of weights of every configuration on every fused shape,
// the decode step those give (36 layers + LM head), cuBLAS, and which configuration is fastest.
std::string time_configs(Bench& bench, const std::vector<ShapeSet>& shapes, const std::vector<int64_t>& row_counts,
                         int bits, bool is_dispatch_only, const std::vector<std::string>& name_prefixes) {
  const std::string format = bits ? "MLX " + std::to_string(bits) + "-bit (group 64; cuBLAS on bf16 weights of the same shapes)" : "bf16";
  std::string report = "\n## linear tile configurations on " + format +
                       " weights, per fused shape (us per call, GB/s of weights)\n\n"
                       "The linear() row is its own choice per shape (named in the summary). step ms = 36 x (qkv + o + "
                       "gate_up + down) + lm_head, each per call. To change the choice, edit `k" +
                       std::string(bits ? "Quantized" : "Bf16") +
                       "Dispatch` in src/backends/cuda/linear.cu with the fastest name per row range.\n";
  std::string summary = "\n### Fastest configuration per row count\n\n| rows | fastest | step ms | current | step ms | "
                        "current / fastest | cuBLAS step ms |\n| ---: | --- | ---: | --- | ---: | ---: | ---: |\n";
  char line[1024];
  for (int64_t n_rows : row_counts) {
    std::snprintf(line, sizeof line, "\n### M = %lld\n\n| config |", (long long)n_rows);
    report += line;
    for (const ShapeSet& shape : shapes) report += std::string(" ") + shape.name + " us | GB/s |";
    report += " step ms |\n| --- |";
    for (size_t i = 0; i < shapes.size(); ++i) report += " ---: | ---: |";
    report += " ---: |\n";
    std::string best_name, current_name;  // current: linear()'s choice for each shape, "a/b/c/d/e"
    for (const ShapeSet& shape : shapes) {
      const int id = tf::cuda::linear_default_config(n_rows, shape.matrices[0]->n_out, bits);
      if (!current_name.empty()) current_name += '/';
      current_name += tf::cuda::linear_config(id).name;
    }
    double best_ms = INFINITY, current_ms = NAN, cublas_ms = NAN;
    constexpr int kDispatch = -2, kCublas = -1;
    for (int id = kDispatch; id < tf::cuda::linear_config_count(); ++id) {
      if (id >= 0 && (!tf::cuda::linear_config_fits(id, n_rows, bits) || is_dispatch_only ||
                      !has_any_prefix(tf::cuda::linear_config(id).name, name_prefixes)))
        continue;
      const Impl impl = id == kCublas ? Impl::cublas : Impl::ours;
      bench.config_id = id == kDispatch ? -1 : id;
      const std::string name = id == kDispatch ? "linear()" : id == kCublas ? "cuBLAS" : tf::cuda::linear_config(id).name;
      std::string row = "| " + name + " |";
      double step_ms = 0.0;
      for (const ShapeSet& shape : shapes) {
        const Stats stats = bench.time(shape.matrices, n_rows, impl);
        const double us_per_call = stats.median_ms * 1e3 / double(shape.matrices.size());
        const double bytes = id == kCublas ? double(shape.matrices[0]->n_out * shape.matrices[0]->n_in) * 2.0
                                           : shape.matrices[0]->bytes();
        step_ms += stats.median_ms;  // a shape's matrices are all its calls in one step
        std::snprintf(line, sizeof line, " %.1f | %.0f |", us_per_call, bytes / (us_per_call * 1e-6) / 1e9);
        row += line;
      }
      std::snprintf(line, sizeof line, " %.3f |\n", step_ms);
      report += row + line;
      if (id == kCublas) {
        cublas_ms = step_ms;
      } else if (id == kDispatch) {
        current_ms = step_ms;
      } else if (step_ms < best_ms) {
        best_ms = step_ms, best_name = tf::cuda::linear_config(id).name;
      }
    }
    std::snprintf(line, sizeof line, "| %lld | %s | %.3f | %s | %.3f | %.2f | %.3f |\n", (long long)n_rows, best_name.c_str(),
                  best_ms, current_name.c_str(), current_ms, current_ms / best_ms, cublas_ms);
    summary += line;
    std::printf("M=%3lld configs: fastest %s %.3f ms, current %s %.3f ms, cuBLAS %.3f ms\n", (long long)n_rows,
                best_name.c_str(), best_ms, current_name.c_str(), current_ms, cublas_ms);
  }
  bench.config_id = -1;
  return report + summary;
}

}  // namespace

int main(int argc, char** argv) {
  std::string receipt_path;
  bool is_configs_only = false, is_dispatch_only = false;
  std::vector<std::string> name_prefixes;  // empty: every configuration
  int bits = 0;
  std::vector<int64_t> config_row_counts = {1, 8, 16, 32, 48, 64, 128, 256, 512};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--configs-only") {
      is_configs_only = true;
    } else if (std::string(argv[i]) == "--dispatch-only") {
      is_dispatch_only = true;
    } else if (std::string(argv[i]) == "--bits" && i + 1 < argc) {
      bits = std::atoi(argv[++i]);
      if (bits != 4 && bits != 8) {
        std::fprintf(stderr, "--bits: 4 or 8\n");
        return 2;
      }
      is_configs_only = true;
    } else if (std::string(argv[i]) == "--configs" && i + 1 < argc) {  // e.g. --configs s,r4c4g2u1
      for (std::string list = argv[++i]; !list.empty();) {
        const size_t comma = list.find(',');
        name_prefixes.push_back(list.substr(0, comma));
        list = comma == std::string::npos ? "" : list.substr(comma + 1);
      }
    } else if (std::string(argv[i]) == "--rows" && i + 1 < argc) {  // e.g. --rows 128,512
      config_row_counts.clear();
      for (std::string list = argv[++i]; !list.empty();) {
        const size_t comma = list.find(',');
        const int64_t n_rows = std::stoll(list.substr(0, comma));
        if (n_rows < 1 || n_rows > kMaxRows) {
          std::fprintf(stderr, "--rows: each count must be 1..%lld\n", (long long)kMaxRows);
          return 2;
        }
        config_row_counts.push_back(n_rows);
        list = comma == std::string::npos ? "" : list.substr(comma + 1);
      }
    } else {
      receipt_path = argv[i];
    }
  }
  cudaDeviceProp properties;
  TF_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf("GPU: %s, %d SMs, L2 %d MB\n", properties.name, properties.multiProcessorCount, properties.l2CacheSize >> 20);
  const double copy_gbps = measure_copy_gbps();
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy_gbps);

  // One allocation per layer for its seven matrices, plus the LM head.
  const int64_t per_layer = kQWidth * kHidden + 2 * kKvWidth * kHidden + kHidden * kQWidth + 2 * kIntermediate * kHidden +
                            kHidden * kIntermediate;
  std::vector<DeviceBuffer<uint16_t>> layers;
  Bench bench{{}, DeviceBuffer<uint16_t>(size_t(kMaxRows * kHidden)), DeviceBuffer<uint16_t>(size_t(kMaxRows * kIntermediate)),
              DeviceBuffer<uint16_t>(size_t(kMaxRows * 2 * kIntermediate)), DeviceBuffer<float>(size_t(kMaxRows * kVocab)),
              nullptr, nullptr};
  TF_CUDA_CHECK(cudaStreamCreate(&bench.stream));
  fill_synthetic(bench.x_hidden, 1);
  fill_synthetic(bench.x_wide, 2);
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    layers.emplace_back(size_t(per_layer));
    fill_synthetic(layers.back(), uint32_t(100 + layer));
    const uint16_t* p = layers.back().data();
    auto add = [&](int64_t n_out, int64_t n_in, bool is_wide, const char* name) {
      bench.step.push_back({p, n_out, n_in, is_wide, false, name});
      p += n_out * n_in;
    };
    add(kQWidth, kHidden, false, "q_proj");
    add(kKvWidth, kHidden, false, "k_proj");
    add(kKvWidth, kHidden, false, "v_proj");
    add(kHidden, kQWidth, false, "o_proj");
    add(kIntermediate, kHidden, false, "gate_proj");
    add(kIntermediate, kHidden, false, "up_proj");
    add(kHidden, kIntermediate, true, "down_proj");
  }
  DeviceBuffer<uint16_t> lm_head(size_t(kVocab * kHidden));
  fill_synthetic(lm_head, 7);
  bench.step.push_back({lm_head.data(), kVocab, kHidden, false, true, "lm_head"});
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  CUBLAS_CHECK(cublasCreate(&bench.handle));
  CUBLAS_CHECK(cublasSetStream(bench.handle, bench.stream));
  // A workspace of our own, so cuBLAS allocates nothing while a graph is being captured.
  DeviceBuffer<uint8_t> cublas_workspace(size_t(64) << 20);
  CUBLAS_CHECK(cublasSetWorkspace(bench.handle, cublas_workspace.data(), cublas_workspace.size()));
  double step_bytes = 0.0;
  for (const Matrix& m : bench.step) step_bytes += double(m.n_out * m.n_in) * 2.0;
  std::printf("weights per decode step: %.2f GB in %zu matrices\n", step_bytes / 1e9, bench.step.size());

  std::vector<const Matrix*> all;
  for (const Matrix& m : bench.step) all.push_back(&m);
  // The same weights as the model will hold them: q/k/v and gate/up are adjacent in each layer's
  // buffer, so [q; k; v] and [gate; up] are single matrices of 6144 and 24576 rows.
  std::vector<Matrix> fused_step;
  for (size_t i = 0; i + 7 <= bench.step.size(); i += 7) {
    const Matrix* layer = &bench.step[i];
    fused_step.push_back({layer[0].data, kQWidth + 2 * kKvWidth, kHidden, false, false, "qkv_proj"});
    fused_step.push_back(layer[3]);
    fused_step.push_back({layer[4].data, 2 * kIntermediate, kHidden, false, false, "gate_up_proj"});
    fused_step.push_back(layer[6]);
  }
  fused_step.push_back(bench.step.back());
  std::vector<const Matrix*> all_fused;
  for (const Matrix& m : fused_step) all_fused.push_back(&m);
  std::vector<ShapeSet> shapes = {{"qkv", "qkv_proj", {}},
                                  {"o", "o_proj", {}},
                                  {"gate_up", "gate_up_proj", {}},
                                  {"down", "down_proj", {}},
                                  {"lm_head", "lm_head", {}}};
  // --bits: every fused matrix also gets packed words, scales and biases of its shape.
  std::vector<DeviceBuffer<uint32_t>> packed, scale_bias;
  if (bits) {
    constexpr int kGroup = 64;
    uint64_t seed = 1000;
    for (Matrix& m : fused_step) {
      const size_t n_groups = size_t(m.n_out * tf::cuda::affine_row_entries(m.n_in, kGroup));
      packed.emplace_back(size_t(m.n_out * tf::cuda::affine_row_words(m.n_in, bits)));
      scale_bias.emplace_back(n_groups);
      tf::cuda::fill_random_u32(packed.back().data(), int64_t(packed.back().size()), seed++);
      tf::cuda::fill_random_scale_bias(scale_bias.back().data(), int64_t(n_groups), seed++, bits);
      m.quantized = {bits, kGroup, nullptr, packed.back().data(), scale_bias.back().data()};
    }
    TF_CUDA_CHECK(cudaDeviceSynchronize());
  }
  for (const Matrix& m : fused_step)
    for (ShapeSet& shape : shapes)
      if (std::string(m.name) == shape.matrix_name) shape.matrices.push_back(&m);
  const std::string config_report = time_configs(bench, shapes, config_row_counts, bits, is_dispatch_only, name_prefixes);
  // --configs-only: no row counts for the sections below, which then print empty tables.
  const std::vector<int64_t> row_counts =
      is_configs_only ? std::vector<int64_t>{} : std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128};
  struct Row {
    int64_t n_rows;
    Stats ours, cublas;
  };
  std::vector<Row> rows, fused_rows;
  for (int64_t n_rows : row_counts) {
    Row row{n_rows, bench.time(all, n_rows, Impl::ours), bench.time(all, n_rows, Impl::cublas)};
    rows.push_back(row);
    try {
      fused_rows.push_back({n_rows, bench.time(all_fused, n_rows, Impl::ours, true),
                            bench.time(all_fused, n_rows, Impl::cublas, true)});
    } catch (const std::exception& e) {  // keep the other numbers if graph capture fails
      std::printf("fused+graph timing failed: %s\n", e.what());
      cudaGetLastError();
      fused_rows.push_back({n_rows, {NAN, NAN, NAN}, {NAN, NAN, NAN}});
    }
    std::printf("M=%3lld fused+graph: ours %.3f ms (%.0f GB/s)  cublas %.3f ms\n", (long long)n_rows,
                fused_rows.back().ours.median_ms, step_bytes / (fused_rows.back().ours.median_ms * 1e-3) / 1e9,
                fused_rows.back().cublas.median_ms);
    std::printf("M=%3lld  ours %.3f ms (%.0f GB/s)  cublas %.3f ms (%.0f GB/s)\n", (long long)n_rows, row.ours.median_ms,
                step_bytes / (row.ours.median_ms * 1e-3) / 1e9, row.cublas.median_ms,
                step_bytes / (row.cublas.median_ms * 1e-3) / 1e9);
  }

  // Per shape, each timed over its 36 layers (its own weights every time, so L2 cannot hold them).
  struct ShapeRow {
    const char* name;
    int64_t n_out, n_in, n_rows;
    Stats ours, cublas;
    double bytes;
  };
  std::vector<ShapeRow> shape_rows;
  for (int64_t n_rows : is_configs_only ? std::vector<int64_t>{} : std::vector<int64_t>{1, 16, 64}) {
    for (const char* name : {"q_proj", "k_proj", "o_proj", "gate_proj", "down_proj", "lm_head"}) {
      std::vector<const Matrix*> same;
      for (const Matrix& m : bench.step)
        if (std::string(m.name) == name) same.push_back(&m);
      const double bytes = double(same.size()) * double(same[0]->n_out * same[0]->n_in) * 2.0;
      shape_rows.push_back({name, same[0]->n_out, same[0]->n_in, n_rows, bench.time(same, n_rows, Impl::ours),
                            bench.time(same, n_rows, Impl::cublas), bytes});
    }
  }
  const double agreement = compare_with_cublas(bench, bench.step[4], 16);
  std::printf("ours vs cuBLAS on gate_proj, M=16: relative difference %.2e\n", agreement);

  std::string report;
  char line[512];
  auto add_line = [&](const char* text) { report += text; report += "\n"; };
  add_line(bits ? "# Receipt: batch-invariant linear layers on MLX-quantized weights on the GPU (qwen3-8b shapes)\n"
                : "# Receipt: batch-invariant bf16 linear layers on the GPU (qwen3-8b shapes)\n");
  std::snprintf(line, sizeof line, "- command: `%s`", env_or("TF_COMMAND", "bench_cuda_linear").c_str());
  add_line(line);
  std::snprintf(line, sizeof line, "- commit: %s", env_or("TF_COMMIT", "unknown").c_str());
  add_line(line);
  std::snprintf(line, sizeof line, "- GPU: %s, %d SMs, L2 %d MB", properties.name, properties.multiProcessorCount,
                properties.l2CacheSize >> 20);
  add_line(line);
  std::snprintf(line, sizeof line,
                "- what: every linear of one decode step (36 layers x q/k/v/o/gate/up/down + lm_head, %.2f GB of bf16 "
                "weights, synthetic, made on the GPU), launched back to back between two CUDA events; %d warm-ups, "
                "median and [min, max] of %d repetitions",
                step_bytes / 1e9, kWarmup, kReps);
  add_line(line);
  std::snprintf(line, sizeof line, "- ceiling: device-to-device copy, 2 GiB, %.0f GB/s counting bytes read and written", copy_gbps);
  add_line(line);
  add_line("- ours: `linear` (mma.sync m16n8k16, one K order for every M); cuBLAS: `cublasGemmEx` bf16 in, "
           "f32 compute, same output types (bf16, f32 logits)");
  std::snprintf(line, sizeof line, "- agreement: ours vs cuBLAS, gate_proj at M=16, relative difference %.2e\n", agreement);
  add_line(line);
  add_line("## Whole decode step\n");
  add_line("| rows | ours ms (median [min, max]) | ours GB/s | of copy bw | cuBLAS ms | cuBLAS GB/s | ours / cuBLAS time | vs ours at 1 row |");
  add_line("| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |");
  for (const Row& row : rows) {
    const double ours_gbps = step_bytes / (row.ours.median_ms * 1e-3) / 1e9;
    const double cublas_gbps = step_bytes / (row.cublas.median_ms * 1e-3) / 1e9;
    std::snprintf(line, sizeof line, "| %lld | %.3f [%.3f, %.3f] | %.0f | %.1f%% | %.3f [%.3f, %.3f] | %.0f | %.2f | %.2fx |",
                  (long long)row.n_rows, row.ours.median_ms, row.ours.min_ms, row.ours.max_ms, ours_gbps,
                  100.0 * ours_gbps / copy_gbps, row.cublas.median_ms, row.cublas.min_ms, row.cublas.max_ms, cublas_gbps,
                  row.ours.median_ms / row.cublas.median_ms, row.ours.median_ms / rows[0].ours.median_ms);
    add_line(line);
  }
  add_line("\n## Whole decode step, q/k/v and gate/up fused (4 launches a layer), replayed as one CUDA graph\n");
  add_line("| rows | ours ms (median [min, max]) | ours GB/s | of copy bw | cuBLAS ms | cuBLAS GB/s | ours / cuBLAS time | vs ours at 1 row |");
  add_line("| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |");
  for (const Row& row : fused_rows) {
    const double ours_gbps = step_bytes / (row.ours.median_ms * 1e-3) / 1e9;
    const double cublas_gbps = step_bytes / (row.cublas.median_ms * 1e-3) / 1e9;
    std::snprintf(line, sizeof line, "| %lld | %.3f [%.3f, %.3f] | %.0f | %.1f%% | %.3f [%.3f, %.3f] | %.0f | %.2f | %.2fx |",
                  (long long)row.n_rows, row.ours.median_ms, row.ours.min_ms, row.ours.max_ms, ours_gbps,
                  100.0 * ours_gbps / copy_gbps, row.cublas.median_ms, row.cublas.min_ms, row.cublas.max_ms, cublas_gbps,
                  row.ours.median_ms / row.cublas.median_ms, row.ours.median_ms / fused_rows[0].ours.median_ms);
    add_line(line);
  }
  add_line("\n## Per shape (each over its 36 layers; lm_head once)\n");
  add_line("| shape | N x K | rows | ours ms | ours GB/s | cuBLAS ms | cuBLAS GB/s | ours / cuBLAS |");
  add_line("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
  for (const ShapeRow& s : shape_rows) {
    std::snprintf(line, sizeof line, "| %s | %lld x %lld | %lld | %.3f | %.0f | %.3f | %.0f | %.2f |", s.name,
                  (long long)s.n_out, (long long)s.n_in, (long long)s.n_rows, s.ours.median_ms,
                  s.bytes / (s.ours.median_ms * 1e-3) / 1e9, s.cublas.median_ms, s.bytes / (s.cublas.median_ms * 1e-3) / 1e9,
                  s.ours.median_ms / s.cublas.median_ms);
    add_line(line);
  }
  report += config_report;
  std::printf("\n%s", report.c_str());
  if (!receipt_path.empty()) {
    FILE* file = std::fopen(receipt_path.c_str(), "w");
    if (!file) {
      std::fprintf(stderr, "cannot write %s\n", receipt_path.c_str());
      return 1;
    }
    std::fputs(report.c_str(), file);
    std::fclose(file);
  }
  CUBLAS_CHECK(cublasDestroy(bench.handle));
  TF_CUDA_CHECK(cudaStreamDestroy(bench.stream));
  return 0;
}
