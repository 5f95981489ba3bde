// A lane's draft tree for one round: the nodes below the root (the lane's last token), each with
// its parent, its depth and whether it lies on the main chain.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tf {

// Nodes in an order where parents come first. The main chain is the root's first child, that
// node's first child, and so on: its K/V can be written straight to the lane's own positions,
// while every other node's goes to scratch slots and moves only if it is accepted.
struct DraftTree {
  std::vector<int32_t> tokens;   // [n_nodes]
  std::vector<int32_t> parents;  // [n_nodes] index of the parent node, or -1 for a child of the root
  std::vector<uint8_t> sources;  // [n_nodes] which proposer added the node (ProposerKind)
  std::vector<int32_t> depths;   // [n_nodes] 1 for a child of the root
  std::vector<uint8_t> is_main;  // [n_nodes] on the main chain

  int64_t size() const { return int64_t(tokens.size()); }
  int32_t depth(int32_t node) const { return node < 0 ? 0 : depths[size_t(node)]; }
  int32_t max_depth() const { return max_depth_; }
  // The child of `parent` (-1 = root) that holds `token`, or -1.
  int32_t child_with_token(int32_t parent, int32_t token) const;
  // Adds `chain` below `parent` (-1 = root), reusing nodes that already hold the same token, until
  // the tree holds max_nodes nodes. Returns how many new nodes were added.
  int64_t add_chain(int32_t parent, const std::vector<int32_t>& chain, int64_t max_nodes, uint8_t source);
  // Keeps the nodes with keep[node] set, in order (a kept node's parent must be kept); the main
  // chain is the first kept child chain again.
  void retain(const std::vector<uint8_t>& keep);
  void clear();

 private:
  void push_node(int32_t parent, int32_t token, uint8_t source);
  std::vector<uint8_t> has_child_;  // [n_nodes + 1], [0] for the root
  int32_t max_depth_ = 0;
};

}  // namespace tf
