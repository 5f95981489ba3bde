// expf over many floats at once, bit for bit what std::exp(float) returns: attention's
// probabilities and SwiGLU's sigmoid call it for every element, and a scalar call each cost a
// large share of a step. The avx2 and avx512 levels run on machines where glibc's expf is its
// FMA variant: the same double-precision steps (scale by 32/ln 2, round with a shift, a 32-entry
// table of 2^(i/32), a cubic in the remainder, fused where that variant fuses), the same special
// cases, 4 or 8 doubles a register. The generic level calls std::exp itself. test_kernels checks
// every level against std::exp over a sweep of all 2^32 inputs. Were some other libm to differ,
// the equalities would still hold: which elements take the vector path depends only on a row's
// own element count, never on its neighbours (and that test would name the machine).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/simd.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tf::cpu {
namespace exp_detail {

constexpr double kScale = 0x1.71547652b82fep+5;  // 32 / ln 2
constexpr double kShift = 0x1.8p+52;             // adding it rounds to an integer (ties to even)
constexpr double kC0 = 0x1.c6af84b912394p-20;    // 2^(r/32) ~ 1 + r (kC2 + r (kC1 + r kC0))
constexpr double kC1 = 0x1.ebfce50fac4f3p-13;
constexpr double kC2 = 0x1.62e42ff0c52d6p-6;
constexpr float kOverflowAbove = 0x1.62e42ep6f;     // log(2^128)
constexpr float kZeroBelow = -0x1.9fe368p6f;        // log(2^-150)
constexpr float kTinyBelow = -0x1.9d1d9ep6f;        // log(2^-149): the smallest subnormal, as glibc rounds it
// 2^(i/32) rounded to double, less i << 47 (the shifted integer part adds it back).
constexpr uint64_t kTable[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

// Half of a W-lane float register as doubles (W/2 of them).
template <int W>
struct Half {
  typedef float f32 __attribute__((vector_size(W * 2)));
  typedef double f64 __attribute__((vector_size(W * 4)));
  typedef uint64_t u64 __attribute__((vector_size(W * 4)));
};

// acc += a * b with one rounding (written as the instruction: see madd in simd.h).
template <class V>
TF_INLINE void fuse_into(V& acc, const V& a, const V& b) {
  asm("vfmadd231pd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

template <int W>
TF_INLINE void exp_half(typename Half<W>::f32& x) {
  using H = Half<W>;
  using f64 = typename H::f64;
  using u64 = typename H::u64;
  const f64 xd = __builtin_convertvector(x, f64);
  const f64 scale = f64{} + kScale, shift = f64{} + kShift;
  f64 shifted = shift;
  fuse_into(shifted, scale, xd);  // k + shift, k = round(x * 32 / ln 2)
  const u64 k = __builtin_bit_cast(u64, shifted);
  const f64 kd = shifted - shift;
  f64 r = -kd;
  fuse_into(r, scale, xd);  // x * 32 / ln 2 - k
  u64 bits = k << 47;
  if constexpr (W == 16) {
    // The table in four registers: two-source permutes pick entries 0-15 and 16-31, bit 4 chooses.
    u64 table[4];
    std::memcpy(table, kTable, sizeof table);
    const u64 low = __builtin_shuffle(table[0], table[1], k), high = __builtin_shuffle(table[2], table[3], k);
    bits += (k & 16) != 0 ? high : low;
  } else {
    for (int i = 0; i < W / 2; ++i) bits[i] += kTable[k[i] & 31];
  }
  const f64 s = __builtin_bit_cast(f64, bits);  // 2^(k/32)
  f64 z = f64{} + kC1, y = f64{} + 1.0;
  fuse_into(z, r, f64{} + kC0);
  fuse_into(y, r, f64{} + kC2);
  fuse_into(y, z, r * r);
  x = __builtin_convertvector(y * s, typename H::f32);
}

}  // namespace exp_detail

// x = exp(x) for each of W floats (W = 8 or 16: a level with FMA). Vectors pass by reference only
// (a vector returned by value has an ABI that depends on the target).
template <int W>
TF_INLINE void exp_native(typename Native<W>::f32& x) {
  using namespace exp_detail;
  using f32 = typename Native<W>::f32;
  using u32 = typename Native<W>::u32;
  using half = typename Half<W>::f32;
  // The halves by shuffles: element-wise copy loops compiled to a chain of scalar inserts.
  half low, high;
  f32 e;
  if constexpr (W == 16) {
    low = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7);
    high = __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
    exp_half<W>(low);
    exp_half<W>(high);
    e = __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  } else {
    low = __builtin_shufflevector(x, x, 0, 1, 2, 3);
    high = __builtin_shufflevector(x, x, 4, 5, 6, 7);
    exp_half<W>(low);
    exp_half<W>(high);
    e = __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7);
  }
  // glibc's special cases: NaN and infinities, overflow, underflow.
  const u32 bits = __builtin_bit_cast(u32, x);
  const f32 zero = f32{}, infinity = zero + HUGE_VALF, tiny = zero + 0x1p-149f;
  e = (bits & 0x7fffffffu) >= 0x7f800000u ? x + x : e;
  e = x > kOverflowAbove ? infinity : e;
  e = x < kTinyBelow ? tiny : e;
  e = x < kZeroBelow ? zero : e;  // -infinity too
  x = e;
}

// values[i] = std::exp(values[i]) for i < n, bit for bit.
template <int W>
TF_INLINE void exp_in_place(float* values, int64_t n) {
  int64_t i = 0;
  if constexpr (W == 8 || W == 16) {
    using f32 = typename Native<W>::f32;
    for (; i + W <= n; i += W) {
      f32 x;
      std::memcpy(&x, values + i, sizeof x);
      exp_native<W>(x);
      std::memcpy(values + i, &x, sizeof x);
    }
  }
  for (; i < n; ++i) values[i] = std::exp(values[i]);
}

}  // namespace tf::cpu

#pragma GCC diagnostic pop
