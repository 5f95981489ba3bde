// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): a counter-based
// generator, so the random number for (seed, position) needs no state carried between calls.
#pragma once
#include <array>
#include <cstdint>

namespace tf {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten rounds of Philox4x32 on `counter` under `key`; matches the Random123 reference.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

}  // namespace tf
