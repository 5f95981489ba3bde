// The decode ceiling on the CPU: how fast the pool's threads read a buffer as large as the weights.
#pragma once
#include <cstdint>

namespace tf::cpu {

// GB/s (1e9 bytes per second), the median of several whole passes over n_bytes with every thread
// of an n_threads pool (0 = one per core), in the widest loads the machine has. A buffer the size of
// what a decode step reads, not one far larger: part of it is served from the last-level cache,
// as part of the weights is.
double measure_read_bandwidth_gbs(int64_t n_bytes, int n_threads);

}  // namespace tf::cpu
