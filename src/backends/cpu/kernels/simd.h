// Fixed-layout SIMD helpers shared by the CPU kernels: 16 f32 lanes, weight decoders, reductions.
//
// Every kernel reduces with the same lane layout (lane l owns elements k with k % 16 == l), plain
// multiply then add (never fma: the project builds with -ffp-contract=off), and one fixed
// horizontal tree. The 16 lanes live in one AVX-512, two AVX2 or four SSE2 registers; each lane
// sees the same IEEE f32 operations in every case, so all ISA variants give bitwise identical
// results (tests force each level through set_simd_level_for_testing and compare).
#pragma once
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/dtype.h"

// Vector arguments only cross always_inline calls, so the vector-ABI notes do not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tf::cpu {

constexpr int kLanes = 16;

#define TF_INLINE inline __attribute__((always_inline))

// The instruction sets a kernel can be compiled for; results are identical across them.
enum class SimdLevel { generic, avx2, avx512 };

bool simd_level_supported(SimdLevel level);
// The level kernels dispatch to: the best supported, unless a test forced another.
SimdLevel simd_level();
// Forces a (supported) level so tests can compare the variants bit for bit.
void set_simd_level_for_testing(SimdLevel level);

// The native width every x86-64 CPU has (SSE2), for code outside the dispatched kernels.
constexpr int kGenericWidth = 4;

// Native register types holding W lanes (W = 16 for AVX-512, 8 for AVX2, 4 for SSE2).
template <int W>
struct Native;
template <>
struct Native<16> {
  typedef float f32 __attribute__((vector_size(64)));
  typedef int32_t i32 __attribute__((vector_size(64)));
  typedef uint32_t u32 __attribute__((vector_size(64)));
  typedef uint16_t u16 __attribute__((vector_size(32)));
  typedef uint8_t u8 __attribute__((vector_size(16)));
};
template <>
struct Native<8> {
  typedef float f32 __attribute__((vector_size(32)));
  typedef int32_t i32 __attribute__((vector_size(32)));
  typedef uint32_t u32 __attribute__((vector_size(32)));
  typedef uint16_t u16 __attribute__((vector_size(16)));
  typedef uint8_t u8 __attribute__((vector_size(8)));
};
template <>
struct Native<4> {
  typedef float f32 __attribute__((vector_size(16)));
  typedef int32_t i32 __attribute__((vector_size(16)));
  typedef uint32_t u32 __attribute__((vector_size(16)));
  typedef uint16_t u16 __attribute__((vector_size(8)));
  typedef uint8_t u8 __attribute__((vector_size(4)));
};

// The 16 lanes of the fixed layout, held as 16/W native registers. GCC spills vectors wider
// than the ISA's registers to memory, so each ISA gets its own W; the lanes are the same.
template <int W>
struct Lanes {
  static constexpr int kParts = kLanes / W;
  using f32 = typename Native<W>::f32;
  f32 part[kParts];
};

template <int W>
TF_INLINE Lanes<W> operator+(const Lanes<W>& a, const Lanes<W>& b) {
  Lanes<W> result;
#pragma GCC unroll 4
  for (int p = 0; p < Lanes<W>::kParts; ++p) result.part[p] = a.part[p] + b.part[p];
  return result;
}

template <int W>
TF_INLINE Lanes<W> operator*(const Lanes<W>& a, const Lanes<W>& b) {
  Lanes<W> result;
#pragma GCC unroll 4
  for (int p = 0; p < Lanes<W>::kParts; ++p) result.part[p] = a.part[p] * b.part[p];
  return result;
}

template <int W>
TF_INLINE Lanes<W> zero_lanes() {
  Lanes<W> v;
  for (int p = 0; p < Lanes<W>::kParts; ++p) v.part[p] = typename Native<W>::f32{};
  return v;
}

template <int W>
TF_INLINE Lanes<W> broadcast(float value) {
  Lanes<W> v;
  for (int p = 0; p < Lanes<W>::kParts; ++p) v.part[p] = typename Native<W>::f32{} + value;
  return v;
}

template <class Vector, class Element>
TF_INLINE Vector load_vector(const Element* p) {
  Vector v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <int W>
TF_INLINE Lanes<W> load_f32(const float* p) {
  Lanes<W> v;
  for (int p_index = 0; p_index < Lanes<W>::kParts; ++p_index)
    v.part[p_index] = load_vector<typename Native<W>::f32>(p + p_index * W);
  return v;
}

template <int W>
TF_INLINE void store_f32(float* p, const Lanes<W>& v) {
  for (int p_index = 0; p_index < Lanes<W>::kParts; ++p_index)
    std::memcpy(p + p_index * W, &v.part[p_index], sizeof v.part[p_index]);
}

// Loads n < 16 floats, zero in the other lanes: tails add +0 products in every path alike.
template <int W>
TF_INLINE Lanes<W> load_f32_partial(const float* p, int n) {
  float buffer[kLanes] = {};
  for (int i = 0; i < n; ++i) buffer[i] = p[i];
  return load_f32<W>(buffer);
}

// Small unsigned integers to float, through the signed conversion every ISA has.
template <int W>
TF_INLINE void small_u32_to_f32(const typename Native<W>::u32& v, typename Native<W>::f32* out) {
  using N = Native<W>;
  *out = __builtin_convertvector(__builtin_convertvector(v, typename N::i32), typename N::f32);
}

template <int W>
TF_INLINE Lanes<W> load_bf16(const uint16_t* p) {
  using N = Native<W>;
  Lanes<W> v;
  for (int i = 0; i < Lanes<W>::kParts; ++i) {
    auto bits = __builtin_convertvector(load_vector<typename N::u16>(p + i * W), typename N::u32);
    v.part[i] = __builtin_bit_cast(typename N::f32, bits << 16);
  }
  return v;
}

// Exact f16 -> f32 with integer operations only, so no path produces (slow) subnormal floats.
template <int W>
TF_INLINE Lanes<W> load_f16(const uint16_t* p) {
  using N = Native<W>;
  Lanes<W> v;
  for (int i = 0; i < Lanes<W>::kParts; ++i) {
    auto h = __builtin_convertvector(load_vector<typename N::u16>(p + i * W), typename N::u32);
    auto sign = (h & 0x8000u) << 16;
    auto exponent = h & 0x7c00u;
    auto mantissa = h & 0x3ffu;
    auto normal = ((h & 0x7fffu) << 13) + (112u << 23);
    auto inf_nan = 0x7f800000u | (mantissa << 13);
    typename N::f32 subnormal_value;
    small_u32_to_f32<W>(mantissa, &subnormal_value);
    auto subnormal = __builtin_bit_cast(typename N::u32, subnormal_value * (1.0f / 16777216.0f));
    auto magnitude = exponent == 0 ? subnormal : (exponent == 0x7c00u ? inf_nan : normal);
    v.part[i] = __builtin_bit_cast(typename N::f32, magnitude | sign);
  }
  return v;
}

// W lanes of 4-bit values from W/2 bytes: each byte is duplicated into two lanes by a shuffle,
// then shifted by 0 or 4 bits, so the unpacking stays in vector registers.
template <int W, size_t... J>
TF_INLINE typename Native<W>::u32 nibbles_to_lanes(const uint8_t* p, std::index_sequence<J...>) {
  typedef uint8_t u8x16 __attribute__((vector_size(16)));
  u8x16 bytes{};
  std::memcpy(&bytes, p, W / 2);
  auto doubled = __builtin_shufflevector(bytes, bytes, int(J / 2)...);
  auto wide = __builtin_convertvector(doubled, typename Native<W>::u32);
  const typename Native<W>::u32 shifts = {uint32_t(4 * (J % 2))...};
  return (wide >> shifts) & 0xfu;
}

// 16 unsigned 4-bit values from 8 bytes, lowest bits first (MLX packing on little-endian).
template <int W>
TF_INLINE Lanes<W> unpack_u4(const uint8_t* p) {
  Lanes<W> v;
  for (int i = 0; i < Lanes<W>::kParts; ++i)
    small_u32_to_f32<W>(nibbles_to_lanes<W>(p + i * W / 2, std::make_index_sequence<W>()), &v.part[i]);
  return v;
}

// 16 unsigned 8-bit values from 16 bytes, lowest bits first.
template <int W>
TF_INLINE Lanes<W> unpack_u8(const uint8_t* p) {
  using N = Native<W>;
  Lanes<W> v;
  for (int i = 0; i < Lanes<W>::kParts; ++i) {
    auto bytes = load_vector<typename N::u8>(p + i * W);
    small_u32_to_f32<W>(__builtin_convertvector(bytes, typename N::u32), &v.part[i]);
  }
  return v;
}

// MLX affine dequantization, rounded in f32: scale * q, then + bias.
template <int W>
TF_INLINE Lanes<W> dequantize(const Lanes<W>& q, const Lanes<W>& scale, const Lanes<W>& bias) {
  return scale * q + bias;
}

// The one horizontal order: halves added pairwise, 16 -> 8 -> 4 -> 2 -> 1.
template <int W>
TF_INLINE float horizontal_sum(const Lanes<W>& v) {
  float t[kLanes];
  store_f32<W>(t, v);
  for (int i = 0; i < 8; ++i) t[i] = t[i] + t[i + 8];
  for (int i = 0; i < 4; ++i) t[i] = t[i] + t[i + 4];
  for (int i = 0; i < 2; ++i) t[i] = t[i] + t[i + 2];
  return t[0] + t[1];
}

// sum a[k]*b[k] over k < n in the fixed lane layout; the order depends on n alone.
template <int W>
TF_INLINE float dot_fixed_order(const float* a, const float* b, int64_t n) {
  Lanes<W> acc = zero_lanes<W>();
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) acc = acc + load_f32<W>(a + k) * load_f32<W>(b + k);
  if (k < n) acc = acc + load_f32_partial<W>(a + k, int(n - k)) * load_f32_partial<W>(b + k, int(n - k));
  return horizontal_sum(acc);
}

// Instantiations of a kernel body per ISA, each with its native width W. The body is an
// always_inline template lambda so that all of it is compiled for the caller's target.
template <class Body>
__attribute__((target("avx512f"))) void run_simd_avx512(const Body& body) {
  body.template operator()<16>();
}

template <class Body>
__attribute__((target("avx2"))) void run_simd_avx2(const Body& body) {
  body.template operator()<8>();
}

template <class Body>
void run_simd_generic(const Body& body) {
  body.template operator()<kGenericWidth>();
}

// Calls body.template operator()<W>() compiled for simd_level().
template <class Body>
void run_with_simd_level(const Body& body) {
  switch (simd_level()) {
    case SimdLevel::avx512: run_simd_avx512(body); break;
    case SimdLevel::avx2: run_simd_avx2(body); break;
    default: run_simd_generic(body); break;
  }
}

}  // namespace tf::cpu

#pragma GCC diagnostic pop
