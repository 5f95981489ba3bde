// Model-free proposers and the draft tree: chain sharing and bounds, long-copy against a
// brute-force suffix search, copies with edits, incremental observation, n-gram and replay; the
// proposer gate's decisions and the row cost it reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "speculation/long_copy.h"
#include "speculation/ngram.h"
#include "speculation/proposer.h"
#include "speculation/proposer_gate.h"
#include "speculation/replay.h"
#include "speculation/round_shape.h"

namespace tf {
namespace {

DraftTree propose_tree(Proposer& proposer, const std::vector<int32_t>& tokens, int64_t n_prompt,
                       int64_t max_nodes = 1000) {
  LaneHistory history{tokens, n_prompt};
  proposer.observe(history);
  DraftTree tree;
  proposer.propose(history, max_nodes, &tree);
  EXPECT_LE(tree.size(), max_nodes);
  return tree;
}

// The tree's first chain (the main proposal; a proposer adds it first, so node i's parent is i - 1).
std::vector<int32_t> propose_chain(Proposer& proposer, const std::vector<int32_t>& tokens,
                                   int64_t n_prompt, int64_t max_nodes = 1000) {
  DraftTree tree = propose_tree(proposer, tokens, n_prompt, max_nodes);
  int64_t n_chain = 0;
  while (n_chain < tree.size() && tree.parents[size_t(n_chain)] == n_chain - 1) ++n_chain;
  return std::vector<int32_t>(tree.tokens.begin(), tree.tokens.begin() + std::ptrdiff_t(n_chain));
}

// Whether a path from the root spells `path`.
bool tree_holds(const DraftTree& tree, const std::vector<int32_t>& path) {
  int32_t node = -1;
  for (int32_t token : path) {
    int32_t child = -1;
    for (int64_t i = 0; i < tree.size() && child < 0; ++i)
      if (tree.parents[size_t(i)] == node && tree.tokens[size_t(i)] == token) child = int32_t(i);
    if (child < 0) return false;
    node = child;
  }
  return true;
}

// The path from the root to `node`, in order.
std::vector<int32_t> path_to(const DraftTree& tree, int32_t node) {
  std::vector<int32_t> path;
  for (; node >= 0; node = tree.parents[size_t(node)]) path.insert(path.begin(), tree.tokens[size_t(node)]);
  return path;
}

// Tokens that never repeat, so every match in a test is one the test put there.
std::vector<int32_t> distinct_tokens(int32_t first, int64_t n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), first);
  std::shuffle(tokens.begin(), tokens.end(), std::mt19937(uint32_t(first)));
  return tokens;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(DraftTree, AddChainSharesPrefixesAndKeepsParentsFirst) {
  DraftTree tree;
  EXPECT_EQ(tree.add_chain(-1, {1, 2, 3}, 16, 0), 3);
  EXPECT_EQ(tree.add_chain(-1, {1, 2, 4}, 16, 1), 1);
  EXPECT_EQ(tree.add_chain(-1, {1, 2, 3}, 16, 1), 0);
  EXPECT_EQ(tree.add_chain(-1, {5}, 16, 1), 1);
  EXPECT_EQ(tree.add_chain(1, {3, 6}, 16, 2), 1);  // below node 1 (token 2): 3 exists, 6 is new
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{-1, 0, 1, 1, -1, 2}));
  EXPECT_EQ(tree.sources, (std::vector<uint8_t>{0, 0, 0, 1, 1, 2}));
  EXPECT_EQ(tree.depth(0), 1);
  EXPECT_EQ(tree.depth(3), 3);
  EXPECT_EQ(tree.depth(4), 1);
  EXPECT_EQ(tree.depth(5), 4);
  for (int64_t node = 0; node < tree.size(); ++node) EXPECT_LT(tree.parents[size_t(node)], node);
  tree.clear();
  EXPECT_EQ(tree.size(), 0);
  EXPECT_TRUE(tree.parents.empty() && tree.sources.empty());
}

TEST(DraftTree, AddChainStopsAtMaxNodes) {
  DraftTree tree;
  EXPECT_EQ(tree.add_chain(-1, {1, 2, 3, 4, 5, 6}, 4, 0), 4);
  EXPECT_EQ(tree.size(), 4);
  EXPECT_EQ(tree.add_chain(-1, {1, 2, 9}, 4, 0), 0);  // walking shared nodes still works when full
  EXPECT_EQ(tree.add_chain(-1, {1, 2, 9}, 5, 0), 1);
  EXPECT_EQ(tree.parents.back(), 1);
  EXPECT_EQ(tree.add_chain(-1, {7, 8}, 0, 0), 0);
  EXPECT_STREQ(proposer_kind_name(ProposerKind::long_copy), "long_copy");
  EXPECT_STREQ(proposer_kind_name(ProposerKind::drafter), "drafter");
}

TEST(LongCopy, CopyOfThePromptBecomesConfidentAfterTheThreshold) {
  LongCopyOptions options;
  const std::vector<int32_t> text = distinct_tokens(1000, 200);
  const std::vector<int32_t> prompt =
      concat(concat(distinct_tokens(5000, 30), text), distinct_tokens(6000, 20));
  LongCopyProposer proposer(options);
  // The reply opens with words of its own, so it does not quote the prompt from its first token
  // (that start has a rule of its own, below).
  std::vector<int32_t> tokens = concat(prompt, distinct_tokens(7000, 2));
  for (int64_t n_copied = 0; n_copied < 190; ++n_copied) {
    if (n_copied > 0) tokens.push_back(text[size_t(n_copied - 1)]);
    std::vector<int32_t> chain = propose_chain(proposer, tokens, int64_t(prompt.size()), 1000);
    EXPECT_EQ(proposer.last_match_length(), n_copied) << n_copied;
    std::vector<int32_t> rest(text.begin() + n_copied, text.end());
    if (n_copied < options.min_short_match) {
      EXPECT_TRUE(chain.empty()) << n_copied;
    } else if (n_copied < options.min_confident_match) {
      const int64_t n_short = std::max(options.min_short_chain, options.short_chain_per_token * n_copied);
      EXPECT_EQ(chain, std::vector<int32_t>(rest.begin(), rest.begin() + n_short)) << n_copied;
    } else {
      ASSERT_EQ(int64_t(chain.size()), options.max_copy) << n_copied;
      EXPECT_TRUE(std::equal(rest.begin(), rest.end(), chain.begin())) << n_copied;
    }
  }
  // The long copy respects the room left in the tree.
  DraftTree tree;
  tree.add_chain(-1, {7}, 100, 0);
  proposer.propose(LaneHistory{tokens, int64_t(prompt.size())}, 5, &tree);
  EXPECT_EQ(tree.size(), 5);
  EXPECT_EQ(tree.tokens[1], text[189]);
}

// A reply that quotes the prompt from its first token proposes what follows the earliest place the
// reply occurs (the text it was given to rewrite), though a later place repeats its start.
TEST(LongCopy, AReplyQuotingThePromptCopiesFromTheEarliestPlace) {
  LongCopyOptions options;
  const std::vector<int32_t> text = distinct_tokens(1000, 400);
  // the text, then a note that repeats its first 12 tokens and goes on differently
  const std::vector<int32_t> prompt = concat(concat(concat(distinct_tokens(5000, 30), text),
                                                    std::vector<int32_t>(text.begin(), text.begin() + 12)),
                                             distinct_tokens(6000, 20));
  LongCopyProposer proposer(options);
  std::vector<int32_t> tokens = prompt;
  for (int64_t n_copied = 1; n_copied < options.min_confident_match; ++n_copied) {
    tokens.push_back(text[size_t(n_copied - 1)]);
    std::vector<int32_t> chain = propose_chain(proposer, tokens, int64_t(prompt.size()), 1000);
    const int64_t n_quote = n_copied < options.min_short_match ? options.min_short_chain
                                                               : options.quote_chain_per_token * n_copied;
    ASSERT_LE(n_copied + n_quote, int64_t(text.size()));
    auto rest = text.begin() + n_copied;
    EXPECT_EQ(chain, std::vector<int32_t>(rest, rest + n_quote)) << n_copied;
  }
}

// Predicted Outputs: a copy source the prompt does not hold is copied from as if it came before the
// prompt, so a reply quoting it gets its continuation; without it the same history proposes nothing.
TEST(LongCopy, ACopySourceOutsideTheHistoryIsCopied) {
  LongCopyOptions options;
  const std::vector<int32_t> prediction = distinct_tokens(1000, 200);
  const std::vector<int32_t> prompt = distinct_tokens(5000, 30);
  LongCopyProposer with_prediction(options, prediction);
  LongCopyProposer without(options);
  std::vector<int32_t> tokens = prompt;
  for (int64_t n_copied = 1; n_copied <= 40; ++n_copied) {
    tokens.push_back(prediction[size_t(n_copied - 1)]);
    const std::vector<int32_t> chain = propose_chain(with_prediction, tokens, int64_t(prompt.size()), 64);
    ASSERT_FALSE(chain.empty()) << n_copied;
    auto rest = prediction.begin() + n_copied;
    EXPECT_EQ(chain, std::vector<int32_t>(rest, rest + int64_t(chain.size()))) << n_copied;
    EXPECT_TRUE(propose_chain(without, tokens, int64_t(prompt.size()), 64).empty()) << n_copied;
  }
}

// A reply that has copied its source is a rewrite: after a slip too long to be an edit, a match
// of rewrite_confident_match tokens realigns the whole copy, where a reply that never copied only
// gets a short chain from it.
TEST(LongCopy, ARewriteRealignsOnAShorterMatch) {
  LongCopyOptions options;
  const std::vector<int32_t> text = distinct_tokens(1000, 400);
  const std::vector<int32_t> prompt = concat(text, {5});
  const std::vector<int32_t> slip = distinct_tokens(7000, options.max_edit_tokens + 8);
  const std::vector<int32_t> resumed(text.begin() + 200, text.begin() + 200 + options.rewrite_confident_match);
  const std::vector<int32_t> rest(text.begin() + 200 + options.rewrite_confident_match, text.end());

  LongCopyProposer rewrite(options);
  const std::vector<int32_t> copied(text.begin(), text.begin() + 100);
  std::vector<int32_t> chain =
      propose_chain(rewrite, concat(concat(concat(prompt, copied), slip), resumed), int64_t(prompt.size()));
  ASSERT_GE(chain.size(), rest.size());
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), chain.begin()));

  LongCopyProposer fresh(options);
  chain = propose_chain(fresh, concat(concat(prompt, slip), resumed), int64_t(prompt.size()));
  EXPECT_EQ(int64_t(chain.size()), options.short_chain_per_token * options.rewrite_confident_match);
  EXPECT_TRUE(std::equal(chain.begin(), chain.end(), rest.begin()));
}

// A copy that departs from its source and rejoins it two tokens later is aligned again at once:
// the next proposal is the long copy from just after the rejoin point.
TEST(LongCopy, RejoinsTheSourceAfterAnEdit) {
  LongCopyOptions options;
  const std::vector<int32_t> text = distinct_tokens(1000, 300);
  const int64_t edit_at = 150;
  const int32_t renamed = 99999;
  std::vector<int32_t> tokens = text;
  const int64_t n_prompt = int64_t(tokens.size());
  LongCopyProposer proposer(options);
  tokens.insert(tokens.end(), text.begin(), text.begin() + edit_at);
  tokens.push_back(renamed);
  for (int64_t n_after = 0; n_after < 60; ++n_after) {
    if (n_after > 0) tokens.push_back(text[size_t(edit_at + n_after)]);
    if (n_after < options.rejoin_tokens) {
      // Not rejoined yet: among short branches resuming the source past the departure, the one
      // that skips the replaced token goes on with the text.
      DraftTree tree = propose_tree(proposer, tokens, n_prompt);
      EXPECT_EQ(proposer.last_match_length(), n_after);
      EXPECT_LE(tree.size(), options.rejoin_branches * options.rejoin_branch_tokens) << n_after;
      auto rest = text.begin() + edit_at + n_after + 1;
      EXPECT_TRUE(tree_holds(tree, std::vector<int32_t>(rest, rest + options.rejoin_branch_tokens))) << n_after;
      continue;
    }
    std::vector<int32_t> chain = propose_chain(proposer, tokens, n_prompt);
    EXPECT_EQ(proposer.last_match_length(), n_after);
    ASSERT_EQ(int64_t(chain.size()), options.max_copy) << n_after;
    EXPECT_EQ(chain[0], text[size_t(edit_at + n_after + 1)]) << n_after;
    EXPECT_EQ(chain[5], text[size_t(edit_at + n_after + 6)]) << n_after;
  }
}

// A rename: the source uses name A (two tokens) at several places; once the reply has written B
// (three tokens) for A at the first place, copies proposed before later places already say B.
TEST(LongCopy, AppliesALearnedEditAtLaterOccurrences) {
  const std::vector<int32_t> old_name = {7, 8}, new_name = {90001, 90002, 90003};
  std::vector<int32_t> source, renamed;
  for (int part = 0; part < 4; ++part) {
    auto words = distinct_tokens(1000 + 100 * part, 40);
    source = concat(concat(source, words), old_name);
    renamed = concat(concat(renamed, words), new_name);
  }
  source = concat(source, distinct_tokens(2000, 10));
  renamed = concat(renamed, distinct_tokens(2000, 10));
  std::vector<int32_t> tokens = concat(source, {5});  // 5: "rename A to B"
  const int64_t n_prompt = int64_t(tokens.size());
  LongCopyProposer proposer;
  // The reply so far: the first part, B, and two tokens past it.
  tokens.insert(tokens.end(), renamed.begin(), renamed.begin() + 40 + 3 + 2);
  std::vector<int32_t> chain = propose_chain(proposer, tokens, n_prompt, 1000);
  std::vector<int32_t> rest(renamed.begin() + 45, renamed.end());
  ASSERT_GE(chain.size(), rest.size());
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), chain.begin()));
}

// Once the edit is learned, the copy stays aligned while the reply writes it again: from every
// point of the reply, inside a later B included, the proposal is exactly the rest of the reply. A
// place where the reply keeps A (a rename the model missed) is followed as a plain copy.
TEST(LongCopy, StaysAlignedThroughALearnedEdit) {
  const std::vector<int32_t> old_name = {7, 8}, new_name = {90001, 90002, 90003};
  const size_t part_size = 40, kept_at = 3 * (part_size + 3) + part_size;  // where the reply keeps A
  std::vector<int32_t> source, reply, renamed_everywhere;
  for (int part = 0; part < 5; ++part) {
    auto words = distinct_tokens(1000 + 100 * part, int64_t(part_size));
    source = concat(concat(source, words), old_name);
    reply = concat(concat(reply, words), part == 3 ? old_name : new_name);
    renamed_everywhere = concat(concat(renamed_everywhere, words), new_name);
  }
  source = concat(source, distinct_tokens(2000, 10));
  reply = concat(reply, distinct_tokens(2000, 10));
  renamed_everywhere = concat(renamed_everywhere, distinct_tokens(2000, 10));
  const std::vector<int32_t> prompt = concat(source, {5});
  LongCopyProposer proposer;
  for (size_t written = part_size + 3 + 2; written < reply.size(); ++written) {
    std::vector<int32_t> tokens =
        concat(prompt, std::vector<int32_t>(reply.begin(), reply.begin() + std::ptrdiff_t(written)));
    std::vector<int32_t> chain = propose_chain(proposer, tokens, int64_t(prompt.size()), 1000);
    // Before the kept A the copy expects B there too; after it, the reply itself.
    const std::vector<int32_t>& truth = written <= kept_at ? renamed_everywhere : reply;
    std::vector<int32_t> rest(truth.begin() + std::ptrdiff_t(written), truth.end());
    ASSERT_GE(chain.size(), rest.size()) << "written " << written;
    EXPECT_TRUE(std::equal(rest.begin(), rest.end(), chain.begin())) << "written " << written;
  }
}

// A model may rename some occurrences and keep others: where the copy applies the learned edit, a
// sibling branch keeps the old name, so the round goes on past that occurrence either way.
TEST(LongCopy, OffersTheOldTokensBesideALearnedEdit) {
  const std::vector<int32_t> old_name = {7, 8}, new_name = {90001, 90002, 90003};
  const auto first = distinct_tokens(1000, 40), second = distinct_tokens(2000, 40),
             third = distinct_tokens(3000, 40);
  const std::vector<int32_t> source = concat(concat(concat(concat(first, old_name), second), old_name), third);
  // The reply renamed the first occurrence and copied the next 20 tokens.
  const std::vector<int32_t> written =
      concat(concat(first, new_name), std::vector<int32_t>(second.begin(), second.begin() + 20));
  const std::vector<int32_t> tokens = concat(concat(source, {5}), written);
  const int64_t n_prompt = int64_t(source.size()) + 1;
  const std::vector<int32_t> ahead(second.begin() + 20, second.end());  // then the second occurrence
  const int64_t max_nodes = 60, n_kept = LongCopyOptions{}.kept_edit_branch;

  LongCopyProposer proposer;
  DraftTree tree = propose_tree(proposer, tokens, n_prompt, max_nodes);
  ASSERT_EQ(tree.size(), max_nodes);
  std::vector<int32_t> renamed = concat(concat(ahead, new_name), third);
  std::vector<int32_t> kept = concat(concat(ahead, old_name), third);
  std::vector<int32_t> main_chain = path_to(tree, int32_t(max_nodes - n_kept - 1));
  std::vector<int32_t> kept_branch = path_to(tree, int32_t(max_nodes - 1));
  ASSERT_EQ(main_chain.size(), size_t(max_nodes - n_kept));
  ASSERT_EQ(kept_branch.size(), ahead.size() + size_t(n_kept));
  EXPECT_TRUE(std::equal(main_chain.begin(), main_chain.end(), renamed.begin()));
  EXPECT_TRUE(std::equal(kept_branch.begin(), kept_branch.end(), kept.begin()));

  // No learned edit ahead: one chain, every row on it.
  LongCopyProposer fresh;
  const std::vector<int32_t> plain = concat(concat(source, {5}), std::vector<int32_t>(source.begin(), source.begin() + 30));
  DraftTree chain_only = propose_tree(fresh, plain, int64_t(source.size()) + 1, max_nodes);
  EXPECT_EQ(path_to(chain_only, int32_t(chain_only.size() - 1)).size(), size_t(chain_only.size()));
}

// Edits are learned from the reply only. A prompt often repeats itself with differences (two
// similar functions in one file); taking those for edits would rewrite the reply's plain copy.
TEST(LongCopy, LearnsNoEditFromThePromptsOwnRepeats) {
  const std::vector<int32_t> old_name = {7, 8}, other_name = {90001};
  const auto first = distinct_tokens(1000, 40), second = distinct_tokens(2000, 40),
             third = distinct_tokens(3000, 40), fourth = distinct_tokens(4000, 40);
  // The prompt: a passage, the same passage with `other_name` in place of `old_name`, then a third
  // passage using `old_name`.
  const std::vector<int32_t> source = concat(concat(concat(concat(concat(concat(concat(concat(
      first, old_name), second), first), other_name), second), third), old_name), fourth);
  const std::vector<int32_t> prompt = concat(source, {5});
  // The reply copies the third passage: its copy keeps `old_name`.
  const std::vector<int32_t> tokens = concat(prompt, std::vector<int32_t>(third.begin(), third.begin() + 30));
  LongCopyProposer proposer;
  std::vector<int32_t> chain = propose_chain(proposer, tokens, int64_t(prompt.size()), 1000);
  const std::vector<int32_t> expected =
      concat(concat(std::vector<int32_t>(third.begin() + 30, third.end()), old_name), fourth);
  ASSERT_GE(chain.size(), expected.size());
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), chain.begin()));
}

TEST(LongCopy, MostRecentOccurrenceWins) {
  LongCopyProposer proposer;
  // 10 11 12 13 occurs twice before the end: first followed by 100, then by 200.
  const std::vector<int32_t> tokens = {10, 11, 12, 13, 100, 50, 51,  //
                                       10, 11, 12, 13, 200, 60,      //
                                       10, 11, 12, 13};
  std::vector<int32_t> chain = propose_chain(proposer, tokens, 12);
  EXPECT_EQ(proposer.last_match_length(), 4);
  EXPECT_EQ(proposer.last_match_end(), 10);
  ASSERT_FALSE(chain.empty());
  EXPECT_EQ(chain[0], 200);
}

TEST(LongCopy, RepeatingRunKeepsRepeating) {
  LongCopyProposer proposer;
  std::vector<int32_t> tokens = {1, 2};
  for (int i = 0; i < 40; ++i) tokens.push_back(i % 2 ? 8 : 7);
  std::vector<int32_t> chain = propose_chain(proposer, tokens, 2, 20);
  ASSERT_EQ(chain.size(), 20u);
  for (size_t i = 0; i < chain.size(); ++i) EXPECT_EQ(chain[i], i % 2 ? 8 : 7);
}

// Longest suffix of `tokens` that also ends earlier, and the latest such end (-1 for none).
std::pair<int64_t, int64_t> brute_force_match(const std::vector<int32_t>& tokens) {
  int64_t last = int64_t(tokens.size()) - 1;
  int64_t best_length = 0, best_end = -1;
  for (int64_t end = last - 1; end >= 0; --end) {
    int64_t length = 0;
    while (length <= end && tokens[size_t(end - length)] == tokens[size_t(last - length)]) ++length;
    if (length > best_length) best_length = length, best_end = end;
  }
  return {best_length, best_end};
}

TEST(LongCopy, AgreesWithBruteForceSuffixSearch) {
  std::mt19937 rng(7);
  LongCopyOptions options;
  options.min_short_match = 1;
  options.min_short_chain = 6;
  options.short_chain_per_token = 0;  // a fixed chain of 6: this test is about the match itself
  options.min_confident_match = 1 << 30;
  for (int history_index = 0; history_index < 300; ++history_index) {
    int alphabet = 1 + history_index % 5;
    int64_t length = 1 + int64_t(rng() % 160);
    LongCopyProposer proposer(options);
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < length; ++i) {
      tokens.push_back(int32_t(rng() % alphabet) * 40000);  // spread ids out, as real ones are
      std::vector<int32_t> chain = propose_chain(proposer, tokens, 0);
      auto [match_length, match_end] = brute_force_match(tokens);
      ASSERT_EQ(proposer.last_match_length(), match_length) << history_index << " at " << i;
      ASSERT_EQ(proposer.last_match_end(), match_end) << history_index << " at " << i;
      std::vector<int32_t> expected;
      for (int64_t source = match_end + 1; match_length > 0 && int64_t(expected.size()) < 6;
           ++source) {
        expected.push_back(source < int64_t(tokens.size())
                               ? tokens[size_t(source)]
                               : expected[size_t(source - int64_t(tokens.size()))]);
      }
      ASSERT_EQ(chain, expected) << history_index << " at " << i;
    }
  }
}

TEST(LongCopy, IncrementalObserveMatchesOneObserve) {
  std::mt19937 rng(11);
  LongCopyOptions options;
  options.min_confident_match = 6;
  for (int history_index = 0; history_index < 20; ++history_index) {
    std::vector<int32_t> all;
    for (int i = 0; i < 600; ++i) all.push_back(int32_t(rng() % 3));
    LongCopyProposer incremental(options);
    std::vector<int32_t> tokens;
    while (tokens.size() < all.size()) {
      size_t step = std::min<size_t>(1 + rng() % 40, all.size() - tokens.size());
      tokens.insert(tokens.end(), all.begin() + int64_t(tokens.size()),
                    all.begin() + int64_t(tokens.size() + step));
      std::vector<int32_t> stepped = propose_chain(incremental, tokens, 0, 64);
      LongCopyProposer at_once(options);
      EXPECT_EQ(propose_chain(at_once, tokens, 0, 64), stepped);
      EXPECT_EQ(at_once.last_match_length(), incremental.last_match_length());
    }
  }
}

TEST(LongCopy, LongRunsStayFast) {
  // A model stuck repeating one token: each new token must not walk the whole run.
  LongCopyProposer proposer;
  std::vector<int32_t> tokens(100000, 42);
  for (int i = 0; i < 1000; ++i) tokens.push_back(i);
  tokens.insert(tokens.end(), 20000, 42);
  std::vector<int32_t> chain = propose_chain(proposer, tokens, 0, 300);
  // The whole second run matches the end of the first one, which was followed by 0, 1, 2, ...
  EXPECT_EQ(proposer.last_match_length(), 20000);
  EXPECT_EQ(proposer.last_match_end(), 99999);
  std::vector<int32_t> expected(256);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(chain, expected);
}

TEST(Ngram, ChainsTheMostRecentContinuation) {
  NgramProposer proposer;
  std::vector<int32_t> tokens = {1, 2, 3, 4, 1, 2, 3, 5, 1, 2};
  EXPECT_EQ(propose_chain(proposer, tokens, 4), (std::vector<int32_t>{3, 5, 1, 2, 3, 5, 1, 2}));
  // A context never seen with two tokens falls back to the last token alone.
  tokens.push_back(4);
  tokens.push_back(3);
  EXPECT_EQ(propose_chain(proposer, tokens, 4)[0], 5);
  // An unseen token proposes nothing.
  tokens.push_back(77);
  EXPECT_TRUE(propose_chain(proposer, tokens, 4).empty());
  // The budget bounds the chain.
  tokens.push_back(1);
  EXPECT_EQ(propose_chain(proposer, tokens, 4, 3).size(), 3u);
  // Longer contexts take over as soon as the chain makes one known: 1 -> 2, then 1 2 -> 4, ...
  NgramProposer four_gram(NgramOptions{4, 5});
  EXPECT_EQ(propose_chain(four_gram, tokens, 4), (std::vector<int32_t>{2, 4, 3, 77, 1}));
}

TEST(Replay, ProposesTheExpectedReplyUntilItDiverges) {
  ReplayProposer proposer({5, 6, 7, 8, 9}, 3);
  EXPECT_EQ(propose_chain(proposer, {1, 2}, 2), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(propose_chain(proposer, {1, 2, 5, 6}, 2), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(propose_chain(proposer, {1, 2, 5, 6, 7, 8}, 2), (std::vector<int32_t>{9}));
  EXPECT_EQ(propose_chain(proposer, {1, 2, 5, 6, 7, 8}, 2, 0), (std::vector<int32_t>{}));
  EXPECT_TRUE(propose_chain(proposer, {1, 2, 5, 6, 7, 8, 9}, 2).empty());

  ReplayProposer diverging({5, 6, 7, 8, 9}, 10);
  EXPECT_EQ(propose_chain(diverging, {1, 2, 5}, 2), (std::vector<int32_t>{6, 7, 8, 9}));
  EXPECT_TRUE(propose_chain(diverging, {1, 2, 5, 4}, 2).empty());
  EXPECT_TRUE(propose_chain(diverging, {1, 2, 5, 4, 7}, 2).empty());
}

TEST(Proposers, ShareOneTree) {
  std::vector<int32_t> tokens = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2};
  LaneHistory history{tokens, 4};
  LongCopyProposer long_copy;
  NgramProposer ngram;
  DraftTree tree;
  long_copy.propose(history, 16, &tree);
  ngram.propose(history, 16, &tree);
  // a 6-token match proposes 12; the n-gram chain repeats the copy's first eight tokens
  EXPECT_EQ(tree.size(), 12);
  EXPECT_EQ(tree.tokens[0], 3);
  ReplayProposer replay({1, 2, 9, 9}, 2);
  replay.propose(LaneHistory{tokens, 8}, 16, &tree);
  EXPECT_EQ(tree.size(), 14);
  EXPECT_EQ(tree.parents[12], -1);
  EXPECT_EQ(tree.sources[13], uint8_t(ProposerKind::replay));
}

TEST(ProposerGate, RunsWhileAcceptedTokensPayForTheUseAndProbesWhenSkipped) {
  ProposerGate gate;
  const double round_seconds = 0.005;
  // Warm-up: it drafts whatever it costs, so the averages start from real uses.
  for (int64_t i = 0; i < ProposerGate::kWarmupUses; ++i) {
    EXPECT_TRUE(gate.should_run(round_seconds)) << i;
    gate.record_use(0.020, 0, round_seconds);  // a use costs four rounds and gets nothing accepted
  }
  // Probes that do not pay come at doubling intervals, up to the cap, and never more often than
  // keeps their cost within kProbeShare of the lane's time: a use of four rounds waits 133.
  const int64_t cost_floor = int64_t(0.020 / (ProposerGate::kProbeShare * round_seconds));
  ASSERT_EQ(cost_floor, 133);
  int64_t interval = std::max(ProposerGate::kFirstProbeInterval, cost_floor);
  EXPECT_EQ(gate.probe_interval(), interval);
  for (int probe = 0; probe < 6; ++probe) {
    for (int64_t i = 0; i < interval; ++i) {
      EXPECT_FALSE(gate.should_run(round_seconds)) << probe << " " << i;
      EXPECT_TRUE(gate.is_closed(round_seconds)) << probe << " " << i;
      gate.record_skip();
    }
    EXPECT_TRUE(gate.should_run(round_seconds)) << probe;
    EXPECT_FALSE(gate.is_closed(round_seconds)) << "a probe is due: " << probe;
    gate.record_use(0.020, 0, round_seconds);
    interval = std::max(std::min(2 * interval, ProposerGate::kMaxProbeInterval), cost_floor);
    EXPECT_EQ(gate.probe_interval(), interval);
  }
  // The text turned predictable: 6 accepted tokens a use are worth 30 ms against a 20 ms use.
  for (int i = 0; i < 12; ++i) gate.record_use(0.020, 6, round_seconds);
  EXPECT_TRUE(gate.should_run(round_seconds));
  EXPECT_EQ(gate.probe_interval(), ProposerGate::kFirstProbeInterval);
  EXPECT_NEAR(gate.accepted_per_use(), 6.0, 0.2);
  EXPECT_NEAR(gate.seconds_per_use(), 0.020, 1e-9);
  // Cheap rounds make the same tokens worth less: 6 x 2 ms < 20 ms.
  EXPECT_FALSE(gate.should_run(0.002));
}

TEST(ProposerGate, ANewLaneStartsFromTheEnginesAverages) {
  ProposerGate engine_wide;
  for (int i = 0; i < 8; ++i) engine_wide.record_use(0.020, 0, 0.005);
  const ProposerGate lane = engine_wide.for_new_lane();
  EXPECT_FALSE(lane.should_run(0.005));  // no warm-up of its own
  // nor a probe soon: it waits as long as the engine's failed probes have earned
  EXPECT_EQ(lane.probe_interval(), engine_wide.probe_interval());
  EXPECT_GT(lane.probe_interval(), ProposerGate::kFirstProbeInterval);
  ProposerGate waiting = lane;
  for (int64_t i = 0; i < engine_wide.probe_interval(); ++i) {
    EXPECT_FALSE(waiting.should_run(0.005)) << i;
    waiting.record_skip();
  }
  EXPECT_TRUE(waiting.should_run(0.005));
  EXPECT_TRUE(ProposerGate().should_run(0.005));  // an engine with no runs yet warms up
}

// A use that costs many rounds (the block drafter beside several lanes on a CPU) is probed so
// rarely that failed probes take at most kProbeShare of the lane's time, whatever the doubling says.
TEST(ProposerGate, FailedProbesOfADearProposerStayWithinTheirShare) {
  ProposerGate gate;
  const double round_seconds = 0.001, use_seconds = 0.010;
  double probe_seconds = 0.0, lane_seconds = 0.0;
  int64_t n_probes = 0;
  for (int64_t round = 0; round < 20000; ++round) {
    if (gate.should_run(round_seconds)) {
      gate.record_use(use_seconds, 0, round_seconds);
      if (round >= ProposerGate::kWarmupUses) {
        probe_seconds += use_seconds;
        ++n_probes;
      }
      lane_seconds += use_seconds;
    } else {
      gate.record_skip();
    }
    lane_seconds += round_seconds;
  }
  EXPECT_GE(gate.probe_interval(), 333);
  EXPECT_GT(n_probes, 0) << "it is still probed now and then";
  EXPECT_LE(probe_seconds / lane_seconds, ProposerGate::kProbeShare);
  // An unknown round cost leaves the first interval as it was.
  ProposerGate unknown;
  for (int64_t i = 0; i < ProposerGate::kWarmupUses; ++i) unknown.record_use(use_seconds, 0, 0.0);
  EXPECT_EQ(unknown.probe_interval(), ProposerGate::kFirstProbeInterval);
}

// A probe lane takes the engine's averages and probes at once, once; then it waits like any lane.
TEST(ProposerGate, AProbeLaneProbesAtOnce) {
  ProposerGate engine_wide;
  for (int i = 0; i < 8; ++i) engine_wide.record_use(0.020, 0, 0.005);
  ProposerGate probe = engine_wide.for_probe_lane();
  EXPECT_FALSE(probe.is_warming_up());
  EXPECT_TRUE(probe.should_run(0.005));
  EXPECT_FALSE(probe.is_closed(0.005)) << "its lane keeps the proposer's context for the probe";
  probe.record_use(0.020, 0, 0.005);
  EXPECT_FALSE(probe.should_run(0.005));
  EXPECT_NEAR(probe.accepted_per_use(), 0.0, 1e-12);
  // A probe that finds the text predictable opens the gate: 12 accepted tokens pay 60 ms for 20.
  ProposerGate lucky = engine_wide.for_probe_lane();
  for (int i = 0; i < 4; ++i) lucky.record_use(0.020, 12, 0.005);
  EXPECT_TRUE(lucky.should_run(0.005));
  EXPECT_EQ(lucky.probe_interval(), ProposerGate::kFirstProbeInterval);
}

// Acceptance by depth of a chain: depth d's draft accepted, once its parent is, with chance q[d-1].
std::vector<double> constant_acceptance(double q, int n_depths) { return std::vector<double>(size_t(n_depths), q); }

// E[accepted + 1] / cost(window) of a chain, worked out directly: the reference the choice must meet.
double chain_rate(const RoundCostModel& cost, const std::vector<double>& q, int64_t window) {
  double tokens = 1.0, chance = 1.0;
  for (int64_t d = 1; d < window; ++d) tokens += (chance *= q[size_t(d - 1)]);
  return tokens / cost.seconds(window);
}

TEST(RoundShape, TheChainWindowMaximisesExpectedTokensPerSecond) {
  // The first three drafts always accepted, the fourth never: a row costs a tenth of the round's
  // fixed cost, so rows 2 to 4 pay and the fifth does not.
  const std::vector<double> three_then_none = {1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  EXPECT_EQ(best_chain_window({1.0, 0.1}, three_then_none, 64), 4);
  // Against a brute-force search, for costs from a GPU's (rows nearly free) to a CPU's (a row about
  // a round's fixed cost) and acceptance from poor to near-certain.
  for (double q : {0.3, 0.6, 0.8, 0.9, 0.97}) {
    const std::vector<double> acceptance = constant_acceptance(q, 256);
    for (double per_row : {1e-7, 1e-4, 1e-3, 1e-2}) {
      const RoundCostModel cost{1e-2, per_row};
      const int64_t window = best_chain_window(cost, acceptance, 256);
      int64_t best = 1;
      for (int64_t n = 2; n <= 256; ++n)
        if (chain_rate(cost, acceptance, n) > chain_rate(cost, acceptance, best)) best = n;
      EXPECT_EQ(window, best) << "q " << q << ", per row " << per_row;
    }
  }
  // Expensive rows: a small window; rows nearly free: the widest allowed; an unknown cost: the widest.
  const std::vector<double> likely = constant_acceptance(0.8, 256);
  EXPECT_LE(best_chain_window({1e-3, 1e-3}, likely, 256), 5);
  EXPECT_GE(best_chain_window({1e-3, 1e-3}, likely, 256), 2);
  EXPECT_EQ(best_chain_window({1e-2, 1e-12}, constant_acceptance(0.97, 256), 256), 256);
  EXPECT_EQ(best_chain_window({}, likely, 256), 256);
  // Drafts that are never accepted are never verified, however cheap.
  EXPECT_EQ(best_chain_window({1e-2, 1e-9}, constant_acceptance(0.0, 64), 64), 1);
}

TEST(RoundShape, NodeCountCountsEveryLanesRootsAndTakesTheFewestRowsAmongEqualRates) {
  // Two lanes' roots and four nodes of chance 1, 1, 0.5, 0.5 at 1 s a round plus 1 s a row:
  // (2 + 1 + 1) / 5 = 0.8 beats (2 + 1 + 1 + 0.5) / 6 = 0.75.
  EXPECT_EQ(best_node_count({1.0, 1.0}, {1.0, 1.0, 0.5, 0.5}, 2), 2);
  // Prompt rows in the round make each draft row a smaller share of it: now the halves pay.
  EXPECT_EQ(best_node_count({1.0, 1.0}, {1.0, 1.0, 0.5, 0.5}, 2, 100), 4);
  // Rows of no chance at no cost change no rate: left out.
  EXPECT_EQ(best_node_count({1.0, 0.0}, {1.0, 0.0, 0.0}, 1), 1);
  EXPECT_EQ(best_node_count({}, {0.1, 0.1}, 1), 2);
}

// A chain of n_drafted tokens from one proposer.
DraftTree chain_tree(int n_drafted, ProposerKind kind) {
  DraftTree tree;
  std::vector<int32_t> chain(static_cast<size_t>(n_drafted));
  std::iota(chain.begin(), chain.end(), 100);
  tree.add_chain(-1, chain, 1000, uint8_t(kind));
  return tree;
}

std::vector<uint8_t> first_accepted(const DraftTree& tree, int n_right) {
  std::vector<uint8_t> accepted(size_t(tree.size()), 0);
  for (int i = 0; i < n_right && i < int(tree.size()); ++i) accepted[size_t(i)] = 1;
  return accepted;
}

TEST(RoundShape, AcceptanceByDepthLearnsEachProposersChainAndItsSiblingsApart) {
  AcceptanceByDepth acceptance;
  EXPECT_DOUBLE_EQ(acceptance.conditional(ProposerKind::long_copy, false, false, 1), AcceptanceByDepth::kFirstPrior);
  // Long copy: eight drafts a round, the first five always right. The drafter: a chain of four whose
  // head is right every other round, plus a root sibling that never is.
  for (int round = 0; round < 200; ++round) {
    const DraftTree copy = chain_tree(8, ProposerKind::long_copy);
    acceptance.record(copy, first_accepted(copy, 5), false);
    DraftTree drafter = chain_tree(4, ProposerKind::drafter);
    drafter.add_chain(-1, {7}, 1000, uint8_t(ProposerKind::drafter));
    acceptance.record(drafter, first_accepted(drafter, round % 2 == 0 ? 1 : 0), false);
  }
  for (int32_t d = 1; d <= 5; ++d) EXPECT_GT(acceptance.conditional(ProposerKind::long_copy, false, false, d), 0.95) << d;
  EXPECT_LT(acceptance.conditional(ProposerKind::long_copy, false, false, 6), 0.15);
  // Depths 7 and 8 were never reached: they read as the depth above them, and deeper ones likewise.
  EXPECT_LT(acceptance.conditional(ProposerKind::long_copy, false, false, 40), 0.15);
  EXPECT_NEAR(acceptance.conditional(ProposerKind::drafter, false, false, 1), 0.5, 0.1);
  EXPECT_LT(acceptance.conditional(ProposerKind::drafter, true, false, 1), 0.1);
  // The n-gram proposer has no evidence: the prior.
  EXPECT_DOUBLE_EQ(acceptance.conditional(ProposerKind::ngram, false, false, 3), AcceptanceByDepth::kFirstPrior);
  // After a round that accepted its whole depth (a copy running on) the figures are apart: there the
  // same proposer's chains were all right.
  AcceptanceByDepth runs = acceptance;
  for (int round = 0; round < 20; ++round) {
    const DraftTree copy = chain_tree(8, ProposerKind::long_copy);
    runs.record(copy, first_accepted(copy, 8), true);
  }
  EXPECT_GT(runs.conditional(ProposerKind::long_copy, false, true, 8), 0.9);
  EXPECT_GT(runs.conditional(ProposerKind::long_copy, false, true, 30), 0.9);
  EXPECT_LT(runs.conditional(ProposerKind::long_copy, false, false, 6), 0.5);
  // A node's chance is its parent's times its own, so it never exceeds its parent's.
  const DraftTree copy = chain_tree(8, ProposerKind::long_copy);
  const std::vector<double> chances = acceptance.node_chances(copy, false);
  ASSERT_EQ(chances.size(), 8u);
  EXPECT_GT(chances[4], 0.8);
  EXPECT_LT(chances[5], 0.15);
  for (size_t i = 1; i < chances.size(); ++i) EXPECT_LE(chances[i], chances[i - 1]);
  // Evidence fades when it is not renewed: a depth, or a proposer, cut off long ago is tried again.
  AcceptanceByDepth fading = acceptance;
  for (int round = 0; round < 300; ++round) {
    const DraftTree short_copy = chain_tree(3, ProposerKind::long_copy);
    fading.record(short_copy, first_accepted(short_copy, 3), false);
  }
  EXPECT_GT(fading.conditional(ProposerKind::long_copy, false, false, 6), 0.5);
  EXPECT_NEAR(fading.conditional(ProposerKind::drafter, true, false, 1), AcceptanceByDepth::kFirstPrior, 0.01);
}

TEST(RowCost, ReadsTheSlopeOfRoundTimeOverRows) {
  RowCost cost;
  EXPECT_EQ(cost.seconds_per_row(), 0.0);
  for (int i = 0; i < 200; ++i) cost.record_round(5, 0.003);  // rounds of one size: no slope yet
  EXPECT_EQ(cost.seconds_per_row(), 0.0);
  // 2 ms plus 0.5 ms a row, over rounds of 1 to 16 rows.
  for (int i = 0; i < 400; ++i) {
    const int64_t rows = 1 + i % 16;
    cost.record_round(rows, 0.002 + 0.0005 * double(rows));
  }
  EXPECT_NEAR(cost.seconds_per_row(), 0.0005, 2e-5);
  EXPECT_NEAR(cost.model().fixed_seconds, 0.002, 2e-4);
  // Rounds that settle on one size (shaped rounds do) keep the line last read.
  for (int i = 0; i < 400; ++i) cost.record_round(8, 0.002 + 0.0005 * 8);
  EXPECT_NEAR(cost.seconds_per_row(), 0.0005, 2e-5);
  // Rows that cost nothing (a GPU's verify rounds) read as about zero, never below.
  RowCost flat;
  for (int i = 0; i < 400; ++i) flat.record_round(1 + i % 16, 0.002 - 1e-7 * double(i % 16));
  EXPECT_EQ(flat.seconds_per_row(), 0.0);
}

}  // namespace
}  // namespace tf
