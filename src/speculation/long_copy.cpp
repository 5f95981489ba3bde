// Suffix automaton with most-recent occurrence tracking, and the long-copy proposals made from it.
#include "speculation/long_copy.h"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace tf {
namespace {

// Each automaton state's latest end position is the newest position whose prefix state lies
// below it in the suffix-link tree. Adding position i sets it to i on the whole path from the
// new prefix state to the root, which a link-cut tree does in O(log n) amortized; walking the path
// would cost its depth, which grows with the length of a repeated run (a model stuck in a loop).
class LatestEndTree {
 public:
  int32_t add_node(int32_t latest_end) {
    children_.push_back({-1, -1});
    parent_.push_back(-1);
    value_.push_back(latest_end);
    pending_.push_back(-1);
    return int32_t(parent_.size() - 1);
  }

  // `child` must be the root of its own tree.
  void link(int32_t child, int32_t parent) {
    access(child);
    parent_[child] = parent;
  }

  // Detaches `node` from its parent.
  void cut(int32_t node) {
    access(node);
    int32_t above = children_[node][0];
    if (above >= 0) parent_[above] = -1;
    children_[node][0] = -1;
  }

  int32_t latest_end(int32_t node) {
    splay(node);  // pushes pending assignments down to `node`
    return value_[node];
  }

  void set_latest_end_to_root(int32_t node, int32_t end) {
    access(node);  // the splay tree of `node` now holds exactly the path to the root
    value_[node] = end;
    pending_[node] = end;
  }

 private:
  bool is_splay_root(int32_t node) const {
    int32_t parent = parent_[node];
    return parent < 0 || (children_[parent][0] != node && children_[parent][1] != node);
  }

  void push_down(int32_t node) {
    if (pending_[node] < 0) return;
    for (int32_t child : children_[node]) {
      if (child < 0) continue;
      value_[child] = pending_[node];
      pending_[child] = pending_[node];
    }
    pending_[node] = -1;
  }

  void rotate(int32_t node) {
    int32_t parent = parent_[node];
    int32_t grandparent = parent_[parent];
    int side = children_[parent][1] == node ? 1 : 0;
    if (!is_splay_root(parent))
      children_[grandparent][children_[grandparent][1] == parent ? 1 : 0] = node;
    parent_[node] = grandparent;
    int32_t moved = children_[node][1 - side];
    children_[parent][side] = moved;
    if (moved >= 0) parent_[moved] = parent;
    children_[node][1 - side] = parent;
    parent_[parent] = node;
  }

  void splay(int32_t node) {
    path_.clear();
    for (int32_t up = node;; up = parent_[up]) {
      path_.push_back(up);
      if (is_splay_root(up)) break;
    }
    for (auto it = path_.rbegin(); it != path_.rend(); ++it) push_down(*it);
    while (!is_splay_root(node)) {
      int32_t parent = parent_[node];
      if (!is_splay_root(parent)) {
        int32_t grandparent = parent_[parent];
        bool is_zig_zig = (children_[grandparent][0] == parent) == (children_[parent][0] == node);
        rotate(is_zig_zig ? parent : node);
      }
      rotate(node);
    }
  }

  void access(int32_t node) {
    for (int32_t below = -1, up = node; up >= 0; below = up, up = parent_[up]) {
      splay(up);
      children_[up][1] = below;
    }
    splay(node);
  }

  std::vector<std::array<int32_t, 2>> children_;  // [n_nodes] splay children: shallower, deeper
  std::vector<int32_t> parent_;   // [n_nodes] splay parent, or the path's parent in the tree
  std::vector<int32_t> value_;    // [n_nodes] latest end position
  std::vector<int32_t> pending_;  // [n_nodes] assignment not yet pushed to the children, or -1
  std::vector<int32_t> path_;     // scratch for splay()
};

uint64_t edge_key(int32_t state, int32_t token) {
  return (uint64_t(uint32_t(state)) << 32) | uint32_t(token);
}

}  // namespace

// The classic online suffix automaton. Transitions live in one hash map keyed by (state, token),
// since the vocabulary is large and most states have few; a per-state edge list lets a split
// copy them.
struct LongCopyProposer::Automaton {
  std::vector<int32_t> length;                    // [n_states] longest string of the state
  std::vector<int32_t> link;                      // [n_states] suffix link, -1 for the root
  std::vector<int32_t> first_edge;                // [n_states] head of the state's edge list, or -1
  std::vector<int32_t> edge_token;                // [n_edges]
  std::vector<int32_t> edge_target;               // [n_edges]
  std::vector<int32_t> edge_next;                 // [n_edges] next edge of the same state, or -1
  std::unordered_map<uint64_t, int32_t> edge_of;  // (state, token) -> edge
  LatestEndTree latest_end;
  int32_t last_state = 0;
  int64_t match_length = 0;
  int64_t match_end = -1;

  Automaton() { new_state(0, -1); }

  int32_t new_state(int32_t state_length, int32_t state_latest_end) {
    length.push_back(state_length);
    link.push_back(-1);
    first_edge.push_back(-1);
    return latest_end.add_node(state_latest_end);
  }

  int32_t find_edge(int32_t state, int32_t token) const {
    auto it = edge_of.find(edge_key(state, token));
    return it == edge_of.end() ? -1 : it->second;
  }

  void add_edge(int32_t state, int32_t token, int32_t target) {
    int32_t edge = int32_t(edge_token.size());
    edge_token.push_back(token);
    edge_target.push_back(target);
    edge_next.push_back(first_edge[state]);
    first_edge[state] = edge;
    edge_of.emplace(edge_key(state, token), edge);
  }

  // Appends the token at `position`; afterwards match_length/match_end describe the new suffix.
  void extend(int32_t token, int32_t position) {
    int32_t current = new_state(length[last_state] + 1, -1);
    int32_t state = last_state;
    int32_t edge = -1;
    for (; state >= 0; state = link[state]) {
      edge = find_edge(state, token);
      if (edge >= 0) break;
      add_edge(state, token, current);
    }
    if (state < 0) {
      link[current] = 0;
    } else if (length[edge_target[edge]] == length[state] + 1) {
      link[current] = edge_target[edge];
    } else {
      int32_t split = edge_target[edge];
      int32_t clone = new_state(length[state] + 1, latest_end.latest_end(split));
      for (int32_t e = first_edge[split]; e >= 0; e = edge_next[e])
        add_edge(clone, edge_token[e], edge_target[e]);
      for (; state >= 0; state = link[state]) {
        int32_t redirected = find_edge(state, token);
        if (edge_target[redirected] != split) break;
        edge_target[redirected] = clone;
      }
      latest_end.cut(split);
      latest_end.link(clone, link[split]);
      latest_end.link(split, clone);
      link[clone] = link[split];
      link[split] = clone;
      link[current] = clone;
    }
    latest_end.link(current, link[current]);
    // The suffix link names the longest suffix seen before; its latest end, read before this
    // position is recorded, is that suffix's most recent earlier occurrence.
    int32_t matched = link[current];
    match_length = length[matched];
    match_end = match_length > 0 ? latest_end.latest_end(matched) : -1;
    latest_end.set_latest_end_to_root(current, position);
    last_state = current;
  }
};

LongCopyProposer::LongCopyProposer(LongCopyOptions options, std::vector<int32_t> copy_source)
    : options_(options), copy_source_(std::move(copy_source)), automaton_(std::make_unique<Automaton>()) {}

LaneHistory LongCopyProposer::with_source(const LaneHistory& history) {
  if (copy_source_.empty()) return history;
  const size_t n_source = copy_source_.size();
  const size_t n_seen = source_and_history_.size() < n_source ? 0 : source_and_history_.size() - n_source;
  if (source_and_history_.size() < n_source || history.tokens.size() < n_seen) {  // a different history
    source_and_history_ = copy_source_;
  }
  source_and_history_.insert(source_and_history_.end(),
                             history.tokens.begin() + int64_t(source_and_history_.size() - n_source), history.tokens.end());
  return {source_and_history_, history.n_prompt + int64_t(n_source)};
}

LongCopyProposer::~LongCopyProposer() = default;

void LongCopyProposer::catch_up(const LaneHistory& history) {
  const std::vector<int32_t>& tokens = history.tokens;
  if (int64_t(tokens.size()) < n_observed_) {  // a different history: start over
    automaton_ = std::make_unique<Automaton>();
    n_observed_ = 0;
    cursor_ = departed_source_ = departed_at_ = -1;
    is_rewrite_ = false;
    in_edit_.clear();
    edits_.clear();
  }
  for (; n_observed_ < int64_t(tokens.size()); ++n_observed_) {
    automaton_->extend(tokens[size_t(n_observed_)], int32_t(n_observed_));
    // Only the reply follows a source: the prompt's own repeats (a file's similar lines) are not
    // edits, and edits learned from them would be applied to the reply's copy.
    if (n_observed_ >= history.n_prompt) follow_source(tokens, n_observed_);
  }
}

void LongCopyProposer::follow_source(const std::vector<int32_t>& tokens, int64_t n) {
  if (cursor_ >= 0) {
    // The copy applies a learned edit before copying (propose()), so the cursor does too.
    if (in_edit_.empty() && cursor_ < n) {
      const Edit* edit = edit_at(tokens, cursor_, n);  // tokens from n on are not observed yet
      if (edit && !edit->new_tokens.empty() && edit->new_tokens[0] == tokens[size_t(n)]) {
        in_edit_ = edit->new_tokens;
        in_edit_written_ = 0;
        in_edit_old_size_ = int64_t(edit->old_tokens.size());
      }
    }
    if (!in_edit_.empty()) {
      if (in_edit_[in_edit_written_] == tokens[size_t(n)]) {
        if (++in_edit_written_ == in_edit_.size()) {
          cursor_ += in_edit_old_size_;
          in_edit_.clear();
        }
        return;
      }
      // The reply left the edit part-way: it departed where the edit began.
      departed_source_ = cursor_;
      departed_at_ = n - int64_t(in_edit_written_);
      in_edit_.clear();
      cursor_ = -1;
    } else if (cursor_ < n && tokens[size_t(cursor_)] == tokens[size_t(n)]) {
      ++cursor_;
      return;
    } else {
      departed_source_ = cursor_;
      departed_at_ = n;
      cursor_ = -1;
    }
  }
  if (departed_source_ >= 0) {
    if (try_rejoin(tokens, n)) return;
    if (n - departed_at_ > options_.max_edit_tokens) departed_source_ = -1;  // lost: wait for a long match
  }
  if (automaton_->match_length >= confident_match()) {
    cursor_ = automaton_->match_end + 1;
    is_rewrite_ = true;
  }
}

// The last rejoin_tokens tokens, all at or after the departure, equal the source just after the
// departure point (within max_edit_tokens): what lies between is an edit.
bool LongCopyProposer::try_rejoin(const std::vector<int32_t>& tokens, int64_t n) {
  const int64_t k = options_.rejoin_tokens;
  if (n - k + 1 < departed_at_) return false;
  int64_t last_start = std::min(departed_source_ + options_.max_edit_tokens, n - k);
  for (int64_t start = departed_source_; start <= last_start; ++start) {
    bool same = true;
    for (int64_t j = 0; j < k && same; ++j) same = tokens[size_t(start + j)] == tokens[size_t(n - k + 1 + j)];
    if (!same) continue;
    Edit edit;
    edit.old_tokens.assign(tokens.begin() + departed_source_, tokens.begin() + start);
    edit.new_tokens.assign(tokens.begin() + departed_at_, tokens.begin() + (n - k + 1));
    learn_edit(std::move(edit));
    cursor_ = start + k;
    departed_source_ = departed_at_ = -1;
    return true;
  }
  return false;
}

void LongCopyProposer::learn_edit(Edit edit) {
  // An insertion has no old tokens to recognise at the next occurrence.
  if (edit.old_tokens.empty() || int64_t(edit.new_tokens.size()) > options_.max_edit_tokens) return;
  auto same = [&](const Edit& e) { return e.old_tokens == edit.old_tokens; };
  edits_.erase(std::remove_if(edits_.begin(), edits_.end(), same), edits_.end());
  edits_.insert(edits_.begin(), std::move(edit));
  if (int64_t(edits_.size()) > options_.max_edits) edits_.pop_back();
}

const LongCopyProposer::Edit* LongCopyProposer::edit_at(const std::vector<int32_t>& tokens, int64_t p,
                                                        int64_t end) const {
  for (const Edit& e : edits_) {
    if (p + int64_t(e.old_tokens.size()) <= end &&
        std::equal(e.old_tokens.begin(), e.old_tokens.end(), tokens.begin() + p))
      return &e;
  }
  return nullptr;
}

std::pair<int64_t, int64_t> LongCopyProposer::copy_source(const std::vector<int32_t>& tokens, int64_t from,
                                                          int64_t n_chain, int64_t keep_at,
                                                          std::vector<int32_t>* chain) const {
  const int64_t n_tokens = int64_t(tokens.size());
  std::pair<int64_t, int64_t> first_edit{-1, -1};
  for (int64_t p = from; int64_t(chain->size()) < n_chain;) {
    if (p >= n_tokens) {
      if (p - n_tokens >= int64_t(chain->size())) break;  // chain[i] is the reply's token n_tokens + i
      chain->push_back((*chain)[size_t(p++ - n_tokens)]);
    } else if (const Edit* edit = p == keep_at ? nullptr : edit_at(tokens, p, n_tokens)) {
      if (first_edit.first < 0) first_edit = {int64_t(chain->size()), p};
      chain->insert(chain->end(), edit->new_tokens.begin(), edit->new_tokens.end());
      p += int64_t(edit->old_tokens.size());
    } else {
      chain->push_back(tokens[size_t(p++)]);
    }
  }
  return first_edit;
}

int64_t LongCopyProposer::confident_match() const {
  return is_rewrite_ ? options_.rewrite_confident_match : options_.min_confident_match;
}

void LongCopyProposer::observe(const LaneHistory& lane_history) { catch_up(with_source(lane_history)); }

int64_t LongCopyProposer::last_match_length() const { return automaton_->match_length; }

int64_t LongCopyProposer::last_match_end() const { return automaton_->match_end; }

void LongCopyProposer::propose(const LaneHistory& lane_history, int64_t max_nodes, DraftTree* tree) {
  const LaneHistory history = with_source(lane_history);
  catch_up(history);
  const std::vector<int32_t>& tokens = history.tokens;
  const int64_t n_tokens = int64_t(tokens.size());
  if (cursor_ >= 0) {
    // Aligned: copy the source from the cursor with the learned edits applied.
    int64_t n_chain = std::min(options_.max_copy, max_nodes - tree->size());
    chain_.clear();
    int64_t from = cursor_;
    if (!in_edit_.empty()) {  // the rest of the edit the reply is writing, then the source past it
      chain_.assign(in_edit_.begin() + std::ptrdiff_t(in_edit_written_), in_edit_.end());
      from += in_edit_old_size_;
    }
    const auto [edit_in_chain, edit_in_source] = copy_source(tokens, from, n_chain, -1, &chain_);
    if (int64_t(chain_.size()) > n_chain) chain_.resize(size_t(std::max<int64_t>(n_chain, 0)));
    // The branch keeping the first edit's old tokens takes its rows from the copy's end.
    const int64_t n_kept = edit_in_chain < 0 ? 0
                           : std::min(options_.kept_edit_branch, int64_t(chain_.size()) - edit_in_chain - 1);
    if (n_kept > 0) {
      chain_.resize(chain_.size() - size_t(n_kept));
      kept_chain_.assign(chain_.begin(), chain_.begin() + std::ptrdiff_t(edit_in_chain));
      copy_source(tokens, edit_in_source, edit_in_chain + n_kept, edit_in_source, &kept_chain_);
      kept_chain_.resize(std::min(kept_chain_.size(), size_t(edit_in_chain + n_kept)));
    }
    if (!chain_.empty()) {
      tree->add_chain(-1, chain_, max_nodes, uint8_t(ProposerKind::long_copy));
      if (n_kept > 0) tree->add_chain(-1, kept_chain_, max_nodes, uint8_t(ProposerKind::long_copy));
      return;
    }
  }
  if (departed_source_ < 0) propose_quote_start(history, max_nodes, tree);
  int64_t match_length = automaton_->match_length;
  int64_t n_chain = 0;
  if (match_length >= confident_match()) {
    n_chain = options_.max_copy;
  } else if (is_rewrite_ && match_length > 0) {
    n_chain = std::max(options_.rewrite_min_chain, options_.rewrite_chain_per_token * match_length);
  } else if (match_length >= options_.min_short_match) {
    n_chain = std::max(options_.min_short_chain, options_.short_chain_per_token * match_length);
  }
  const bool is_editing = departed_source_ >= 0 && n_tokens - departed_at_ <= options_.rejoin_branch_span;
  if (n_chain == 0 && match_length > 0 && is_editing) {
    // Writing an edit: its new tokens often occur earlier (a rename's new name is in the request),
    // so even a match of one token is worth a short branch.
    n_chain = options_.rejoin_branch_tokens;
  }
  n_chain = std::min(n_chain, max_nodes - tree->size());
  if (n_chain > 0) {
    // Copy what followed the earlier occurrence; past the end of the history the copy reads its own
    // output, so a repeating run keeps repeating (the earlier occurrence overlaps the current one).
    chain_.clear();
    for (int64_t source = automaton_->match_end + 1; int64_t(chain_.size()) < n_chain; ++source) {
      chain_.push_back(source < n_tokens ? tokens[size_t(source)]
                                         : chain_[size_t(source - n_tokens)]);
    }
    tree->add_chain(-1, chain_, max_nodes, uint8_t(ProposerKind::long_copy));
  }
  if (is_editing) propose_rejoins(tokens, max_nodes, tree);
}

void LongCopyProposer::propose_quote_start(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) {
  const std::vector<int32_t>& tokens = history.tokens;
  const int64_t n_tokens = int64_t(tokens.size()), n_reply = n_tokens - history.n_prompt;
  if (n_reply < 1 || n_reply >= options_.min_confident_match) return;
  // The earliest place in the prompt where the whole reply so far occurs.
  const auto reply = tokens.begin() + history.n_prompt;
  const auto found = std::search(tokens.begin(), reply, reply, tokens.end());
  if (found == reply) return;
  const int64_t n_chain = std::min(n_reply < options_.min_short_match
                                       ? options_.min_short_chain
                                       : options_.quote_chain_per_token * n_reply,
                                   max_nodes - tree->size());
  if (n_chain <= 0) return;
  chain_.clear();
  copy_source(tokens, int64_t(found - tokens.begin()) + n_reply, n_chain, -1, &chain_);
  chain_.resize(std::min(chain_.size(), size_t(n_chain)));
  tree->add_chain(-1, chain_, max_nodes, uint8_t(ProposerKind::long_copy));
}

void LongCopyProposer::propose_rejoins(const std::vector<int32_t>& tokens, int64_t max_nodes, DraftTree* tree) {
  const int64_t n_tokens = int64_t(tokens.size()), n_written = n_tokens - departed_at_;
  for (int64_t skipped = 0; skipped < options_.rejoin_branches; ++skipped) {
    // The reply's last tokens may already be the resumed source's first ones (fewer than
    // rejoin_tokens, or the rejoin would have happened): the branch goes on after them.
    int64_t resume = departed_source_ + skipped;
    for (int64_t r = std::min(options_.rejoin_tokens - 1, n_written); r > 0; --r) {
      if (resume + r <= departed_at_ &&
          std::equal(tokens.begin() + resume, tokens.begin() + resume + r, tokens.end() - r)) {
        resume += r;
        break;
      }
    }
    if (resume >= departed_at_) break;  // the source is the history before the departure
    const int64_t n_branch = std::min(options_.rejoin_branch_tokens, max_nodes - tree->size());
    if (n_branch <= 0) break;
    chain_.clear();
    copy_source(tokens, resume, n_branch, -1, &chain_);
    chain_.resize(std::min(chain_.size(), size_t(n_branch)));
    tree->add_chain(-1, chain_, max_nodes, uint8_t(ProposerKind::long_copy));
  }
}

}  // namespace tf
