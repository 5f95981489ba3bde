// Philox4x32-10 and the uniform float the sampler draws from it.
#include "sampling/philox.h"

#include "sampling/sampler.h"

namespace tf {
namespace {

constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

PhiloxCounter philox_round(const PhiloxCounter& x, const PhiloxKey& key) {
  const uint64_t product0 = uint64_t{kMultiplier0} * x[0];
  const uint64_t product1 = uint64_t{kMultiplier1} * x[2];
  const auto hi0 = static_cast<uint32_t>(product0 >> 32);
  const auto lo0 = static_cast<uint32_t>(product0);
  const auto hi1 = static_cast<uint32_t>(product1 >> 32);
  const auto lo1 = static_cast<uint32_t>(product1);
  return {hi1 ^ x[1] ^ key[0], lo1, hi0 ^ x[3] ^ key[1], lo0};
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    counter = philox_round(counter, key);
  }
  return counter;
}

float philox_uniform(uint64_t seed, uint64_t position) {
  const PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const PhiloxCounter counter = {static_cast<uint32_t>(position),
                                 static_cast<uint32_t>(position >> 32), 0u, 0u};
  // 24 bits fill a float's mantissa exactly, so the result is in [0, 1) and never rounds to 1.
  const uint32_t bits = philox4x32_10(counter, key)[0] >> 8;
  return static_cast<float>(bits) * 0x1p-24f;
}

}  // namespace tf
