// Batch invariance of the whole forward, bitwise: a row's logits do not depend on how the prompt
// was chunked, on which other lanes' rows share the forward, or on the thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/backends.h"
#include "backends/cpu/kernels/simd.h"
#include "models/model.h"
#include "support/fixtures.h"
#include "support/forward_runs.h"

namespace tf {
namespace {

std::shared_ptr<Model> load_with_threads(const std::string& name, int n_threads) {
  ModelLoadOptions options;
  options.n_threads = n_threads;
  return load_model(test::fixture_model(name), options);
}

// Runs check once at every SIMD level this machine has (each level has its own bits when its
// numerics differ, see simd.h), restoring the start-up level afterwards.
template <class Check>
void at_every_simd_level(const Check& check) {
  const cpu::SimdLevel saved = cpu::simd_level();
  for (cpu::SimdLevel level : {cpu::SimdLevel::generic, cpu::SimdLevel::avx2, cpu::SimdLevel::avx512}) {
    if (!cpu::simd_level_supported(level)) continue;
    SCOPED_TRACE(std::string("SIMD level ") + cpu::simd_level_name(level));
    cpu::set_simd_level_for_testing(level);
    check();
  }
  cpu::set_simd_level_for_testing(saved);
}

using test::chunked_logits;
using test::random_chunks;
using test::random_ids;

class ForwardInvarianceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardInvarianceTest, ChunkingNeighboursAndThreadsDoNotChangeLogits) {
  at_every_simd_level([&] {
    std::mt19937 rng(42);
    auto model = load_with_threads(GetParam(), 1);
    const int64_t n = 70;  // crosses an attention chunk boundary (64 keys)
    auto ids = random_ids(rng, n, model->config().vocab_size);
    std::vector<float> reference = chunked_logits(*model, ids, {n}, 0, rng);
    for (int trial = 0; trial < 6; ++trial) {
      int threads = 1 + trial % 4;
      auto threaded = load_with_threads(GetParam(), threads);
      std::vector<float> got = chunked_logits(*threaded, ids, random_chunks(rng, n), trial * 5, rng);
      ASSERT_EQ(got.size(), reference.size());
      EXPECT_EQ(0, std::memcmp(got.data(), reference.data(), got.size() * sizeof(float)))
          << "trial " << trial << " with " << threads << " threads";
    }
  });
}

TEST_P(ForwardInvarianceTest, DecodeRowIsTheSameAmongAnyNumberOfRows) {
  at_every_simd_level([&] {
    std::mt19937 rng(7);
    auto model = load_with_threads(GetParam(), 3);
    const int64_t vocab = model->config().vocab_size;
    auto ids = random_ids(rng, 12, vocab);
    std::vector<float> alone = chunked_logits(*model, ids, {11, 1}, 0, rng);
    for (int m : {2, 3, 7, 16, 33, 64, 257}) {
      std::vector<float> crowded = chunked_logits(*model, ids, {11, 1}, m, rng);
      EXPECT_EQ(0, std::memcmp(crowded.data(), alone.data(), alone.size() * sizeof(float))) << m;
    }
  });
}

// The tokens the model chooses itself equal the sampler's on the same logits (greedy and sampled),
// and unpicked rows' logits come back unchanged.
TEST_P(ForwardInvarianceTest, PicksEqualTheSamplerOnTheLogits) {
  std::mt19937 rng(9);
  auto model = load_with_threads(GetParam(), 3);
  test::expect_picks_match_logits(*model, random_ids(rng, 37, model->config().vocab_size));
}

INSTANTIATE_TEST_SUITE_P(TinyQwen3, ForwardInvarianceTest,
                         ::testing::Values("qwen3-tiny-a", "qwen3-tiny-b", "qwen3-tiny-c"));

}  // namespace
}  // namespace tf
