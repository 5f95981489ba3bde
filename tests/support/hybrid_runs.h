// Runs of a hybrid's forward shared by the CPU and GPU suites: a lane's logits over chunked prefills
// among neighbour lanes (batch invariance), and a lane's recurrent state after plain decoding against
// one verify pass of a draft tree whose accepted path is moved home as the engine does.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "models/model.h"
#include "runtime/kv_cache.h"
#include "support/forward_runs.h"

namespace tf::test {

// Lanes of unrelated sequences that share passes with the rows under test: each adds a chain of
// random length continuing its own committed sequence (a hybrid lane always resumes where its state is).
struct Neighbours {
  KvCache& kv;
  std::mt19937& rng;
  int64_t vocab;
  std::vector<int32_t> lanes;
  std::vector<int32_t> lengths;

  Neighbours(KvCache& cache, std::mt19937& random, int64_t n_vocab, int n) : kv(cache), rng(random), vocab(n_vocab) {
    for (int i = 0; i < n; ++i) {
      lanes.push_back(kv.lane_open());
      lengths.push_back(0);
    }
  }
  // Up to `n_rows` rows over the lanes, each lane's rows a chain; its rows are then committed.
  void add(Batch& batch, int64_t n_rows) { add_rows(batch, n_rows); }
  void add_rows(Batch& batch, int64_t n_rows) {
    while (n_rows > 0 && !lanes.empty()) {
      const size_t i = rng() % lanes.size();
      const int64_t n = std::min<int64_t>(n_rows, 1 + int64_t(rng() % 9));
      if (lengths[i] + n > 400) {  // start over on the same lane: its state resets at position 0
        lengths[i] = 0;
      }
      if (!kv.lane_reserve(lanes[i], lengths[i] + n)) FAIL() << "the test's KV cache is too small";
      const int32_t first = int32_t(batch.rows.size());
      for (int64_t j = 0; j < n; ++j) {
        const int32_t pos = lengths[i] + int32_t(j);
        batch.rows.push_back({int32_t(rng() % uint32_t(vocab)), pos, lanes[i], j == 0 ? -1 : first + int32_t(j) - 1,
                              kv.slot(lanes[i], pos), bool(rng() % 2)});
      }
      lengths[i] += int32_t(n);
      n_rows -= n;
      // A lane appears once per pass.
      std::swap(lanes[i], lanes.back());
      std::swap(lengths[i], lengths.back());
      parked.push_back({lanes.back(), lengths.back()});
      lanes.pop_back();
      lengths.pop_back();
    }
  }
  void end_pass() {
    for (auto [lane, length] : parked) {
      lanes.push_back(lane);
      lengths.push_back(length);
    }
    parked.clear();
  }
  std::vector<std::pair<int32_t, int32_t>> parked;
};

// Logits of every position of `ids` on one lane, prefilled in `chunks`, each pass with up to
// `noise` neighbour rows before and after.
inline std::vector<float> hybrid_chunked_logits(Model& model, const std::vector<int32_t>& ids,
                                         const std::vector<int64_t>& chunks, int noise, std::mt19937& rng) {
  const int64_t n_vocab = model.config().vocab_size;
  KvCache kv = make_kv_cache(model, 512);
  const int32_t lane = kv.lane_open();
  kv.lane_reserve(lane, int64_t(ids.size()));
  Neighbours neighbours(kv, rng, n_vocab, 48);
  std::vector<float> out;
  int64_t done = 0;
  for (int64_t chunk : chunks) {
    Batch batch;
    neighbours.add(batch, noise ? int64_t(rng() % uint32_t(noise + 1)) : 0);
    const size_t ours = batch.rows.size();
    for (int64_t i = 0; i < chunk; ++i) {
      const int32_t pos = int32_t(done + i);
      batch.rows.push_back({ids[size_t(pos)], pos, lane, i == 0 ? -1 : int32_t(ours + size_t(i) - 1),
                            kv.slot(lane, pos), true});
    }
    neighbours.add(batch, noise ? int64_t(rng() % uint32_t(noise + 1)) : 0);
    neighbours.end_pass();
    test::append_rows_logits(model, batch, kv, ours, chunk, n_vocab, out);
    done += chunk;
  }
  return out;
}

// A draft tree below a root row: node i's parent (-1 the root) and token; nodes on the main chain
// write to the lane's slots, the others to scratch.
struct Tree {
  std::vector<int32_t> parents, tokens;
  std::vector<bool> is_main;
  int32_t depth(int32_t node) const { return node < 0 ? 0 : 1 + depth(parents[size_t(node)]); }
};

struct LaneSnapshot {
  std::vector<float> logits;  // of the row after the accepted path
  std::vector<uint8_t> state;  // the recurrent state and conv history (Model::read_recurrent_state)
  std::vector<float> accepted_logits;  // of the root and the accepted rows, in order
};

// The lane's recurrent state once every position up to `end` is folded in, through the model's
// interface (the backend's own fold), with the logits of its last row.
inline LaneSnapshot lane_after(Model& model, KvCache& kv, int32_t lane, int64_t end,
                               const std::vector<float>& last_logits) {
  std::vector<uint8_t> bytes(static_cast<size_t>(model.recurrent_state_bytes()));
  model.read_recurrent_state(kv, lane, end, bytes.data());
  return {last_logits, bytes, {}};
}

// Prompt, then the root token and `accepted` committed one row a pass, then `next` alone.
inline LaneSnapshot plain_decoding(Model& model, const std::vector<int32_t>& prompt, int32_t root,
                            const std::vector<int32_t>& accepted, int32_t next) {
  const int64_t vocab = model.config().vocab_size;
  KvCache kv = make_kv_cache(model, 64);
  const int32_t lane = kv.lane_open();
  kv.lane_reserve(lane, int64_t(prompt.size() + accepted.size()) + 2);
  Batch prefill;
  for (size_t i = 0; i < prompt.size(); ++i)
    prefill.rows.push_back({prompt[i], int32_t(i), lane, int32_t(i) - 1, kv.slot(lane, int64_t(i)), false});
  model.forward(prefill, kv, nullptr);
  std::vector<int32_t> steps = {root};
  steps.insert(steps.end(), accepted.begin(), accepted.end());
  steps.push_back(next);
  std::vector<float> logits(static_cast<size_t>(vocab)), path_logits;
  for (size_t i = 0; i < steps.size(); ++i) {
    const int32_t pos = int32_t(prompt.size() + i);
    Batch step;
    step.rows.push_back({steps[i], pos, lane, -1, kv.slot(lane, pos), true});
    model.forward(step, kv, logits.data());
    if (i + 1 < steps.size()) path_logits.insert(path_logits.end(), logits.begin(), logits.end());
  }
  LaneSnapshot snapshot = lane_after(model, kv, lane, int64_t(prompt.size() + steps.size()), logits);
  snapshot.accepted_logits = path_logits;
  return snapshot;
}

// Prompt, then one verify pass of the root and `tree` (with neighbour lanes' rows around it), then the
// accepted nodes' slots moved home as the engine does, then `next` alone.
inline LaneSnapshot verified_decoding(Model& model, const std::vector<int32_t>& prompt, int32_t root, const Tree& tree,
                               const std::vector<int32_t>& accepted_nodes, int32_t next, std::mt19937& rng) {
  const int64_t vocab = model.config().vocab_size;
  KvCache kv = make_kv_cache(model, 128);
  const int32_t lane = kv.lane_open();
  const int32_t scratch = kv.lane_open();
  kv.lane_reserve(lane, int64_t(prompt.size()) + 300);
  kv.lane_reserve(scratch, 300);
  Neighbours neighbours(kv, rng, vocab, 3);
  Batch prefill;
  for (size_t i = 0; i < prompt.size(); ++i)
    prefill.rows.push_back({prompt[i], int32_t(i), lane, int32_t(i) - 1, kv.slot(lane, int64_t(i)), false});
  neighbours.add(prefill, 5);
  neighbours.end_pass();
  std::vector<float> prefill_logits(size_t(prefill.n_logit_rows() * vocab));
  model.forward(prefill, kv, prefill_logits.data());

  Batch verify;
  neighbours.add(verify, 4);
  const int32_t root_row = int32_t(verify.rows.size());
  const int32_t root_pos = int32_t(prompt.size());
  verify.rows.push_back({root, root_pos, lane, -1, kv.slot(lane, root_pos), true});
  int32_t n_scratch = 0;
  for (size_t node = 0; node < tree.tokens.size(); ++node) {
    const int32_t pos = root_pos + tree.depth(int32_t(node));
    const int32_t parent = tree.parents[node] < 0 ? root_row : root_row + 1 + tree.parents[node];
    const int32_t slot = tree.is_main[node] ? kv.slot(lane, pos) : kv.slot(scratch, n_scratch++);
    verify.rows.push_back({tree.tokens[node], pos, lane, parent, slot, true});
  }
  neighbours.add(verify, 4);
  neighbours.end_pass();
  std::vector<float> logits(size_t(verify.n_logit_rows() * vocab));
  model.forward(verify, kv, logits.data());
  // The logits of the root and the accepted rows, in path order.
  auto logit_row_of = [&](int32_t row) {
    int64_t index = 0;
    for (int32_t r = 0; r < row; ++r) index += verify.rows[size_t(r)].wants_logits;
    return logits.begin() + index * vocab;
  };
  std::vector<float> path_logits(logit_row_of(root_row), logit_row_of(root_row) + vocab);
  for (int32_t node : accepted_nodes) {
    const BatchRow& row = verify.rows[size_t(root_row + 1 + node)];
    const int32_t home = kv.slot(lane, row.pos);
    if (row.kv_slot != home) kv.copy_slot(row.kv_slot, home);
    path_logits.insert(path_logits.end(), logit_row_of(root_row + 1 + node), logit_row_of(root_row + 1 + node) + vocab);
  }

  Batch step;
  neighbours.add(step, 3);
  const int32_t pos = root_pos + 1 + int32_t(accepted_nodes.size());
  const int32_t next_row = int32_t(step.rows.size());
  step.rows.push_back({next, pos, lane, -1, kv.slot(lane, pos), true});
  neighbours.end_pass();
  std::vector<float> step_logits(size_t(step.n_logit_rows() * vocab));
  model.forward(step, kv, step_logits.data());
  int64_t index = 0;
  for (int32_t r = 0; r < next_row; ++r) index += step.rows[size_t(r)].wants_logits;
  LaneSnapshot snapshot = lane_after(model, kv, lane, pos + 1,
                                     {step_logits.begin() + index * vocab, step_logits.begin() + (index + 1) * vocab});
  snapshot.accepted_logits = path_logits;
  return snapshot;
}

inline void expect_same_lane(const LaneSnapshot& plain, const LaneSnapshot& verified, const char* what) {
  ASSERT_EQ(plain.state.size(), verified.state.size());
  EXPECT_EQ(0, std::memcmp(plain.state.data(), verified.state.data(), plain.state.size()))
      << what << ": recurrent and conv state";
  EXPECT_EQ(0, std::memcmp(plain.logits.data(), verified.logits.data(), plain.logits.size() * sizeof(float)))
      << what << ": logits of the next row";
  ASSERT_EQ(plain.accepted_logits.size(), verified.accepted_logits.size());
  EXPECT_EQ(0, std::memcmp(plain.accepted_logits.data(), verified.accepted_logits.data(),
                           plain.accepted_logits.size() * sizeof(float)))
      << what << ": logits of the verified rows on the accepted path";
}

// Siblings at the root and below it, chains beneath; the accepted path runs through scratch rows.
inline void expect_sibling_paths_equal_plain(Model& model) {
  std::mt19937 rng(11);
  const int64_t vocab = model.config().vocab_size;
  const auto prompt = random_ids(rng, 9, vocab);
  auto token = [&] { return int32_t(rng() % uint32_t(vocab)); };
  // 0-1-2-3 main chain; 4 sibling of 0 with 5-6 below; 7 sibling of 5; 8 below 1.
  Tree tree;
  tree.parents = {-1, 0, 1, 2, -1, 4, 5, 4, 1};
  tree.is_main = {true, true, true, true, false, false, false, false, false};
  for (size_t i = 0; i < tree.parents.size(); ++i) tree.tokens.push_back(token());
  const int32_t root = token(), next = token();
  for (const std::vector<int32_t>& path : {std::vector<int32_t>{4, 5, 6}, std::vector<int32_t>{4, 7},
                                           std::vector<int32_t>{0, 1, 8}, std::vector<int32_t>{0, 1, 2, 3}}) {
    std::vector<int32_t> accepted;
    for (int32_t node : path) accepted.push_back(tree.tokens[size_t(node)]);
    expect_same_lane(plain_decoding(model, prompt, root, accepted, next),
                     verified_decoding(model, prompt, root, tree, path, next, rng), "sibling path");
  }
}

// Every draft rejected: the lane is what plain decoding of the root alone leaves.
inline void expect_rejection_leaves_no_trace(Model& model) {
  std::mt19937 rng(12);
  const int64_t vocab = model.config().vocab_size;
  const auto prompt = random_ids(rng, 13, vocab);
  Tree tree;
  tree.parents = {-1, 0, 1, -1, 3, -1};
  tree.is_main = {true, true, true, false, false, false};
  for (size_t i = 0; i < tree.parents.size(); ++i) tree.tokens.push_back(int32_t(rng() % uint32_t(vocab)));
  const int32_t root = int32_t(rng() % uint32_t(vocab)), next = int32_t(rng() % uint32_t(vocab));
  expect_same_lane(plain_decoding(model, prompt, root, {}, next),
                   verified_decoding(model, prompt, root, tree, {}, next, rng), "all rejected");
}

// The lone long-copy driver's widest window: a 256-row chain accepted whole, and cut halfway.
inline void expect_copy_chain_equals_plain(Model& model) {
  std::mt19937 rng(13);
  const int64_t vocab = model.config().vocab_size;
  const auto prompt = random_ids(rng, 5, vocab);
  Tree tree;
  for (int32_t i = 0; i < 256; ++i) {
    tree.parents.push_back(i - 1);
    tree.is_main.push_back(true);
    tree.tokens.push_back(int32_t(rng() % uint32_t(vocab)));
  }
  const int32_t root = int32_t(rng() % uint32_t(vocab)), next = int32_t(rng() % uint32_t(vocab));
  for (int32_t n_accepted : {256, 131}) {
    std::vector<int32_t> path, accepted;
    for (int32_t i = 0; i < n_accepted; ++i) {
      path.push_back(i);
      accepted.push_back(tree.tokens[size_t(i)]);
    }
    expect_same_lane(plain_decoding(model, prompt, root, accepted, next),
                     verified_decoding(model, prompt, root, tree, path, next, rng), "copy chain");
  }
}

// What a lane keeps at a block boundary (Model::keep_recurrent_state, the engine's hold on its last
// block) is what a read there gives, and stays so while the lane moves on and keeps no other.
inline void expect_kept_state_is_the_read_state(Model& model) {
  std::mt19937 rng(17);
  const auto ids = random_ids(rng, 60, model.config().vocab_size);
  const size_t n_bytes = static_cast<size_t>(model.recurrent_state_bytes());
  std::vector<uint8_t> read_32(n_bytes), kept_32(n_bytes), kept_later(n_bytes), read_48(n_bytes), kept_48(n_bytes);
  for (bool keep : {false, true}) {
    KvCache kv = make_kv_cache(model, 8);
    const int32_t lane = kv.lane_open();
    kv.lane_reserve(lane, 60);
    Batch first, second;
    for (int32_t p = 0; p < 60; ++p)
      (p < 20 ? first : second).rows.push_back({ids[size_t(p)], p, lane, p == 0 || p == 20 ? -1 : p - (p < 20 ? 1 : 21),
                                                kv.slot(lane, p), false});
    model.forward(first, kv, nullptr);
    model.forward(second, kv, nullptr);
    if (!keep) {
      model.read_recurrent_state(kv, lane, 32, read_32.data());
      model.read_recurrent_state(kv, lane, 48, read_48.data());
      continue;
    }
    model.keep_recurrent_state(kv, lane, 32);
    model.read_kept_recurrent_state(kv, lane, kept_32.data());
    model.read_recurrent_state(kv, lane, 40, kept_later.data());  // the lane moves on
    model.read_kept_recurrent_state(kv, lane, kept_later.data());
    model.keep_recurrent_state(kv, lane, 48);
    model.read_kept_recurrent_state(kv, lane, kept_48.data());
  }
  EXPECT_EQ(kept_32, read_32) << "the kept state is not the state a read gives at its position";
  EXPECT_EQ(kept_later, read_32) << "the kept state changed when the lane moved on";
  EXPECT_EQ(kept_48, read_48) << "a second keep did not replace the first";
}

}  // namespace tf::test
