// Greedy and seeded sampling: penalties, temperature, top-k, softmax, top-p, min-p, one draw.
// Softmax weights are integer masses (sampling_math.h), so every sum is exact, and every ranking is
// a total order (value or mass descending, id ascending): a token depends only on logits,
// parameters and position, and the CUDA sampler, which shares the arithmetic, picks the same one.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "sampling/sampling_math.h"

namespace tf {
namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

// NaN ranks below everything, so a stray NaN cannot break the strict weak ordering.
float rank_key(float value) { return std::isnan(value) ? kNegativeInfinity : value; }

// Larger value first, lower id on ties: a total order, so the result of any sort or selection
// is unique whatever the algorithm does inside. The values must be free of NaN.
struct ValueDescendingIdAscending {
  const float* values;
  bool operator()(int32_t a, int32_t b) const {
    if (values[a] != values[b]) return values[a] > values[b];
    return a < b;
  }
};

// Larger mass first, lower id on ties.
struct MassDescendingIdAscending {
  const uint32_t* masses;
  bool operator()(int32_t a, int32_t b) const {
    if (masses[a] != masses[b]) return masses[a] > masses[b];
    return a < b;
  }
};

// Candidates ranked lazily, so only as much is sorted as a walk reaches. order[0, n_sorted)
// is final and every entry ranks before all later ones; entries in [n_sorted, n_head) also rank
// before all of [n_head, end), so a short walk never touches the tail.
template <class Before>
struct LazyRanking {
  std::vector<int32_t>& order;
  Before before;
  size_t n_head;
  size_t n_sorted = 0;

  // Makes order[0, want) final. Growing by 4x and sorting the rest outright once past a quarter
  // keeps a walk over everything near the cost of one full sort.
  void extend(size_t want) {
    if (want <= n_sorted) return;
    const size_t end = want <= n_head ? n_head : order.size();
    size_t target = std::max({want, size_t{64}, 4 * n_sorted});
    if (target >= end / 4) target = end;
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(n_sorted);
    const auto middle = order.begin() + static_cast<std::ptrdiff_t>(target);
    const auto last = order.begin() + static_cast<std::ptrdiff_t>(end);
    if (middle != last) std::nth_element(first, middle, last, before);
    std::sort(first, middle, before);
    n_sorted = target;
  }
};

struct LogSoftmaxNormalizer {
  float max_logit;
  float log_sum;  // log of sum(exp(logit - max_logit)), summed in id order
};

// Summed in double: a float sum near 1 drops the many terms under its last bit, and over a 152k
// vocabulary that biased every logprob upward by ~1e-4.
LogSoftmaxNormalizer log_softmax_normalizer(const float* logits, int64_t n_vocab) {
  float max_logit = kNegativeInfinity;
  for (int64_t id = 0; id < n_vocab; ++id) max_logit = std::max(max_logit, rank_key(logits[id]));
  double sum = 0.0;
  for (int64_t id = 0; id < n_vocab; ++id) sum += std::exp(double(rank_key(logits[id]) - max_logit));
  return {max_logit, float(std::log(sum))};
}

// Every allowed logit at -inf leaves no best token: the lowest allowed id, never a masked one.
int32_t allowed_or_first(int32_t token, const float* values, int64_t n_vocab, const LogitConstraint& constraint) {
  if (values[token] != kNegativeInfinity || !constraint.allowed || is_allowed(constraint.allowed, token)) return token;
  for (int64_t id = 0; id < n_vocab; ++id)
    if (is_allowed(constraint.allowed, id)) return int32_t(id);
  return token;
}

}  // namespace

int32_t argmax(const float* logits, int64_t n) {
  if (n <= 0) fail("argmax: empty logits");
  // Strict > keeps the lowest id on ties and never picks a NaN over a number.
  int64_t best = 0;
  float best_value = kNegativeInfinity;
  for (int64_t id = 0; id < n; ++id) {
    if (logits[id] > best_value) {
      best_value = logits[id];
      best = id;
    }
  }
  return static_cast<int32_t>(best);
}

void penalty_counts(const PenaltyHistory& history, std::vector<std::pair<int32_t, int32_t>>* out) {
  out->clear();
  if (history.counts) out->assign(history.counts->begin(), history.counts->end());
  for (int64_t i = 0; i < history.n_path; ++i) out->push_back({history.path[i], 1});
  std::sort(out->begin(), out->end());
  // Sum the counts of equal tokens: the list holds each token once.
  size_t n_unique = 0;
  for (size_t i = 0; i < out->size(); ++i) {
    if (n_unique > 0 && (*out)[n_unique - 1].first == (*out)[i].first) {
      (*out)[n_unique - 1].second += (*out)[i].second;
    } else {
      (*out)[n_unique++] = (*out)[i];
    }
  }
  out->resize(n_unique);
}

void apply_logit_constraint(float* logits, int64_t n_vocab, const LogitConstraint& constraint) {
  for (int64_t i = 0; i < constraint.n_bias; ++i) {
    const auto [token, bias] = constraint.bias[i];
    if (token >= 0 && token < n_vocab) logits[token] += bias;
  }
  if (!constraint.allowed) return;
  for (int64_t id = 0; id < n_vocab; ++id)
    if (!is_allowed(constraint.allowed, id)) logits[id] = kNegativeInfinity;
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab, const SamplingParams& params,
                        int64_t position, const PenaltyHistory& history, const LogitConstraint& constraint) {
  if (n_vocab <= 0) fail("sampler: empty logits");
  const bool has_penalty_params = params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
  if (has_penalty_params) penalty_counts(history, &penalties_);
  const bool has_penalties = has_penalty_params && !penalties_.empty();
  if (params.is_greedy() && !has_penalties && constraint.is_empty()) return argmax(logits, n_vocab);

  const auto n = static_cast<size_t>(n_vocab);
  processed_.assign(logits, logits + n);
  float* values = processed_.data();
  for (size_t id = 0; id < n; ++id) {
    if (std::isnan(values[id])) values[id] = kNegativeInfinity;
  }
  apply_logit_constraint(values, n_vocab, constraint);
  if (has_penalties) {
    // Each token is touched once, so the order cannot matter.
    for (const auto& [token, count] : penalties_) {
      if (token < 0 || token >= n_vocab) continue;
      const float presence = count > 0 ? params.presence_penalty : 0.0f;
      values[token] -= presence + params.frequency_penalty * static_cast<float>(count);
    }
  }
  if (params.is_greedy()) return allowed_or_first(argmax(values, n_vocab), values, n_vocab, constraint);

  // Candidates: the top_k best by value, else every token. The best token is always one.
  const int32_t best = argmax(values, n_vocab);
  const float best_value = values[best];
  // All -inf, or some +inf: no proper distribution; take the best-ranked token.
  if (!std::isfinite(best_value)) return allowed_or_first(best, values, n_vocab, constraint);
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  const bool has_top_k = params.top_k > 0 && static_cast<size_t>(params.top_k) < n;
  if (has_top_k) {
    std::nth_element(order_.begin(), order_.begin() + params.top_k, order_.end(), ValueDescendingIdAscending{values});
    order_.resize(static_cast<size_t>(params.top_k));
  }

  // Integer masses (sampling_math.h): the kept set and the draw are exact sums, in any order.
  masses_.assign(n, 0);
  const float inverse_temperature = 1.0f / params.temperature;
  uint64_t total = 0;
  size_t n_positive = 0;
  for (int32_t id : order_) {
    const uint32_t mass = sampling_mass(sampling_gap(values[id], best_value, inverse_temperature), kSamplingExp2Table);
    masses_[size_t(id)] = mass;
    total += mass;
    if (mass != 0) order_[n_positive++] = id;
  }
  order_.resize(n_positive);  // tokens of mass 0 can be neither kept nor drawn

  // Tokens ranked by (mass descending, id ascending). Those far below the best go to the back
  // unranked; most walks end long before them.
  const MassDescendingIdAscending before{masses_.data()};
  const auto tail = std::partition(order_.begin(), order_.end(), [&](int32_t id) { return masses_[size_t(id)] >= (kSamplingMassOne >> 16); });
  LazyRanking<MassDescendingIdAscending> ranking{order_, before, size_t(tail - order_.begin())};
  // Top-p: the shortest prefix whose mass reaches ceil(top_p * total), at least one token.
  size_t n_kept = order_.size();
  uint64_t kept_mass = total;
  if (params.top_p < 1.0f) {
    const uint64_t need = std::max<uint64_t>(1, sampling_scaled_ceil(std::max(params.top_p, 0.0f), total));
    uint64_t cumulative = 0;
    for (size_t i = 0; i < n_kept; ++i) {
      ranking.extend(i + 1);
      cumulative += masses_[size_t(order_[i])];
      if (cumulative >= need) {
        n_kept = i + 1;
        kept_mass = cumulative;
        break;
      }
    }
  }
  // Min-p: keep masses of at least ceil(min_p * best mass); min_p above 1 acts as 1.
  if (params.min_p > 0.0f) {
    const uint64_t threshold = std::min<uint64_t>(sampling_scaled_ceil(params.min_p, kSamplingMassOne), kSamplingMassOne);
    uint64_t cumulative = 0;
    size_t i = 0;
    for (; i < n_kept; ++i) {
      ranking.extend(i + 1);
      if (masses_[size_t(order_[i])] < threshold) break;
      cumulative += masses_[size_t(order_[i])];
    }
    n_kept = i;
    kept_mass = cumulative;
  }

  // The draw: the first kept token whose cumulative mass passes floor(u * kept mass).
  const auto u = static_cast<uint32_t>(philox_uniform(params.seed, static_cast<uint64_t>(position)) * 0x1p24f);
  const uint64_t target = sampling_target(kept_mass, u);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < n_kept; ++i) {
    ranking.extend(i + 1);
    cumulative += masses_[size_t(order_[i])];
    if (cumulative > target) return order_[i];
  }
  fail("sampler: the draw passed its kept mass");
}

float Sampler::logprob_of(const float* logits, int64_t n_vocab, int32_t token) {
  if (token < 0 || token >= n_vocab) return kNegativeInfinity;
  const LogSoftmaxNormalizer normalizer = log_softmax_normalizer(logits, n_vocab);
  return (logits[token] - normalizer.max_logit) - normalizer.log_sum;
}

std::vector<TokenLogprob> Sampler::top_logprobs(const float* logits, int64_t n_vocab, int n) {
  const auto n_top = static_cast<size_t>(std::clamp<int64_t>(n, 0, std::max<int64_t>(n_vocab, 0)));
  if (n_top == 0) return {};
  const LogSoftmaxNormalizer normalizer = log_softmax_normalizer(logits, n_vocab);
  std::vector<int32_t> order(static_cast<size_t>(n_vocab));
  std::iota(order.begin(), order.end(), 0);
  const auto last = order.begin() + static_cast<std::ptrdiff_t>(n_top);
  const auto before = [logits](int32_t a, int32_t b) {
    const float value_a = rank_key(logits[a]);
    const float value_b = rank_key(logits[b]);
    return value_a != value_b ? value_a > value_b : a < b;
  };
  std::partial_sort(order.begin(), last, order.end(), before);
  std::vector<TokenLogprob> top;
  top.reserve(n_top);
  for (auto it = order.begin(); it != last; ++it) {
    top.push_back({*it, (logits[*it] - normalizer.max_logit) - normalizer.log_sum});
  }
  return top;
}

}  // namespace tf
