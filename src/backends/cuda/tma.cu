#include "backends/cuda/tma.cuh"

#include <cudaTypedefs.h>

#include <string>

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

// The driver's encoder, looked up once through the runtime (the build links no libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &found);
    TF_CUDA_REQUIRE(status == cudaSuccess && found == cudaDriverEntryPointSuccess && function != nullptr,
                    "TMA: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

}  // namespace

CUtensorMap matrix_map(const void* data, TensorElement element, int64_t n_rows, int64_t n_cols, int box_rows,
                       int box_cols) {
  CUtensorMap map{};
  const bool is_bf16 = element == TensorElement::bf16;
  const cuuint64_t dims[2] = {cuuint64_t(n_cols), cuuint64_t(n_rows)};
  const cuuint64_t strides[1] = {cuuint64_t(n_cols) * (is_bf16 ? 2 : 4)};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = tensor_map_encoder()(
      &map, is_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, const_cast<void*>(data),
      dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TF_CUDA_REQUIRE(result == CUDA_SUCCESS, "TMA: cuTensorMapEncodeTiled failed (code " + std::to_string(int(result)) +
                                              ") for a " + std::to_string(n_rows) + " x " + std::to_string(n_cols) +
                                              (is_bf16 ? " bf16" : " u32") + " matrix");
  return map;
}

}  // namespace tf::cuda
