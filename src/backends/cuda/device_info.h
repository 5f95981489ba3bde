// The GPU itself: presence and architecture checks, its name, and its measured memory bandwidth.
#pragma once
#include <string>

namespace tf::cuda {

// Checks that a Hopper GPU is present; fails naming what was found otherwise.
void require_hopper_gpu();

// "NVIDIA H200, 141 GB" for receipts.
std::string gpu_description();

// The ceiling for decode: device-to-device copy of a buffer far larger than L2, counted as bytes
// read plus bytes written per second, in GB/s (median of several copies).
double measure_copy_bandwidth_gbs();

}  // namespace tf::cuda
