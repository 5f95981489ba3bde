// Environment switches of the CUDA backend (TF_CUDA_GRAPHS, TF_CUDA_PDL): on
// unless set to "0", so a benchmark can measure what each is worth in the same binary.
#pragma once
#include <cstdlib>
#include <cstring>

namespace tf::cuda {

inline bool is_switched_on(const char* variable) {
  const char* value = std::getenv(variable);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

}  // namespace tf::cuda
