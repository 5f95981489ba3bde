// Cost of the load-time non-finite scan: Checkpoint::open of a model directory (warm page cache)
// with its scan share, and the scan of one large synthetic bf16 tensor against a plain read of
// the same bytes (the machine's single-thread read ceiling). Medians and ranges of thread CPU time
// over repeats.
//   bench_weight_scan [MODEL_DIR] [--mib N] [--repeats N]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "loader/checkpoint.h"
#include "loader/weight_scan.h"

namespace {

// This thread's CPU time, not wall time: on a shared machine the wall clock mostly measures
// how long the scheduler kept us waiting.
struct Clock {
  using time_point = double;
  static double now() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
  }
};

double seconds_since(Clock::time_point start) { return Clock::now() - start; }

struct Summary {
  double median, low, high;
};

Summary summarize(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return {values[values.size() / 2], values.front(), values.back()};
}

// Sums 64-bit words: the cheapest full read of the buffer, a ceiling for any scan.
uint64_t read_all(const uint8_t* data, size_t n_bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i + 8 <= n_bytes; i += 8) {
    uint64_t word;
    std::memcpy(&word, data + i, 8);
    sum += word;
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir = TF_SOURCE_DIR "/models/tensorfold-code-target";
  size_t mib = 1024;
  int repeats = 7;
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    if (arg == "--mib" && i + 1 < argc) mib = std::stoul(argv[++i]);
    else if (arg == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
    else model_dir = arg;
  }

  // 1. The model directory: whole open (parse, map, scan + touch) and the scan alone.
  std::vector<double> open_s, scan_s;
  size_t n_bytes = 0, n_float_bytes = 0;
  for (int r = 0; r < repeats + 1; r++) {
    const Clock::time_point start = Clock::now();
    const tf::Checkpoint checkpoint = tf::Checkpoint::open(model_dir);
    const double opened = seconds_since(start);
    const Clock::time_point scan_start = Clock::now();
    n_bytes = n_float_bytes = 0;
    for (const std::string& name : checkpoint.names()) {
      const tf::TensorView& tensor = checkpoint.get(name);
      n_bytes += tensor.n_bytes;
      if (!tf::find_non_finite_applies(tensor.dtype)) continue;
      n_float_bytes += tensor.n_bytes;
      if (tf::find_non_finite(tensor)) std::printf("non-finite value in %s\n", name.c_str());
    }
    if (r == 0) continue;  // the first run warms the page cache
    open_s.push_back(opened);
    scan_s.push_back(seconds_since(scan_start));
  }
  const Summary open = summarize(open_s), scan = summarize(scan_s);
  std::printf("model %s: %.1f MiB of tensors, %.1f MiB scanned (floats)\n", model_dir.c_str(), n_bytes / 1048576.0,
              n_float_bytes / 1048576.0);
  std::printf("  Checkpoint::open   median %.2f ms (%.2f-%.2f)\n", open.median * 1e3, open.low * 1e3, open.high * 1e3);
  std::printf("  scan alone         median %.2f ms (%.2f-%.2f), %.2f GB/s\n", scan.median * 1e3, scan.low * 1e3,
              scan.high * 1e3, n_float_bytes / scan.median / 1e9);

  // 2. One large synthetic bf16 tensor (finite values), resident in memory.
  std::vector<uint16_t> values(mib << 19);
  for (size_t i = 0; i < values.size(); i++) values[i] = uint16_t(0x3c00 + (i * 2654435761u >> 20) % 0x0400);
  tf::TensorView tensor;
  tensor.name = "synthetic";
  tensor.dtype = tf::DType::bf16;
  tensor.shape = {int64_t(values.size())};
  tensor.data = reinterpret_cast<const uint8_t*>(values.data());
  tensor.n_bytes = values.size() * 2;
  std::vector<double> big_scan_s, read_s;
  uint64_t sink = 0;
  for (int r = 0; r < repeats; r++) {
    Clock::time_point start = Clock::now();
    if (tf::find_non_finite(tensor)) std::printf("unexpected non-finite value\n");
    big_scan_s.push_back(seconds_since(start));
    start = Clock::now();
    sink += read_all(tensor.data, tensor.n_bytes);
    read_s.push_back(seconds_since(start));
  }
  const Summary big = summarize(big_scan_s), read = summarize(read_s);
  std::printf("synthetic bf16 tensor of %zu MiB:\n", mib);
  std::printf("  scan               median %.1f ms (%.1f-%.1f), %.2f GB/s\n", big.median * 1e3, big.low * 1e3,
              big.high * 1e3, tensor.n_bytes / big.median / 1e9);
  std::printf("  plain read         median %.1f ms (%.1f-%.1f), %.2f GB/s; scan/read %.2f (sink %llu)\n",
              read.median * 1e3, read.low * 1e3, read.high * 1e3, tensor.n_bytes / read.median / 1e9,
              big.median / read.median, (unsigned long long)(sink & 1));
  return 0;
}
