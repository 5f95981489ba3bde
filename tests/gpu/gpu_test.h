// Tiny helpers for the standalone GPU tests: checks that print PASS/FAIL, random bf16 data, norms.
// No gtest: these programs must build on the GPU machine with nvcc alone.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tf::gpu_test {

inline int& failure_count() {
  static int n = 0;
  return n;
}

// Prints one PASS/FAIL line per check; the program's exit status counts the failures.
inline void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failure_count();
}

inline int finish(const char* program) {
  std::printf("%s: %d failure(s)\n", program, failure_count());
  return failure_count() == 0 ? 0 : 1;
}

// Normal(0, scale) values rounded to bf16, returned as bits.
inline std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(normal(rng));
  return v;
}

inline std::vector<float> bf16_to_f32(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = tf::bf16_to_f32(bits[i]);
  return v;
}

// ||out - ref|| / ||ref||, in double; NaN anywhere gives +inf so it never passes.
inline double relative_error(const std::vector<float>& out, const std::vector<float>& ref) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    diff += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The gap between the best and second-best logit of a row.
inline float top2_margin(const float* row, int64_t n) {
  float best = -INFINITY, second = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] > best) {
      second = best;
      best = row[i];
    } else if (row[i] > second) {
      second = row[i];
    }
  }
  return best - second;
}

inline std::string format_error(double error) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.2e", error);
  return buffer;
}

// Bitwise equality of two spans of equal-sized elements.
template <class T>
bool bitwise_equal(const T* a, const T* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

}  // namespace tf::gpu_test
