// N-gram tables updated token by token, and greedy chains drawn from them.
#include "speculation/ngram.h"

#include <algorithm>

namespace tf {
namespace {

// Hash of the `n_context` tokens ending just before `end`; the length is mixed in so contexts of
// different lengths never share a key by construction.
uint64_t context_key(const int32_t* end, int n_context) {
  uint64_t hash = 0x9e3779b97f4a7c15ull * uint64_t(n_context);
  for (const int32_t* token = end - n_context; token < end; ++token) {
    hash ^= uint32_t(*token);
    hash *= 0xff51afd7ed558ccdull;
    hash ^= hash >> 33;
  }
  return hash;
}

}  // namespace

NgramProposer::NgramProposer(NgramOptions options) : options_(options) {
  options_.n = std::max(options_.n, 2);
}

void NgramProposer::catch_up(const LaneHistory& history) {
  const std::vector<int32_t>& tokens = history.tokens;
  if (int64_t(tokens.size()) < n_observed_) {  // a different history: start over
    next_token_.clear();
    n_observed_ = 0;
  }
  for (; n_observed_ < int64_t(tokens.size()); ++n_observed_) {
    const int32_t* next = tokens.data() + n_observed_;
    int max_context = int(std::min<int64_t>(options_.n - 1, n_observed_));
    for (int n_context = 1; n_context <= max_context; ++n_context) {
      next_token_[context_key(next, n_context)] = *next;
    }
  }
}

void NgramProposer::observe(const LaneHistory& history) { catch_up(history); }

bool NgramProposer::predict_next(const std::vector<int32_t>& context, int32_t* next) const {
  const int32_t* end = context.data() + context.size();
  for (int n_context = int(std::min<size_t>(options_.n - 1, context.size())); n_context >= 1;
       --n_context) {
    auto it = next_token_.find(context_key(end, n_context));
    if (it != next_token_.end()) {
      *next = it->second;
      return true;
    }
  }
  return false;
}

void NgramProposer::propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) {
  catch_up(history);
  int64_t n_chain = std::min(options_.max_chain, max_nodes - tree->size());
  if (n_chain <= 0 || history.tokens.empty()) return;

  size_t n_tail = std::min(history.tokens.size(), size_t(options_.n - 1));
  extended_.assign(history.tokens.end() - int64_t(n_tail), history.tokens.end());
  int32_t next = 0;
  while (int64_t(extended_.size() - n_tail) < n_chain && predict_next(extended_, &next)) {
    extended_.push_back(next);
  }
  std::vector<int32_t> chain(extended_.begin() + int64_t(n_tail), extended_.end());
  tree->add_chain(-1, chain, max_nodes, uint8_t(ProposerKind::ngram));
}

}  // namespace tf
