// Hopper warpgroup MMA (wgmma): the PTX wrappers the wgmma linear kernel needs. An mma's 16 k slots
// are added as one set and wgmma gives mma.sync's bits for the same k16 steps
// (bench/receipts/h100-mma-bits-probe.md), so a kernel built on these keeps the register kernels'
// bits as long as it keeps their grouping of inputs into steps.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/tma.cuh"

namespace tf::cuda {

// A shared-memory operand without swizzle: 8 x 8 core matrices of 16-byte rows, `k_step` bytes apart
// along K and `n_step` bytes apart along the operand's rows.
__device__ __forceinline__ uint64_t wgmma_descriptor(const void* start, uint32_t k_step, uint32_t n_step) {
  return uint64_t((shared_address(start) >> 4) & 0x3FFF) | (uint64_t((k_step >> 4) & 0x3FFF) << 16) |
         (uint64_t((n_step >> 4) & 0x3FFF) << 32);
}

// Orders this thread's register writes (the accumulators' zeros) before the next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most kPending committed groups of this warpgroup's wgmma are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// d += A B for a 64 x 128 tile and one k16 step: A (64 x 16, bf16) from registers in mma.sync's A
// layout (warp w of the warpgroup holds rows 16w..16w+15), B (128 x 16, bf16, K-major) from shared
// memory. d in mma.sync's C layout for each 8-column tile j: d[4j..4j+3].
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
}

// A warpgroup lowers (give) or raises (take) the registers each of its threads holds, so warps
// with little to keep hand theirs to warps with much; the block's total must stay within its launch's.
template <int kRegisters>
__device__ __forceinline__ void registers_give() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void registers_take() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// Makes this thread's finished shared-memory writes visible to wgmma, which reads through the async proxy.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

}  // namespace tf::cuda
