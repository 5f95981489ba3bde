// The MTP head's shared checks, for the CPU suite (tests/test_mtp.cpp) and the CUDA one
// (tests/gpu/test_cuda_mtp.cpp): a fixture with a head on a device, its context's chunk invariance,
// the proposer's freshness, and the three equalities with MTP drafts.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/backends.h"
#include "loader/quantize.h"
#include "loader/safetensors.h"
#include "models/mtp_head.h"
#include "runtime/kv_cache.h"
#include "speculation/mtp_proposer.h"
#include "support/equalities.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"
#include "support/mtp_fixture.h"

namespace tf::test {

// The target's taps of the MTP's layer for every position of `ids`, from one prefill.
inline std::vector<float> target_taps(Model& model, const MtpHead& head, const std::vector<int32_t>& ids) {
  model.set_tap_layers({head.tap_layer()});
  KvCache kv = make_kv_cache(model, kv_blocks_for(int64_t(ids.size())));
  const int32_t lane = kv.lane_open();
  kv.lane_reserve(lane, int64_t(ids.size()));
  Batch batch;
  for (size_t i = 0; i < ids.size(); ++i)
    batch.rows.push_back({ids[i], int32_t(i), lane, int32_t(i) - 1, kv.slot(lane, int64_t(i)), false});
  model.forward(batch, kv, nullptr);
  std::vector<float> taps = model.taps();
  model.set_tap_layers({});
  return taps;
}

// A fixture written with an MTP head (write_fixture_with_mtp), its model on `device` and the head.
struct HybridWithMtp {
  TempDir dir;
  std::shared_ptr<Model> model;
  std::shared_ptr<MtpHead> head;
  HybridWithMtp(const std::string& fixture, MtpWeights kind, uint32_t seed, const std::string& device = "cpu") {
    write_fixture_with_mtp(fixture, dir.path, kind, seed);
    ModelLoadOptions options = test_load_options(device);
    options.keep_mtp_head = true;
    model = load_model(dir.path, options);
    head = model->load_mtp_head(1);
  }
};

// Entries appended in any chunks, with chains drafted (and thrown away) between them, are bitwise the
// entries appended at once with no chain ever drafted: the chain's scratch K/V never becomes context.
inline void expect_context_chunk_invariant(const HybridWithMtp& m, uint32_t seed) {
  const ModelConfig& c = m.model->config();
  std::mt19937 rng(seed);
  const std::vector<int32_t> ids = random_ids(rng, 60, c.vocab_size);
  const std::vector<float> taps = target_taps(*m.model, *m.head, ids);
  const int64_t h = c.hidden_size;
  auto chain_of = [&](MtpContext& context, const std::vector<int32_t>& steps) {
    std::vector<float> probabilities;
    EXPECT_TRUE(m.head->begin_chain(context));
    for (size_t j = 0;; ++j) {
      for (const TokenGuess& g : m.head->chain_top(context, 4)) {
        probabilities.push_back(float(g.token));
        probabilities.push_back(g.probability);
      }
      if (j == steps.size()) break;
      m.head->chain_step(context, steps[j]);
    }
    return probabilities;
  };
  MtpContext chunked;
  int64_t n = 0;
  while (n < 59) {
    const int64_t chunk = std::min<int64_t>(59 - n, 1 + int64_t(rng() % 6));
    m.head->append_context(chunked, taps.data() + n * h, ids.data() + n + 1, chunk);
    n += chunk;
    // A rejected chain of random tokens, as long as the next chunk or longer.
    const std::vector<int32_t> rejected = random_ids(rng, 1 + int64_t(rng() % 8), c.vocab_size);
    const std::vector<float> drafted = chain_of(chunked, rejected);
    MtpContext whole;
    m.head->append_context(whole, taps.data(), ids.data() + 1, n);
    EXPECT_EQ(chain_of(whole, rejected), drafted) << "after " << n << " entries";
  }
  // And the chain after the last entry, on the chunked context that has drafted many chains.
  MtpContext whole;
  m.head->append_context(whole, taps.data(), ids.data() + 1, n);
  const std::vector<int32_t> steps = {ids[3], ids[7], ids[11]};
  EXPECT_EQ(chain_of(chunked, steps), chain_of(whole, steps));
}

// The proposer fed as the engine feeds it (prompt taps, then per round the root's and the accepted
// rows' taps) drafts, every round, what a proposer given the whole committed history at once
// drafts: whatever it drafted and had rejected before never reaches its context.
inline void expect_proposer_drafts_as_fresh(const HybridWithMtp& m, uint32_t seed) {
  const ModelConfig& c = m.model->config();
  std::mt19937 rng(seed);
  const std::vector<int32_t> ids = random_ids(rng, 80, c.vocab_size);
  const std::vector<float> taps = target_taps(*m.model, *m.head, ids);
  const int64_t h = c.hidden_size, n_prompt = 12;
  MtpProposerOptions options;
  options.min_path_probability = 0.0f;  // whole chains, so every round drafts rows that may be rejected
  MtpProposer fed(m.head, options);
  fed.observe_taps(0, taps.data(), n_prompt);
  int64_t root = n_prompt, n_rounds = 0, n_rejected = 0;
  while (root + 6 < int64_t(ids.size())) {
    const std::vector<int32_t> tokens(ids.begin(), ids.begin() + root + 1);
    DraftTree tree;
    fed.propose({tokens, n_prompt}, 16, &tree);
    ASSERT_EQ(tree.size(), options.max_chain);
    MtpProposer fresh(m.head, options);
    fresh.observe_taps(0, taps.data(), root);
    DraftTree fresh_tree;
    fresh.propose({tokens, n_prompt}, 16, &fresh_tree);
    EXPECT_EQ(tree.tokens, fresh_tree.tokens) << "round " << n_rounds;
    // The target "accepts" a random prefix; the drafts past it (whatever they were) are rejected.
    const int64_t accepted = int64_t(rng() % uint32_t(tree.size() + 1));
    n_rejected += tree.size() - accepted;
    fed.observe_taps(root, taps.data() + root * h, accepted + 1);
    root += accepted + 1;
    ++n_rounds;
  }
  EXPECT_GT(n_rejected, 0);
  EXPECT_GT(n_rounds, 10);
}

inline EngineOptions mtp_engine_options(int64_t n_ctx = 160) {
  EngineOptions options;
  options.n_ctx = n_ctx;
  options.speculation.mtp_chain.min_path_probability = 0.0f;  // every round drafts whole chains
  return options;
}

inline GenerationRequest only_mtp(GenerationRequest r) {
  r.draft.proposers = proposer_bit(ProposerKind::mtp);
  return r;
}

// Drafted = undrafted and concurrent = solo with MTP drafts, greedy and sampled, alone and together,
// with MTP alone and among the other proposers; drafts were proposed and rejected, and where the head
// can guess right (`expect_accepted`), accepted.
inline void expect_mtp_keeps_equalities(const HybridWithMtp& m, bool expect_accepted, int n_requests) {
  const int64_t vocab = m.model->config().vocab_size;
  std::mt19937 rng(31);
  for (bool sampled : {false, true}) {
    auto requests = with_penalties_and_logprobs(copy_friendly_requests(n_requests, sampled, vocab, rng()));
    const EngineRun plain = run_engine(m.model, without_drafts(requests), mtp_engine_options(), true);
    std::vector<GenerationRequest> mtp_alone;
    for (const auto& r : requests) mtp_alone.push_back(only_mtp(r));
    int64_t drafted = 0, accepted = 0;
    for (const auto* set : {&mtp_alone, &requests}) {
      for (bool together : {false, true}) {
        EngineOptions options = random_windows(rng, together ? LanePolicy::always_lanes : LanePolicy::automatic);
        options.n_ctx = 160;
        options.speculation.mtp_chain.min_path_probability = 0.0f;
        if (!together) options.window_policy = WindowPolicy::fixed;
        const EngineRun run = run_engine(m.model, *set, options, together, nullptr, nullptr, m.head);
        const char* what = together ? "mtp, together" : "mtp, solo";
        expect_same_tokens(plain.replies, run.replies, what);
        expect_same_logprobs(plain, run, *set, what);
        if (together) expect_rounds_shared_by_lanes(run.stats, what);
        drafted += run.stats.drafted_by_proposer[int(ProposerKind::mtp)];
        accepted += run.stats.accepted_by_proposer[int(ProposerKind::mtp)];
      }
      // As the server runs: gated by the clock.
      EngineOptions gated = mtp_engine_options();
      gated.speculation.gate_proposers = true;
      const EngineRun gated_run = run_engine(m.model, *set, gated, true, nullptr, nullptr, m.head);
      expect_same_tokens(plain.replies, gated_run.replies, "mtp, gated");
    }
    const char* mode = sampled ? "sampled" : "greedy";
    std::printf("%s: %lld MTP drafts verified, %lld accepted\n", mode, (long long)drafted, (long long)accepted);
    EXPECT_GT(drafted, 0) << mode << ": MTP drafts must have been verified";
    EXPECT_GT(drafted, accepted) << mode << ": some MTP drafts must have been rejected";
    if (expect_accepted) {
      EXPECT_GT(accepted, 0) << mode << ": some MTP drafts must have been accepted";
    }
  }
}

// An MLX copy written by `tensorfold quantize` holds the head's fc quantized (its input, 2 x hidden,
// fills whole groups of 32 here); the head loads from it on `device` and its drafts keep the equalities.
inline void expect_quantized_copy_drafts_with_its_head(const std::string& device) {
  TempDir dense_dir, mlx_dir;
  write_fixture_with_mtp("qwen3.5-tiny-c", dense_dir.path, MtpWeights::random, 13);
  QuantizeOptions quantize;
  quantize.bits = 4;
  quantize.group_size = 32;
  quantize_model_dir(dense_dir.path, mlx_dir.path, quantize);
  EXPECT_EQ(SafetensorsFile::open(mlx_dir.path + "/model.safetensors")->tensors().count("mtp.fc.scales"), 1u);
  ModelLoadOptions load = test_load_options(device);
  load.keep_mtp_head = true;
  auto model = load_model(mlx_dir.path, load);
  auto head = model->load_mtp_head(1);
  std::mt19937 rng(14);
  for (bool sampled : {false, true}) {
    auto requests = copy_friendly_requests(8, sampled, model->config().vocab_size, rng());
    for (auto& r : requests) r = only_mtp(r);
    const EngineRun plain = run_engine(model, without_drafts(requests), mtp_engine_options(), true);
    for (bool together : {false, true}) {
      const EngineRun run = run_engine(model, requests, mtp_engine_options(), together, nullptr, nullptr, head);
      expect_same_tokens(plain.replies, run.replies, together ? "quantized mtp, together" : "quantized mtp, solo");
      EXPECT_GT(run.stats.drafted_by_proposer[int(ProposerKind::mtp)], 0);
    }
  }
}

}  // namespace tf::test
