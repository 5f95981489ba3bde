// Taps a proposer was handed but has not yet appended to its drafter's context. A lane's committed
// rows arrive every round, a few at a time; appending them only when the proposer next drafts (in
// one batch, a prefill-like pass) means a gated-off proposer costs no drafter forward per round.
// Held positions start at the context's end; a restated history (taps from an earlier position)
// truncates the context and drops what was held.
#pragma once
#include <cstdint>
#include <vector>

namespace tf {

class PendingTaps {
 public:
  explicit PendingTaps(int64_t width) : width_(width) {}

  // Takes the taps of positions first_position .. + n_tokens - 1 for `context` (anything with
  // size() and truncate(n)); taps that start past what is held are ignored (the gap cannot be filled).
  template <class Context>
  void observe(Context& context, int64_t first_position, const float* taps, int64_t n_tokens) {
    if (first_position > context.size() + n_tokens_held()) return;
    if (first_position < context.size()) {
      context.truncate(first_position);
      taps_.clear();
    } else {
      taps_.resize(size_t((first_position - context.size()) * width_));
    }
    taps_.insert(taps_.end(), taps, taps + n_tokens * width_);
  }

  int64_t n_tokens_held() const { return int64_t(taps_.size()) / width_; }
  const float* data() const { return taps_.data(); }
  // Drops the first n held tokens (appended to the context).
  void drop_first(int64_t n) { taps_.erase(taps_.begin(), taps_.begin() + n * width_); }
  // Drops everything held and frees it.
  void clear() { taps_ = {}; }

 private:
  int64_t width_;
  std::vector<float> taps_;  // [n_tokens_held][width]
};

}  // namespace tf
