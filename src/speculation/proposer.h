// Proposers put candidate continuations on the table for one lane; the engine verifies them.
// A proposer proposes; acceptance lives in the engine alone, so a wrong proposal costs speed only.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tf {

// A lane's tokens so far: the prompt, then the reply. The last token is the tree's root: it is
// verified this round and every proposed node continues it.
struct LaneHistory {
  const std::vector<int32_t>& tokens;
  int64_t n_prompt;
};

// Draft nodes below the root, in an order where parents come first.
struct DraftTree {
  std::vector<int32_t> tokens;   // [n_nodes]
  std::vector<int32_t> parents;  // [n_nodes] index of the parent node, or -1 for a child of the root
  std::vector<uint8_t> sources;  // [n_nodes] which proposer added the node (ProposerKind)

  int64_t size() const { return int64_t(tokens.size()); }
  int32_t depth(int32_t node) const;
  // Adds `chain` below `parent` (-1 = root), reusing nodes that already hold the same token, until
  // the tree holds max_nodes nodes. Returns how many new nodes were added.
  int64_t add_chain(int32_t parent, const std::vector<int32_t>& chain, int64_t max_nodes, uint8_t source);
  void clear();
};

enum class ProposerKind : uint8_t { long_copy = 0, ngram = 1, replay = 2, drafter = 3 };
constexpr int kProposerKinds = 4;
const char* proposer_kind_name(ProposerKind kind);

// Which proposers a request may use, bit k for ProposerKind k; benchmarks isolate one at a time.
using ProposerSet = uint8_t;
constexpr ProposerSet proposer_bit(ProposerKind kind) { return ProposerSet(1u << uint8_t(kind)); }
constexpr ProposerSet kAllProposers = ProposerSet((1u << kProposerKinds) - 1);

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual ProposerKind kind() const = 0;
  // Called after tokens were appended to the history (prompt first, then accepted tokens), so
  // incremental structures can catch up; history.tokens only ever grows between calls.
  virtual void observe(const LaneHistory& history) = 0;
  // Adds at most max_nodes - tree.size() nodes to the tree.
  virtual void propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) = 0;
};

}  // namespace tf
