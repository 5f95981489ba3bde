// The arithmetic of a seeded draw, shared by the CPU sampler and the CUDA sampler so that both pick
// the same token bit for bit. A candidate's softmax weight is an integer mass, about
// 2^31 * exp((value - best value) / temperature), computed in fixed point from one float product;
// every sum, cut and draw after it is integer, so it is exact and independent of the order or the
// parallel split in which tokens are visited.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace tf {

// The mass of the best candidate; every other mass is at most this.
constexpr uint32_t kSamplingMassOne = 0x80000000u;

// round(2^31 * 2^(-i/64)), i = 0 .. 63, as a list, so the CUDA sampler's __constant__ copy holds
// the same numbers.
#define TF_SAMPLING_EXP2_TABLE \
    2147483648u, 2124350982u, 2101467502u, 2078830522u, 2056437387u, 2034285470u, 2012372174u, 1990694927u, \
    1969251188u, 1948038440u, 1927054196u, 1906295993u, 1885761398u, 1865448001u, 1845353420u, 1825475297u, \
    1805811301u, 1786359126u, 1767116489u, 1748081133u, 1729250827u, 1710623359u, 1692196547u, 1673968228u, \
    1655936265u, 1638098541u, 1620452965u, 1602997467u, 1585730000u, 1568648537u, 1551751076u, 1535035634u, \
    1518500250u, 1502142985u, 1485961921u, 1469955159u, 1454120821u, 1438457051u, 1422962010u, 1407633882u, \
    1392470869u, 1377471191u, 1362633090u, 1347954824u, 1333434672u, 1319070932u, 1304861917u, 1290805962u, \
    1276901417u, 1263146652u, 1249540052u, 1236080024u, 1222764986u, 1209593378u, 1196563654u, 1183674286u, \
    1170923762u, 1158310587u, 1145833280u, 1133490379u, 1121280436u, 1109202018u, 1097253708u, 1085434106u

constexpr uint32_t kSamplingExp2Table[64] = {TF_SAMPLING_EXP2_TABLE};

// The scaled gap x = (value - best) / temperature as one float subtraction and one product with
// 1 / temperature (each rounded once, the same on both sides); the best token's gap is exactly 0.
TF_HOST_DEVICE inline float sampling_gap(float value, float best_value, float inverse_temperature) {
  const float difference = value - best_value;
  return difference == 0.0f ? 0.0f : difference * inverse_temperature;
}

// round(2^31 * e^x) for a gap x <= 0, within about 2^-29 relative (x itself is taken to 2^-24):
// -x log2(e) in fixed point, 2^-fraction from the table and a 4-term series, then a rounding
// shift. -inf, NaN and x <= -23 (where -x log2(e) >= 33) give 0; x in (-2^-24, 0] gives kSamplingMassOne. `exp2_table` is
// kSamplingExp2Table (or a copy of it).
TF_HOST_DEVICE inline uint32_t sampling_mass(float x, const uint32_t* exp2_table) {
  if (!(x > -23.0f)) return 0;  // also what the steps below give: a quick exit for the tail
  const auto gap = static_cast<uint32_t>(x * -0x1p24f);  // -x in Q24, truncated: < 2^29
  constexpr uint64_t kLog2eQ31 = 3098164009u;
  const uint64_t exponent = uint64_t{gap} * kLog2eQ31;  // -x log2(e) in Q55, < 2^62
  const auto whole = static_cast<uint32_t>(exponent >> 55);
  if (whole >= 32) return 0;  // 2^31 * 2^-32 rounds to 0
  const auto fraction = static_cast<uint32_t>(exponent >> 23);  // Q32
  const uint32_t top = fraction >> 26;
  constexpr uint64_t kLn2Q32 = 2977044472u;
  // 1 - 2^-g for the rest g < 2^-6: h - h^2/2 + h^3/6 - h^4/24 with h = g ln 2, all Q32.
  const auto h = static_cast<uint32_t>((uint64_t{fraction & 0x03FFFFFFu} * kLn2Q32) >> 32);
  const auto h2 = static_cast<uint32_t>((uint64_t{h} * h) >> 32);
  const auto h3 = static_cast<uint32_t>((uint64_t{h2} * h) >> 32);
  const auto h4 = static_cast<uint32_t>((uint64_t{h3} * h) >> 32);
  const uint32_t loss = h - h2 / 2 + h3 / 6 - h4 / 24;
  const uint32_t base = exp2_table[top];
  const uint32_t mantissa = base - static_cast<uint32_t>((uint64_t{base} * loss) >> 32);  // Q31, >= 2^30
  if (whole == 0) return mantissa;
  return static_cast<uint32_t>((uint64_t{mantissa} + (uint64_t{1} << (whole - 1))) >> whole);
}

// ceil(f * m) for a float f >= 0 (not NaN), exactly, saturating at 2^64 - 1.
TF_HOST_DEVICE inline uint64_t sampling_scaled_ceil(float f, uint64_t m) {
  uint32_t bits;
  static_assert(sizeof bits == sizeof f);
  __builtin_memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7FFFFFFFu) == 0 || m == 0) return 0;
  const uint32_t exponent_field = (bits >> 23) & 0xFFu;
  if (exponent_field == 0xFFu) return ~uint64_t{0};  // +inf
  // f = mantissa * 2^(power)
  const uint64_t mantissa = exponent_field == 0 ? (bits & 0x7FFFFFu) : ((bits & 0x7FFFFFu) | 0x800000u);
  const int power = exponent_field == 0 ? -149 : int(exponent_field) - 150;
  // The 88-bit product mantissa * m as high:low 64-bit words.
  const uint64_t low_part = mantissa * (m & 0xFFFFFFFFu);
  const uint64_t high_part = mantissa * (m >> 32);
  const uint64_t low = low_part + (high_part << 32);
  const uint64_t high = (high_part >> 32) + (low < low_part ? 1 : 0);
  if (power >= 0) {
    if (power >= 64 || high != 0 || (power > 0 && (low >> (64 - power)) != 0)) return ~uint64_t{0};
    return low << power;
  }
  const int shift = -power;
  if (shift >= 128) return 1;  // 0 < f * m < 1
  uint64_t quotient, remainder_bits;
  if (shift >= 64) {
    quotient = shift == 64 ? high : high >> (shift - 64);
    remainder_bits = low | (shift == 64 ? 0 : high << (128 - shift));
  } else {
    if ((high >> shift) != 0) return ~uint64_t{0};
    quotient = (low >> shift) | (shift == 0 ? 0 : high << (64 - shift));
    remainder_bits = low << (64 - shift);
  }
  return quotient + (remainder_bits != 0 ? 1 : 0);
}

// floor(w * u / 2^24) for a 24-bit uniform u (w < 2^61), exactly: the draw's target inside mass w.
TF_HOST_DEVICE inline uint64_t sampling_target(uint64_t w, uint32_t u) {
  return ((w >> 32) * u << 8) + (((w & 0xFFFFFFFFu) * u) >> 24);
}

// Ordered bits of a value for ranking: larger value, larger bits; -0 ranks as +0. Not NaN.
TF_HOST_DEVICE inline uint32_t sampling_order_bits(float value) {
  if (value == 0.0f) value = 0.0f;
  uint32_t bits;
  __builtin_memcpy(&bits, &value, sizeof bits);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

}  // namespace tf
