// The draft tree's bookkeeping: chain insertion with prefix sharing, depths and the main chain.
#include "speculation/draft_tree.h"

#include <algorithm>
#include <cassert>

namespace tf {

int32_t DraftTree::child_with_token(int32_t parent, int32_t token) const {
  // Children come after their parent, so the search starts just past it.
  for (int64_t node = parent + 1; node < size(); ++node)
    if (parents[size_t(node)] == parent && tokens[size_t(node)] == token) return int32_t(node);
  return -1;
}

int64_t DraftTree::add_chain(int32_t parent, const std::vector<int32_t>& chain, int64_t max_nodes,
                             uint8_t source) {
  assert(parent >= -1 && parent < size());
  if (has_child_.empty()) has_child_.push_back(0);
  int64_t n_added = 0;
  bool is_following_existing = true;  // a freshly added node has no children to follow
  for (int32_t token : chain) {
    if (is_following_existing) {
      const int32_t existing_child = child_with_token(parent, token);
      if (existing_child >= 0) {
        parent = existing_child;
        continue;
      }
      is_following_existing = false;
    }
    if (size() >= max_nodes) break;
    push_node(parent, token, source);
    parent = int32_t(size() - 1);
    ++n_added;
  }
  return n_added;
}

void DraftTree::retain(const std::vector<uint8_t>& keep) {
  const DraftTree old = *this;
  clear();
  has_child_.push_back(0);
  std::vector<int32_t> new_index(old.tokens.size(), -1);
  for (size_t node = 0; node < old.tokens.size(); ++node) {
    if (!keep[node]) continue;
    const int32_t old_parent = old.parents[node];
    const int32_t parent = old_parent < 0 ? -1 : new_index[size_t(old_parent)];
    assert(old_parent < 0 || parent >= 0);
    new_index[node] = int32_t(size());
    push_node(parent, old.tokens[node], old.sources[node]);
  }
}

// A node's first child continues a main-chain parent's chain; later siblings go to scratch.
void DraftTree::push_node(int32_t parent, int32_t token, uint8_t source) {
  const bool parent_is_main = parent < 0 || is_main[size_t(parent)];
  tokens.push_back(token);
  parents.push_back(parent);
  sources.push_back(source);
  depths.push_back(depth(parent) + 1);
  is_main.push_back(parent_is_main && !has_child_[size_t(parent + 1)]);
  has_child_[size_t(parent + 1)] = 1;
  has_child_.push_back(0);
  max_depth_ = std::max(max_depth_, depths.back());
}

void DraftTree::clear() {
  tokens.clear();
  parents.clear();
  sources.clear();
  depths.clear();
  is_main.clear();
  has_child_.clear();
  max_depth_ = 0;
}

}  // namespace tf
