// DFlash drafter: target taps, the drafter's block logits against the PyTorch reference dump,
// batch invariance of its context and block, its loader errors, and the proposer's tree shape.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "backends/backends.h"
#include "backends/cpu/cpu_dflash_drafter.h"
#include "backends/cpu/kernels/activation.h"
#include "backends/cpu/qwen3_cpu_model.h"
#include "loader/safetensors.h"
#include "models/dflash_drafter.h"
#include "models/model.h"
#include "models/token_guess.h"
#include "runtime/kv_cache.h"
#include "speculation/drafter_proposer.h"
#include "speculation/speculation.h"
#include "support/cpu_numerics.h"
#include "support/expect_error.h"
#include "support/fixtures.h"
#include "support/random_drafter.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using test::TempDir;
using test::write_random_drafter;

// The reference runs PyTorch in float32 on the stored weights; ours is float32 too, so the only
// differences are summation orders.
constexpr float kTolerance = 1e-4f;

const char* kTarget = "qwen3-tiny-a";
const char* kReferenceDrafter = "tests/fixtures/drafter/tiny-a-drafter";
const char* kReferenceDump = "tests/fixtures/drafter/tiny-a-drafter-reference.json";

const Qwen3Weights& target_weights(const Model& model) {
  return dynamic_cast<const Qwen3CpuModel&>(model).weights();
}

// One prefill forward over `ids` (optionally split into chunks at `chunk_starts`); returns the
// taps of every row and writes the logits of every row.
std::vector<float> prefill_taps(Model& model, const std::vector<int32_t>& ids,
                                std::vector<float>* logits, const std::vector<size_t>& chunk_starts = {0}) {
  const ModelConfig& c = model.config();
  KvCache kv = make_kv_cache(model, kv_blocks_for(int64_t(ids.size())));
  int32_t lane = kv.lane_open();
  kv.lane_reserve(lane, int64_t(ids.size()));
  logits->assign(ids.size() * size_t(c.vocab_size), 0.0f);
  std::vector<float> taps;
  for (size_t k = 0; k < chunk_starts.size(); ++k) {
    size_t begin = chunk_starts[k], end = k + 1 < chunk_starts.size() ? chunk_starts[k + 1] : ids.size();
    Batch batch;
    for (size_t i = begin; i < end; ++i)
      batch.rows.push_back({ids[i], int32_t(i), lane, i == begin ? -1 : int32_t(i - begin) - 1,
                            kv.slot(lane, int64_t(i)), true});
    model.forward(batch, kv, logits->data() + begin * size_t(c.vocab_size));
    taps.insert(taps.end(), model.taps().begin(), model.taps().end());
  }
  return taps;
}

std::vector<int32_t> random_ids(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = int32_t(rng() % uint32_t(vocab));
  return ids;
}

float largest_difference(const float* a, const std::vector<float>& b) {
  float worst = 0;
  for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

std::vector<float> flatten(const nlohmann::json& rows) {
  std::vector<float> out;
  for (const auto& row : rows)
    for (const auto& x : row) out.push_back(x.get<float>());
  return out;
}

TEST(DrafterTaps, TapsDoNotChangeLogitsAndAreChunkInvariant) {
  auto model = load_model(test::fixture_model(kTarget), {});
  const ModelConfig& c = model->config();
  std::vector<int32_t> ids = random_ids(37, c.vocab_size, 7);
  std::vector<float> plain_logits, tapped_logits, chunked_logits;
  prefill_taps(*model, ids, &plain_logits);
  EXPECT_TRUE(model->taps().empty());
  model->set_tap_layers({int(c.n_layers - 1), 0});
  std::vector<float> taps = prefill_taps(*model, ids, &tapped_logits);
  ASSERT_EQ(taps.size(), ids.size() * 2 * size_t(c.hidden_size));
  EXPECT_EQ(plain_logits, tapped_logits) << "taps must not move the logits";
  std::vector<float> chunked = prefill_taps(*model, ids, &chunked_logits, {0, 1, 9, 30});
  EXPECT_EQ(taps, chunked) << "a token's taps must not depend on how the prompt was chunked";
  test::expect_error_naming([&] { model->set_tap_layers({int(c.n_layers)}); }, {"tap layer"});
  model->set_tap_layers({});
}

// A drafter fed its context in one call, token by token, or after a truncation, drafts the same
// bits; lanes do not see each other.
TEST(DrafterForward, ContextAndBlockAreBatchInvariant) {
  TempDir dir;
  auto model = load_model(test::fixture_model(kTarget), {});
  const ModelConfig& c = model->config();
  write_random_drafter(dir.path, c, 11);
  CpuDFlashDrafter drafter(dir.path, c, target_weights(*model).embed_tokens, target_weights(*model).lm_head, 3);
  const auto& layer_ids = drafter.config().target_layer_ids;
  model->set_tap_layers({layer_ids.begin(), layer_ids.end()});
  std::vector<int32_t> ids = random_ids(41, c.vocab_size, 12);
  std::vector<float> logits;
  std::vector<float> taps = prefill_taps(*model, ids, &logits);
  const int64_t width = drafter.config().tap_width();
  const size_t n_out = size_t(drafter.n_block_logits() * c.vocab_size);
  const int64_t p = int64_t(ids.size()) - 1;  // the last token is the block's head

  DrafterContext whole;
  drafter.append_context(whole, taps.data(), p);
  std::vector<float> expected(n_out);
  drafter.propose_block(whole, ids.back(), p, expected.data());
  for (float x : expected) ASSERT_TRUE(std::isfinite(x));

  DrafterContext single, other;
  std::vector<int32_t> other_ids = random_ids(20, c.vocab_size, 13);
  std::vector<float> other_logits;
  std::vector<float> other_taps = prefill_taps(*model, other_ids, &other_logits);
  for (int64_t t = 0; t < p; ++t) {
    drafter.append_context(single, taps.data() + t * width, 1);
    if (t < 19) drafter.append_context(other, other_taps.data() + t * width, 1);
  }
  std::vector<float> got(n_out), scratch(n_out);
  drafter.propose_block(other, other_ids.back(), 19, scratch.data());
  drafter.propose_block(single, ids.back(), p, got.data());
  EXPECT_EQ(got, expected) << "token-by-token context, with another lane interleaved";

  // Rejected entries replaced: append garbage taps past p - 5, truncate, append the real ones.
  DrafterContext rolled;
  drafter.append_context(rolled, taps.data(), p - 5);
  drafter.append_context(rolled, other_taps.data(), 9);
  drafter.propose_block(rolled, other_ids[3], p - 5, scratch.data());
  rolled.truncate(p - 5);
  drafter.append_context(rolled, taps.data() + (p - 5) * width, 5);
  drafter.propose_block(rolled, ids.back(), p, got.data());
  EXPECT_EQ(got, expected) << "after a truncation";

  // Rows read one at a time, out of order, or after a block of other rows (the CPU drafter
  // computes the LM head for several rows at once): the same bits as propose_block.
  const int64_t n_vocab = c.vocab_size;
  drafter.run_block(whole, ids.back(), p);
  std::vector<float> row(static_cast<size_t>(n_vocab));
  for (int64_t j : {5, 0, 14, 3, 4, 13, 6}) {
    drafter.block_logits(j, row.data());
    EXPECT_TRUE(std::equal(row.begin(), row.end(), expected.begin() + j * n_vocab)) << "row " << j;
    const auto top = drafter.block_top(j, 2);
    ASSERT_EQ(top.size(), 2u);
    EXPECT_EQ(top[0].token, argmax_token(expected.data() + j * n_vocab, n_vocab)) << "row " << j;
    EXPECT_GE(top[0].probability, top[1].probability);
  }
  drafter.propose_block(other, other_ids.back(), 19, scratch.data());
  drafter.run_block(whole, ids.back(), p);
  drafter.block_logits(9, row.data());
  EXPECT_TRUE(std::equal(row.begin(), row.end(), expected.begin() + 9 * n_vocab)) << "a new block's rows";

  // A block sees context positions < p only; entries past p do not matter.
  drafter.append_context(rolled, taps.data() + p * width, 1);
  drafter.propose_block(rolled, ids.back(), p, got.data());
  EXPECT_EQ(got, expected) << "with an entry at position p present";
}

TEST(DrafterLoader, ErrorsNameTheFileAndTheField) {
  auto model = load_model(test::fixture_model(kTarget), {});
  const ModelConfig& c = model->config();
  const Qwen3Weights& weights = target_weights(*model);
  TempDir dir;
  Json config;
  write_random_drafter(dir.path, c, 3, &config);
  const std::string config_path = dir.path + "/config.json";
  auto rewrite = [&](const Json& j) { std::ofstream(config_path) << j.dump(2); };
  auto load = [&] { CpuDFlashDrafter drafter(dir.path, c, weights.embed_tokens, weights.lm_head, 1); };

  for (const char* field : {"block_size", "target_layer_ids", "mask_token_id", "hidden_size",
                            "num_hidden_layers", "head_dim", "rope_theta", "target_hidden_size"}) {
    Json broken = config;
    broken.erase(field);
    rewrite(broken);
    test::expect_error_naming(load, {config_path, std::string("\"") + field + "\"", "missing"});
  }
  Json wrong = config;
  wrong["target_layer_ids"] = {0, int32_t(c.n_layers)};
  rewrite(wrong);
  test::expect_error_naming(load, {config_path, "target_layer_ids", std::to_string(c.n_layers)});
  wrong = config;
  wrong["hidden_size"] = c.hidden_size + 32;
  rewrite(wrong);
  test::expect_error_naming(load, {config_path, "hidden_size"});
  wrong = config;
  wrong["architectures"] = {"Qwen3ForCausalLM"};
  rewrite(wrong);
  test::expect_error_naming(load, {config_path, "Qwen3ForCausalLM", "DFlashDrafter"});

  rewrite(config);
  EXPECT_NO_THROW(load());
  fs::remove(dir.path + "/model.safetensors");
  test::expect_error_naming(load, {dir.path});
}

// A proposer's reading of a logits row: the k best ids by one pass (few) or a sort (many), ties to
// the lower id either way, and softmax probabilities whichever sum of exps the backend gives.
TEST(TokenGuess, TopTokensAndTheirProbabilities) {
  std::mt19937 rng(31);
  std::uniform_int_distribution<int> level(-40, 8);  // few distinct values: many ties
  for (int64_t n_vocab : {1, 7, 1000, 15360}) {
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    for (float& x : logits) x = 0.5f * float(level(rng));
    std::vector<int32_t> sorted(static_cast<size_t>(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) sorted[size_t(i)] = int32_t(i);
    std::stable_sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (int64_t k : {1, 2, 4, 16, 17, 40}) {
      const std::vector<int32_t> top = top_k_tokens(logits.data(), n_vocab, k);
      const std::vector<int32_t> want(sorted.begin(), sorted.begin() + std::min(k, n_vocab));
      EXPECT_EQ(top, want) << "n_vocab " << n_vocab << " k " << k;
    }
    double sum = 0.0;
    for (float x : logits) sum += std::exp(double(x - logits[size_t(sorted[0])]));
    for (auto sum_of_exps : {SumOfExps(nullptr), SumOfExps(cpu::sum_of_exps)}) {
      const std::vector<TokenGuess> guesses = likeliest_tokens(logits.data(), n_vocab, 3, sum_of_exps);
      ASSERT_EQ(int64_t(guesses.size()), std::min<int64_t>(3, n_vocab));
      for (size_t i = 0; i < guesses.size(); ++i) {
        EXPECT_EQ(guesses[i].token, sorted[i]);
        const double want = std::exp(double(logits[size_t(sorted[i])] - logits[size_t(sorted[0])])) / sum;
        EXPECT_NEAR(guesses[i].probability, want, 1e-6 * want) << "n_vocab " << n_vocab;
      }
    }
  }
}

// The test target and a random drafter for it.
struct RandomDrafter {
  std::shared_ptr<Model> model = load_model(test::fixture_model(kTarget), {});
  TempDir dir;
  std::shared_ptr<CpuDFlashDrafter> drafter;

  explicit RandomDrafter(uint32_t seed) {
    write_random_drafter(dir.path, model->config(), seed);
    drafter = std::make_shared<CpuDFlashDrafter>(dir.path, model->config(), target_weights(*model).embed_tokens,
                                                 target_weights(*model).lm_head, 2);
  }
};

TEST(DrafterProposer, GreedyChainAndRootSiblings) {
  RandomDrafter random(21);
  const std::shared_ptr<Model>& model = random.model;
  const std::shared_ptr<CpuDFlashDrafter>& drafter = random.drafter;
  const ModelConfig& c = model->config();
  const auto& layer_ids = drafter->config().target_layer_ids;
  model->set_tap_layers({layer_ids.begin(), layer_ids.end()});
  std::vector<int32_t> ids = random_ids(30, c.vocab_size, 22);
  std::vector<float> logits;
  std::vector<float> taps = prefill_taps(*model, ids, &logits);
  const int64_t n_vocab = c.vocab_size;

  DrafterProposerOptions every_node;
  every_node.min_path_probability = 0.0f;
  DrafterProposer proposer(drafter, every_node);
  LaneHistory history{ids, int64_t(ids.size())};
  DraftTree tree;
  proposer.observe(history);
  proposer.propose(history, 64, &tree);
  EXPECT_EQ(tree.size(), 0) << "no context yet: nothing to propose";

  proposer.observe_taps(0, taps.data(), int64_t(ids.size()) - 1);
  EXPECT_EQ(proposer.n_context(), int64_t(ids.size()) - 1);
  proposer.propose(history, 64, &tree);
  // The drafter keeps the proposer's block: its rows' logits, to check the tree against.
  const int64_t n_chain = drafter->n_block_logits();
  std::vector<float> block(size_t(n_chain * n_vocab));
  for (int64_t j = 0; j < n_chain; ++j) drafter->block_logits(j, block.data() + j * n_vocab);
  std::vector<int32_t> first = top_k_tokens(block.data(), n_vocab, 4);
  // Layout: chain head, three siblings, then the chain's remaining 14 nodes below the head.
  ASSERT_EQ(tree.size(), 1 + 3 + (n_chain - 1));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(tree.tokens[size_t(i)], first[size_t(i)]);
    EXPECT_EQ(tree.parents[size_t(i)], -1);
  }
  for (int64_t j = 1; j < n_chain; ++j) {
    const size_t node = size_t(3 + j);
    EXPECT_EQ(tree.tokens[node], argmax_token(block.data() + j * n_vocab, n_vocab)) << "depth " << j;
    EXPECT_EQ(tree.parents[node], j == 1 ? 0 : int32_t(node - 1));
  }
  for (uint8_t source : tree.sources) EXPECT_EQ(source, uint8_t(ProposerKind::drafter));
  EXPECT_EQ(first[0], argmax_token(block.data(), n_vocab));

  // With a confidence floor the chain stops at the first node whose path probability falls
  // below it, and unlikely siblings go; the head always stays.
  for (float floor : {0.001f, 0.02f, 0.5f}) {
    DrafterProposerOptions options;
    options.min_path_probability = floor;
    DrafterProposer confident(drafter, options);
    confident.observe_taps(0, taps.data(), int64_t(ids.size()) - 1);
    DraftTree cut;
    confident.propose(history, 64, &cut);
    auto softmax_at = [&](int64_t j, int32_t token) {
      const float* row = block.data() + j * n_vocab;
      double max_logit = *std::max_element(row, row + n_vocab), sum = 0;
      for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(row[i]) - max_logit);
      return std::exp(double(row[token]) - max_logit) / sum;
    };
    int64_t expected_chain = 1;
    double path = softmax_at(0, first[0]);
    for (int64_t j = 1; j < n_chain; ++j) {
      path *= softmax_at(j, argmax_token(block.data() + j * n_vocab, n_vocab));
      if (path < floor) break;
      ++expected_chain;
    }
    int64_t expected_siblings = 0;
    for (int i = 1; i < 4; ++i) expected_siblings += softmax_at(0, first[size_t(i)]) >= floor;
    EXPECT_EQ(cut.size(), expected_chain + expected_siblings) << "floor " << floor;
    EXPECT_EQ(cut.tokens[0], first[0]);
  }

  // A 16-row window keeps the head, the siblings and the shallowest 12 chain nodes.
  DraftTree window;
  proposer.propose(history, 16, &window);
  ASSERT_EQ(window.size(), 16);
  EXPECT_EQ(std::vector<int32_t>(tree.tokens.begin(), tree.tokens.begin() + 16), window.tokens);

  // Taps re-sent from an earlier position replace the entries past it.
  proposer.observe_taps(10, taps.data() + 10 * drafter->config().tap_width(), int64_t(ids.size()) - 11);
  DraftTree again;
  proposer.propose(history, 64, &again);
  EXPECT_EQ(again.tokens, tree.tokens);
}

// A long run of held taps (a long prompt, in prefill-sized chunks) is caught up on as a window:
// the newest kMostHeldTaps, at positions counted from the window's start, and the block the
// proposer drafts is bit for bit the one a context of just those taps gives. Taps re-sent from
// before the window start it again there.
TEST(DrafterProposer, CatchesUpOnAWindowOfTheNewestTaps) {
  RandomDrafter random(29);
  const std::shared_ptr<CpuDFlashDrafter>& drafter = random.drafter;
  const ModelConfig& c = random.model->config();
  const int64_t width = drafter->config().tap_width();
  const std::vector<int32_t> ids = random_ids(size_t(3 * kMostHeldTaps), c.vocab_size, 30);
  const auto n_taps = int64_t(ids.size()) - 1;  // the root has none yet
  std::vector<float> taps(size_t(n_taps * width));
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& tap : taps) tap = normal(rng);

  DrafterProposer proposer(drafter);
  for (int64_t first = 0; first < n_taps; first += 259) {
    proposer.observe_taps(first, taps.data() + first * width, std::min<int64_t>(259, n_taps - first));
    EXPECT_LE(proposer.n_taps_held(), 2 * kMostHeldTaps) << "held after position " << first;
  }
  EXPECT_EQ(proposer.n_context(), n_taps);
  LaneHistory history{ids, int64_t(ids.size())};
  DraftTree tree;
  proposer.propose(history, 16, &tree);
  ASSERT_GT(tree.size(), 0);
  EXPECT_EQ(proposer.first_position(), n_taps - kMostHeldTaps);
  EXPECT_EQ(proposer.n_taps_held(), 0);
  const int64_t n_vocab = c.vocab_size;
  std::vector<float> windowed(size_t(2 * n_vocab)), alone(size_t(2 * n_vocab));
  for (int64_t j = 0; j < 2; ++j) drafter->block_logits(j, windowed.data() + j * n_vocab);

  DrafterContext context;
  drafter->append_context(context, taps.data() + (n_taps - kMostHeldTaps) * width, kMostHeldTaps);
  drafter->run_block(context, ids.back(), kMostHeldTaps);
  for (int64_t j = 0; j < 2; ++j) drafter->block_logits(j, alone.data() + j * n_vocab);
  EXPECT_EQ(0, std::memcmp(windowed.data(), alone.data(), windowed.size() * sizeof(float)));

  // Taps re-sent from before the window start it again there; drafting, it keeps the newest window.
  const int64_t restart = n_taps - kMostHeldTaps - 10;
  proposer.observe_taps(restart, taps.data() + restart * width, n_taps - restart);
  EXPECT_EQ(proposer.first_position(), restart);
  EXPECT_EQ(proposer.n_context(), n_taps);
  DraftTree again;
  proposer.propose(history, 16, &again);
  EXPECT_EQ(proposer.first_position(), n_taps - kMostHeldTaps);
  EXPECT_EQ(again.tokens, tree.tokens);
}

// An engine's speculation with gates on and a random drafter as its only proposer.
struct GatedDrafter : RandomDrafter {
  std::unique_ptr<Speculation> speculation;
  DraftRequest request;

  explicit GatedDrafter(uint32_t seed) : RandomDrafter(seed) {
    SpeculationOptions options;
    options.drafter = drafter;
    options.settings.gate_proposers = true;
    speculation = std::make_unique<Speculation>(options);
    request.proposers = proposer_bit(ProposerKind::drafter);
  }
};

// With gates on, a lane whose drafter does not pay stops feeding its context once it would have to
// catch up on more than kMostHeldTaps taps (a long prompt): it retires and drafts nothing more. A
// drafter in its warm-up keeps its lane, and so does every kProbeLaneEvery-th lane's, which probes
// at once.
TEST(DrafterProposer, RetiresFromALaneWhereItsGateIsClosed) {
  GatedDrafter engine(23);
  const int64_t width = engine.drafter->config().tap_width();
  const std::vector<int32_t> ids = random_ids(30, engine.model->config().vocab_size, 24);
  const std::vector<float> taps(size_t((kMostHeldTaps + 64) * width), 0.25f);
  const RoundCosts costs{0.001, 0.0001};  // a use (a block forward) costs far more than a round

  auto first = engine.speculation->for_lane(engine.request, 16);
  first->observe_taps(0, taps.data(), int64_t(ids.size()) - 1, costs);
  LaneHistory history{ids, int64_t(ids.size())};
  for (int64_t use = 0; use < ProposerGate::kWarmupUses; ++use) {
    DraftTree tree;
    first->draft(history, 16, costs, &tree);
    ASSERT_GT(tree.size(), 0) << "a warm-up use drafts, use " << use;
    first->record_accepted(tree, {}, costs);  // nothing accepted: the drafter does not pay
  }
  ASSERT_TRUE(first->wants_taps());
  // Past its warm-up, closed, and asked to hold a long run of taps: it retires.
  first->observe_taps(int64_t(ids.size()) - 1, taps.data(), kMostHeldTaps + 1, costs);
  EXPECT_FALSE(first->wants_taps());
  DraftTree none;
  first->draft(history, 16, costs, &none);
  EXPECT_EQ(none.size(), 0);

  // Later lanes start from the engine's closed gate and retire at a long prompt; the probe lane
  // keeps its drafter for its probe.
  for (int64_t lane = 2; lane <= Speculation::kProbeLaneEvery; ++lane) {
    auto next = engine.speculation->for_lane(engine.request, 16);
    next->observe_taps(0, taps.data(), kMostHeldTaps + 1, costs);
    EXPECT_EQ(next->wants_taps(), lane == Speculation::kProbeLaneEvery) << "lane " << lane;
  }
  // A short prompt is held whatever the gate says: the drafter may still be probed there.
  auto short_prompt = engine.speculation->for_lane(engine.request, 16);
  short_prompt->observe_taps(0, taps.data(), kMostHeldTaps, costs);
  EXPECT_TRUE(short_prompt->wants_taps());
}

// Lanes that start together warm up together: a lane that has not drafted yet when the engine's
// warm-up ends takes the engine's averages (here: the drafter does not pay, so it skips).
TEST(DrafterProposer, LanesStartedTogetherShareOneWarmUp) {
  GatedDrafter engine(25);
  const std::vector<int32_t> ids = random_ids(30, engine.model->config().vocab_size, 26);
  const std::vector<float> taps(size_t(int64_t(ids.size()) * engine.drafter->config().tap_width()), 0.25f);
  const RoundCosts costs{0.001, 0.0001};
  LaneHistory history{ids, int64_t(ids.size())};

  auto early = engine.speculation->for_lane(engine.request, 16);
  auto waiting = engine.speculation->for_lane(engine.request, 16);
  for (auto* lane : {early.get(), waiting.get()}) lane->observe_taps(0, taps.data(), int64_t(ids.size()) - 1, costs);
  for (int64_t use = 0; use < ProposerGate::kWarmupUses; ++use) {
    DraftTree tree;
    early->draft(history, 16, costs, &tree);
    ASSERT_GT(tree.size(), 0) << "use " << use;
    early->record_accepted(tree, {}, costs);
  }
  DraftTree tree;
  waiting->draft(history, 16, costs, &tree);
  EXPECT_EQ(tree.size(), 0) << "the engine's warm-up is over and the drafter does not pay";
}

// One lane at a time warms the engine's gate up: while the first lane that drafted is in its
// warm-up, lanes that started beside it draft nothing; once its uses pay, they draft at once. A
// warm-up whose lane stops drafting for a round, or ends, is taken over by the next lane that drafts.
TEST(DrafterProposer, OneLaneWarmsTheGateUpForItsNeighbours) {
  GatedDrafter engine(27);
  const std::vector<int32_t> ids = random_ids(30, engine.model->config().vocab_size, 28);
  const std::vector<float> taps(size_t(int64_t(ids.size()) * engine.drafter->config().tap_width()), 0.25f);
  const RoundCosts costs{1.0, 0.0001};  // a plain round dearer than any use: an accepted token pays
  LaneHistory history{ids, int64_t(ids.size())};
  auto lane = [&] {
    auto made = engine.speculation->for_lane(engine.request, 16);
    made->observe_taps(0, taps.data(), int64_t(ids.size()) - 1, costs);
    return made;
  };
  auto draft = [&](LaneSpeculation& speculation) {
    DraftTree tree;
    speculation.draft(history, 16, costs, &tree);
    if (tree.size() > 0) speculation.record_accepted(tree, {0}, costs);  // the chain's head accepted
    return tree.size();
  };

  auto first = lane();
  auto second = lane();
  ASSERT_GT(draft(*first), 0) << "the first lane to draft warms the gate up";
  EXPECT_EQ(draft(*second), 0) << "its neighbour waits for the verdict";
  DraftTree none;
  first->draft(history, 0, costs, &none);  // a round in which the warming lane drafts nothing...
  ASSERT_GT(draft(*second), 0) << "...hands the warm-up to the next lane that drafts";
  EXPECT_EQ(draft(*first), 0) << "which keeps it while it drafts every round";
  second.reset();  // the warming lane ends two uses into the warm-up
  first.reset();
  auto third = lane();
  auto fourth = lane();
  for (int64_t use = 2; use < ProposerGate::kWarmupUses; ++use) {
    ASSERT_GT(draft(*third), 0) << "the next lane that drafts takes the warm-up over, use " << use;
    if (use + 1 < ProposerGate::kWarmupUses) {
      EXPECT_EQ(draft(*fourth), 0) << "still warming up, use " << use;
    }
  }
  EXPECT_GT(draft(*fourth), 0) << "the warm-up is over and the drafter pays";
}

// The PyTorch reference (tools/train/make_drafter_fixture.py, dflash.py): the target's taps and
// the drafter's block logits in tests/fixtures/drafter/. A missing dump is a failure, not a skip.
// At f32 inputs, which a float32 reference can check to 1e-4 (a drafter's numerics change which
// drafts it makes, never a token of the reply).
TEST(DrafterParity, BlockLogitsMatchPyTorchReference) {
  test::CpuNumericsScope scope(test::f32_inputs());
  const std::string dump_path = test::source_path(kReferenceDump);
  const std::string drafter_dir = test::source_path(kReferenceDrafter);
  ASSERT_TRUE(fs::exists(dump_path)) << "reference dump missing: " << dump_path
                                     << " (written by tools/train/make_drafter_fixture.py)";
  ASSERT_TRUE(fs::exists(drafter_dir + "/config.json")) << "reference drafter missing: " << drafter_dir;
  auto ref = test::read_json(dump_path);
  auto model = load_model(test::fixture_model(kTarget), {});
  const ModelConfig& c = model->config();
  CpuDFlashDrafter drafter(drafter_dir, c, target_weights(*model).embed_tokens, target_weights(*model).lm_head, 2);
  const auto& layer_ids = drafter.config().target_layer_ids;
  model->set_tap_layers({layer_ids.begin(), layer_ids.end()});

  std::vector<int32_t> ids = ref["prompt_ids"].get<std::vector<int32_t>>();
  std::vector<float> logits;
  std::vector<float> taps = prefill_taps(*model, ids, &logits);
  std::vector<float> ref_taps = flatten(ref["taps"]);
  ASSERT_EQ(taps.size(), ref_taps.size()) << "taps: [n_prompt][n_taps * hidden]";
  const float taps_difference = largest_difference(taps.data(), ref_taps);
  EXPECT_LT(taps_difference, kTolerance) << "target taps";

  std::vector<int32_t> block_ids = ref["block_input_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(int64_t(block_ids.size()), drafter.config().block_size);
  for (size_t i = 1; i < block_ids.size(); ++i) EXPECT_EQ(block_ids[i], drafter.config().mask_token_id);
  // The reference block follows the whole prompt: context positions 0..n-1, block at n.
  const int64_t position = ref["block_start_position"].get<int64_t>();
  ASSERT_LE(position, int64_t(ids.size()));
  // The drafter's context is built from our taps, as the engine would; the taps check above
  // keeps the two sources equal within tolerance.
  DrafterContext context;
  drafter.append_context(context, taps.data(), position);
  const int64_t n_vocab = c.vocab_size;
  std::vector<float> block(size_t(drafter.n_block_logits() * n_vocab));
  drafter.propose_block(context, block_ids[0], position, block.data());
  // The reference has logits for every block entry; entry 0 (the known token) predicts nothing.
  const auto& ref_rows = ref["block_logits"];
  ASSERT_EQ(int64_t(ref_rows.size()), drafter.config().block_size) << "block_logits: [block_size][vocab]";
  std::vector<float> ref_block = flatten(ref_rows);
  ref_block.erase(ref_block.begin(), ref_block.begin() + n_vocab);
  ASSERT_EQ(block.size(), ref_block.size());
  const float block_difference = largest_difference(block.data(), ref_block);
  EXPECT_LT(block_difference, kTolerance) << "drafter block logits";
  std::printf("largest differences to the reference: taps %.3g, block logits %.3g\n", taps_difference,
              block_difference);
  std::vector<int32_t> ref_argmax = ref["block_argmax"].get<std::vector<int32_t>>();
  for (int64_t j = 0; j < drafter.n_block_logits(); ++j) {
    const float* row = block.data() + j * n_vocab;
    EXPECT_FLOAT_EQ(row[argmax_token(row, n_vocab)], row[ref_argmax[size_t(j + 1)]])
        << "block entry " << j + 1;
  }
}

}  // namespace
}  // namespace tf
