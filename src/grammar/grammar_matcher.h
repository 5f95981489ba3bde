// Walking a grammar along bytes and tokens: a state is the set of parse stacks alive after the
// bytes so far; a token is allowed when the grammar accepts its bytes from the state. States are
// values, so a draft tree forks one per branch and the reply's state moves only on accepted tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"

namespace tf {

// The bytes of every token of a vocabulary as a trie, built once per tokenizer and shared. A token
// with no bytes (a special token, an unused id) is never allowed by a grammar.
class TokenVocabulary {
 public:
  explicit TokenVocabulary(std::vector<std::string> token_bytes);
  int64_t n_tokens() const { return int64_t(bytes_.size()); }
  const std::string& bytes(int32_t token) const { return bytes_[size_t(token)]; }

  struct Node {
    uint32_t first_child = 0, n_children = 0;  // children in `nodes`, ascending by byte
    uint32_t first_token = 0, n_tokens = 0;    // tokens whose bytes end here, in `node_tokens`
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;  // [0] is the root (no bytes)
  std::vector<int32_t> node_tokens;
  size_t max_token_bytes = 0;

 private:
  std::vector<std::string> bytes_;
};

struct GrammarState {
  std::vector<int32_t> stacks;  // ascending ids of interned stacks whose top is a byte set
  bool is_complete = false;     // the grammar can end here
  bool is_dead() const { return stacks.empty() && !is_complete; }
  bool operator==(const GrammarState&) const = default;
};

// One request's walk through its grammar: the interned stacks every state refers to, and masks
// already computed. Used by one thread (the engine's) for one reply.
class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocabulary);

  GrammarState start();
  // The state after `byte`, `bytes` or `token` (dead when the grammar refuses them).
  GrammarState advance(const GrammarState& state, uint8_t byte);
  GrammarState advance_bytes(const GrammarState& state, std::string_view bytes);
  GrammarState advance_token(const GrammarState& state, int32_t token);
  // Bit t % 32 of word t / 32 is set when token t's bytes keep the grammar alive from `state`;
  // n_vocabulary_tokens() bits, the rest of the last word clear. Cached per state.
  const std::vector<uint32_t>& allowed_tokens(const GrammarState& state);
  int64_t n_vocabulary_tokens() const { return vocabulary_->n_tokens(); }
  int64_t n_mask_computations() const { return n_mask_computations_; }

 private:
  struct StackNode {
    int32_t position;  // into grammar code: the next symbol to match
    int32_t below;     // the stack under it, or -1
  };
  int32_t intern(int32_t position, int32_t below);
  // Adds every stack that the stacks `roots` expand to (tops that match bytes), without recursion:
  // a chain of rules however long costs no call depth.
  void expand(std::span<const StackNode> roots, GrammarState* out);
  void advance_into(const GrammarState& state, uint8_t byte, GrammarState* out);
  // Where one stack goes on one byte, computed once: a state's step is the union of its stacks'.
  struct Step {
    std::vector<int32_t> stacks;
    bool is_complete = false;
  };
  const Step& step(int32_t stack, uint8_t byte);
  void mark_allowed(uint32_t node, const GrammarState& state, int depth, std::vector<uint32_t>* mask);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  std::vector<StackNode> nodes_;
  std::unordered_map<uint64_t, int32_t> interned_;
  std::unordered_map<uint64_t, uint32_t> step_index_;  // (stack << 8 | byte) -> steps_
  std::vector<Step> steps_;
  std::vector<GrammarState> scratch_;  // [trie depth] states of the mask walk
  std::vector<StackNode> work_;         // expand()'s pending (position, below) pairs
  std::unordered_set<uint64_t> expanded_;  // and those it has taken

  struct StateHash {
    size_t operator()(const GrammarState& s) const;
  };
  std::unordered_map<GrammarState, std::vector<uint32_t>, StateHash> masks_;
  int64_t n_mask_computations_ = 0;
};

}  // namespace tf
