// Batch invariance of the CUDA model, bitwise: a row's logits do not depend on how the prompt was
// chunked, on how many unrelated rows share the forward, or on whether its chain runs as plain
// decode rows or as tree rows beside sibling branches; and a forward replayed from a captured CUDA
// graph gives what the same forward gives launched kernel by kernel.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "models/model.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"

namespace tf {
namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaInvarianceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaInvarianceTest, ChunkingAndNeighboursDoNotChangeLogits) {
  std::mt19937 rng(42);
  auto model = test::load_fixture(GetParam(), "cuda");
  const int64_t n = 140;  // crosses two attention chunk boundaries (64 keys)
  auto ids = test::random_ids(rng, n, model->config().vocab_size);
  std::vector<float> reference = test::chunked_logits(*model, ids, {n}, 0, rng);
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<float> got = test::chunked_logits(*model, ids, test::random_chunks(rng, n), trial * 5, rng);
    EXPECT_TRUE(bitwise_equal(got, reference)) << "trial " << trial;
  }
}

TEST_P(CudaInvarianceTest, DecodeRowIsTheSameAmongAnyNumberOfRows) {
  std::mt19937 rng(7);
  auto model = test::load_fixture(GetParam(), "cuda");
  auto ids = test::random_ids(rng, 12, model->config().vocab_size);
  std::vector<float> alone = test::chunked_logits(*model, ids, {11, 1}, 0, rng);
  std::vector<int> crowds;
  for (int m = 1; m <= 64; ++m) crowds.push_back(m);
  for (int m : {130, 199, 255, 257}) crowds.push_back(m);  // the wide kernels' row ranges, 129 to past 256
  for (int m : crowds)
    EXPECT_TRUE(bitwise_equal(test::chunked_logits(*model, ids, {11, 1}, m, rng), alone)) << m << " neighbours";
}

TEST_P(CudaInvarianceTest, TreeRowsEqualThePlainChain) {
  std::mt19937 rng(5);
  auto model = test::load_fixture(GetParam(), "cuda");
  const int64_t vocab = model->config().vocab_size;
  for (int trial = 0; trial < 20; ++trial) {
    auto prompt = test::random_ids(rng, 5 + int64_t(rng() % 70), vocab);
    auto chain = test::random_ids(rng, 1 + int64_t(rng() % 8), vocab);
    std::vector<float> plain = test::chain_logits(*model, prompt, chain, -1, rng);
    std::vector<float> tree = test::chain_logits(*model, prompt, chain, int(rng() % 13), rng);
    EXPECT_TRUE(bitwise_equal(tree, plain)) << "trial " << trial;
  }
}

// The same chunks and noise rows through a model that replays captured graphs (rows <= 256) and
// one that launches every kernel (graphs off): each 1- and 3-row step replays one graph with
// new positions, keys and slots, so a graph that kept stale row data would differ here.
TEST_P(CudaInvarianceTest, GraphReplayEqualsEagerLaunches) {
  ModelLoadOptions with_graphs = test::test_load_options("cuda");
  with_graphs.use_cuda_graphs = true;
  ModelLoadOptions without_graphs = with_graphs;
  without_graphs.use_cuda_graphs = false;
  auto graphs = load_model(test::fixture_model(GetParam()), with_graphs);
  auto eager = load_model(test::fixture_model(GetParam()), without_graphs);
  std::mt19937 ids_rng(3);
  auto ids = test::random_ids(ids_rng, 300, graphs->config().vocab_size);
  std::vector<int64_t> chunks = {200, 70};  // 200 rows replay the staged linear kernels from a graph
  for (int i = 0; i < 10; ++i) chunks.push_back(1);
  for (int i = 0; i < 5; ++i) chunks.push_back(3);
  graphs->set_tap_layers({0, int(graphs->config().n_layers) - 1});
  eager->set_tap_layers({0, int(eager->config().n_layers) - 1});
  for (int noise : {0, 2}) {
    std::mt19937 rng_a(11), rng_b(11);
    EXPECT_TRUE(bitwise_equal(test::chunked_logits(*graphs, ids, chunks, noise, rng_a),
                              test::chunked_logits(*eager, ids, chunks, noise, rng_b)))
        << noise << " noise rows";
    // Taps cover every row of the last forward; noise rows may share a slot within a forward (their
    // K/V write races), so only a forward of our rows alone has taps that must agree.
    if (noise == 0) {
      EXPECT_TRUE(bitwise_equal(graphs->taps(), eager->taps()));
    }
  }
}

// The tokens the model chooses itself equal the sampler's on the same logits (greedy and sampled),
// and unpicked rows' logits come back unchanged.
TEST_P(CudaInvarianceTest, PicksEqualTheSamplerOnTheLogits) {
  std::mt19937 rng(9);
  auto model = test::load_fixture(GetParam(), "cuda");
  test::expect_picks_match_logits(*model, test::random_ids(rng, 37, model->config().vocab_size));
}

// The last one keeps MLX 4-bit weights packed on the GPU (dequantized in registers).
INSTANTIATE_TEST_SUITE_P(TinyQwen3, CudaInvarianceTest,
                         ::testing::Values("qwen3-tiny-a", "qwen3-tiny-b", "qwen3-tiny-c",
                                           "models/tensorfold-code-target-mlx4"));

}  // namespace
}  // namespace tf
