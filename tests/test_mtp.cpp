// The checkpoint's MTP head as a proposer on Qwen3.5-class hybrids (CPU): binding (a missing head, a
// malformed or incomplete one), the head's forward against a plain re-computation, its context
// holding committed rows only whatever was drafted, and the three equalities with MTP drafts,
// greedy and sampled, alone and among other lanes, some of them accepted; a quantized copy's head;
// --drafter mtp through the serving stack.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "app/serving_stack.h"
#include "backends/backends.h"
#include "core/dtype.h"
#include "loader/safetensors.h"
#include "models/mtp_head.h"
#include "server/metrics.h"
#include "speculation/mtp_proposer.h"
#include "support/equalities.h"
#include "support/expect_error.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"
#include "support/mtp_fixture.h"
#include "support/mtp_runs.h"
#include "support/resumed.h"

namespace tf {
namespace {

using test::HybridWithMtp;
using test::target_taps;
using test::mtp_engine_options;
using test::only_mtp;

TEST(MtpWeights, AHeadlessCheckpointNamesItsDirectoryAndTheMissingTensor) {
  auto model = test::load_fixture("qwen3.5-tiny-c", "cpu");
  test::expect_error_naming([&] { model->load_mtp_head(1); },
                            {test::fixture_model("qwen3.5-tiny-c"), "mtp.fc.weight"});
  auto dense = test::load_fixture("qwen3-tiny-a", "cpu");
  test::expect_error_naming([&] { dense->load_mtp_head(1); }, {"no MTP head"});
}

TEST(MtpWeights, AMalformedOrIncompleteHeadIsAnErrorNamingTheTensor) {
  {
    test::TempDir dir;
    test::write_fixture_with_mtp("qwen3.5-tiny-c", dir.path, test::MtpWeights::random, 1,
                                 [](std::map<std::string, test::MtpTensor>& t) {
                                   t["mtp.fc.weight"].shape[1] /= 2;
                                   t["mtp.fc.weight"].values.resize(t["mtp.fc.weight"].values.size() / 2);
                                 });
    test::expect_error_naming([&] { load_model(dir.path, test::test_load_options("cpu")); }, {"mtp.fc.weight"});
  }
  {
    test::TempDir dir;
    test::write_fixture_with_mtp("qwen3.5-tiny-c", dir.path, test::MtpWeights::random, 1,
                                 [](std::map<std::string, test::MtpTensor>& t) { t.erase("mtp.layers.0.mlp.up_proj.weight"); });
    test::expect_error_naming([&] { load_model(dir.path, test::test_load_options("cpu")); },
                              {"mtp.layers.0.mlp.up_proj.weight"});
  }
  {
    test::TempDir dir;
    test::write_fixture_with_mtp("qwen3.5-tiny-c", dir.path, test::MtpWeights::random, 1,
                                 [](std::map<std::string, test::MtpTensor>& t) { t.erase("mtp.norm.weight"); });
    test::expect_error_naming([&] { load_model(dir.path, test::test_load_options("cpu")); }, {"mtp.norm.weight"});
  }
}

// --- A plain re-computation of the head, in double, straight from the tensors in the file. ---

struct PlainMtp {
  const SafetensorsFile& file;
  const ModelConfig& c;

  std::vector<double> tensor(const std::string& name) const {
    const TensorView& t = file.tensors().at(name);
    std::vector<double> out(size_t(t.n_elements()));
    for (int64_t i = 0; i < t.n_elements(); ++i) out[size_t(i)] = load_as_f32(t.data, t.dtype, i);
    return out;
  }
  std::vector<double> gain(const std::string& name) const {  // zero-centred: 1 + w
    std::vector<double> g = tensor(name);
    for (double& x : g) x += 1.0;
    return g;
  }
  std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& g) const {
    const size_t n = g.size();
    std::vector<double> out(x.size());
    for (size_t row = 0; row < x.size() / n; ++row) {
      double sum = 0;
      for (size_t i = 0; i < n; ++i) sum += x[row * n + i] * x[row * n + i];
      const double scale = 1.0 / std::sqrt(sum / double(n) + double(c.rms_norm_eps));
      for (size_t i = 0; i < n; ++i) out[row * n + i] = x[row * n + i] * scale * g[i];
    }
    return out;
  }
  // y = W x for W [rows][cols].
  static std::vector<double> mul(const std::vector<double>& w, const std::vector<double>& x) {
    const size_t cols = x.size(), rows = w.size() / cols;
    std::vector<double> y(rows, 0.0);
    for (size_t r = 0; r < rows; ++r)
      for (size_t k = 0; k < cols; ++k) y[r] += w[r * cols + k] * x[k];
    return y;
  }
  void rope(double* head, int64_t position) const {
    const int64_t rd = c.hybrid.rotary_dim, half = rd / 2;
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(position) * std::pow(c.rope_theta, -2.0 * double(i) / double(rd));
      const double a = head[i], b = head[i + half];
      head[i] = a * std::cos(angle) - b * std::sin(angle);
      head[i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }

  // The logits the head's output at the last of entries 0..n-1 gives (entry t: taps of position t
  // and token t+1).
  std::vector<double> last_entry_logits(const std::vector<float>& taps, const std::vector<int32_t>& next_tokens) const {
    const int64_t h = c.hidden_size, hd = c.head_dim, n = int64_t(next_tokens.size());
    const std::string text = "model.language_model.";
    const std::vector<double> embed = tensor(text + "embed_tokens.weight");
    const std::vector<double> final_norm = gain(text + "norm.weight");
    const std::string l = "mtp.layers.0.";
    const auto fc = tensor("mtp.fc.weight"), wq = tensor(l + "self_attn.q_proj.weight"),
               wk = tensor(l + "self_attn.k_proj.weight"), wv = tensor(l + "self_attn.v_proj.weight"),
               wo = tensor(l + "self_attn.o_proj.weight"), w_gate = tensor(l + "mlp.gate_proj.weight"),
               w_up = tensor(l + "mlp.up_proj.weight"), w_down = tensor(l + "mlp.down_proj.weight");
    std::vector<std::vector<double>> x(static_cast<size_t>(n)), keys(static_cast<size_t>(n)), values(static_cast<size_t>(n));
    std::vector<double> query, gate;
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> e(embed.begin() + next_tokens[size_t(t)] * h, embed.begin() + (next_tokens[size_t(t)] + 1) * h);
      std::vector<double> hidden(taps.begin() + t * h, taps.begin() + (t + 1) * h);
      e = rms(e, gain("mtp.pre_fc_norm_embedding.weight"));
      hidden = rms(rms(hidden, final_norm), gain("mtp.pre_fc_norm_hidden.weight"));
      e.insert(e.end(), hidden.begin(), hidden.end());
      x[size_t(t)] = mul(fc, e);
      const std::vector<double> normed = rms(x[size_t(t)], gain(l + "input_layernorm.weight"));
      const std::vector<double> qg = mul(wq, normed);
      keys[size_t(t)] = rms(mul(wk, normed), gain(l + "self_attn.k_norm.weight"));
      values[size_t(t)] = mul(wv, normed);
      for (int64_t kh = 0; kh < c.n_kv_heads; ++kh) rope(keys[size_t(t)].data() + kh * hd, t);
      query.assign(size_t(c.q_dim()), 0.0);
      gate.assign(size_t(c.q_dim()), 0.0);
      for (int64_t head = 0; head < c.n_heads; ++head)
        for (int64_t i = 0; i < hd; ++i) {
          query[size_t(head * hd + i)] = qg[size_t(head * 2 * hd + i)];
          gate[size_t(head * hd + i)] = qg[size_t(head * 2 * hd + hd + i)];
        }
      query = rms(query, gain(l + "self_attn.q_norm.weight"));
      for (int64_t head = 0; head < c.n_heads; ++head) rope(query.data() + head * hd, t);
    }
    // The last entry attends to entries 0..n-1.
    std::vector<double> attended(size_t(c.q_dim()), 0.0);
    const int64_t group = c.n_heads / c.n_kv_heads;
    for (int64_t head = 0; head < c.n_heads; ++head) {
      const int64_t kh = head / group;
      std::vector<double> scores(static_cast<size_t>(n));
      double best = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t i = 0; i < hd; ++i) s += query[size_t(head * hd + i)] * keys[size_t(j)][size_t(kh * hd + i)];
        scores[size_t(j)] = s / std::sqrt(double(hd));
        best = std::max(best, scores[size_t(j)]);
      }
      for (double& s : scores) sum += (s = std::exp(s - best));
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < hd; ++i)
          attended[size_t(head * hd + i)] += scores[size_t(j)] / sum * values[size_t(j)][size_t(kh * hd + i)];
    }
    for (size_t i = 0; i < attended.size(); ++i) attended[i] *= 1.0 / (1.0 + std::exp(-gate[i]));
    std::vector<double> stream = x[size_t(n - 1)];
    const std::vector<double> projected = mul(wo, attended);
    for (int64_t i = 0; i < h; ++i) stream[size_t(i)] += projected[size_t(i)];
    const std::vector<double> normed = rms(stream, gain(l + "post_attention_layernorm.weight"));
    std::vector<double> g = mul(w_gate, normed);
    const std::vector<double> u = mul(w_up, normed);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    const std::vector<double> down = mul(w_down, g);
    for (int64_t i = 0; i < h; ++i) stream[size_t(i)] += down[size_t(i)];
    const std::string head_name = c.tie_word_embeddings ? text + "embed_tokens.weight" : "lm_head.weight";
    return mul(tensor(head_name), rms(stream, gain("mtp.norm.weight")));
  }
};

TEST(MtpHead, ForwardMatchesAPlainRecomputation) {
  HybridWithMtp m("qwen3.5-tiny-c", test::MtpWeights::random, 2);
  auto file = SafetensorsFile::open(m.dir.path + "/model.safetensors");
  const ModelConfig& c = m.model->config();
  std::mt19937 rng(3);
  const std::vector<int32_t> ids = test::random_ids(rng, 9, c.vocab_size);
  const std::vector<float> taps = target_taps(*m.model, *m.head, ids);
  PlainMtp plain{*file, c};
  for (int64_t n : {1, 3, 8}) {
    MtpContext context;
    m.head->append_context(context, taps.data(), ids.data() + 1, n);
    ASSERT_TRUE(m.head->begin_chain(context));
    const std::vector<TokenGuess> top = m.head->chain_top(context, 5);
    const std::vector<double> logits =
        plain.last_entry_logits(std::vector<float>(taps.begin(), taps.begin() + n * c.hidden_size),
                                std::vector<int32_t>(ids.begin() + 1, ids.begin() + 1 + n));
    double best = -1e300, sum = 0;
    for (double v : logits) best = std::max(best, v);
    for (double v : logits) sum += std::exp(v - best);
    for (const TokenGuess& guess : top)
      EXPECT_NEAR(guess.probability, std::exp(logits[size_t(guess.token)] - best) / sum, 2e-4)
          << "entries " << n << " token " << guess.token;
    EXPECT_EQ(top[0].token, int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin())) << n;
  }
}

// Entries appended in any chunks, with chains drafted (and thrown away) between them, are bitwise the
// entries appended at once with no chain ever drafted.
TEST(MtpHead, ContextIsChunkInvariantAndDraftedChainsLeaveNoTrace) {
  test::expect_context_chunk_invariant(HybridWithMtp("qwen3.5-tiny-c", test::MtpWeights::random, 4), 5);
}

// Fed as the engine feeds it, the proposer drafts what a fresh one on the committed history drafts.
TEST(MtpProposer, DraftsAsAFreshProposerOnTheCommittedHistory) {
  test::expect_proposer_drafts_as_fresh(HybridWithMtp("qwen3.5-tiny-c", test::MtpWeights::random, 6), 7);
}

TEST(MtpEngine, RandomHeadKeepsTheEqualities) {
  HybridWithMtp m("qwen3.5-tiny-c", test::MtpWeights::random, 8);
  test::expect_mtp_keeps_equalities(m, false, 24);
}

// The echoing head guesses the target's own last choice again: accepted wherever the chat fixture's
// greedy replies repeat a token (they do), so accepted MTP rows are under the equalities too.
TEST(MtpEngine, EchoingHeadHasDraftsAcceptedAndKeepsTheEqualities) {
  HybridWithMtp m("qwen3.5-tiny-chat", test::MtpWeights::echo_hidden, 9);
  test::expect_mtp_keeps_equalities(m, true, 8);
}

// Resumed = fresh: a lane resumed from the prefix cache gets the MTP context from the cached
// blocks' taps and drafts exactly as the fresh lane did.
TEST(MtpEngine, ResumedLaneDraftsAsAFreshOne) {
  HybridWithMtp m("qwen3.5-tiny-c", test::MtpWeights::random, 10);
  test::expect_resumed_lane_drafts_as_a_fresh_one(m.model, nullptr, m.head);
}

TEST(MtpEngine, AQuantizedCopyDraftsWithItsQuantizedHead) { test::expect_quantized_copy_drafts_with_its_head("cpu"); }

// The composition root: drafter "mtp" loads the model's head and the engine drafts with it.
TEST(MtpEngine, TheServingStackDraftsWithTheHeadForDrafterMtp) {
  test::TempDir dir;
  test::write_fixture_with_mtp("qwen3.5-tiny-c", dir.path, test::MtpWeights::random, 15);
  ServingOptions options;
  options.model_dir = dir.path;
  options.drafter = "mtp";
  options.needs_tokenizer = false;
  options.engine = mtp_engine_options(64);
  auto stack = ServingStack::load(options);
  EXPECT_TRUE(stack->facts().uses_mtp);
  EXPECT_EQ(stack->facts().drafter_dir, "");
  ReplyCollector collector;
  GenerationRequest request = test::random_requests(1, false, stack->facts().vocab_size, 16)[0];
  ASSERT_EQ(stack->engine()->submit(request, collector.sink()).status, SubmitStatus::accepted);
  collector.wait();
  const EngineStats stats = test::settled_stats(*stack->engine());
  EXPECT_GT(stats.drafted_by_proposer[int(ProposerKind::mtp)], 0);
  // /metrics counts them under their own label.
  const std::string line = "tensorfold_drafted_by_proposer_total{proposer=\"mtp\"} " +
                           std::to_string(stats.drafted_by_proposer[int(ProposerKind::mtp)]) + "\n";
  EXPECT_NE(server::prometheus_text(stats).find(line), std::string::npos) << server::prometheus_text(stats);
}

// A slot saved where the MTP head drafted (taps of one layer) and restored into an engine with a block
// drafter (taps of two): the taps do not fit, so they are not handed over and the drafter drafts
// nothing for that lane (rather than reading past them); the reply is the fresh one.
TEST(MtpEngine, RestoredTapsOfOtherLayersAreNotHandedToADrafter) {
  HybridWithMtp m("qwen3.5-tiny-c", test::MtpWeights::random, 17);
  test::TempDir drafter_dir;
  test::write_random_drafter(drafter_dir.path, m.model->config(), 18);
  auto drafter = load_drafter(drafter_dir.path, *m.model, 1);
  EngineOptions options;
  options.n_ctx = 200;
  options.n_parallel = 2;
  options.model_id = "fixture";
  options.window_policy = WindowPolicy::fixed;
  GenerationRequest first = test::random_requests(1, false, m.model->config().vocab_size, 19, 60, 10)[0];
  first.prompt.resize(60, 5);
  first.max_tokens = 20;
  SlotSnapshot saved;
  {
    Engine engine(options, m.model, nullptr, nullptr, m.head);
    test::EngineRun run;
    test::submit_and_collect(engine, {first}, &run);
    first.prompt.insert(first.prompt.end(), run.replies[0].tokens.begin(), run.replies[0].tokens.end());
    saved = engine.save_slot(0);
  }
  EXPECT_EQ(saved.tap_width, m.model->config().hidden_size);
  GenerationRequest next = first;
  for (int i = 0; i < 7; ++i) next.prompt.push_back(int32_t(3 + i));
  next.draft.proposers = proposer_bit(ProposerKind::drafter);
  const test::EngineRun fresh = test::run_engine(m.model, {test::cold(next)}, options, false, nullptr, drafter);
  Engine restored(options, m.model, nullptr, drafter);
  EXPECT_GE(restored.restore_slot(1, saved), 48);
  test::EngineRun resumed;
  test::submit_and_collect(restored, {next}, &resumed);
  test::expect_same_tokens(fresh.replies, resumed.replies, "restored slot, another drafter");
  EXPECT_GT(resumed.replies[0].final_update.timings.cache_n, 0);
  EXPECT_GT(fresh.replies[0].final_update.timings.draft_n, 0);
  EXPECT_EQ(resumed.replies[0].final_update.timings.draft_n, 0);
}

TEST(MtpEngine, TheBlockDrafterAndTheMtpHeadDoNotDraftTogether) {
  HybridWithMtp m("qwen3.5-tiny-c", test::MtpWeights::random, 11);
  test::TempDir drafter_dir;
  test::write_random_drafter(drafter_dir.path, m.model->config(), 12);
  auto drafter = load_drafter(drafter_dir.path, *m.model, 1);
  test::expect_error_naming([&] { Engine engine(EngineOptions{}, m.model, nullptr, drafter, m.head); },
                            {"MTP head", "block drafter"});
}

}  // namespace
}  // namespace tf
