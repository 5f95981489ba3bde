// Rotary position embedding (the rotate-half form Qwen uses), angles from models/rope_frequencies.h.
#pragma once
#include <cstdint>
#include <vector>

namespace tf::cpu {

// Rotates x: [n_rows][n_heads][head_dim] in place; row r is at logical position positions[r].
void rope_apply(float* x, int64_t n_rows, int64_t n_heads, int64_t head_dim,
                const int32_t* positions, const std::vector<float>& inverse_frequencies);

}  // namespace tf::cpu
