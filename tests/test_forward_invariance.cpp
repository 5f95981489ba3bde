// Batch invariance of the whole forward, bitwise: a row's logits do not depend on how the prompt
// was chunked, on which other lanes' rows share the forward, or on the thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/kv_cache.h"
#include "loader/checkpoint.h"
#include "models/model.h"
#include "models/qwen3.h"
#include "support/fixtures.h"

namespace tf {
namespace {

std::shared_ptr<Model> load_with_threads(const std::string& name, int n_threads) {
  ModelLoadOptions options;
  options.n_threads = n_threads;
  return load_model(test::fixture_model(name), options);
}

std::vector<int32_t> random_ids(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng() % uint32_t(vocab));
  return ids;
}

// Logits of every position of `ids`, prefilled in the given chunk sizes; each chunk's forward also
// carries `noise` rows of unrelated lanes at random positions.
std::vector<float> chunked_logits(Model& model, const std::vector<int32_t>& ids,
                                  const std::vector<int64_t>& chunks, int noise, std::mt19937& rng) {
  const ModelConfig& c = model.config();
  const int64_t n_vocab = c.vocab_size;
  KvCache kv(c.n_layers, c.kv_dim(), 128);
  int32_t lane = kv.lane_open();
  kv.lane_reserve(lane, int64_t(ids.size()));
  std::vector<int32_t> other_lanes;
  for (int i = 0; i < std::min(noise, 8); ++i) {
    other_lanes.push_back(kv.lane_open());
    kv.lane_reserve(other_lanes.back(), 80);
  }
  std::vector<float> out;
  int64_t done = 0;
  for (int64_t chunk : chunks) {
    Batch batch;
    // Unrelated rows before and after ours, so our rows sit at varying offsets.
    auto add_noise = [&](int n) {
      for (int i = 0; i < n; ++i) {
        int32_t l = other_lanes[rng() % other_lanes.size()];
        int32_t pos = int32_t(rng() % 40);
        batch.rows.push_back({int32_t(rng() % uint32_t(n_vocab)), pos, l, -1, kv.slot(l, pos),
                              bool(rng() % 2)});
      }
    };
    add_noise(noise ? int(rng() % uint32_t(noise + 1)) : 0);
    size_t ours = batch.rows.size();
    for (int64_t i = 0; i < chunk; ++i) {
      int32_t pos = int32_t(done + i);
      batch.rows.push_back({ids[size_t(pos)], pos, lane, i == 0 ? -1 : int32_t(ours + size_t(i) - 1),
                            kv.slot(lane, pos), true});
    }
    add_noise(noise ? int(rng() % uint32_t(noise + 1)) : 0);
    std::vector<float> logits(size_t(batch.n_logit_rows() * n_vocab));
    model.forward(batch, kv, logits.data());
    int64_t logit_row = 0;
    for (size_t r = 0; r < batch.rows.size(); ++r) {
      if (!batch.rows[r].wants_logits) continue;
      if (r >= ours && r < ours + size_t(chunk))
        out.insert(out.end(), logits.begin() + logit_row * n_vocab, logits.begin() + (logit_row + 1) * n_vocab);
      ++logit_row;
    }
    done += chunk;
  }
  return out;
}

std::vector<int64_t> random_chunks(std::mt19937& rng, int64_t n) {
  std::vector<int64_t> chunks;
  while (n > 0) {
    int64_t c = 1 + int64_t(rng() % uint32_t(std::min<int64_t>(n, 20)));
    chunks.push_back(c);
    n -= c;
  }
  return chunks;
}

class ForwardInvarianceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardInvarianceTest, ChunkingNeighboursAndThreadsDoNotChangeLogits) {
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
}

TEST_P(ForwardInvarianceTest, DecodeRowIsTheSameAmongAnyNumberOfRows) {
  std::mt19937 rng(7);
  auto model = load_with_threads(GetParam(), 3);
  const int64_t vocab = model->config().vocab_size;
  auto ids = random_ids(rng, 12, vocab);
  std::vector<float> alone = chunked_logits(*model, ids, {11, 1}, 0, rng);
  for (int m : {2, 3, 7, 16, 33, 64, 257}) {
    std::vector<float> crowded = chunked_logits(*model, ids, {11, 1}, m, rng);
    EXPECT_EQ(0, std::memcmp(crowded.data(), alone.data(), alone.size() * sizeof(float))) << m;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyQwen3, ForwardInvarianceTest,
                         ::testing::Values("qwen3-tiny-a", "qwen3-tiny-b", "qwen3-tiny-c"));

}  // namespace
}  // namespace tf
