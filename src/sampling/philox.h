// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): a counter-based
// generator, so the random number for (seed, position) needs no state carried between calls.
// Header-only and host-device, so the CPU sampler and the GPU sampler draw the same numbers.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace tf {

// Plain arrays in structs rather than std::array, which device code cannot call.
struct PhiloxCounter {
  uint32_t words[4];
  TF_HOST_DEVICE uint32_t& operator[](int i) { return words[i]; }
  TF_HOST_DEVICE uint32_t operator[](int i) const { return words[i]; }
  friend bool operator==(const PhiloxCounter&, const PhiloxCounter&) = default;
};

struct PhiloxKey {
  uint32_t words[2];
  TF_HOST_DEVICE uint32_t& operator[](int i) { return words[i]; }
  TF_HOST_DEVICE uint32_t operator[](int i) const { return words[i]; }
};

TF_HOST_DEVICE inline PhiloxCounter philox_round(const PhiloxCounter& x, const PhiloxKey& key) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u;
  constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
  const uint64_t product0 = uint64_t{kMultiplier0} * x[0];
  const uint64_t product1 = uint64_t{kMultiplier1} * x[2];
  const auto hi0 = static_cast<uint32_t>(product0 >> 32);
  const auto lo0 = static_cast<uint32_t>(product0);
  const auto hi1 = static_cast<uint32_t>(product1 >> 32);
  const auto lo1 = static_cast<uint32_t>(product1);
  return {{hi1 ^ x[1] ^ key[0], lo1, hi0 ^ x[3] ^ key[1], lo0}};
}

// Ten rounds of Philox4x32 on `counter` under `key`; matches the Random123 reference.
TF_HOST_DEVICE inline PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    counter = philox_round(counter, key);
  }
  return counter;
}

// A uniform float in [0, 1) from Philox4x32-10 keyed by seed, at counter `position`.
TF_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t position) {
  const PhiloxKey key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  const PhiloxCounter counter = {
      {static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), 0u, 0u}};
  // 24 bits fill a float's mantissa exactly, so the result is in [0, 1) and never rounds to 1.
  const uint32_t bits = philox4x32_10(counter, key)[0] >> 8;
  return static_cast<float>(bits) * 0x1p-24f;
}

}  // namespace tf
