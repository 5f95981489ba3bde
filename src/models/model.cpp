// The Model interface's shared part: forward_and_pick for backends that choose tokens on the host.
#include "models/model.h"

#include <algorithm>

#include "core/error.h"

namespace tf {

void Model::forward_and_pick(const Batch& batch, KvCache& kv, const std::vector<LogitRowPick>& picks, int32_t* tokens,
                             float* logits) {
  const int64_t n_vocab = config().vocab_size;
  if (int64_t(picks.size()) != batch.n_logit_rows()) fail_internal("forward_and_pick takes one pick per logit row");
  all_logits_.resize(picks.size() * size_t(n_vocab));
  forward(batch, kv, all_logits_.data());
  int64_t n_copied = 0;
  for (size_t i = 0; i < picks.size(); ++i) {
    const LogitRowPick& pick = picks[i];
    const float* row = all_logits_.data() + int64_t(i) * n_vocab;
    tokens[i] = sampler_.sample(row, n_vocab, *pick.sampling, pick.position, pick.penalties, pick.constraint);
    if (pick.wants_logits) std::copy_n(row, n_vocab, logits + n_copied++ * n_vocab);
  }
}

}  // namespace tf
