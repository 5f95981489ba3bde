// The draft tree's bookkeeping: depth, chain insertion with prefix sharing, and proposer names.
#include <cassert>

#include "speculation/proposer.h"

namespace tf {

int32_t DraftTree::depth(int32_t node) const {
  int32_t depth = 0;
  for (; node >= 0; node = parents[size_t(node)]) ++depth;
  return depth;
}

int64_t DraftTree::add_chain(int32_t parent, const std::vector<int32_t>& chain, int64_t max_nodes,
                             uint8_t source) {
  assert(parent >= -1 && parent < size());
  int64_t n_added = 0;
  bool is_following_existing = true;  // a freshly added node has no children to follow
  for (int32_t token : chain) {
    if (is_following_existing) {
      // Children come after their parent, so the search starts just past it.
      int32_t existing_child = -1;
      for (int64_t node = parent + 1; node < size(); ++node) {
        if (parents[size_t(node)] == parent && tokens[size_t(node)] == token) {
          existing_child = int32_t(node);
          break;
        }
      }
      if (existing_child >= 0) {
        parent = existing_child;
        continue;
      }
      is_following_existing = false;
    }
    if (size() >= max_nodes) break;
    tokens.push_back(token);
    parents.push_back(parent);
    sources.push_back(source);
    parent = int32_t(size() - 1);
    ++n_added;
  }
  return n_added;
}

void DraftTree::clear() {
  tokens.clear();
  parents.clear();
  sources.clear();
}

const char* proposer_kind_name(ProposerKind kind) {
  switch (kind) {
    case ProposerKind::long_copy: return "long_copy";
    case ProposerKind::ngram: return "ngram";
    case ProposerKind::replay: return "replay";
    case ProposerKind::drafter: return "drafter";
  }
  return "unknown";
}

}  // namespace tf
