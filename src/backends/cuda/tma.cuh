// Hopper bulk tensor copies (TMA) into shared memory and the mbarriers that count their bytes: the
// few PTX wrappers the staged linear kernel needs, and the host side that describes a tensor.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// An mbarrier that completes a phase once `count` threads have arrived (and, for a copy's barrier,
// once the bytes it was told to expect have landed).
__device__ __forceinline__ void barrier_init(uint64_t* barrier, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(count) : "memory");
}

// Makes initialized barriers visible to the copy engine; a block barrier must follow.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Waits until the phase of parity `parity` has completed (a fresh barrier's parity-1 phase counts
// as completed, so a producer's first wait on an empty slot returns at once).
__device__ __forceinline__ void barrier_wait(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "TF_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@done bra.uni TF_DONE;\n"
      "bra.uni TF_WAIT;\n"
      "TF_DONE:\n"
      "}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void barrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier)) : "memory");
}

// Arrives and tells the barrier to also wait for `bytes` of copies.
__device__ __forceinline__ void barrier_arrive_expecting(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
}

// Copies the box at (inner, outer) of a 2-D tensor map into shared memory (128-byte aligned);
// elements past the tensor's edge arrive as zeros. The barrier counts the box's bytes.
__device__ __forceinline__ void copy_box(void* destination, const CUtensorMap* map, int inner, int outer,
                                         uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          shared_address(destination)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(shared_address(barrier))
      : "memory");
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory into shared
// memory; the barrier counts them.
__device__ __forceinline__ void copy_bytes(void* destination, const void* source, uint32_t bytes, uint64_t* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(destination)),
               "l"(reinterpret_cast<uint64_t>(source)), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
}

enum class TensorElement { bf16, u32 };

// A row-major matrix [n_rows][n_cols] (16-byte aligned, rows a multiple of 16 bytes) read in boxes of
// box_rows rows by box_cols columns, no swizzle, zeros past the edges.
CUtensorMap matrix_map(const void* data, TensorElement element, int64_t n_rows, int64_t n_cols, int box_rows,
                       int box_cols);

}  // namespace tf::cuda
