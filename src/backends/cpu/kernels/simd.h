// Fixed-layout SIMD helpers shared by the CPU kernels: 16 f32 lanes, weight decoders, reductions.
//
// Every kernel reduces in 16 f32 lanes with a layout fixed by K alone and one fixed horizontal
// tree. The 16 lanes live in one AVX-512, two AVX2 or four SSE2 registers. The compiler never
// fuses a*b+c (-ffp-contract=off); only madd() does, where the level has FMA. So levels of one
// numerics give bitwise identical results: generic (multiply, then add) on its own, avx2 and
// avx512 (fused) together (tests force each level and compare).
#pragma once
#include <cstdint>
#include <string>
#include <cstring>
#include <utility>

#include "core/dtype.h"

// Vector arguments only cross always_inline calls, so the vector-ABI notes do not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tf::cpu {

constexpr int kLanes = 16;

#define TF_INLINE inline __attribute__((always_inline))

// The instruction sets a kernel can be compiled for (avx2 includes FMA). avx512_bf16 is avx512
// whose linear layers take bf16 weights with the AVX-512 BF16 dot product: the inputs rounded to
// bf16 once, each pair's two exact products added in turn (see linear.cpp). That gives other bits
// than avx512 for those layers, so it is a numerics of its own.
enum class SimdLevel { generic, avx2, avx512, avx512_bf16 };

bool simd_level_supported(SimdLevel level);
// Whether the level's madd() is one fused multiply-add (avx2, avx512) or a multiply then an add.
constexpr bool simd_level_fuses(SimdLevel level) { return level != SimdLevel::generic; }
// Whether bf16 weights meet bf16-rounded inputs in the dot-product instruction.
constexpr bool simd_level_has_bf16_dot(SimdLevel level) { return level == SimdLevel::avx512_bf16; }
// "generic", "avx2", "avx512" or "avx512-bf16".
const char* simd_level_name(SimdLevel level);
// What decides the bits of the CPU kernels on this machine, e.g. "avx512, fused multiply-add":
// fixed at start-up, the same for every row count, thread count and batch. allow_bf16_dot false
// describes the level after turn_off_bf16_dot().
std::string cpu_numerics_description(bool allow_bf16_dot = true);
// Leaves the bf16 dot product for f32 inputs (avx512_bf16 becomes avx512), for the rest of the process.
void turn_off_bf16_dot();
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
TF_INLINE Lanes<W> operator-(const Lanes<W>& a, const Lanes<W>& b) {
  Lanes<W> result;
#pragma GCC unroll 4
  for (int p = 0; p < Lanes<W>::kParts; ++p) result.part[p] = a.part[p] - b.part[p];
  return result;
}

template <int W>
TF_INLINE Lanes<W> operator*(const Lanes<W>& a, const Lanes<W>& b) {
  Lanes<W> result;
#pragma GCC unroll 4
  for (int p = 0; p < Lanes<W>::kParts; ++p) result.part[p] = a.part[p] * b.part[p];
  return result;
}

// acc + a * b: fused (one rounding) when kFused, else multiply then add. Only the levels with FMA
// instantiate the fused form (W of 8 or 16). It is written as the instruction itself because the
// intrinsics refuse to inline through these target-neutral templates; the registers are chosen
// where the template lands, inside the level's target function.
template <bool kFused, int W>
TF_INLINE Lanes<W> madd(const Lanes<W>& acc, const Lanes<W>& a, const Lanes<W>& b) {
  if constexpr (!kFused) {
    return acc + a * b;
  } else {
    static_assert(W == 8 || W == 16, "fused multiply-add needs AVX2 or AVX-512 registers");
    Lanes<W> result;
#pragma GCC unroll 4
    for (int p = 0; p < Lanes<W>::kParts; ++p) {
      typename Native<W>::f32 sum = acc.part[p];  // a plain vector, so no part is read through memory
      asm("vfmadd231ps %2, %1, %0" : "+v"(sum) : "v"(a.part[p]), "v"(b.part[p]));
      result.part[p] = sum;
    }
    return result;
  }
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
  // A splat, which a multiply can take from memory; `f32{} + value` added too (and turned -0 into +0).
  for (int p = 0; p < Lanes<W>::kParts; ++p)
    for (int i = 0; i < W; ++i) v.part[p][i] = value;
  return v;
}

// acc + a * (*b), *b in every lane: a multiply, then an add (two roundings). AVX-512 takes *b from
// memory in the multiply, and the pair is one statement: GCC otherwise loads a run of such b as
// whole vectors and broadcasts each with a permute (a shuffle port's work), or hoists the
// multiplies of a long run above their adds and spills the products.
template <int W>
TF_INLINE Lanes<W> add_product_broadcast(const Lanes<W>& acc, const Lanes<W>& a, const float* b) {
  if constexpr (W == 16) {
    Lanes<W> result;
    typename Native<W>::f32 sum = acc.part[0], product;
    asm("vmulps %3%{1to16%}, %2, %1\n\tvaddps %1, %0, %0" : "+v"(sum), "=&v"(product) : "v"(a.part[0]), "m"(*b));
    result.part[0] = sum;
    return result;
  } else {
    return acc + a * broadcast<W>(*b);
  }
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

// Exact f16 -> f32 of the low 16 bits of each lane, with integer operations only, so no path
// produces (slow) subnormal floats.
template <int W>
TF_INLINE typename Native<W>::f32 f16_bits_to_f32(const typename Native<W>::u32& h) {
  using N = Native<W>;
  auto sign = (h & 0x8000u) << 16;
  auto exponent = h & 0x7c00u;
  auto mantissa = h & 0x3ffu;
  auto normal = ((h & 0x7fffu) << 13) + (112u << 23);
  auto inf_nan = 0x7f800000u | (mantissa << 13);
  typename N::f32 subnormal_value;
  small_u32_to_f32<W>(mantissa, &subnormal_value);
  auto subnormal = __builtin_bit_cast(typename N::u32, subnormal_value * (1.0f / 16777216.0f));
  auto magnitude = exponent == 0 ? subnormal : (exponent == 0x7c00u ? inf_nan : normal);
  return __builtin_bit_cast(typename N::f32, magnitude | sign);
}

// W bytes (or W 16-bit words) zero-extended to W 32-bit lanes. GCC 12 lowers the generic
// conversion to a byte-by-byte extraction, so the AVX levels name the one instruction that does it
// (their target functions are where these land; see madd).
template <int W>
TF_INLINE typename Native<W>::u32 widen_u8(const uint8_t* p) {
  typename Native<W>::u32 out;
  if constexpr (W == 16) {
    asm("vpmovzxbd %1, %0" : "=v"(out) : "m"(*reinterpret_cast<const uint8_t(*)[16]>(p)));
  } else if constexpr (W == 8) {
    asm("vpmovzxbd %1, %0" : "=v"(out) : "m"(*reinterpret_cast<const uint8_t(*)[8]>(p)));
  } else {
    out = __builtin_convertvector(load_vector<typename Native<W>::u8>(p), typename Native<W>::u32);
  }
  return out;
}
template <int W>
TF_INLINE typename Native<W>::u32 widen_u16(const void* p) {
  typename Native<W>::u32 out;
  if constexpr (W == 16) {
    asm("vpmovzxwd %1, %0" : "=v"(out) : "m"(*reinterpret_cast<const uint16_t(*)[16]>(p)));
  } else if constexpr (W == 8) {
    asm("vpmovzxwd %1, %0" : "=v"(out) : "m"(*reinterpret_cast<const uint16_t(*)[8]>(p)));
  } else {
    out = __builtin_convertvector(load_vector<typename Native<W>::u16>(p), typename Native<W>::u32);
  }
  return out;
}

// Lane i: table's lane (index's lane i) & 15: one vpermps, the AVX-512 levels only.
template <int W>
TF_INLINE typename Native<W>::f32 lookup16(const typename Native<W>::f32& table, const typename Native<W>::u32& index) {
  static_assert(W == 16, "lookup16: AVX-512 only");
  typename Native<W>::f32 out;
  asm("vpermps %1, %2, %0" : "=v"(out) : "v"(table), "v"(index));
  return out;
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

// Four horizontal sums at once, in exactly horizontal_sum's tree (lane i + lane i+8, then +4,
// +2, +1), with shuffles instead of a store and scalar adds. out[j] = horizontal_sum(v[j]).
template <int W>
TF_INLINE void horizontal_sum4(const Lanes<W>* v, float* out) {
  typedef float f32x8 __attribute__((vector_size(32)));
  typedef float f32x4 __attribute__((vector_size(16)));
  f32x8 s8[4];
  for (int j = 0; j < 4; ++j) {
    if constexpr (W == 16) {
      const auto& x = v[j].part[0];
      s8[j] = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
              __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
    } else if constexpr (W == 8) {
      s8[j] = v[j].part[0] + v[j].part[1];
    } else {
      const f32x4 low = v[j].part[0] + v[j].part[2], high = v[j].part[1] + v[j].part[3];
      s8[j] = __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7);
    }
  }
  const f32x8 s4_ab = __builtin_shufflevector(s8[0], s8[1], 0, 1, 2, 3, 8, 9, 10, 11) +
                      __builtin_shufflevector(s8[0], s8[1], 4, 5, 6, 7, 12, 13, 14, 15);
  const f32x8 s4_cd = __builtin_shufflevector(s8[2], s8[3], 0, 1, 2, 3, 8, 9, 10, 11) +
                      __builtin_shufflevector(s8[2], s8[3], 4, 5, 6, 7, 12, 13, 14, 15);
  const f32x8 s2 = __builtin_shufflevector(s4_ab, s4_cd, 0, 1, 4, 5, 8, 9, 12, 13) +
                   __builtin_shufflevector(s4_ab, s4_cd, 2, 3, 6, 7, 10, 11, 14, 15);
  const f32x4 s1 = __builtin_shufflevector(s2, s2, 0, 2, 4, 6) + __builtin_shufflevector(s2, s2, 1, 3, 5, 7);
  std::memcpy(out, &s1, sizeof s1);
}

// Sixteen horizontal sums at once from single-register (W = 16) lanes, in exactly horizontal_sum's
// tree: each level adds the same pairs (lane i + lane i+8, then +4, +2, +1), with two-source
// permutes packing the halves of two vectors into one. out[j] = horizontal_sum(v[j]).
TF_INLINE void horizontal_sum16(const Lanes<16>* v, float* out) {
  using V = Native<16>::f32;
  V s1[8], s2[4], s3[2];
  for (int i = 0; i < 8; ++i) {  // [out 2i | out 2i+1], 8 lanes each
    const V a = v[2 * i].part[0], b = v[2 * i + 1].part[0];
    s1[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
            __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  }
  for (int i = 0; i < 4; ++i) {  // outs 4i .. 4i+3, 4 lanes each
    const V a = s1[2 * i], b = s1[2 * i + 1];
    s2[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
            __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  }
  for (int i = 0; i < 2; ++i) {  // outs 8i .. 8i+7, 2 lanes each
    const V a = s2[2 * i], b = s2[2 * i + 1];
    s3[i] = __builtin_shufflevector(a, b, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
            __builtin_shufflevector(a, b, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  }
  const V sums = __builtin_shufflevector(s3[0], s3[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
                 __builtin_shufflevector(s3[0], s3[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  std::memcpy(out, &sums, sizeof sums);
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
__attribute__((target("avx2,fma"))) void run_simd_avx2(const Body& body) {
  body.template operator()<8>();
}

template <class Body>
void run_simd_generic(const Body& body) {
  body.template operator()<kGenericWidth>();
}

template <class Vector, size_t... J>
TF_INLINE Vector even_elements(const Vector& a, const Vector& b, std::index_sequence<J...>) {
  return __builtin_shufflevector(a, b, int(2 * J)...);
}
template <class Vector, size_t... J>
TF_INLINE Vector odd_elements(const Vector& a, const Vector& b, std::index_sequence<J...>) {
  return __builtin_shufflevector(a, b, int(2 * J + 1)...);
}

// One f32 word per lane rounded to bf16 in its high half (to nearest even; a NaN stays a NaN), as
// f32_to_bf16 rounds.
TF_INLINE Native<16>::u32 round_to_bf16_high(const Native<16>::u32& u) {
  const auto is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return is_nan ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
}

// 32 consecutive floats as 16 words of bf16 pairs, element 2i in word i's low half and 2i + 1 in
// its high half: the operand layout of the AVX-512 BF16 dot product.
TF_INLINE Native<16>::u32 bf16_pairs(const float* p) {
  using Words = Native<16>::u32;
  const Words first = round_to_bf16_high(load_vector<Words>(p));
  const Words second = round_to_bf16_high(load_vector<Words>(p + kLanes));
  const Words even = even_elements(first, second, std::make_index_sequence<16>());
  const Words odd = odd_elements(first, second, std::make_index_sequence<16>());
  return (even >> 16) | (odd & 0xffff0000u);
}

// acc + the products of 16 pairs of bf16, lane by lane (the pair's two exact products added in
// turn): the instruction written out for the reason madd() gives. Only avx512_bf16 code calls it.
TF_INLINE Native<16>::f32 bf16_dot_add(Native<16>::f32 acc, const Native<16>::u32& a, const Native<16>::u32& b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// Calls body.template operator()<W>() compiled for simd_level().
template <class Body>
void run_with_simd_level(const Body& body) {
  switch (simd_level()) {
    case SimdLevel::avx512:
    case SimdLevel::avx512_bf16: run_simd_avx512(body); break;
    case SimdLevel::avx2: run_simd_avx2(body); break;
    default: run_simd_generic(body); break;
  }
}

}  // namespace tf::cpu

#pragma GCC diagnostic pop
