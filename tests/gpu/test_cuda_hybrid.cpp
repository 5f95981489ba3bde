// Qwen3.5-class hybrids on CUDA: logits against the CPU reference to bf16 accuracy; bitwise batch
// invariance (chunkings, neighbour lanes, M = 1 ... 64 and 257, graphs and overlapped launches on or
// off); the recurrent state after one verify pass of a draft tree (siblings accepted, everything
// rejected, a 256-row copy chain) equal to plain decoding's; and the engine's three equalities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "backends/backends.h"
#include "backends/cuda/cuda_hybrid_storage.h"
#include "gpu_test.h"
#include "models/model.h"
#include "support/equalities.h"
#include "support/expect_error.h"
#include "support/cpu_numerics.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"
#include "support/hybrid_runs.h"
#include "support/random_drafter.h"
#include "support/resumed.h"
#include "support/widened_hybrid.h"

namespace tf {
namespace {

// The CPU model these tests hold the GPU to computes at f32 inputs, as when their tolerances were set.
const ::testing::Environment* const kF32Inputs = ::testing::AddGlobalTestEnvironment(new test::F32InputsThroughout);

using gpu_test::relative_error;
using gpu_test::top2_margin;

// bf16 activations and K/V against the CPU's f32, as in the dense parity suite; the DeltaNet runs in
// f32 on both but from bf16-rounded projections on the GPU, and the delta rule carries each row's
// rounding into every later state (the state itself differs by about 1% after 33 positions). Measured
// on the H200: relative error 2.4-3.1% and largest logit difference 0.08-0.18 on the three small
// fixtures (0.8% and 0.03 on the chat-sized one), against 0.6-0.9% and 0.02-0.03 for dense Qwen3.
constexpr double kMaxRelativeError = 5e-2;
constexpr float kMaxLogitDifference = 0.25f;
constexpr int64_t kGreedySteps = 32;

const std::string& kWidened = test::kWidenedHybrid;  // the kernels' widest DeltaNet variant
std::string model_dir(const std::string& name) { return test::hybrid_model_dir(name); }
std::shared_ptr<Model> load_hybrid(const std::string& name, const std::string& device) {
  return load_model(model_dir(name), test::test_load_options(device));
}
std::shared_ptr<Model> cuda_hybrid(const std::string& name) { return load_hybrid(name, "cuda"); }

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaHybridParity : public ::testing::TestWithParam<std::string> {};

// Teacher-forced over the prompt and the CPU's greedy reply, then free-running greedy tokens.
TEST_P(CudaHybridParity, LogitsAndGreedyTokensMatchTheCpuModel) {
  auto ref = test::read_json(test::fixture_model(GetParam()) + "/reference.json");
  auto cpu = load_hybrid(GetParam(), "cpu");
  auto gpu = cuda_hybrid(GetParam());
  const std::vector<int32_t> prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = test::greedy_generate(cpu, prompt, kGreedySteps);
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), want.begin(), want.end());
  const std::vector<float> cpu_logits = test::prefill_logits(*cpu, ids);
  const std::vector<float> gpu_logits = test::prefill_logits(*gpu, ids);
  ASSERT_EQ(gpu_logits.size(), cpu_logits.size());
  float worst = 0;
  for (size_t i = 0; i < cpu_logits.size(); ++i) worst = std::max(worst, std::fabs(gpu_logits[i] - cpu_logits[i]));
  const double error = relative_error(gpu_logits, cpu_logits);
  std::printf("%s: relative error %.3e, largest logit difference %.3e\n", GetParam().c_str(), error, worst);
  EXPECT_LT(error, kMaxRelativeError);
  EXPECT_LT(worst, kMaxLogitDifference);

  const std::vector<int32_t> got = test::greedy_generate(gpu, prompt, kGreedySteps);
  ASSERT_EQ(got.size(), want.size());
  const int64_t n_vocab = cpu->config().vocab_size;
  size_t n_compared = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float* row = cpu_logits.data() + (prompt.size() - 1 + i) * size_t(n_vocab);
    if (top2_margin(row, n_vocab) < 2 * kMaxLogitDifference) break;
    EXPECT_EQ(got[i], want[i]) << "step " << i;
    ++n_compared;
  }
  std::printf("%s: %zu of %lld greedy steps compared\n", GetParam().c_str(), n_compared, (long long)kGreedySteps);
}

// The DeltaNet state itself after a prefill, against the CPU's (the fold through the model's interface).
void expect_state_matches_the_cpu_model(const std::string& name) {
  auto cpu = load_hybrid(name, "cpu");
  auto gpu = cuda_hybrid(name);
  std::mt19937 rng(3);
  const auto ids = test::random_ids(rng, 33, cpu->config().vocab_size);
  std::vector<std::vector<float>> states;
  for (Model* model : {cpu.get(), gpu.get()}) {
    KvCache kv = make_kv_cache(*model, 8);
    const int32_t lane = kv.lane_open();
    kv.lane_reserve(lane, int64_t(ids.size()));
    Batch batch;
    for (size_t i = 0; i < ids.size(); ++i)
      batch.rows.push_back({ids[i], int32_t(i), lane, int32_t(i) - 1, kv.slot(lane, int64_t(i)), false});
    model->forward(batch, kv, nullptr);
    std::vector<float> state(size_t(model->recurrent_state_bytes()) / sizeof(float));
    model->read_recurrent_state(kv, lane, int64_t(ids.size()), reinterpret_cast<uint8_t*>(state.data()));
    states.push_back(state);
  }
  ASSERT_EQ(gpu->recurrent_state_format(), cpu->recurrent_state_format());
  const double error = relative_error(states[1], states[0]);
  std::printf("%s: recurrent state relative error %.3e\n", name.c_str(), error);
  EXPECT_LT(error, kMaxRelativeError);
}
TEST_P(CudaHybridParity, RecurrentStateMatchesTheCpuModel) { expect_state_matches_the_cpu_model(GetParam()); }

void expect_taps_match_the_cpu_model(const std::string& name) {
  auto cpu = load_hybrid(name, "cpu");
  auto gpu = cuda_hybrid(name);
  const int last = int(cpu->config().n_layers) - 1;
  cpu->set_tap_layers({last, 0});
  gpu->set_tap_layers({last, 0});
  std::mt19937 rng(17);
  auto ids = test::random_ids(rng, 40, cpu->config().vocab_size);
  test::prefill_logits(*cpu, ids);
  test::prefill_logits(*gpu, ids);
  ASSERT_EQ(gpu->taps().size(), cpu->taps().size());
  EXPECT_LT(relative_error(gpu->taps(), cpu->taps()), kMaxRelativeError);
}
TEST_P(CudaHybridParity, TapsMatchTheCpuModel) { expect_taps_match_the_cpu_model(GetParam()); }

INSTANTIATE_TEST_SUITE_P(TinyHybrids, CudaHybridParity,
                         ::testing::Values("qwen3.5-tiny-a", "qwen3.5-tiny-b", "qwen3.5-tiny-c", "qwen3.5-tiny-chat"));

// The widened heads against the CPU: logits of a random prompt, the state and the taps.
TEST(CudaHybridParityWidened, LogitsStateAndTapsMatchTheCpuModel) {
  auto cpu = load_hybrid(kWidened, "cpu");
  auto gpu = cuda_hybrid(kWidened);
  std::mt19937 rng(23);
  const auto ids = test::random_ids(rng, 70, cpu->config().vocab_size);
  const std::vector<float> cpu_logits = test::prefill_logits(*cpu, ids);
  const std::vector<float> gpu_logits = test::prefill_logits(*gpu, ids);
  const double error = relative_error(gpu_logits, cpu_logits);
  std::printf("%s: relative error %.3e\n", kWidened.c_str(), error);
  EXPECT_LT(error, kMaxRelativeError);
  expect_state_matches_the_cpu_model(kWidened);
  expect_taps_match_the_cpu_model(kWidened);
}

class CudaHybridInvariance : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaHybridInvariance, ChunkingAndNeighboursDoNotChangeLogits) {
  std::mt19937 rng(42);
  auto model = cuda_hybrid(GetParam());
  const int64_t n = 140;  // crosses two attention chunks (64 keys)
  const auto ids = test::random_ids(rng, n, model->config().vocab_size);
  const std::vector<float> reference = test::hybrid_chunked_logits(*model, ids, {n}, 0, rng);
  for (int trial = 0; trial < 10; ++trial) {
    const std::vector<float> got = test::hybrid_chunked_logits(*model, ids, test::random_chunks(rng, n), trial * 7, rng);
    EXPECT_TRUE(bitwise_equal(got, reference)) << "trial " << trial;
  }
}

// One decode row alone and among M - 1 neighbour rows, for M = 1 ... 64 and 257 (past the graphs' 256).
TEST_P(CudaHybridInvariance, DecodeRowIsTheSameAmongAnyNumberOfRows) {
  std::mt19937 rng(7);
  auto model = cuda_hybrid(GetParam());
  const auto ids = test::random_ids(rng, 12, model->config().vocab_size);
  const std::vector<float> alone = test::hybrid_chunked_logits(*model, ids, {11, 1}, 0, rng);
  std::vector<int> sizes;
  for (int m = 1; m <= 64; ++m) sizes.push_back(m);
  sizes.push_back(257);
  for (int m : sizes) EXPECT_TRUE(bitwise_equal(test::hybrid_chunked_logits(*model, ids, {11, 1}, m - 1, rng), alone)) << m;
}

// Launch choices change no bit: graphs and overlapped launches off against on, same rows.
TEST_P(CudaHybridInvariance, GraphsAndOverlappedLaunchesChangeNothing) {
  ModelLoadOptions plain = test::test_load_options("cuda");
  plain.use_cuda_graphs = false;
  plain.use_overlapped_launches = false;
  auto eager = load_model(model_dir(GetParam()), plain);
  auto model = cuda_hybrid(GetParam());
  std::mt19937 rng(5);
  const auto ids = test::random_ids(rng, 90, model->config().vocab_size);
  for (int trial = 0; trial < 3; ++trial) {
    std::mt19937 a(100 + trial), b(100 + trial);
    const std::vector<int64_t> chunks = test::random_chunks(a, int64_t(ids.size()));
    test::random_chunks(b, int64_t(ids.size()));
    EXPECT_TRUE(bitwise_equal(test::hybrid_chunked_logits(*model, ids, chunks, 5, a),
                              test::hybrid_chunked_logits(*eager, ids, chunks, 5, b)))
        << "trial " << trial;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyHybrids, CudaHybridInvariance,
                         ::testing::Values("qwen3.5-tiny-a", "qwen3.5-tiny-b", "qwen3.5-tiny-c", kWidened));

TEST(CudaHybridInvariance, PicksEqualTheSamplerOnTheLogits) {
  std::mt19937 rng(9);
  auto model = cuda_hybrid("qwen3.5-tiny-c");
  test::expect_picks_match_logits(*model, test::random_ids(rng, 37, model->config().vocab_size));
}

class CudaHybridSpeculation : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaHybridSpeculation, AcceptedSiblingPathEqualsPlainDecoding) {
  test::expect_sibling_paths_equal_plain(*cuda_hybrid(GetParam()));
}
TEST_P(CudaHybridSpeculation, RejectedEverywhereLeavesNoTrace) {
  test::expect_rejection_leaves_no_trace(*cuda_hybrid(GetParam()));
}
TEST_P(CudaHybridSpeculation, CopyChainOf256RowsEqualsPlainDecoding) {
  test::expect_copy_chain_equals_plain(*cuda_hybrid(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(TinyHybrids, CudaHybridSpeculation,
                         ::testing::Values("qwen3.5-tiny-a", "qwen3.5-tiny-b", kWidened));

// ---- The engine's equalities ----

// A shape the Gated DeltaNet kernel does not run is refused when the model is made, naming the
// config field (it failed at the kernel's first launch with the kernel's own words).
TEST(CudaHybridLoader, AShapeTheKernelDoesNotRunIsRefusedNamingTheField) {
  ModelConfig config = ModelConfig::load(model_dir("qwen3.5-tiny-a"));
  EXPECT_NO_THROW(cuda::delta_net_shape(config));
  ModelConfig wide_kernel = config;
  wide_kernel.hybrid.conv_kernel = 9;
  test::expect_error_naming([&] { cuda::delta_net_shape(wide_kernel); }, {"linear_conv_kernel_dim", "9", "--device cpu"});
  ModelConfig wide_values = config;
  wide_values.hybrid.linear_value_head_dim = 256;
  test::expect_error_naming([&] { cuda::delta_net_shape(wide_values); }, {"linear_value_head_dim", "256"});
}

TEST(CudaHybridEngine, DraftedEqualsUndraftedGreedy) {
  test::expect_drafted_equals_undrafted(cuda_hybrid("qwen3.5-tiny-chat"), false);
}
TEST(CudaHybridEngine, DraftedEqualsUndraftedSampled) {
  test::expect_drafted_equals_undrafted(cuda_hybrid("qwen3.5-tiny-chat"), true);
}
TEST(CudaHybridEngine, ConcurrentEqualsSolo) {
  test::expect_concurrent_equals_solo(cuda_hybrid("qwen3.5-tiny-b"), false);
  test::expect_concurrent_equals_solo(cuda_hybrid("qwen3.5-tiny-b"), true);
}
TEST(CudaHybridEngine, ReplayAtFullAcceptanceEqualsPlainDecoding) {
  test::expect_replay_equals_plain(cuda_hybrid("qwen3.5-tiny-c"), 5);
}
TEST(CudaHybridEngine, BlockDrafterKeepsTheEqualities) {
  test::TempDir dir;
  auto model = cuda_hybrid("qwen3.5-tiny-c");
  test::write_random_drafter(dir.path, model->config(), 5);
  test::expect_drafter_keeps_equalities(model, dir.path, false);
}
TEST(CudaHybridEngine, ResumedEqualsFresh) {
  test::expect_resumed_equals_fresh(cuda_hybrid("qwen3.5-tiny-b"), false, false, 11, 1);
  test::expect_resumed_equals_fresh(cuda_hybrid("qwen3.5-tiny-b"), true, true, 12, 1);
  test::expect_resumed_equals_fresh(cuda_hybrid("qwen3.5-tiny-b"), false, true, 13, 3);
}
TEST(CudaHybridEngine, AKeptStateIsTheReadStateAndOutlivesLaterPasses) {
  test::expect_kept_state_is_the_read_state(*cuda_hybrid("qwen3.5-tiny-b"));
}
TEST(CudaHybridEngine, MultiTurnEqualsCold) { test::expect_multi_turn_equals_cold(cuda_hybrid("qwen3.5-tiny-b")); }
TEST(CudaHybridEngine, ResumedLaneDraftsAsAFreshOne) {
  test::TempDir dir;
  auto model = cuda_hybrid("qwen3.5-tiny-c");
  test::write_random_drafter(dir.path, model->config(), 6);
  test::expect_resumed_lane_drafts_as_a_fresh_one(model, dir.path);
}
TEST(CudaHybridEngine, RestoredSlotContinuesExactly) {
  test::expect_restored_slot_continues_exactly(cuda_hybrid("qwen3.5-tiny-b"), "/tmp/cuda-hybrid-restored-slot.tfslot");
}

}  // namespace
}  // namespace tf
