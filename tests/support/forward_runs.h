// Forward passes for tests, on any backend: prefill logits, chunked prefill among unrelated rows,
// greedy generation through the engine.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <future>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "models/model.h"
#include "runtime/kv_cache.h"

namespace tf::test {

inline std::vector<int32_t> random_ids(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng() % uint32_t(vocab));
  return ids;
}

// Logits of every position of `ids`, prefilled in one forward.
// Runs `batch` and appends the logits of its rows [first, first + n) (every one wants logits) to out.
inline void append_rows_logits(Model& model, const Batch& batch, KvCache& kv, size_t first, int64_t n,
                               int64_t n_vocab, std::vector<float>& out) {
  std::vector<float> logits(size_t(batch.n_logit_rows() * n_vocab));
  model.forward(batch, kv, logits.data());
  int64_t logit_row = 0;
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    if (!batch.rows[r].wants_logits) continue;
    if (r >= first && r < first + size_t(n))
      out.insert(out.end(), logits.begin() + logit_row * n_vocab, logits.begin() + (logit_row + 1) * n_vocab);
    ++logit_row;
  }
}

inline std::vector<float> prefill_logits(Model& model, const std::vector<int32_t>& ids) {
  const ModelConfig& c = model.config();
  KvCache kv = make_kv_cache(model, kv_blocks_for(int64_t(ids.size())));
  int32_t lane = kv.lane_open();
  kv.lane_reserve(lane, int64_t(ids.size()));
  Batch batch;
  for (size_t i = 0; i < ids.size(); ++i)
    batch.rows.push_back({ids[i], int32_t(i), lane, int32_t(i) - 1, kv.slot(lane, int64_t(i)), true});
  std::vector<float> logits(ids.size() * size_t(c.vocab_size));
  model.forward(batch, kv, logits.data());
  return logits;
}

// Logits of every position of `ids`, prefilled in the given chunk sizes; each chunk's forward also
// carries `noise` rows of unrelated lanes at random positions.
inline std::vector<float> chunked_logits(Model& model, const std::vector<int32_t>& ids,
                                         const std::vector<int64_t>& chunks, int noise, std::mt19937& rng) {
  const int64_t n_vocab = model.config().vocab_size;
  KvCache kv = make_kv_cache(model, 128);
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
        batch.rows.push_back({int32_t(rng() % uint32_t(n_vocab)), pos, l, -1, kv.slot(l, pos), bool(rng() % 2)});
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
    append_rows_logits(model, batch, kv, ours, chunk, n_vocab, out);
    done += chunk;
  }
  return out;
}

inline std::vector<int64_t> random_chunks(std::mt19937& rng, int64_t n) {
  std::vector<int64_t> chunks;
  while (n > 0) {
    int64_t c = 1 + int64_t(rng() % uint32_t(std::min<int64_t>(n, 20)));
    chunks.push_back(c);
    n -= c;
  }
  return chunks;
}

// Logits of `chain` after `prompt` (one lane). As plain rows (n_siblings < 0): one decode row per
// forward, each position committed before the next. As a tree: one forward in which each chain row's
// parent is the row before, plus n_siblings random branches hanging off chain rows, in scratch slots.
inline std::vector<float> chain_logits(Model& model, const std::vector<int32_t>& prompt,
                                       const std::vector<int32_t>& chain, int n_siblings, std::mt19937& rng) {
  const int64_t vocab = model.config().vocab_size;
  const int32_t n_prompt = int32_t(prompt.size()), n_chain = int32_t(chain.size());
  KvCache kv = make_kv_cache(model, 64);
  int32_t lane = kv.lane_open();
  kv.lane_reserve(lane, n_prompt + n_chain);
  int32_t scratch = kv.lane_open();
  kv.lane_reserve(scratch, 256);
  Batch prefill;
  for (int32_t i = 0; i < n_prompt; ++i)
    prefill.rows.push_back({prompt[size_t(i)], i, lane, i - 1, kv.slot(lane, i), false});
  model.forward(prefill, kv, nullptr);
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<float> out;
  if (n_siblings < 0) {
    for (int32_t i = 0; i < n_chain; ++i) {
      Batch step;
      step.rows.push_back({chain[size_t(i)], n_prompt + i, lane, -1, kv.slot(lane, n_prompt + i), true});
      model.forward(step, kv, logits.data());
      out.insert(out.end(), logits.begin(), logits.end());
    }
    return out;
  }
  Batch tree;
  for (int32_t i = 0; i < n_chain; ++i)
    tree.rows.push_back({chain[size_t(i)], n_prompt + i, lane, i - 1, kv.slot(lane, n_prompt + i), true});
  int32_t next_scratch = 0;
  for (int s = 0; s < n_siblings; ++s) {
    int32_t parent = int32_t(rng() % uint32_t(n_chain));
    for (int depth = 1 + int(rng() % 3); depth > 0; --depth) {
      int32_t pos = tree.rows[size_t(parent)].pos + 1;
      tree.rows.push_back({int32_t(rng() % vocab), pos, lane, parent, kv.slot(scratch, next_scratch++), true});
      parent = int32_t(tree.rows.size() - 1);
    }
  }
  out.resize(tree.rows.size() * size_t(vocab));
  model.forward(tree, kv, out.data());
  out.resize(size_t(n_chain * vocab));  // the chain's rows come first
  return out;
}

// forward_and_pick against forward on the same rows: a prefill of `ids` where every row asks for
// logits, with greedy, sampled and penalized rows mixed (cycling; penalized rows see a reply so far
// and a draft path of their own). Each picked token must be the one Sampler::sample takes from the
// row's logits, and the rows that want their logits must get them back bitwise, packed in row order.
inline void expect_picks_match_logits(Model& model, const std::vector<int32_t>& ids) {
  const int64_t n_vocab = model.config().vocab_size, n = int64_t(ids.size());
  const std::vector<float> logits = prefill_logits(model, ids);
  SamplingParams greedy, sampled, sharp, penalized_greedy, penalized_sampled;
  sampled.temperature = 0.9f;
  sampled.top_p = 0.95f;
  sampled.seed = 17;
  sharp.temperature = 0.5f;
  sharp.top_k = 5;
  sharp.min_p = 0.05f;
  sharp.seed = 3;
  penalized_greedy.presence_penalty = 1.5f;
  penalized_greedy.frequency_penalty = 0.75f;
  penalized_sampled = sampled;
  penalized_sampled.presence_penalty = -0.5f;
  penalized_sampled.frequency_penalty = 2.0f;
  const SamplingParams* kinds[] = {&greedy, &sampled, &penalized_greedy, &sharp, &penalized_sampled};
  // The reply so far and each row's draft path: the row's own best tokens, so a penalty moves them.
  TokenCounts counts;
  std::vector<int32_t> paths;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t best = argmax(logits.data() + i * n_vocab, n_vocab);
    counts[best] += int32_t(1 + i % 3);
    paths.push_back(best);
    paths.push_back(ids[size_t(i)]);
  }
  std::vector<LogitRowPick> picks;
  for (int64_t i = 0; i < n; ++i)
    picks.push_back({kinds[i % 5], i + 1, PenaltyHistory{&counts, paths.data() + 2 * i, 1 + i % 2}, i % 3 == 0});

  KvCache kv = make_kv_cache(model, kv_blocks_for(n));
  const int32_t lane = kv.lane_open();
  kv.lane_reserve(lane, n);
  Batch batch;
  for (int64_t i = 0; i < n; ++i) batch.rows.push_back({ids[size_t(i)], int32_t(i), lane, int32_t(i) - 1, kv.slot(lane, i), true});
  std::vector<int32_t> tokens(size_t(n), -2);
  std::vector<float> copied(size_t((n + 2) / 3 * n_vocab), NAN);
  model.forward_and_pick(batch, kv, picks, tokens.data(), copied.data());

  Sampler sampler;
  int64_t n_copied = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * n_vocab;
    const LogitRowPick& pick = picks[size_t(i)];
    EXPECT_EQ(tokens[size_t(i)], sampler.sample(row, n_vocab, *pick.sampling, pick.position, pick.penalties))
        << "row " << i;
    if (pick.wants_logits) {
      EXPECT_EQ(std::memcmp(copied.data() + n_copied++ * n_vocab, row, size_t(n_vocab) * sizeof(float)), 0)
          << "row " << i << " logits";
    }
  }
}

// n greedy tokens after `prompt`, through a one-lane engine.
inline std::vector<int32_t> greedy_generate(std::shared_ptr<Model> model, const std::vector<int32_t>& prompt,
                                            int64_t n) {
  EngineOptions options;
  options.n_parallel = 1;
  options.n_ctx = int64_t(prompt.size()) + n;
  Engine engine(options, model, nullptr);
  GenerationRequest request;
  request.prompt = prompt;
  request.max_tokens = n;
  request.ignore_eos = true;
  std::vector<int32_t> out;
  std::promise<void> done;
  auto result = engine.submit(request, [&](const GenerationUpdate& u) {
    out.insert(out.end(), u.tokens.begin(), u.tokens.end());
    if (u.is_final) done.set_value();
    return true;
  });
  EXPECT_EQ(result.status, SubmitStatus::accepted) << result.message;
  done.get_future().wait();
  return out;
}

}  // namespace tf::test
