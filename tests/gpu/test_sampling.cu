// sample_rows_f32 on the GPU: rows independent of their neighbours and of the call, the CPU
// tf::Sampler's token in every draw (every parameter combination, many seeds, batches of 1 .. 64
// rows with random neighbours), drawn frequencies on a small vocabulary, and the edge cases
// (infinities, NaN, -0, rows left alone).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/argmax.cuh"
#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/penalties.cuh"
#include "backends/cuda/sample.cuh"
#include "core/dtype.h"
#include "gpu_test.h"
#include "sampling/sampler.h"

using namespace tf;
using namespace tf::gpu_test;
using tf::cuda::DeviceBuffer;
using tf::cuda::GpuSamplingRow;

namespace {

constexpr int32_t kUntouched = -7;  // what ids hold before the kernel; rows it skips keep it
constexpr int64_t kQwenVocab = 151936;

// TF_GPU_TEST_QUICK=1 (under compute-sanitizer) draws far fewer times.
bool is_quick() { return std::getenv("TF_GPU_TEST_QUICK") != nullptr; }

// Samples each row of `logits` ([rows.size()][n_vocab]) on the GPU.
std::vector<int32_t> gpu_sample(const std::vector<float>& logits, int64_t n_vocab, const std::vector<GpuSamplingRow>& rows) {
  DeviceBuffer<float> logits_device(logits.size());
  logits_device.copy_from_host(logits);
  DeviceBuffer<GpuSamplingRow> rows_device(rows.size());
  rows_device.copy_from_host(rows);
  DeviceBuffer<int32_t> ids_device(rows.size());
  ids_device.copy_from_host(std::vector<int32_t>(rows.size(), kUntouched));
  cuda::sample_rows_f32(logits_device.data(), int64_t(rows.size()), n_vocab, rows_device.data(), ids_device.data());
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  return ids_device.to_host();
}

SamplingParams cpu_params(const GpuSamplingRow& row) {
  SamplingParams params;
  params.temperature = row.temperature;
  params.top_k = row.top_k;
  params.top_p = row.top_p;
  params.min_p = row.min_p;
  params.seed = row.seed;
  return params;
}

int32_t cpu_sample(Sampler& sampler, const float* logits, int64_t n_vocab, const GpuSamplingRow& row) {
  return sampler.sample(logits, n_vocab, cpu_params(row), int64_t(row.position));
}

// A row shaped like a language model's: a broad tail, a few tokens well above it, and in half the
// rows values rounded to bf16 (an LM head's precision), which makes ties common.
std::vector<float> lm_like_logits(int64_t n_vocab, std::mt19937& rng) {
  std::normal_distribution<float> tail(0.0f, 2.0f);
  std::uniform_real_distribution<float> head_lift(10.0f, 24.0f);
  std::uniform_int_distribution<int64_t> any_id(0, n_vocab - 1);
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (float& logit : logits) logit = tail(rng);
  const int n_head = 1 + int(rng() % 24);
  for (int i = 0; i < n_head; ++i) logits[size_t(any_id(rng))] = head_lift(rng);
  if (rng() % 2 == 0) {
    for (float& logit : logits) logit = bf16_to_f32(f32_to_bf16(logit));
  }
  return logits;
}

// Temperature 0.7/1/1.5 x top_k 0/1/20/40/256/257/5000 (up to 256 the row gathers into one block)
// x top_p 1/0.9/0.5 x min_p 0/0.05, seeds and positions random.
std::vector<GpuSamplingRow> parameter_grid(std::mt19937_64& rng) {
  std::vector<GpuSamplingRow> grid;
  for (float temperature : {0.7f, 1.0f, 1.5f})
    for (int32_t top_k : {0, 1, 20, 40, 256, 257, 5000})
      for (float top_p : {1.0f, 0.9f, 0.5f})
        for (float min_p : {0.0f, 0.05f}) grid.push_back({temperature, top_k, top_p, min_p, rng(), rng() % 100000});
  return grid;
}

std::string describe(const GpuSamplingRow& row) {
  char text[160];
  std::snprintf(text, sizeof text, "T=%g top_k=%d top_p=%g min_p=%g seed=%llu position=%llu", row.temperature,
                row.top_k, row.top_p, row.min_p, static_cast<unsigned long long>(row.seed),
                static_cast<unsigned long long>(row.position));
  return text;
}

// A row's id alone, among others at another index, and on a second call, is the same.
void test_batch_invariance(int64_t n_vocab, std::mt19937& rng, std::mt19937_64& rng64) {
  const std::vector<GpuSamplingRow> rows = parameter_grid(rng64);
  const size_t n_rows = rows.size();
  std::vector<float> logits;
  for (size_t r = 0; r < n_rows; ++r) {
    const std::vector<float> row = lm_like_logits(n_vocab, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  const std::vector<int32_t> ids = gpu_sample(logits, n_vocab, rows);
  const std::string where = " n_vocab=" + std::to_string(n_vocab);
  check(gpu_sample(logits, n_vocab, rows) == ids, "sampling repeats on a second call" + where);

  // Reversed, each row between two strangers with other parameters (some not sampled on the GPU).
  std::vector<float> mixed_logits;
  std::vector<GpuSamplingRow> mixed_rows;
  for (size_t r = n_rows; r-- > 0;) {
    for (int stranger = 0; stranger < 2; ++stranger) {
      const std::vector<float> row = lm_like_logits(n_vocab, rng);
      mixed_logits.insert(mixed_logits.end(), row.begin(), row.end());
      GpuSamplingRow params = rows[rng() % n_rows];
      params.seed = rng64();
      if (rng() % 4 == 0) params.temperature = 0.0f;
      mixed_rows.push_back(params);
      if (stranger == 1) continue;
      mixed_logits.insert(mixed_logits.end(), logits.begin() + int64_t(r) * n_vocab,
                          logits.begin() + int64_t(r + 1) * n_vocab);
      mixed_rows.push_back(rows[r]);
    }
  }
  const std::vector<int32_t> mixed_ids = gpu_sample(mixed_logits, n_vocab, mixed_rows);
  int n_same_mixed = 0, n_same_alone = 0;
  for (size_t r = 0; r < n_rows; ++r) {
    n_same_mixed += mixed_ids[3 * (n_rows - 1 - r) + 1] == ids[r];
    const std::vector<float> alone(logits.begin() + int64_t(r) * n_vocab, logits.begin() + int64_t(r + 1) * n_vocab);
    n_same_alone += gpu_sample(alone, n_vocab, {rows[r]})[0] == ids[r];
  }
  check(n_same_mixed == int(n_rows), "row among strangers at another index = row in order (" +
                                         std::to_string(n_same_mixed) + "/" + std::to_string(n_rows) + ")" + where);
  check(n_same_alone == int(n_rows),
        "row alone = row in a call (" + std::to_string(n_same_alone) + "/" + std::to_string(n_rows) + ")" + where);
}

// The sampling pipeline in double precision: the distribution a draw should follow.
struct ExactSampler {
  GpuSamplingRow params;
  std::vector<int64_t> rank;         // [n_vocab] rank by (value descending, id ascending)
  std::vector<int64_t> candidates;   // the top-k candidates in rank order
  std::vector<double> probability;   // [n_vocab] softmax over the candidates, 0 outside
  std::vector<double> mass_through;  // [i] probability of candidates[0 .. i]

  ExactSampler(const float* logits, int64_t n_vocab, const GpuSamplingRow& row_params) : params(row_params) {
    std::vector<float> values(static_cast<size_t>(n_vocab));
    for (int64_t id = 0; id < n_vocab; ++id)
      values[size_t(id)] = (std::isnan(logits[id]) ? -INFINITY : logits[id]) / params.temperature;
    candidates.resize(size_t(n_vocab));
    std::iota(candidates.begin(), candidates.end(), 0);
    std::sort(candidates.begin(), candidates.end(), [&](int64_t a, int64_t b) {
      return values[size_t(a)] != values[size_t(b)] ? values[size_t(a)] > values[size_t(b)] : a < b;
    });
    rank.resize(size_t(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) rank[size_t(candidates[size_t(i)])] = i;
    if (params.top_k > 0 && params.top_k < n_vocab) candidates.resize(size_t(params.top_k));
    const double max_value = values[size_t(candidates[0])];
    double sum = 0.0;
    for (int64_t id : candidates) sum += std::exp(double(values[size_t(id)]) - max_value);
    probability.assign(size_t(n_vocab), 0.0);
    double cumulative = 0.0;
    for (int64_t id : candidates) {
      probability[size_t(id)] = std::exp(double(values[size_t(id)]) - max_value) / sum;
      cumulative += probability[size_t(id)];
      mass_through.push_back(cumulative);
    }
  }

  // How many candidates (a rank prefix) top-p and min-p keep.
  size_t n_kept() const {
    size_t n = candidates.size();
    if (params.top_p < 1.0f) {
      const auto reaching = std::lower_bound(mass_through.begin(), mass_through.end(), double(params.top_p));
      n = std::min(n, size_t(reaching - mass_through.begin()) + 1);
    }
    if (params.min_p > 0.0f) {
      const double threshold = params.min_p * probability[size_t(candidates[0])];
      size_t i = 1;
      while (i < n && probability[size_t(candidates[i])] >= threshold) ++i;
      n = i;
    }
    return n;
  }

  // [n_vocab] the probability of drawing each token.
  std::vector<double> draw_probabilities() const {
    const size_t n = n_kept();
    std::vector<double> drawn(probability.size(), 0.0);
    for (size_t i = 0; i < n; ++i) drawn[size_t(candidates[i])] = probability[size_t(candidates[i])] / mass_through[n - 1];
    return drawn;
  }
};

// Against the CPU sampler: the same token for every row, in batches of 1 .. 64 rows that mix every
// parameter combination (greedy rows too, left to the argmax kernel), fresh seeds and positions,
// and logit rows drawn from a pool, each row split over clusters of 8 and of 16 blocks.
void test_cpu_equality(int64_t n_vocab, int n_batches, std::mt19937& rng, std::mt19937_64& rng64) {
  std::vector<std::vector<float>> pool;
  for (int i = 0; i < 6; ++i) pool.push_back(lm_like_logits(n_vocab, rng));
  const std::vector<GpuSamplingRow> grid = parameter_grid(rng64);
  Sampler sampler;
  int64_t n_rows_seen = 0, n_different = 0, n_greedy_different = 0;
  std::string first_different;
  for (int batch = 0; batch < n_batches; ++batch) {
    const int n_rows = batch < 64 ? batch + 1 : 1 + int(rng() % 64);
    std::vector<GpuSamplingRow> rows;
    std::vector<size_t> sources;
    std::vector<float> logits;
    logits.reserve(size_t(n_rows) * size_t(n_vocab));
    for (int r = 0; r < n_rows; ++r) {
      GpuSamplingRow row = grid[rng() % grid.size()];
      row.seed = rng64();
      row.position = rng64() % 1000000;
      if (rng() % 8 == 0) row.temperature = 0.0f;
      rows.push_back(row);
      sources.push_back(rng() % pool.size());
      logits.insert(logits.end(), pool[sources.back()].begin(), pool[sources.back()].end());
    }
    DeviceBuffer<float> logits_device(logits.size());
    logits_device.copy_from_host(logits);
    DeviceBuffer<GpuSamplingRow> rows_device(rows.size());
    rows_device.copy_from_host(rows);
    // Each row split over clusters of 8 and of 16 blocks: the same token.
    std::vector<int32_t> ids_by_split[2];
    for (int split = 0; split < 2; ++split) {
      DeviceBuffer<int32_t> ids_device(rows.size());
      ids_device.copy_from_host(std::vector<int32_t>(rows.size(), kUntouched));
      cuda::argmax_f32(logits_device.data(), n_rows, n_vocab, ids_device.data());
      cuda::sample_rows_f32(logits_device.data(), n_rows, n_vocab, rows_device.data(), ids_device.data(), nullptr,
                            split == 0 ? 8 : 16);
      TF_CUDA_CHECK(cudaDeviceSynchronize());
      ids_by_split[split] = ids_device.to_host();
    }
    const std::vector<int32_t>& ids = ids_by_split[0];
    for (int r = 0; r < n_rows; ++r) {
      const int32_t cpu_id = cpu_sample(sampler, pool[sources[size_t(r)]].data(), n_vocab, rows[size_t(r)]);
      ++n_rows_seen;
      if (ids[size_t(r)] == cpu_id && ids_by_split[1][size_t(r)] == cpu_id) continue;
      if (rows[size_t(r)].temperature <= 0.0f) ++n_greedy_different;
      if (n_different++ == 0)
        first_different = " first: GPU " + std::to_string(ids[size_t(r)]) + "/" +
                          std::to_string(ids_by_split[1][size_t(r)]) + " (8/16 blocks) CPU " + std::to_string(cpu_id) + " " +
                          describe(rows[size_t(r)]) + " row " + std::to_string(r) + " of " + std::to_string(n_rows);
    }
  }
  check(n_different == 0, "the CPU sampler's token in every row (" + std::to_string(n_different) + " of " +
                              std::to_string(n_rows_seen) + " differ, " + std::to_string(n_greedy_different) +
                              " greedy)" + first_different + " n_vocab=" + std::to_string(n_vocab));
}

// 8 tokens, 20000 positions: each token drawn within 5 standard deviations of its probability,
// tokens cut by top-k, top-p or min-p never.
void test_distribution() {
  // Probabilities 0.30 0.20 0.15 0.12 0.10 0.08 0.04 0.01, ids not in rank order.
  const std::vector<float> logits = {std::log(0.12f), std::log(0.30f), std::log(0.04f), std::log(0.15f),
                                     std::log(0.01f), std::log(0.20f), std::log(0.08f), std::log(0.10f)};
  const int n_positions = is_quick() ? 1000 : 20000;
  const std::vector<GpuSamplingRow> settings = {
      {1.0f, 0, 1.0f, 0.0f, 99, 0},   {2.0f, 0, 1.0f, 0.0f, 7, 0},   {0.5f, 0, 1.0f, 0.0f, 8, 0},
      {1.0f, 3, 1.0f, 0.0f, 11, 0},   {1.0f, 0, 0.7f, 0.0f, 12, 0},  {1.0f, 0, 1.0f, 0.3f, 13, 0},
      {1.0f, 6, 0.9f, 0.2f, 14, 0},
  };
  for (const GpuSamplingRow& setting : settings) {
    std::vector<float> all_logits;
    std::vector<GpuSamplingRow> rows;
    for (int position = 0; position < n_positions; ++position) {
      all_logits.insert(all_logits.end(), logits.begin(), logits.end());
      GpuSamplingRow row = setting;
      row.position = uint64_t(position);
      rows.push_back(row);
    }
    const std::vector<int32_t> ids = gpu_sample(all_logits, int64_t(logits.size()), rows);
    std::vector<int> counts(logits.size(), 0);
    bool is_in_range = true;
    for (int32_t id : ids) {
      if (id < 0 || id >= int32_t(logits.size())) {
        is_in_range = false;
        continue;
      }
      ++counts[size_t(id)];
    }
    const std::vector<double> expected = ExactSampler(logits.data(), int64_t(logits.size()), setting).draw_probabilities();
    bool is_close = is_in_range;
    std::string table;
    for (size_t id = 0; id < logits.size(); ++id) {
      const double mean = n_positions * expected[id];
      const double deviation = std::sqrt(mean * (1.0 - expected[id]));
      is_close = is_close && std::abs(counts[id] - mean) <= 5.0 * deviation + (expected[id] > 0.0 ? 1.0 : 0.0);
      char entry[32];
      std::snprintf(entry, sizeof entry, " %d/%ld", counts[id], std::lround(mean));
      table += entry;
    }
    check(is_close, "frequencies match the distribution, " + describe(setting) + ":" + table);
  }
}

// Hand-made rows with a known token: infinities, NaN, -0 and ties, rows skipped by temperature.
void test_edge_cases() {
  const int64_t n_vocab = 1000;
  struct Case {
    std::string name;
    std::vector<float> logits;
    GpuSamplingRow params;
    int32_t expected;  // kUntouched: the kernel must leave the id alone
  };
  const auto filled = [&](float value) { return std::vector<float>(size_t(n_vocab), value); };
  const auto with = [](std::vector<float> logits, std::vector<std::pair<int, float>> entries) {
    for (const auto& [id, value] : entries) logits[size_t(id)] = value;
    return logits;
  };
  std::vector<float> ramp(static_cast<size_t>(n_vocab));
  for (int64_t id = 0; id < n_vocab; ++id) ramp[size_t(id)] = float(id % 97) * 0.1f;
  const GpuSamplingRow plain{1.0f, 0, 1.0f, 0.0f, 5, 17};
  const GpuSamplingRow truncated{1.5f, 40, 0.9f, 0.05f, 6, 18};
  const GpuSamplingRow greedy_like{0.7f, 1, 1.0f, 0.0f, 7, 19};
  std::vector<Case> cases = {
      {"all -inf gives id 0", filled(-INFINITY), plain, 0},
      {"all -inf gives id 0 (truncated)", filled(-INFINITY), truncated, 0},
      {"all NaN gives id 0", filled(NAN), truncated, 0},
      {"+inf wins, lowest id among +inf", with(ramp, {{700, INFINITY}, {300, INFINITY}}), plain, 300},
      {"+inf wins over NaN and top_k", with(ramp, {{9, INFINITY}, {5, NAN}}), truncated, 9},
      {"the only finite logit among NaN and -inf", with(filled(-INFINITY), {{0, NAN}, {2, 1.0f}, {3, NAN}}), truncated, 2},
      {"-0 ties +0, lowest id first", with(filled(0.0f), {{0, -0.0f}, {1, -0.0f}}), greedy_like, 0},
      {"-0 ties +0, -0 at the lower id", with(filled(-1.0f), {{4, -0.0f}, {6, 0.0f}}), greedy_like, 4},
      {"top tie goes to the lowest id", with(ramp, {{800, 50.0f}, {200, 50.0f}}), greedy_like, 200},
      {"top_p=0 keeps the best alone", with(ramp, {{42, 9.7f}}), {1.5f, 0, 0.0f, 0.0f, 8, 20}, 42},
      {"min_p above 1 keeps the best alone", with(ramp, {{43, 9.7f}}), {1.5f, 0, 1.0f, 2.0f, 9, 21}, 43},
      {"temperature 0 is left alone", ramp, {0.0f, 0, 1.0f, 0.0f, 1, 1}, kUntouched},
      {"temperature -1 is left alone", ramp, {-1.0f, 0, 1.0f, 0.0f, 1, 1}, kUntouched},
      {"temperature NaN is left alone", ramp, {NAN, 0, 1.0f, 0.0f, 1, 1}, kUntouched},
  };
  std::vector<float> logits;
  std::vector<GpuSamplingRow> rows;
  for (const Case& c : cases) {
    logits.insert(logits.end(), c.logits.begin(), c.logits.end());
    rows.push_back(c.params);
  }
  const std::vector<int32_t> ids = gpu_sample(logits, n_vocab, rows);
  Sampler sampler;
  for (size_t i = 0; i < cases.size(); ++i) {
    const bool is_sampled = cases[i].expected != kUntouched;
    const bool same_as_cpu = !is_sampled || cpu_sample(sampler, cases[i].logits.data(), n_vocab, rows[i]) == ids[i];
    check(ids[i] == cases[i].expected && same_as_cpu,
          cases[i].name + " (got " + std::to_string(ids[i]) + ", expected " + std::to_string(cases[i].expected) + ")");
  }

  // Many draws from rows with NaN at every third id and a flat rest: NaN is never drawn; with
  // equal logits and top_k = 3 only ids 0, 1, 2 are.
  std::vector<float> nan_logits, tie_logits;
  std::vector<GpuSamplingRow> nan_rows, tie_rows;
  const int n_positions = is_quick() ? 300 : 2000;
  for (int position = 0; position < n_positions; ++position) {
    for (int64_t id = 0; id < n_vocab; ++id) nan_logits.push_back(id % 3 == 0 ? NAN : float(id % 5));
    nan_rows.push_back({1.5f, 0, 1.0f, 0.0f, 3, uint64_t(position)});
    tie_logits.insert(tie_logits.end(), size_t(n_vocab), 0.25f);
    tie_rows.push_back({1.0f, 3, 1.0f, 0.0f, 4, uint64_t(position)});
  }
  const std::vector<int32_t> nan_ids = gpu_sample(nan_logits, n_vocab, nan_rows);
  check(std::none_of(nan_ids.begin(), nan_ids.end(), [&](int32_t id) { return id < 0 || id >= n_vocab || id % 3 == 0; }),
        "NaN logits are never drawn");
  const std::vector<int32_t> tie_ids = gpu_sample(tie_logits, n_vocab, tie_rows);
  std::vector<int> tie_counts(3, 0);
  bool only_first_three = true;
  for (int32_t id : tie_ids) {
    if (id < 0 || id > 2) only_first_three = false;
    else ++tie_counts[size_t(id)];
  }
  check(only_first_three && *std::min_element(tie_counts.begin(), tie_counts.end()) > n_positions / 4,
        "top_k=3 over equal logits draws ids 0, 1, 2 evenly (" + std::to_string(tie_counts[0]) + " " +
            std::to_string(tie_counts[1]) + " " + std::to_string(tie_counts[2]) + ")");

  // top_k at or past the vocabulary is off.
  std::mt19937 rng(3);
  std::mt19937_64 rng64(4);
  std::vector<GpuSamplingRow> off_rows, full_rows;
  std::vector<float> many_logits;
  for (int r = 0; r < 50; ++r) {
    const std::vector<float> row = lm_like_logits(n_vocab, rng);
    many_logits.insert(many_logits.end(), row.begin(), row.end());
    GpuSamplingRow params{1.5f, 0, 1.0f, 0.0f, rng64(), uint64_t(r)};
    off_rows.push_back(params);
    params.top_k = int32_t(n_vocab + r % 2);
    full_rows.push_back(params);
  }
  check(gpu_sample(many_logits, n_vocab, off_rows) == gpu_sample(many_logits, n_vocab, full_rows),
        "top_k >= n_vocab is the same as top_k = 0");
}

}  // namespace

// Penalties on the GPU against their CPU twin: each row's penalized logits bitwise equal the host's
// `logit -= presence + frequency * count` over penalty_counts(history), whatever the other rows
// hold, and the greedy token after them is the host Sampler's for the same history.
void test_penalties(int64_t n_vocab, std::mt19937& rng) {
  const int n_rows = 7;
  std::vector<float> logits;
  for (int r = 0; r < n_rows; ++r) {
    std::vector<float> row = lm_like_logits(n_vocab, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<TokenCounts> counts(n_rows);
  std::vector<std::vector<int32_t>> paths(n_rows);
  std::vector<cuda::GpuPenaltyRow> rows;
  std::vector<int2> entries;
  std::vector<SamplingParams> params(n_rows);
  std::vector<std::pair<int32_t, int32_t>> merged;
  for (int r = 0; r < n_rows; ++r) {
    // The row's best tokens recur, so penalties move the argmax; row 3 has no history at all.
    const float* row = logits.data() + int64_t(r) * n_vocab;
    const int32_t best = argmax(row, n_vocab);
    if (r != 3) {
      counts[size_t(r)][best] = 1 + r;
      for (int i = 0; i < 40; ++i) counts[size_t(r)][int32_t(rng() % uint32_t(n_vocab))] += 1 + int32_t(rng() % 4);
      paths[size_t(r)] = {best, int32_t(rng() % uint32_t(n_vocab)), best};
    }
    params[size_t(r)].presence_penalty = r % 2 ? 1.25f : -0.5f;
    params[size_t(r)].frequency_penalty = 0.3f * float(r % 3);
    penalty_counts(PenaltyHistory{&counts[size_t(r)], paths[size_t(r)].data(), int64_t(paths[size_t(r)].size())},
                   &merged);
    rows.push_back({params[size_t(r)].presence_penalty, params[size_t(r)].frequency_penalty, int32_t(entries.size()),
                    int32_t(merged.size())});
    for (const auto& [token, count] : merged) entries.push_back(make_int2(token, count));
  }
  DeviceBuffer<float> logits_device(logits.size());
  logits_device.copy_from_host(logits);
  DeviceBuffer<cuda::GpuPenaltyRow> rows_device(rows.size());
  rows_device.copy_from_host(rows);
  DeviceBuffer<int2> entries_device(entries.size());
  entries_device.copy_from_host(entries);
  DeviceBuffer<int32_t> ids_device{size_t(n_rows)};
  cuda::apply_penalties_f32(logits_device.data(), n_rows, n_vocab, rows_device.data(), entries_device.data());
  cuda::argmax_f32(logits_device.data(), n_rows, n_vocab, ids_device.data());
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> penalized = logits_device.to_host();
  const std::vector<int32_t> ids = ids_device.to_host();
  Sampler sampler;
  for (int r = 0; r < n_rows; ++r) {
    std::vector<float> expected(logits.begin() + int64_t(r) * n_vocab, logits.begin() + int64_t(r + 1) * n_vocab);
    const PenaltyHistory history{&counts[size_t(r)], paths[size_t(r)].data(), int64_t(paths[size_t(r)].size())};
    penalty_counts(history, &merged);
    for (const auto& [token, count] : merged) {
      volatile float product = params[size_t(r)].frequency_penalty * float(count);  // no fused multiply-add
      volatile float penalty = (count > 0 ? params[size_t(r)].presence_penalty : 0.0f) + product;
      expected[size_t(token)] -= penalty;
    }
    check(bitwise_equal(penalized.data() + int64_t(r) * n_vocab, expected.data(), size_t(n_vocab)),
          "penalized logits equal the host's, vocab " + std::to_string(n_vocab) + " row " + std::to_string(r));
    const int32_t host = sampler.sample(logits.data() + int64_t(r) * n_vocab, n_vocab, params[size_t(r)], 5, history);
    check(ids[size_t(r)] == host, "greedy token after penalties equals the host Sampler's, vocab " +
                                      std::to_string(n_vocab) + " row " + std::to_string(r));
  }
}

int main() {
  std::mt19937 rng(11);
  std::mt19937_64 rng64(12);
  try {
    test_edge_cases();
    test_distribution();
    for (int64_t n_vocab : {kQwenVocab, int64_t{1000}}) test_penalties(n_vocab, rng);
    for (int64_t n_vocab : {kQwenVocab, int64_t{1000}}) test_batch_invariance(n_vocab, rng, rng64);
    test_cpu_equality(kQwenVocab, is_quick() ? 4 : 96, rng, rng64);
    test_cpu_equality(1000, is_quick() ? 8 : 200, rng, rng64);
    test_cpu_equality(7, is_quick() ? 8 : 100, rng, rng64);
  } catch (const std::exception& e) {
    check(false, std::string("exception: ") + e.what());
  }
  return finish("test_sampling");
}
