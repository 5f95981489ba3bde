// Stack expansion, byte steps and token masks by a walk over the vocabulary's byte trie.
#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace tf {
namespace {

constexpr size_t kMaxStacks = 4096;      // more live parses than this: the grammar is too ambiguous
// (position, stack) pairs one expansion may take: above what long rule chains under many stacks
// take (1,000 alternatives each over a chain of 270 rules: 271,000), bounding grammars whose ways to
// the next byte multiply to well under a second of one core (a pair costs about 0.6 us).
constexpr size_t kMaxExpansions = size_t(1) << 20;

[[noreturn]] void too_ambiguous() {
  throw Error("grammar: too ambiguous (more than " + std::to_string(kMaxStacks) + " parses alive at once)");
}

[[noreturn]] void too_many_expansions() {
  throw Error("grammar: too ambiguous (more than " + std::to_string(kMaxExpansions) +
              " rule expansions to reach the next byte)");
}
constexpr size_t kMaxCachedMasks = 4096;

}  // namespace

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  // Sorted by bytes, the tokens under one trie node are contiguous: a node's children are built
  // from the run of tokens sharing its prefix, level by level.
  std::vector<int32_t> order;
  for (int32_t t = 0; t < int32_t(bytes_.size()); ++t)
    if (!bytes_[size_t(t)].empty()) order.push_back(t);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  struct Pending {
    uint32_t node;
    size_t begin, end, depth;  // tokens order[begin, end) share the node's depth bytes
  };
  nodes.push_back({});
  std::vector<Pending> queue = {{0, 0, order.size(), 0}};
  for (size_t q = 0; q < queue.size(); ++q) {
    const Pending p = queue[q];
    size_t i = p.begin;
    nodes[p.node].first_token = uint32_t(node_tokens.size());
    while (i < p.end && bytes_[size_t(order[i])].size() == p.depth) node_tokens.push_back(order[i++]);
    max_token_bytes = std::max(max_token_bytes, p.depth);
    nodes[p.node].n_tokens = uint32_t(node_tokens.size()) - nodes[p.node].first_token;
    nodes[p.node].first_child = uint32_t(nodes.size());
    while (i < p.end) {
      const uint8_t byte = uint8_t(bytes_[size_t(order[i])][p.depth]);
      size_t j = i;
      while (j < p.end && uint8_t(bytes_[size_t(order[j])][p.depth]) == byte) ++j;
      Node child;
      child.byte = byte;
      nodes.push_back(child);
      queue.push_back({uint32_t(nodes.size() - 1), i, j, p.depth + 1});
      i = j;
    }
    nodes[p.node].n_children = uint32_t(nodes.size()) - nodes[p.node].first_child;
  }
  // node_tokens was filled in queue order, which is node order: the offsets above hold.
}

size_t GrammarMatcher::StateHash::operator()(const GrammarState& s) const {
  size_t h = s.is_complete ? 0x9E3779B97F4A7C15ull : 0;
  for (int32_t id : s.stacks) h = (h ^ size_t(id)) * 0x100000001B3ull;
  return h;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {}

int32_t GrammarMatcher::intern(int32_t position, int32_t below) {
  const uint64_t key = (uint64_t(uint32_t(position)) << 32) | uint32_t(below);
  auto [it, is_new] = interned_.try_emplace(key, int32_t(nodes_.size()));
  if (is_new) nodes_.push_back({position, below});
  return it->second;
}

void GrammarMatcher::expand(std::span<const StackNode> roots, GrammarState* out) {
  // Depth first in the grammar's order (alternatives pushed last to first), so stacks are interned
  // in the order a recursive walk would intern them; each (position, below) expands once: its
  // stacks are already in `out`.
  // clear() keeps (and zeroes) every bucket a large expansion grew: start small again after one.
  if (expanded_.bucket_count() > 4096) expanded_ = {};
  else expanded_.clear();
  work_.assign(roots.rbegin(), roots.rend());
  while (!work_.empty()) {
    const StackNode item = work_.back();
    work_.pop_back();
    if (!expanded_.insert((uint64_t(uint32_t(item.position)) << 32) | uint32_t(item.below)).second) continue;
    // Each pair yields at most one stack, so `out` never holds a duplicate: stop as soon as the
    // parses (or the ways to them) pass the bound, before they multiply further.
    if (out->stacks.size() > kMaxStacks) too_ambiguous();
    if (expanded_.size() > kMaxExpansions) too_many_expansions();
    const GrammarSymbol symbol = grammar_->code[size_t(item.position)];
    switch (symbol.kind) {
      case GrammarSymbol::end:
        if (item.below < 0) {
          out->is_complete = true;
        } else {
          work_.push_back(nodes_[size_t(item.below)]);
        }
        break;
      case GrammarSymbol::bytes:
        out->stacks.push_back(intern(item.position, item.below));
        break;
      case GrammarSymbol::rule: {
        // A rule in tail position returns straight to the caller's caller, so right recursion
        // (repetitions) does not deepen the stack.
        const bool is_tail = grammar_->code[size_t(item.position) + 1].kind == GrammarSymbol::end;
        const int32_t continuation = is_tail ? item.below : intern(item.position + 1, item.below);
        const std::vector<uint32_t>& alternatives = grammar_->alternatives[symbol.index];
        for (auto it = alternatives.rbegin(); it != alternatives.rend(); ++it) work_.push_back({int32_t(*it), continuation});
        break;
      }
    }
  }
}

static void normalize(GrammarState* state) {
  std::sort(state->stacks.begin(), state->stacks.end());
  state->stacks.erase(std::unique(state->stacks.begin(), state->stacks.end()), state->stacks.end());
  if (state->stacks.size() > kMaxStacks) too_ambiguous();
}

GrammarState GrammarMatcher::start() {
  GrammarState state;
  std::vector<StackNode> roots;
  for (uint32_t offset : grammar_->alternatives[grammar_->root]) roots.push_back({int32_t(offset), -1});
  expand(roots, &state);
  normalize(&state);
  return state;
}

const GrammarMatcher::Step& GrammarMatcher::step(int32_t stack, uint8_t byte) {
  const uint64_t key = (uint64_t(uint32_t(stack)) << 8) | byte;
  auto found = step_index_.find(key);
  if (found != step_index_.end()) return steps_[found->second];
  GrammarState next;
  const StackNode node = nodes_[size_t(stack)];
  if (grammar_->matches(grammar_->code[size_t(node.position)].index, byte)) {
    const StackNode root{node.position + 1, node.below};
    expand({&root, 1}, &next);
  }
  normalize(&next);
  step_index_.emplace(key, uint32_t(steps_.size()));
  steps_.push_back({std::move(next.stacks), next.is_complete});
  return steps_.back();
}

void GrammarMatcher::advance_into(const GrammarState& state, uint8_t byte, GrammarState* out) {
  out->stacks.clear();
  out->is_complete = false;
  for (int32_t id : state.stacks) {
    const Step& next = step(id, byte);  // used before the next call can move steps_
    out->stacks.insert(out->stacks.end(), next.stacks.begin(), next.stacks.end());
    out->is_complete = out->is_complete || next.is_complete;
  }
  if (state.stacks.size() > 1) normalize(out);
}

GrammarState GrammarMatcher::advance(const GrammarState& state, uint8_t byte) {
  GrammarState out;
  advance_into(state, byte, &out);
  return out;
}

GrammarState GrammarMatcher::advance_bytes(const GrammarState& state, std::string_view bytes) {
  GrammarState current = state;
  for (unsigned char b : bytes) {
    if (current.stacks.empty()) return {};
    current = advance(current, b);
  }
  return current;
}

GrammarState GrammarMatcher::advance_token(const GrammarState& state, int32_t token) {
  if (token < 0 || token >= vocabulary_->n_tokens() || vocabulary_->bytes(token).empty()) return {};
  return advance_bytes(state, vocabulary_->bytes(token));
}

void GrammarMatcher::mark_allowed(uint32_t node_index, const GrammarState& state, int depth,
                                  std::vector<uint32_t>* mask) {
  const TokenVocabulary::Node& node = vocabulary_->nodes[node_index];
  for (uint32_t c = 0; c < node.n_children; ++c) {
    const uint32_t child_index = node.first_child + c;
    const TokenVocabulary::Node& child = vocabulary_->nodes[child_index];
    GrammarState& next = scratch_[size_t(depth)];
    advance_into(state, child.byte, &next);
    if (next.is_dead()) continue;
    for (uint32_t k = 0; k < child.n_tokens; ++k) {
      const int32_t token = vocabulary_->node_tokens[child.first_token + k];
      (*mask)[size_t(token) >> 5] |= 1u << (token & 31);
    }
    // Deeper calls use deeper scratch slots only (sized before the walk), so `next` stays intact.
    if (!next.stacks.empty() && child.n_children > 0) mark_allowed(child_index, next, depth + 1, mask);
  }
}

const std::vector<uint32_t>& GrammarMatcher::allowed_tokens(const GrammarState& state) {
  auto found = masks_.find(state);
  if (found != masks_.end()) return found->second;
  if (masks_.size() >= kMaxCachedMasks) masks_.clear();
  std::vector<uint32_t> mask(size_t((vocabulary_->n_tokens() + 31) / 32), 0u);
  scratch_.resize(vocabulary_->max_token_bytes + 1);
  if (!state.stacks.empty()) mark_allowed(0, state, 0, &mask);
  ++n_mask_computations_;
  return masks_.emplace(state, std::move(mask)).first->second;
}

}  // namespace tf
