// Sampler: Philox known answers, greedy ties, each logit processor on small hand-made
// distributions, determinism, and agreement with a plain full-sort reference at vocab scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "sampling/philox.h"
#include "sampling/sampler.h"
#include "sampling/sampling_math.h"

namespace tf {
namespace {

std::vector<float> logits_from_probabilities(const std::vector<float>& probabilities) {
  std::vector<float> logits;
  for (float p : probabilities) logits.push_back(std::log(p));
  return logits;
}

// Tokens drawn at positions 0 .. n_draws-1, counted per id.
std::vector<int> draw_counts(const std::vector<float>& logits, const SamplingParams& params,
                             int n_draws, const TokenCounts& counts = {}) {
  Sampler sampler;
  std::vector<int> histogram(logits.size(), 0);
  for (int position = 0; position < n_draws; ++position) {
    const int32_t token =
        sampler.sample(logits.data(), static_cast<int64_t>(logits.size()), params, position, counts);
    EXPECT_GE(token, 0);
    EXPECT_LT(token, static_cast<int32_t>(logits.size()));
    ++histogram[static_cast<size_t>(token)];
  }
  return histogram;
}

std::set<int32_t> drawn_tokens(const std::vector<float>& logits, const SamplingParams& params,
                               int n_draws = 3000) {
  const std::vector<int> histogram = draw_counts(logits, params, n_draws);
  std::set<int32_t> tokens;
  for (size_t id = 0; id < histogram.size(); ++id) {
    if (histogram[id] > 0) tokens.insert(static_cast<int32_t>(id));
  }
  return tokens;
}

SamplingParams sampled(float temperature = 1.0f, uint64_t seed = 1234) {
  SamplingParams params;
  params.temperature = temperature;
  params.seed = seed;
  return params;
}

TEST(Philox, KnownAnswers) {
  // Random123 kat_vectors for philox4x32 with 10 rounds.
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                          {0xffffffffu, 0xffffffffu}),
            (PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                          {0xa4093822u, 0x299f31d0u}),
            (PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, UniformUsesSeedAsKeyAndPositionAsCounter) {
  EXPECT_EQ(philox_uniform(0, 0), static_cast<float>(0x6627e8d5u >> 8) * 0x1p-24f);
  const uint64_t seed = 0x299f31d0a4093822ull;
  const uint64_t position = 0x0000000712345678ull;
  const uint32_t first = philox4x32_10({0x12345678u, 0x7u, 0, 0}, {0xa4093822u, 0x299f31d0u})[0];
  EXPECT_EQ(philox_uniform(seed, position), static_cast<float>(first >> 8) * 0x1p-24f);

  std::set<float> values;
  for (uint64_t p = 0; p < 1000; ++p) {
    const float u = philox_uniform(42, p);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
    values.insert(u);
  }
  EXPECT_GT(values.size(), 990u);
  EXPECT_NE(philox_uniform(1, 5), philox_uniform(2, 5));
}

TEST(Sampler, ArgmaxTiesGoToLowestId) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax(logits.data(), 4), 1);
  const std::vector<float> with_nan = {NAN, -1.0f, -1.0f};
  EXPECT_EQ(argmax(with_nan.data(), 3), 1);
}

TEST(Sampler, GreedyIgnoresSamplingKnobs) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  Sampler sampler;
  for (float temperature : {0.0f, -1.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = 1;
    params.top_p = 0.1f;
    params.seed = 99;
    for (int position = 0; position < 20; ++position) {
      EXPECT_EQ(sampler.sample(logits.data(), 4, params, position), 1);
    }
  }
}

TEST(Sampler, GreedyAppliesPenalties) {
  const std::vector<float> logits = {5.0f, 0.5f, 0.1f};
  Sampler sampler;
  SamplingParams params;
  params.frequency_penalty = 2.0f;
  EXPECT_EQ(sampler.sample(logits.data(), 3, params, 0, {{0, 2}}), 0);  // 5 - 4 = 1 > 0.5
  params.presence_penalty = 0.6f;
  EXPECT_EQ(sampler.sample(logits.data(), 3, params, 0, {{0, 2}}), 1);  // 5 - 0.6 - 4 = 0.4
  // Counts of zero and ids outside the vocabulary change nothing.
  EXPECT_EQ(sampler.sample(logits.data(), 3, params, 0, {{0, 0}, {7, 3}, {-1, 2}}), 0);
}

TEST(Sampler, PenaltiesMatchPrePenalizedLogits) {
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 0.5f};
  const TokenCounts counts = {{0, 2}, {1, 1}};
  SamplingParams params = sampled();
  params.presence_penalty = 0.25f;
  params.frequency_penalty = 0.5f;
  std::vector<float> penalized = logits;
  penalized[0] -= 0.25f + 0.5f * 2.0f;
  penalized[1] -= 0.25f + 0.5f * 1.0f;
  SamplingParams plain = params;
  plain.presence_penalty = 0.0f;
  plain.frequency_penalty = 0.0f;
  Sampler sampler;
  for (int position = 0; position < 500; ++position) {
    EXPECT_EQ(sampler.sample(logits.data(), 4, params, position, counts),
              sampler.sample(penalized.data(), 4, plain, position));
  }
  // A large presence penalty removes the token entirely.
  params.presence_penalty = 100.0f;
  EXPECT_EQ(draw_counts(logits, params, 2000, counts)[0], 0);
}

TEST(Sampler, TemperatureDividesLogits) {
  const std::vector<float> logits = {2.0f, 0.0f, -1.0f};
  const std::vector<float> halved = {1.0f, 0.0f, -0.5f};
  Sampler sampler;
  for (int position = 0; position < 500; ++position) {
    EXPECT_EQ(sampler.sample(logits.data(), 3, sampled(2.0f), position),
              sampler.sample(halved.data(), 3, sampled(1.0f), position));
  }
  // Two tokens: p0 = 1 / (1 + exp(-2 / T)).
  const std::vector<float> pair = {2.0f, 0.0f};
  const int n_draws = 20000;
  for (float temperature : {1.0f, 4.0f, 0.25f}) {
    const double expected = 1.0 / (1.0 + std::exp(-2.0 / temperature));
    const double observed = draw_counts(pair, sampled(temperature), n_draws)[0] / double(n_draws);
    EXPECT_NEAR(observed, expected, 0.02) << "temperature " << temperature;
  }
}

TEST(Sampler, TopKKeepsLargestWithTiesByLowerId) {
  const std::vector<float> flat(5, 0.0f);
  SamplingParams params = sampled();
  params.top_k = 2;
  EXPECT_EQ(drawn_tokens(flat, params), (std::set<int32_t>{0, 1}));

  const std::vector<float> logits = {3.0f, 5.0f, 5.0f, 4.0f};
  params.top_k = 1;
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{1}));
  params.top_k = 3;
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{1, 2, 3}));
  params.top_k = 10;  // larger than the vocabulary: off
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  const std::vector<float> logits = logits_from_probabilities({0.3f, 0.5f, 0.05f, 0.15f});
  SamplingParams params = sampled();
  params.top_p = 0.4f;
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{1}));
  params.top_p = 0.7f;
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{0, 1}));
  params.top_p = 0.9f;
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{0, 1, 3}));
  params.top_p = 1.0f;
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{0, 1, 2, 3}));
  params.top_p = 0.0f;  // always keeps one
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{1}));

  // Ties in probability rank by id: the lower id is kept first.
  const std::vector<float> tied = {0.0f, 1.0f, 1.0f, 0.0f};
  params.top_p = 0.3f;
  EXPECT_EQ(drawn_tokens(tied, params), (std::set<int32_t>{1}));
}

TEST(Sampler, TopPAppliesAfterTopKRenormalizes) {
  // After top_k = 3 the kept probabilities are 0.5/0.95 and 0.3/0.95, already past 0.83;
  // without top_k, 0.5 + 0.3 falls short and a third token is needed.
  const std::vector<float> logits = logits_from_probabilities({0.5f, 0.3f, 0.15f, 0.05f});
  SamplingParams params = sampled();
  params.top_p = 0.83f;
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{0, 1, 2}));
  params.top_k = 3;
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{0, 1}));
}

TEST(Sampler, MinPDropsTokensBelowFractionOfBest) {
  const std::vector<float> logits = logits_from_probabilities({0.5f, 0.3f, 0.15f, 0.05f});
  SamplingParams params = sampled();
  params.min_p = 0.2f;  // threshold 0.1
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{0, 1, 2}));
  params.min_p = 0.5f;  // threshold 0.25
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{0, 1}));
  params.min_p = 0.09f;  // threshold 0.045
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{0, 1, 2, 3}));
  params.min_p = 1.0f;
  EXPECT_EQ(drawn_tokens(logits, params), (std::set<int32_t>{0}));
}

TEST(Sampler, FrequenciesMatchProbabilities) {
  const std::vector<float> probabilities = {0.4f, 0.25f, 0.15f, 0.1f, 0.06f, 0.04f};
  const int n_draws = 20000;
  const std::vector<int> histogram =
      draw_counts(logits_from_probabilities(probabilities), sampled(1.0f, 7), n_draws);
  double chi_square = 0.0;
  for (size_t id = 0; id < probabilities.size(); ++id) {
    const double expected = probabilities[id] * n_draws;
    chi_square += (histogram[id] - expected) * (histogram[id] - expected) / expected;
  }
  // 5 degrees of freedom: 20.5 is the 0.1% tail; a seeded test never flakes, the bound is loose.
  EXPECT_LT(chi_square, 30.0);
}

TEST(Sampler, DeterministicAndPositionDependent) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(5000);
  for (float& v : logits) v = normal(rng);
  SamplingParams params = sampled(1.0f, 77);
  params.top_k = 400;
  params.top_p = 0.95f;
  params.min_p = 0.01f;
  const TokenCounts counts = {{5, 1}, {17, 3}};
  params.frequency_penalty = 0.3f;

  Sampler first;
  Sampler second;
  std::vector<int32_t> stream;
  for (int position = 0; position < 200; ++position) {
    const int32_t token = first.sample(logits.data(), 5000, params, position, counts);
    // Scratch reuse must not leak between calls: a differently used sampler agrees.
    SamplingParams other = sampled(0.7f, 5);
    second.sample(logits.data(), 5000, other, position);
    EXPECT_EQ(second.sample(logits.data(), 5000, params, position, counts), token);
    stream.push_back(token);
  }
  EXPECT_GT(std::set<int32_t>(stream.begin(), stream.end()).size(), 20u);

  params.seed = 78;
  int n_same = 0;
  for (int position = 0; position < 200; ++position) {
    n_same += first.sample(logits.data(), 5000, params, position, counts) == stream[position];
  }
  EXPECT_LT(n_same, 100);
}

// ceil(f * m) in 128-bit arithmetic, for 0 <= f < 2^40.
uint64_t ceil_product(float f, uint64_t m) {
  int exponent = 0;
  const float fraction = std::frexp(f, &exponent);
  const auto mantissa = static_cast<uint64_t>(std::ldexp(fraction, 24));  // f = mantissa * 2^(exponent - 24)
  const unsigned __int128 product = (unsigned __int128)mantissa * m;
  const int shift = 24 - exponent;
  unsigned __int128 result = product;
  if (shift > 0) {
    if (shift >= 128) return product != 0;
    result = (product >> shift) + ((product & (((unsigned __int128)1 << shift) - 1)) != 0);
  } else {
    result = product << -shift;
  }
  return result > ~uint64_t{0} ? ~uint64_t{0} : uint64_t(result);
}

// The plain version of the documented pipeline: full sorts, the same integer masses.
// Everything up to the draw is independent of the position, so it is prepared once.
struct ReferenceDistribution {
  std::vector<uint32_t> masses;  // [n_vocab], meaningful for candidates only
  std::vector<int32_t> ranked;   // kept tokens, mass descending, id ascending
  uint64_t total = 0;            // their mass
};

ReferenceDistribution reference_distribution(const std::vector<float>& logits,
                                             const SamplingParams& params) {
  const std::vector<float>& values = logits;
  std::vector<int32_t> candidates(values.size());
  std::iota(candidates.begin(), candidates.end(), 0);
  std::sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
    return values[a] != values[b] ? values[a] > values[b] : a < b;
  });
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < values.size()) {
    candidates.resize(static_cast<size_t>(params.top_k));
  }
  const float best_value = values[size_t(candidates[0])];
  std::vector<uint32_t> masses(values.size(), 0);
  uint64_t total = 0;
  for (int32_t id : candidates) {
    masses[id] = sampling_mass(sampling_gap(values[id], best_value, 1.0f / params.temperature), kSamplingExp2Table);
    total += masses[id];
  }
  std::sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
    return masses[a] != masses[b] ? masses[a] > masses[b] : a < b;
  });
  while (!candidates.empty() && masses[candidates.back()] == 0) candidates.pop_back();
  size_t n_kept = candidates.size();
  uint64_t cumulative = 0;
  for (size_t i = 0; i < candidates.size() && params.top_p < 1.0f; ++i) {
    cumulative += masses[candidates[i]];
    if (cumulative >= std::max<uint64_t>(1, ceil_product(std::max(params.top_p, 0.0f), total))) {
      n_kept = i + 1;
      break;
    }
  }
  if (params.min_p > 0.0f) {
    size_t i = 1;
    while (i < n_kept && masses[candidates[i]] >= std::ceil(double(params.min_p) * kSamplingMassOne)) ++i;
    n_kept = i;
  }
  candidates.resize(n_kept);
  total = 0;
  for (int32_t id : candidates) total += masses[id];
  return {std::move(masses), std::move(candidates), total};
}

int32_t reference_draw(const ReferenceDistribution& distribution, const SamplingParams& params,
                       int64_t position) {
  const auto u = static_cast<uint32_t>(philox_uniform(params.seed, static_cast<uint64_t>(position)) * 0x1p24f);
  const auto target = static_cast<uint64_t>(((unsigned __int128)distribution.total * u) >> 24);
  uint64_t cumulative = 0;
  for (int32_t id : distribution.ranked) {
    cumulative += distribution.masses[id];
    if (cumulative > target) return id;
  }
  return -1;
}

// The fixed-point masses against exp in double precision, and the exact integer helpers.
TEST(Sampler, MassesFollowExp) {
  double worst = 0.0;
  for (float x = 0.0f; x > -20.0f; x -= 0.000731f) {
    const double exact = std::ldexp(std::exp(double(x)), 31);
    const double mass = sampling_mass(x, kSamplingExp2Table);
    worst = std::max(worst, (std::abs(mass - exact) - 0.5) / exact);  // beyond the final rounding
  }
  EXPECT_LT(worst, 2e-7);  // x is taken in steps of 2^-24
  EXPECT_EQ(sampling_mass(0.0f, kSamplingExp2Table), kSamplingMassOne);
  EXPECT_EQ(sampling_mass(-INFINITY, kSamplingExp2Table), 0u);
  EXPECT_EQ(sampling_mass(NAN, kSamplingExp2Table), 0u);
  EXPECT_EQ(sampling_mass(-30.0f, kSamplingExp2Table), 0u);
  EXPECT_EQ(sampling_scaled_ceil(0.5f, 7), 4u);
  EXPECT_EQ(sampling_scaled_ceil(0.25f, 8), 2u);
  EXPECT_EQ(sampling_scaled_ceil(0.0f, 8), 0u);
  EXPECT_EQ(sampling_scaled_ceil(3.0f, 5), 15u);
  EXPECT_EQ(sampling_scaled_ceil(INFINITY, 5), ~uint64_t{0});
  std::mt19937_64 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t m = rng() >> (rng() % 64);
    const float f = std::ldexp(float(rng() >> 40), -int(rng() % 60));
    EXPECT_EQ(sampling_scaled_ceil(f, m), ceil_product(f, m)) << f << " " << m;
    const uint64_t w = m >> 3;
    const auto u = uint32_t(rng() >> 40);
    EXPECT_EQ(sampling_target(w, u), uint64_t(((unsigned __int128)w * u) >> 24));
  }
}

TEST(Sampler, MatchesFullSortReferenceAtVocabScale) {
  const int64_t n_vocab = 151936;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (float& v : logits) v = normal(rng);
  logits[1234] = logits[4321] = 14.0f;  // a tie at the top, broken by id

  struct Case {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
  };
  const std::vector<Case> cases = {{1.0f, 0, 1.0f, 0.0f},  {0.8f, 50, 1.0f, 0.0f},
                                   {1.0f, 0, 0.9f, 0.0f},  {1.5f, 0, 0.999f, 0.0f},
                                   {1.0f, 0, 1.0f, 0.05f}, {0.7f, 40, 0.8f, 0.02f},
                                   {3.0f, 0, 1.0f, 0.0f}};
  Sampler sampler;
  for (const Case& c : cases) {
    SamplingParams params = sampled(c.temperature, 2024);
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.min_p = c.min_p;
    const ReferenceDistribution reference = reference_distribution(logits, params);
    for (int64_t position = 0; position < 40; ++position) {
      EXPECT_EQ(sampler.sample(logits.data(), n_vocab, params, position),
                reference_draw(reference, params, position))
          << "T=" << c.temperature << " top_k=" << c.top_k << " top_p=" << c.top_p
          << " min_p=" << c.min_p << " position " << position;
    }
  }
}

TEST(Sampler, LogprobsFromRawLogits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(1000);
  for (float& v : logits) v = normal(rng);
  double total = 0.0;
  for (int32_t id = 0; id < 1000; ++id) total += std::exp(Sampler::logprob_of(logits.data(), 1000, id));
  EXPECT_NEAR(total, 1.0, 1e-4);

  const std::vector<TokenLogprob> top = Sampler::top_logprobs(logits.data(), 1000, 5);
  ASSERT_EQ(top.size(), 5u);
  EXPECT_EQ(top[0].token, argmax(logits.data(), 1000));
  for (size_t i = 0; i < top.size(); ++i) {
    EXPECT_EQ(top[i].logprob, Sampler::logprob_of(logits.data(), 1000, top[i].token));
    if (i > 0) {
      EXPECT_GE(top[i - 1].logprob, top[i].logprob);
    }
  }
}

TEST(Sampler, TopLogprobsTiesByIdAndClamped) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  const std::vector<TokenLogprob> top = Sampler::top_logprobs(logits.data(), 4, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[1].token, 2);
  EXPECT_EQ(top[2].token, 3);
  EXPECT_EQ(top[0].logprob, top[1].logprob);
  EXPECT_EQ(Sampler::top_logprobs(logits.data(), 4, 10).size(), 4u);
  EXPECT_TRUE(Sampler::top_logprobs(logits.data(), 4, 0).empty());
  const std::vector<float> uniform(8, 0.5f);
  EXPECT_NEAR(Sampler::logprob_of(uniform.data(), 8, 3), std::log(1.0f / 8.0f), 1e-6);
}

}  // namespace
}  // namespace tf
