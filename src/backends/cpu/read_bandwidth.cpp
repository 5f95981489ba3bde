#include "backends/cpu/read_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "backends/cpu/kernels/simd.h"
#include "core/thread_pool.h"

namespace tf::cpu {

double measure_read_bandwidth_gbs(int64_t n_bytes, int n_threads) {
  constexpr int64_t kPieceFloats = 16384;  // 64 KB: the unit of work a thread claims
  const int64_t n_pieces = std::max<int64_t>(1, (n_bytes / 4 + kPieceFloats - 1) / kPieceFloats);
  std::vector<float> buffer(static_cast<size_t>(n_pieces * kPieceFloats), 1.0f);  // touched here, before the timing
  std::vector<float> sinks(static_cast<size_t>(n_pieces));
  ThreadPool pool(n_threads);
  const auto pass = [&] {
    pool.parallel_for(n_pieces, [&](int64_t begin, int64_t end) {
      run_with_simd_level([&]<int W>() __attribute__((always_inline)) {
        for (int64_t piece = begin; piece < end; ++piece) {
          const float* p = buffer.data() + piece * kPieceFloats;
          Lanes<W> acc[4] = {zero_lanes<W>(), zero_lanes<W>(), zero_lanes<W>(), zero_lanes<W>()};
          for (int64_t i = 0; i < kPieceFloats; i += 4 * kLanes)
            for (int a = 0; a < 4; ++a) acc[a] = acc[a] + load_f32<W>(p + i + a * kLanes);
          sinks[size_t(piece)] = horizontal_sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
        }
      });
    });
  };
  pass();  // warms the caches as a previous decode step would have
  std::vector<double> rates;
  for (int rep = 0; rep < 15; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(double(buffer.size() * sizeof(float)) / seconds / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace tf::cpu
