// The Model interface's shared part: forward_and_pick for backends that choose tokens on the host.
#include "models/model.h"

#include <algorithm>

#include "core/error.h"

namespace tf {
namespace {

// The token a pick with sampling set chooses from its row's logits, on the host.
int32_t pick_on_host(const float* row_logits, int64_t n_vocab, const LogitRowPick& pick) {
  thread_local Sampler sampler;
  static const TokenCounts no_history;
  return sampler.sample(row_logits, n_vocab, *pick.sampling, pick.position, no_history);
}

}  // namespace

void Model::forward_and_pick(const Batch& batch, KvCache& kv, const std::vector<LogitRowPick>& picks, int32_t* tokens,
                             float* logits) {
  const int64_t n_vocab = config().vocab_size;
  if (int64_t(picks.size()) != batch.n_logit_rows()) fail("forward_and_pick: one pick per logit row");
  all_logits_.resize(picks.size() * size_t(n_vocab));
  forward(batch, kv, all_logits_.data());
  int64_t n_unpicked = 0;
  for (size_t i = 0; i < picks.size(); ++i) {
    const float* row = all_logits_.data() + int64_t(i) * n_vocab;
    if (picks[i].sampling != nullptr) {
      tokens[i] = pick_on_host(row, n_vocab, picks[i]);
    } else {
      tokens[i] = -1;
      std::copy_n(row, n_vocab, logits + n_unpicked++ * n_vocab);
    }
  }
}

}  // namespace tf
