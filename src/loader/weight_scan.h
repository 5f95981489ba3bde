// The load-time check that a checkpoint's floating-point tensors hold only finite values: a NaN
// or Inf weight would otherwise load silently and turn every reply into garbage.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"

namespace tf {

struct NonFiniteValue {
  int64_t index = 0;  // flat element index
  bool is_nan = false;  // false: +Inf or -Inf
};

// Whether find_non_finite looks at a dtype (the floating-point ones).
bool find_non_finite_applies(DType dtype);

// The first NaN or Inf element of an f32, f16, bf16 or f64 tensor; nullopt for other dtypes.
// Reads every byte of the tensor once, in blocks the compiler vectorizes.
std::optional<NonFiniteValue> find_non_finite(const TensorView& tensor);

// Throws tf::Error naming the tensor, its file, the element and its position in the shape.
void check_finite(const TensorView& tensor, const std::string& file);

}  // namespace tf
