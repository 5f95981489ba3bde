// Probe: does Hopper's wgmma add a k16 step with the same bits as mma.sync m16n8k16, and does the
// order of the 16 products inside one instruction change its bits? The staged linear kernel keeps
// mma.sync's K grouping so prefill matches decode bit for bit; a wgmma kernel could only do the same
// if both answers are "same bits". Part two runs chains of k16 steps at N = 8 ... 64 through both
// instructions. Prints mismatch counts for each comparison; exits 2 where bits that should agree
// differ (the linear kernels rely on them), 1 on a CUDA error.
// Built as probe_mma_bits with the CUDA build; run it on the GPU machine (bench/receipts/h100-mma-bits-probe.md).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/wgmma.cuh"  // the descriptor and fences the linear kernel uses

namespace {

constexpr int kM = 64, kN = 8, kK = 16;  // one wgmma m64n8k16; four mma.sync m16n8k16 (one a warp)

__device__ __forceinline__ uint32_t pair(const uint16_t* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 16); }

// One trial's operands (each block of 128 threads runs one): A [64][K], B as [N][K] (n rows, K
// contiguous), C and D [64][N].
struct Trial {
  const uint16_t* a;
  const uint16_t* b;
  const float* c;
  float* d;
};
template <int N, int K>
__device__ Trial trial(const uint16_t* a_all, const uint16_t* b_all, const float* c_all, float* d_all) {
  const size_t t = blockIdx.x;
  return {a_all + t * kM * K, b_all + t * N * K, c_all + t * kM * N, d_all + t * kM * N};
}

// Copies src [rows][K] into shared memory as 8 x 8 core matrices, core matrix (row / 8, k / 8) at
// (row / 8) * row_step + (k / 8) * k_step bytes, and makes the writes visible to wgmma.
__device__ void to_core_matrices(uint16_t* shared, const uint16_t* src, int rows, int K, uint32_t row_step,
                                 uint32_t k_step) {
  for (int i = threadIdx.x; i < rows * K; i += blockDim.x) {
    const int row = i / K, k = i % K;
    shared[((row / 8) * row_step + (k / 8) * k_step) / 2 + (row % 8) * 8 + k % 8] = src[i];
  }
  tf::cuda::fence_async_shared();
}

// wgmma m64n8k16 with B (and, if kAShared, A) in shared memory as 8x8 core matrices (8 rows of 16
// bytes). Core matrix (row block i, k block j) sits at i * row_step + j * k_step bytes; the
// descriptor gets (leading, stride) as given, so a run can tell which offset the hardware reads as
// the K direction.
template <bool kAShared>
__global__ void wgmma_kernel(const uint16_t* a_all, const uint16_t* b_all, const float* c_all, float* d_all,
                             uint32_t row_step, uint32_t k_step, uint32_t leading, uint32_t stride) {
  __shared__ __align__(1024) uint16_t a_s[8192];
  __shared__ __align__(1024) uint16_t b_s[8192];
  const auto [a, b, c, d] = trial<kN, kK>(a_all, b_all, c_all, d_all);
  to_core_matrices(a_s, a, kM, kK, row_step, k_step);
  to_core_matrices(b_s, b, kN, kK, row_step, k_step);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * warp + g, r1 = r0 + 8;
  float acc[4] = {c[r0 * kN + 2 * t], c[r0 * kN + 2 * t + 1], c[r1 * kN + 2 * t], c[r1 * kN + 2 * t + 1]};
  const uint64_t b_desc = tf::cuda::wgmma_descriptor(b_s, leading, stride);
  tf::cuda::wgmma_fence();
  if constexpr (kAShared) {
    const uint64_t a_desc = tf::cuda::wgmma_descriptor(a_s, leading, stride);
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "l"(a_desc), "l"(b_desc), "r"(1));
  } else {
    const uint32_t a0 = pair(a + r0 * kK + 2 * t), a1 = pair(a + r1 * kK + 2 * t);
    const uint32_t a2 = pair(a + r0 * kK + 2 * t + 8), a3 = pair(a + r1 * kK + 2 * t + 8);
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b_desc), "r"(1));
  }
  tf::cuda::wgmma_commit();
  tf::cuda::wgmma_wait<0>();
  d[r0 * kN + 2 * t] = acc[0];
  d[r0 * kN + 2 * t + 1] = acc[1];
  d[r1 * kN + 2 * t] = acc[2];
  d[r1 * kN + 2 * t + 1] = acc[3];
}

// ---- Part two: wider N and chains of k16 steps ----
// One trial: A [64][64], B as [N][64], C [64][N]; D = C plus four k16 steps, accumulated in the
// accumulator registers (wgmma, A from registers) or through mma.sync's C operand. If an element's
// bits depend on neither N nor the instruction, the two agree everywhere.
constexpr int kChainK = 64;

// m64nNk16, accumulating (scale-d 1), A from registers, B from a descriptor: d holds N / 2 floats.
__device__ __forceinline__ void wgmma_step(float (&d)[4], const uint32_t (&a)[4], uint64_t b_desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}
__device__ __forceinline__ void wgmma_step(float (&d)[8], const uint32_t (&a)[4], uint64_t b_desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}
__device__ __forceinline__ void wgmma_step(float (&d)[16], const uint32_t (&a)[4], uint64_t b_desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}
__device__ __forceinline__ void wgmma_step(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}

template <int N>
__global__ void wgmma_chain_kernel(const uint16_t* a_all, const uint16_t* b_all, const float* c_all, float* d_all) {
  __shared__ __align__(1024) uint16_t b_s[N * kChainK];
  const auto [a, b, c, d] = trial<N, kChainK>(a_all, b_all, c_all, d_all);
  to_core_matrices(b_s, b, N, kChainK, 128, N * 16);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * warp + g, r1 = r0 + 8;
  float acc[N / 2];
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    acc[4 * j] = c[r0 * N + 8 * j + 2 * t];
    acc[4 * j + 1] = c[r0 * N + 8 * j + 2 * t + 1];
    acc[4 * j + 2] = c[r1 * N + 8 * j + 2 * t];
    acc[4 * j + 3] = c[r1 * N + 8 * j + 2 * t + 1];
  }
  tf::cuda::wgmma_fence();
#pragma unroll
  for (int step = 0; step < kChainK / 16; ++step) {
    const int k0 = 16 * step;
    const uint32_t regs[4] = {pair(a + r0 * kChainK + k0 + 2 * t), pair(a + r1 * kChainK + k0 + 2 * t),
                              pair(a + r0 * kChainK + k0 + 2 * t + 8), pair(a + r1 * kChainK + k0 + 2 * t + 8)};
    wgmma_step(acc, regs, tf::cuda::wgmma_descriptor(b_s + 2 * step * N * 8, N * 16, 128));
  }
  tf::cuda::wgmma_commit();
  tf::cuda::wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    d[r0 * N + 8 * j + 2 * t] = acc[4 * j];
    d[r0 * N + 8 * j + 2 * t + 1] = acc[4 * j + 1];
    d[r1 * N + 8 * j + 2 * t] = acc[4 * j + 2];
    d[r1 * N + 8 * j + 2 * t + 1] = acc[4 * j + 3];
  }
}

// One trial a block of 128 threads: A [64][K], B as [N][K] (n rows, K contiguous), C [64][N]; warp w
// computes rows 16w..16w+15 with mma.sync, the running sum through C, K / 16 steps.
template <int N, int K = kChainK>
__global__ void mma_chain_kernel(const uint16_t* a_all, const uint16_t* b_all, const float* c_all, float* d_all) {
  const auto [a, b, c, d] = trial<N, K>(a_all, b_all, c_all, d_all);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = 16 * warp + g, r1 = r0 + 8;
  for (int j = 0; j < N / 8; ++j) {
    float acc[4] = {c[r0 * N + 8 * j + 2 * t], c[r0 * N + 8 * j + 2 * t + 1], c[r1 * N + 8 * j + 2 * t],
                    c[r1 * N + 8 * j + 2 * t + 1]};
    const uint16_t* column = b + (8 * j + g) * K;
    for (int step = 0; step < K / 16; ++step) {
      const int k0 = 16 * step;
      asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "r"(pair(a + r0 * K + k0 + 2 * t)), "r"(pair(a + r1 * K + k0 + 2 * t)),
            "r"(pair(a + r0 * K + k0 + 2 * t + 8)), "r"(pair(a + r1 * K + k0 + 2 * t + 8)),
            "r"(pair(column + k0 + 2 * t)), "r"(pair(column + k0 + 2 * t + 8)));
    }
    d[r0 * N + 8 * j + 2 * t] = acc[0];
    d[r0 * N + 8 * j + 2 * t + 1] = acc[1];
    d[r1 * N + 8 * j + 2 * t] = acc[2];
    d[r1 * N + 8 * j + 2 * t + 1] = acc[3];
  }
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#define CHECK(call)                                                                         \
  do {                                                                                      \
    cudaError_t e = (call);                                                                 \
    if (e != cudaSuccess) {                                                                 \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

struct Data {
  std::vector<uint16_t> a, b;
  std::vector<float> c;
};

// Same products, k slot j takes input perm[j].
Data permuted(const Data& in, const int (&perm)[kK], int trials) {
  Data out = in;
  for (int s = 0; s < trials; ++s) {
    for (int r = 0; r < kM; ++r)
      for (int j = 0; j < kK; ++j) out.a[(size_t(s) * kM + r) * kK + j] = in.a[(size_t(s) * kM + r) * kK + perm[j]];
    for (int r = 0; r < kN; ++r)
      for (int j = 0; j < kK; ++j) out.b[(size_t(s) * kN + r) * kK + j] = in.b[(size_t(s) * kN + r) * kK + perm[j]];
  }
  return out;
}

}  // namespace

int main() {
  const int trials = 4096;
  const size_t n_a = size_t(trials) * kM * kK, n_b = size_t(trials) * kN * kK, n_c = size_t(trials) * kM * kN;
  Data data{std::vector<uint16_t>(n_a), std::vector<uint16_t>(n_b), std::vector<float>(n_c)};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-12, 12), sign(0, 1);
  auto value = [&](int spread) {  // trials alternate narrow and wide exponent ranges
    const int e = spread ? exponent(rng) : exponent(rng) / 6;
    return (sign(rng) ? -1.0f : 1.0f) * std::ldexp(mantissa(rng), e);
  };
  for (int s = 0; s < trials; ++s) {
    const int spread = s % 2;
    for (size_t i = 0; i < size_t(kM) * kK; ++i) data.a[size_t(s) * kM * kK + i] = to_bf16(value(spread));
    for (size_t i = 0; i < size_t(kN) * kK; ++i) data.b[size_t(s) * kN * kK + i] = to_bf16(value(spread));
    for (size_t i = 0; i < size_t(kM) * kN; ++i)
      data.c[size_t(s) * kM * kN + i] = (s % 4 < 2) ? 0.0f : value(spread) * value(0);
  }

  uint16_t *a_d, *b_d;
  float *c_d, *d_d;
  CHECK(cudaMalloc(&a_d, n_a * 2));
  CHECK(cudaMalloc(&b_d, n_b * 2));
  CHECK(cudaMalloc(&c_d, n_c * 4));
  CHECK(cudaMalloc(&d_d, n_c * 4));
  auto upload = [&](const Data& d) {
    cudaMemcpy(a_d, d.a.data(), n_a * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(b_d, d.b.data(), n_b * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(c_d, d.c.data(), n_c * 4, cudaMemcpyHostToDevice);
  };
  auto download = [&]() {
    std::vector<float> out(n_c);
    cudaMemcpy(out.data(), d_d, n_c * 4, cudaMemcpyDeviceToHost);
    return out;
  };
  // The reference: each element's exact sum (long double holds every partial sum of these ranges closely).
  std::vector<double> exact(n_c);
  for (int s = 0; s < trials; ++s)
    for (int r = 0; r < kM; ++r)
      for (int n = 0; n < kN; ++n) {
        long double sum = data.c[(size_t(s) * kM + r) * kN + n];
        for (int k = 0; k < kK; ++k)
          sum += (long double)from_bf16(data.a[(size_t(s) * kM + r) * kK + k]) *
                 from_bf16(data.b[(size_t(s) * kN + n) * kK + k]);
        exact[(size_t(s) * kM + r) * kN + n] = double(sum);
      }
  // Prints how many elements differ in bits and adds them to `unexpected` unless a difference is the
  // point (a wrong layout).
  size_t unexpected = 0;
  auto compare = [&](const char* name, const std::vector<float>& x, const std::vector<float>& y,
                     bool should_agree = true) {
    size_t differ = 0;
    double worst = 0;
    for (size_t i = 0; i < n_c; ++i) {
      if (std::memcmp(&x[i], &y[i], 4) != 0) ++differ;
      const double scale = std::fabs(exact[i]) + 1e-30;
      worst = std::max(worst, std::fabs(double(x[i]) - double(y[i])) / scale);
    }
    std::printf("%-58s %8zu of %zu elements differ in bits, largest difference %.3g of |exact|\n", name, differ,
                n_c, worst);
    if (should_agree) unexpected += differ;
  };
  auto against_exact = [&](const char* name, const std::vector<float>& x) {
    double worst = 0;
    for (size_t i = 0; i < n_c; ++i)
      worst = std::max(worst, std::fabs(double(x[i]) - exact[i]) / (std::fabs(exact[i]) + 1e-30));
    std::printf("%-58s largest error %.3g of |exact|\n", name, worst);
  };

  upload(data);
  mma_chain_kernel<kN, kK><<<trials, 128>>>(a_d, b_d, c_d, d_d);
  CHECK(cudaDeviceSynchronize());
  const std::vector<float> mma = download();
  against_exact("mma.sync m16n8k16 against the exact sum", mma);
  {
    mma_chain_kernel<kN, kK><<<trials, 128>>>(a_d, b_d, c_d, d_d);
    CHECK(cudaDeviceSynchronize());
    compare("mma.sync run twice", mma, download());
  }

  const int swap_halves[kK] = {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7};
  const int reverse[kK] = {15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  const int swap_pairs[kK] = {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14};
  const int quads[kK] = {4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11};
  const int mixed[kK] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
  const int staged_order[kK] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
  const struct {
    const char* name;
    const int* perm;
  } perms[] = {{"mma.sync, k slots: halves swapped", swap_halves},
               {"mma.sync, k slots: reversed", reverse},
               {"mma.sync, k slots: neighbours swapped", swap_pairs},
               {"mma.sync, k slots: quads swapped within halves", quads},
               {"mma.sync, k slots: halves interleaved", mixed},
               {"mma.sync, k slots: middle quads swapped", staged_order}};
  for (const auto& p : perms) {
    int perm[kK];
    std::memcpy(perm, p.perm, sizeof perm);
    upload(permuted(data, perm, trials));
    mma_chain_kernel<kN, kK><<<trials, 128>>>(a_d, b_d, c_d, d_d);
    CHECK(cudaDeviceSynchronize());
    compare(p.name, mma, download());
  }

  upload(data);
  // Core matrices 128 bytes apart along rows, 1024 along K: descriptors with either reading.
  const struct {
    const char* name;
    uint32_t row_step, k_step, leading, stride;
    bool is_right;  // whether the descriptor reads the offsets as the copy laid them out
  } layouts[] = {{"leading = K step", 128, 1024, 1024, 128, true},
                 {"leading = row step", 128, 1024, 128, 1024, false},
                 {"K step 128, leading = K step", 256, 128, 128, 256, true}};
  for (const auto& l : layouts) {
    char name[128];
    wgmma_kernel<false><<<trials, 128>>>(a_d, b_d, c_d, d_d, l.row_step, l.k_step, l.leading, l.stride);
    CHECK(cudaDeviceSynchronize());
    std::snprintf(name, sizeof name, "wgmma (A registers, %s) against mma.sync", l.name);
    compare(name, mma, download(), l.is_right);
    wgmma_kernel<true><<<trials, 128>>>(a_d, b_d, c_d, d_d, l.row_step, l.k_step, l.leading, l.stride);
    CHECK(cudaDeviceSynchronize());
    std::snprintf(name, sizeof name, "wgmma (A shared, %s) against mma.sync", l.name);
    compare(name, mma, download(), l.is_right);
  }

  // Part two: four k16 steps into C, for N = 8 ... 64.
  const int chain_trials = 512;
  const auto chain = [&]<int N>() -> int {
    const size_t n_a2 = size_t(chain_trials) * kM * kChainK, n_b2 = size_t(chain_trials) * N * kChainK,
                 n_c2 = size_t(chain_trials) * kM * N;
    std::vector<uint16_t> a2(n_a2), b2(n_b2);
    std::vector<float> c2(n_c2);
    for (size_t i = 0; i < n_a2; ++i) a2[i] = to_bf16(value(int(i / (kM * kChainK)) % 2));
    for (size_t i = 0; i < n_b2; ++i) b2[i] = to_bf16(value(int(i / (N * kChainK)) % 2));
    for (size_t i = 0; i < n_c2; ++i) c2[i] = value(1) * value(0);
    uint16_t *a2_d, *b2_d;
    float *c2_d, *d2_d;
    CHECK(cudaMalloc(&a2_d, n_a2 * 2));
    CHECK(cudaMalloc(&b2_d, n_b2 * 2));
    CHECK(cudaMalloc(&c2_d, n_c2 * 4));
    CHECK(cudaMalloc(&d2_d, n_c2 * 4));
    cudaMemcpy(a2_d, a2.data(), n_a2 * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(b2_d, b2.data(), n_b2 * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(c2_d, c2.data(), n_c2 * 4, cudaMemcpyHostToDevice);
    std::vector<float> with_mma(n_c2), with_wgmma(n_c2);
    mma_chain_kernel<N><<<chain_trials, 128>>>(a2_d, b2_d, c2_d, d2_d);
    CHECK(cudaDeviceSynchronize());
    cudaMemcpy(with_mma.data(), d2_d, n_c2 * 4, cudaMemcpyDeviceToHost);
    wgmma_chain_kernel<N><<<chain_trials, 128>>>(a2_d, b2_d, c2_d, d2_d);
    CHECK(cudaDeviceSynchronize());
    cudaMemcpy(with_wgmma.data(), d2_d, n_c2 * 4, cudaMemcpyDeviceToHost);
    size_t differ = 0;
    for (size_t i = 0; i < n_c2; ++i) differ += std::memcmp(&with_mma[i], &with_wgmma[i], 4) != 0;
    std::printf("wgmma m64n%dk16, four steps accumulated, against mma.sync's chain  %8zu of %zu elements differ in bits\n",
                N, differ, n_c2);
    unexpected += differ;
    cudaFree(a2_d);
    cudaFree(b2_d);
    cudaFree(c2_d);
    cudaFree(d2_d);
    return 0;
  };
  if (chain.template operator()<8>() || chain.template operator()<16>() || chain.template operator()<32>() ||
      chain.template operator()<64>())
    return 1;
  // The linear kernels rely on these equalities (and gpu_test_linear checks the kernels themselves).
  if (unexpected > 0) std::printf("FAIL: %zu elements differ where the bits should agree\n", unexpected);
  return unexpected > 0 ? 2 : 0;
}
