// The angles of rotary position embedding come from one function, used by every backend.
#pragma once
#include <cstdint>
#include <vector>

namespace tf {

// The inverse frequencies theta^(-2i/head_dim), i < head_dim/2, computed as transformers does.
std::vector<float> rope_inverse_frequencies(int64_t head_dim, double theta);

}  // namespace tf
