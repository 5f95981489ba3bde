// The rows of one forward pass: prefill chunks, decode rows and draft-tree rows of many lanes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace tf {

// A row sees its lane's committed positions below the first row of its in-batch chain, then its
// in-batch ancestors (following `parent`), then itself: logical positions 0..pos in order.
struct BatchRow {
  int32_t token = 0;
  int32_t pos = 0;          // logical position in the lane's sequence
  int32_t lane = 0;         // KV cache lane
  int32_t parent = -1;      // index in this batch of the row at pos-1, or -1: pos-1 is committed
  int32_t kv_slot = 0;      // physical slot this row's K/V is written to
  bool wants_logits = false;
};

struct Batch {
  std::vector<BatchRow> rows;
  int64_t n_logit_rows() const {
    int64_t n = 0;
    for (const auto& r : rows) n += r.wants_logits;
    return n;
  }
  // The engine checks ids at submit; a model checks again before an id indexes its embedding.
  void check_token_ids(int64_t n_vocab) const {
    for (const auto& r : rows)
      if (r.token < 0 || r.token >= n_vocab)
        fail("token id " + std::to_string(r.token) + " is outside the vocabulary of " + std::to_string(n_vocab));
  }
};

}  // namespace tf
