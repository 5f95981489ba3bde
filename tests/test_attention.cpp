// CPU attention against a double reference, and its invariance to neighbours, threads and slots, at
// every SIMD level the machine has: generic, avx2 and avx512 give one set of bits (f32 products),
// avx512-bf16 its own (bf16-rounded operands in the dot-product instruction; attention_bf16_dot.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/attention_bf16_dot.h"
#include "backends/cpu/kernels/simd.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace tf::cpu {
namespace {

// One query row with its own keys and values in logical order.
struct TestRow {
  std::vector<float> query;  // [n_heads * head_dim]
  std::vector<float> keys;   // [n_keys][n_kv_heads * head_dim]
  std::vector<float> values;
  int32_t n_keys;
};

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Runs attention over `rows`, their keys scattered over a cache at random physical slots, the cache
// laid out by position ([slot][kv head][dim]) or by head ([kv head][slot][dim]).
std::vector<float> run_scattered(const std::vector<const TestRow*>& rows, const AttentionShape& shape,
                                 std::mt19937& rng, ThreadPool& pool, bool keep_slot_order, bool head_major = false) {
  const int64_t kv_stride = shape.n_kv_heads * shape.head_dim;
  int64_t n_total = 0;
  for (const TestRow* row : rows) n_total += row->n_keys;
  const int64_t n_slots = n_total + 17;
  std::vector<int32_t> free_slots(static_cast<size_t>(n_slots));
  std::iota(free_slots.begin(), free_slots.end(), 0);
  if (!keep_slot_order) std::shuffle(free_slots.begin(), free_slots.end(), rng);
  std::vector<float> k_cache = random_floats(size_t(n_slots * kv_stride), rng, 1.0f);  // junk elsewhere
  std::vector<float> v_cache = random_floats(size_t(n_slots * kv_stride), rng, 1.0f);
  const KvLayout layout = head_major ? KvLayout::head_major(n_slots, shape.head_dim)
                                     : KvLayout::interleaved(shape.n_kv_heads, shape.head_dim);
  std::vector<std::vector<int32_t>> slots(rows.size());
  std::vector<const int32_t*> slot_pointers(rows.size());
  std::vector<int32_t> n_keys(rows.size());
  std::vector<float> queries;
  size_t next = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int32_t j = 0; j < rows[r]->n_keys; ++j) {
      const int32_t slot = free_slots[next++];
      slots[r].push_back(slot);
      store_kv_row(k_cache.data(), layout, slot, &rows[r]->keys[size_t(j * kv_stride)], shape.n_kv_heads, shape.head_dim);
      store_kv_row(v_cache.data(), layout, slot, &rows[r]->values[size_t(j * kv_stride)], shape.n_kv_heads,
                   shape.head_dim);
    }
    slot_pointers[r] = slots[r].data();
    n_keys[r] = rows[r]->n_keys;
    queries.insert(queries.end(), rows[r]->query.begin(), rows[r]->query.end());
  }
  std::vector<float> out(queries.size());
  attention(queries.data(), int64_t(rows.size()), k_cache.data(), v_cache.data(), layout, slot_pointers.data(),
            n_keys.data(), shape, out.data(), pool);
  return out;
}

// The levels this machine has, each with the level whose bits it must give (the first of its numerics).
std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel level : {SimdLevel::generic, SimdLevel::avx2, SimdLevel::avx512, SimdLevel::avx512_bf16})
    if (simd_level_supported(level)) levels.push_back(level);
  return levels;
}

// Runs body at level, then puts the machine's level back.
template <class Body>
auto at_level(SimdLevel level, const Body& body) {
  const SimdLevel saved = simd_level();
  set_simd_level_for_testing(level);
  auto result = body();
  set_simd_level_for_testing(saved);
  return result;
}

float bf16_rounded(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// In double; with bf16_operands the query, keys, values and weights rounded to bf16 first, as the
// avx512-bf16 path reads them (its weights are rounded against the running max, so not exactly).
std::vector<float> reference(const TestRow& row, const AttentionShape& shape, bool bf16_operands = false) {
  const auto operand = [&](float x) { return bf16_operands ? double(bf16_rounded(x)) : double(x); };
  const int64_t d = shape.head_dim, kv_stride = shape.n_kv_heads * d;
  const int64_t group = shape.n_heads / shape.n_kv_heads;
  std::vector<float> out(size_t(shape.n_heads * d));
  for (int64_t h = 0; h < shape.n_heads; ++h) {
    const int64_t kv = (h / group) * d;
    std::vector<double> scores(static_cast<size_t>(row.n_keys));
    double max_score = -INFINITY, sum = 0;
    for (int32_t j = 0; j < row.n_keys; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < d; ++i)
        dot += operand(row.query[size_t(h * d + i)]) * operand(row.keys[size_t(j * kv_stride + kv + i)]);
      scores[size_t(j)] = dot * shape.scale;
      max_score = std::max(max_score, scores[size_t(j)]);
    }
    for (double& s : scores) sum += (s = operand(float(std::exp(s - max_score))));
    for (int64_t i = 0; i < d; ++i) {
      double acc = 0;
      for (int32_t j = 0; j < row.n_keys; ++j)
        acc += scores[size_t(j)] * operand(row.values[size_t(j * kv_stride + kv + i)]);
      out[size_t(h * d + i)] = float(acc / sum);
    }
  }
  return out;
}

struct ShapeCase {
  int64_t n_heads, n_kv_heads, head_dim;
};

TEST(Attention, MatchesReferenceAndIsInvariant) {
  ThreadPool pools[4] = {ThreadPool(1), ThreadPool(2), ThreadPool(3), ThreadPool(4)};
  std::mt19937 rng(21);
  const std::vector<SimdLevel> levels = supported_levels();
  for (const ShapeCase& c : {ShapeCase{4, 4, 64}, ShapeCase{8, 4, 64}, ShapeCase{4, 2, 128}, ShapeCase{4, 2, 40},
                             ShapeCase{10, 2, 24}, ShapeCase{4, 2, 256}}) {
    SCOPED_TRACE("heads " + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) + " dim " +
                 std::to_string(c.head_dim));
    const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
    const int64_t kv_stride = c.n_kv_heads * c.head_dim;
    std::vector<int32_t> key_counts = {1, 2, 63, 64, 65, 128, 129, 300};
    std::uniform_int_distribution<int32_t> count(1, 300);
    while (key_counts.size() < 16) key_counts.push_back(count(rng));
    std::vector<TestRow> rows;
    for (int32_t n_keys : key_counts) {
      // Queries scaled up so some softmaxes are peaked and the running max moves between chunks.
      rows.push_back({random_floats(size_t(c.n_heads * c.head_dim), rng, 2.5f),
                      random_floats(size_t(n_keys * kv_stride), rng, 1.0f),
                      random_floats(size_t(n_keys * kv_stride), rng, 1.0f), n_keys});
    }

    // Each row alone, at every level: near the reference of its numerics.
    std::vector<std::vector<std::vector<float>>> solo(levels.size());  // [level][row]
    for (size_t l = 0; l < levels.size(); ++l)
      for (const TestRow& row : rows) {
        const bool bf16_operands = at_level(levels[l], [&] { return attention_takes_bf16_dot(shape.head_dim); });
        solo[l].push_back(at_level(levels[l], [&] { return run_scattered({&row}, shape, rng, pools[0], true); }));
        const std::vector<float> expected = reference(row, shape, bf16_operands);
        const double tolerance = bf16_operands ? 4e-3 : 2e-6;
        for (size_t i = 0; i < expected.size(); ++i)
          ASSERT_NEAR(solo[l].back()[i], expected[i], tolerance * (1.0 + std::fabs(expected[i])))
              << simd_level_name(levels[l]) << " keys " << row.n_keys << " element " << i;
      }
    for (size_t l = 1; l < levels.size(); ++l)  // generic, avx2 and avx512 alike
      if (levels[l] != SimdLevel::avx512_bf16)
        for (size_t r = 0; r < rows.size(); ++r)
          ASSERT_EQ(std::memcmp(solo[l][r].data(), solo[0][r].data(), solo[0][r].size() * 4), 0)
              << simd_level_name(levels[l]) << " row " << r;

    // Rows among others, at random slots, on any thread count: each its bits alone.
    std::uniform_int_distribution<size_t> pick(0, rows.size() - 1);
    for (int trial = 0; trial < 32; ++trial) {
      std::vector<size_t> ids(1 + size_t(trial) * 3 % 40);
      for (size_t& id : ids) id = pick(rng);
      std::vector<const TestRow*> batch;
      for (size_t id : ids) batch.push_back(&rows[id]);
      const size_t l = size_t(trial) % levels.size();
      // Half the trials keep the cache by head (HostKvStorage's layout): the same bits.
      const std::vector<float> out =
          at_level(levels[l], [&] { return run_scattered(batch, shape, rng, pools[trial % 4], false, trial % 2 == 1); });
      const size_t row_size = size_t(c.n_heads * c.head_dim);
      for (size_t r = 0; r < ids.size(); ++r)
        ASSERT_EQ(std::memcmp(&out[r * row_size], solo[l][ids[r]].data(), row_size * 4), 0)
            << simd_level_name(levels[l]) << " trial " << trial << " row " << r << " keys " << rows[ids[r]].n_keys;
    }
  }
}

// Rows of one sequence, as a prefill chunk or a verify chain gives them: row r sees keys
// 0 .. first_keys + r, all through one slot list (or equal copies of it), so a run of them takes
// its keys with its (row, head) pairs in the lanes. Each row must give the bits it gives alone (a
// row at a time), at every level and thread count; rows whose last key differs (tree rows) run a
// row at a time among them, and a second sequence's rows after the first's start a run of their own.
TEST(Attention, RowsOfOneSequenceInLanesEqualEachRowAlone) {
  ThreadPool pools[3] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  std::mt19937 rng(33);
  // Groups of 2 and 4 heads with head_dim 64, 128 and (avx512-bf16) 256 take the lanes; one head a
  // group, or head_dim 40, always runs a row at a time.
  const std::vector<SimdLevel> levels = supported_levels();
  for (const ShapeCase& c : {ShapeCase{8, 4, 64}, ShapeCase{8, 2, 128}, ShapeCase{4, 4, 64}, ShapeCase{4, 2, 40},
                             ShapeCase{4, 2, 256}}) {
    SCOPED_TRACE("heads " + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) + " dim " +
                 std::to_string(c.head_dim));
    const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
    const int64_t n_slots = 400, row_width = c.n_heads * c.head_dim;
    const KvLayout layout = KvLayout::head_major(n_slots, c.head_dim);
    const std::vector<float> k_cache = random_floats(size_t(n_slots * c.n_kv_heads * c.head_dim), rng, 1.0f);
    const std::vector<float> v_cache = random_floats(k_cache.size(), rng, 1.0f);
    std::vector<int32_t> sequence(static_cast<size_t>(n_slots));
    std::iota(sequence.begin(), sequence.end(), 0);
    std::shuffle(sequence.begin(), sequence.end(), rng);
    std::vector<int32_t> other_sequence = sequence;
    std::shuffle(other_sequence.begin(), other_sequence.end(), rng);
    for (int trial = 0; trial < 32; ++trial) {
      const int64_t n_rows = 1 + (trial * 7) % 37, first_keys = (trial * 53) % 250;
      const std::vector<float> queries = random_floats(size_t(n_rows * row_width), rng, 2.5f);
      // Half the trials give each row its own copy of the slot list; every third gives the rows
      // from the middle on a last key of their own.
      std::vector<std::vector<int32_t>> copies(static_cast<size_t>(n_rows), sequence);
      std::vector<const int32_t*> slots(static_cast<size_t>(n_rows));
      std::vector<int32_t> n_keys(static_cast<size_t>(n_rows));
      for (int64_t r = 0; r < n_rows; ++r) {
        n_keys[size_t(r)] = int32_t(first_keys + r + 1);
        if (trial % 3 == 2 && r >= n_rows / 2)
          copies[size_t(r)][size_t(n_keys[size_t(r)] - 1)] = sequence[size_t(n_slots - 1 - r)];
        slots[size_t(r)] = trial % 2 == 0 && trial % 3 != 2 ? sequence.data() : copies[size_t(r)].data();
        if (trial % 4 == 3 && r >= n_rows / 3) {  // a second sequence's rows from here on
          n_keys[size_t(r)] = int32_t(r - n_rows / 3 + 1 + trial);
          slots[size_t(r)] = other_sequence.data();
        }
      }
      const SimdLevel level = levels[size_t(trial) % levels.size()];
      const std::vector<float> together = at_level(level, [&] {
        std::vector<float> out(queries.size());
        attention(queries.data(), n_rows, k_cache.data(), v_cache.data(), layout, slots.data(), n_keys.data(), shape,
                  out.data(), pools[trial % 3]);
        return out;
      });
      SCOPED_TRACE(simd_level_name(level));
      // Where this level reads keys and values as bf16, a cache stored in bf16 gives the same bits.
      if (at_level(level, [&] { return attention_takes_bf16_dot(c.head_dim); })) {
        const std::vector<float> from_bf16 = at_level(level, [&] {
          std::vector<uint16_t> k_bf16(k_cache.size()), v_bf16(v_cache.size());
          const KvSlice cache{k_bf16.data(), v_bf16.data(), layout, true};
          const int64_t kv_dim = c.n_kv_heads * c.head_dim;
          std::vector<float> k_row(static_cast<size_t>(kv_dim)), v_row(k_row.size());
          for (int64_t slot = 0; slot < n_slots; ++slot) {
            for (int64_t head = 0; head < c.n_kv_heads; ++head)
              for (int64_t d = 0; d < c.head_dim; ++d) {
                const size_t at = size_t(slot * layout.slot_stride + head * layout.head_stride + d);
                k_row[size_t(head * c.head_dim + d)] = k_cache[at];
                v_row[size_t(head * c.head_dim + d)] = v_cache[at];
              }
            cache.store(slot, k_row.data(), v_row.data(), c.n_kv_heads, c.head_dim);
          }
          std::vector<float> out(queries.size());
          attention(queries.data(), n_rows, cache, slots.data(), n_keys.data(), shape, out.data(), pools[trial % 3]);
          return out;
        });
        ASSERT_EQ(std::memcmp(from_bf16.data(), together.data(), together.size() * 4), 0) << "trial " << trial;
      }
      for (int64_t r = 0; r < n_rows; ++r) {
        const std::vector<float> alone = at_level(level, [&] {
          std::vector<float> out(static_cast<size_t>(row_width));
          attention(queries.data() + r * row_width, 1, k_cache.data(), v_cache.data(), layout, &slots[size_t(r)],
                    &n_keys[size_t(r)], shape, out.data(), pools[0]);
          return out;
        });
        ASSERT_EQ(std::memcmp(together.data() + r * row_width, alone.data(), size_t(row_width) * 4), 0)
            << "trial " << trial << " row " << r << " of " << n_rows << " keys " << n_keys[size_t(r)];
      }
    }
  }
}

}  // namespace
}  // namespace tf::cpu
