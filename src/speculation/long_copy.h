// Long-copy proposer: finds where the history's end occurred before and proposes what followed.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "speculation/proposer.h"

namespace tf {

struct LongCopyOptions {
  int64_t min_confident_match = 24;  // a match this long proposes a long copy
  int64_t max_copy = 256;            // most tokens in one long copy
  int64_t min_short_match = 3;       // shorter matches propose nothing
  int64_t min_short_chain = 8;       // fewest tokens proposed after a short match
  int64_t short_chain_per_token = 2; // a short match of k tokens proposes this many times k (a longer
                                     // match is likelier to be the start of a copy)
  int64_t quote_chain_per_token = 8; // a reply that so far quotes the prompt from its first token,
                                     // k tokens long, proposes what follows the earliest such place:
                                     // min_short_chain tokens, from min_short_match on k times this
  int64_t rejoin_tokens = 2;         // tokens matching the source again that end a departure
  int64_t max_edit_tokens = 32;      // longest departure (either side) still learned as an edit
  int64_t max_edits = 16;            // edits remembered, newest first
  int64_t rejoin_branches = 3;       // while departed: branches resuming the source 0, 1, 2... tokens
  int64_t rejoin_branch_tokens = 8;  // past the departure point (an insertion, or an edit of that many
                                     // old tokens), of this many tokens each
  int64_t rejoin_branch_span = 6;    // ...for this many tokens after departing: an edit is short, and
                                     // a longer departure is new text, where branches only cost rows
  int64_t kept_edit_branch = 16;     // tokens of the branch that keeps the old tokens where the copy
                                     // applies a learned edit (0: no such branch)
  // Once a confident match has aligned the reply with a source, the reply is a rewrite: after a
  // slip it realigns on a shorter match, and a match of any length proposes a chain.
  int64_t rewrite_confident_match = 8;
  int64_t rewrite_min_chain = 16;       // fewest tokens a rewrite's short match proposes
  int64_t rewrite_chain_per_token = 8;  // ...and per matched token
};

// Keeps a suffix automaton over the lane's tokens, extended as tokens arrive, so the longest suffix
// of the history that also ends at an earlier position is known after every token. Among several
// earlier occurrences the most recent wins: the newest copy of a repeated text (a file edited over
// several turns, a list being extended) is the one most likely to be continued.
//
// Copies are edit-aware. A rewrite follows its source with a few changes (a rename touches every
// occurrence of one name), so once a confident match aligns the reply with its source, a cursor
// follows the source token by token. Where the reply departs from the cursor and rejoins the
// source a few tokens later, the departure is learned as an edit (old tokens -> new tokens); a
// copy proposed from the cursor applies the learned edits wherever their old tokens recur, so
// later occurrences of a renamed name cost no extra round. Where the reply writes a learned edit's
// new tokens at the cursor, the cursor steps over the edit's old tokens, so the copy stays aligned
// through the edit instead of departing and rejoining at every occurrence. A model may apply an
// edit at some occurrences and not others, so where the copy first applies a learned edit, a short
// sibling branch keeps the old tokens: either way the round goes on past that occurrence. While
// the reply is departed (writing an edit of unknown length), short branches resume the source just
// past the departure point, so the round where the edit ends already continues the copy, and a
// short branch follows even a one-token match, as the edit's new tokens often occur earlier (a
// rename's new name is in the request).
// A rewrite's reply starts by quoting its source: until a confident match, a reply that occurs
// whole in the prompt also proposes what follows its earliest occurrence there (the text given to
// rewrite), besides what follows the most recent occurrence of its suffix. Once aligned, the reply
// is known to be a rewrite: where the model slips off its source, a shorter match realigns the
// copy, and any match proposes a chain. Only the reply is followed: the prompt's own near-repeats
// are not edits.
// A proposer serves one lane: the history must only grow between calls.
class LongCopyProposer final : public Proposer {
 public:
  // copy_source: tokens to copy from besides the history (a prediction), read as if they came
  // before the prompt, so a reply quoting it from its first token finds it first.
  explicit LongCopyProposer(LongCopyOptions options = {}, std::vector<int32_t> copy_source = {});
  ~LongCopyProposer() override;

  ProposerKind kind() const override { return ProposerKind::long_copy; }
  void observe(const LaneHistory& history) override;
  void propose(const LaneHistory& history, int64_t max_nodes, DraftTree* tree) override;

  // Length of the longest suffix of the observed history that also ends at an earlier position.
  int64_t last_match_length() const;
  // Index of the last token of that suffix's most recent earlier occurrence, or -1 without a match.
  int64_t last_match_end() const;

 private:
  struct Automaton;
  struct Edit {
    std::vector<int32_t> old_tokens, new_tokens;
  };
  // The history with the copy source in front (the history itself when there is none).
  LaneHistory with_source(const LaneHistory& history);
  void catch_up(const LaneHistory& history);
  // Moves the source cursor past tokens[n], or notes a departure, or rejoins after one.
  void follow_source(const std::vector<int32_t>& tokens, int64_t n);
  bool try_rejoin(const std::vector<int32_t>& tokens, int64_t n);
  void learn_edit(Edit edit);
  void propose_quote_start(const LaneHistory& history, int64_t max_nodes, DraftTree* tree);
  void propose_rejoins(const std::vector<int32_t>& tokens, int64_t max_nodes, DraftTree* tree);
  // The newest learned edit whose old tokens start at tokens[p] and end before tokens[end], or nullptr.
  const Edit* edit_at(const std::vector<int32_t>& tokens, int64_t p, int64_t end) const;
  // Appends the source from tokens[from] to *chain (which proposes the tokens after the history),
  // with the learned edits applied except one starting at keep_at, until it holds n_chain tokens;
  // past the history's end it reads its own output (a repeating run). Returns where the first
  // applied edit starts: its chain index and source index, or {-1, -1}.
  std::pair<int64_t, int64_t> copy_source(const std::vector<int32_t>& tokens, int64_t from, int64_t n_chain,
                                          int64_t keep_at, std::vector<int32_t>* chain) const;

  LongCopyOptions options_;
  std::vector<int32_t> copy_source_;
  std::vector<int32_t> source_and_history_;  // copy_source_, then the history seen so far
  std::unique_ptr<Automaton> automaton_;
  int64_t n_observed_ = 0;
  // The match length that aligns the copy: shorter once the reply is a rewrite.
  int64_t confident_match() const;
  bool is_rewrite_ = false;       // a confident match has aligned the reply with a source
  int64_t cursor_ = -1;           // history index the aligned reply should copy next, or -1
  int64_t departed_source_ = -1;  // cursor when the reply departed from it, or -1
  int64_t departed_at_ = -1;      // history index of the first departing token
  std::vector<int32_t> in_edit_;  // new tokens of the learned edit the reply is writing at cursor_
  size_t in_edit_written_ = 0;    // how many of them it has written
  int64_t in_edit_old_size_ = 0;  // old tokens the cursor steps over once all are written
  std::vector<Edit> edits_;       // newest first
  std::vector<int32_t> chain_, kept_chain_;  // scratch for propose()
};

}  // namespace tf
