// Non-finite weights found by their exponent bits (all ones means NaN or Inf in every IEEE
// format), scanned block by block without branches so the loop vectorizes.
#include "loader/weight_scan.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "loader/file_helpers.h"

namespace tf {

namespace {

// Bits of the element type, its exponent mask and its mantissa mask.
template <typename Bits>
std::optional<NonFiniteValue> scan(const uint8_t* data, int64_t n, Bits exponent, Bits mantissa) {
  constexpr int64_t kBlock = 4096;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    Bits any = 0;
    for (int64_t i = begin; i < end; i++) {
      Bits x;
      std::memcpy(&x, data + i * int64_t(sizeof(Bits)), sizeof(Bits));  // offsets need not be aligned
      any |= Bits((x & exponent) == exponent);
    }
    if (!any) continue;
    for (int64_t i = begin; i < end; i++) {
      Bits x;
      std::memcpy(&x, data + i * int64_t(sizeof(Bits)), sizeof(Bits));
      if ((x & exponent) == exponent) return NonFiniteValue{i, (x & mantissa) != 0};
    }
  }
  return std::nullopt;
}

// Position of a flat index in a shape, as "[i, j, k]".
std::string position_in(const std::vector<int64_t>& shape, int64_t index) {
  std::vector<int64_t> position(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) break;
    position[d] = index % shape[d];
    index /= shape[d];
  }
  return shape_text(position);
}

}  // namespace

bool find_non_finite_applies(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f64;
}

std::optional<NonFiniteValue> find_non_finite(const TensorView& tensor) {
  const int64_t n = int64_t(tensor.n_bytes / dtype_size(tensor.dtype));
  switch (tensor.dtype) {
    case DType::f32: return scan<uint32_t>(tensor.data, n, 0x7f800000u, 0x007fffffu);
    case DType::bf16: return scan<uint16_t>(tensor.data, n, 0x7f80, 0x007f);
    case DType::f16: return scan<uint16_t>(tensor.data, n, 0x7c00, 0x03ff);
    case DType::f64: return scan<uint64_t>(tensor.data, n, 0x7ff0000000000000ull, 0x000fffffffffffffull);
    default: return std::nullopt;
  }
}

void check_finite(const TensorView& tensor, const std::string& file) {
  const std::optional<NonFiniteValue> found = find_non_finite(tensor);
  if (!found) return;
  fail("tensor \"" + tensor.name + "\" in " + file + " holds " + (found->is_nan ? "NaN" : "an infinity") +
       " at element " + position_in(tensor.shape, found->index) + " of shape " + shape_text(tensor.shape) +
       ": the checkpoint is corrupt (non-finite weights are refused at load)");
}

}  // namespace tf
