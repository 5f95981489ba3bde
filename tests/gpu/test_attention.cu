// attention_bf16 on the GPU: parity with cpu::attention, and rows bitwise independent of their
// neighbours, of the row count, of where their keys live in the cache, of whether the key splits
// ran as separate blocks (with scratch) or one after another in one block (without), and of
// whether a row shared its blocks with the other rows of a chain group.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "backends/cpu/kernels/attention.h"
#include "backends/cuda/attention.cuh"
#include "backends/cuda/device_buffer.cuh"
#include "core/thread_pool.h"
#include "gpu_test.h"

using namespace tf;
using namespace tf::gpu_test;
using tf::cuda::DeviceBuffer;

namespace {

// One attention problem: logical keys (content by logical position) and rows' logical key lists.
struct Problem {
  int n_heads, n_kv_heads, head_dim;
  int64_t n_logical;                          // distinct logical keys
  std::vector<uint16_t> keys, values;         // [n_logical][n_kv_heads * head_dim]
  std::vector<uint16_t> queries;              // [n_rows][n_heads * head_dim]
  std::vector<std::vector<int32_t>> visible;  // per row: logical keys in order
};

enum class Splits { parallel, in_order };  // with scratch, or without (one block per row)
enum class Groups { none, chains };         // every row alone, or runs of prefix rows share blocks

// Runs of rows (in the order given) whose key lists are each a prefix of the next and cut into
// splits alike, at most attention_rows_per_group long: the groups a model forms from chain rows. [n_groups + 1] starts.
std::vector<int32_t> chain_group_starts(const Problem& p, const std::vector<int>& rows, const cuda::AttentionShape& shape) {
  std::vector<int32_t> starts;
  int group_size = 0;
  for (size_t i = 0; i < rows.size(); ++i, ++group_size) {
    const auto& before = i > 0 ? p.visible[size_t(rows[i - 1])] : p.visible[size_t(rows[i])];
    const auto& here = p.visible[size_t(rows[i])];
    const bool is_prefix = before.size() <= here.size() && std::equal(before.begin(), before.end(), here.begin());
    const bool cuts_alike =
        cuda::attention_chunks_per_split(int(before.size())) == cuda::attention_chunks_per_split(int(here.size()));
    if (i > 0 && is_prefix && cuts_alike && group_size < cuda::attention_rows_per_group(shape)) continue;
    starts.push_back(int32_t(i));
    group_size = 0;
  }
  starts.push_back(int32_t(rows.size()));
  return starts;
}

// Places logical key j at physical slot placement[j] of a cache of n_slots (other slots hold
// noise), runs the GPU kernel over the chosen rows (repeats allowed) and returns their outputs.
std::vector<uint16_t> run_gpu(const Problem& p, const std::vector<int>& rows, const std::vector<int32_t>& placement,
                              int64_t n_slots, std::mt19937& rng, Splits splits = Splits::parallel,
                              Groups groups = Groups::none) {
  const int64_t kv_width = int64_t(p.n_kv_heads) * p.head_dim, q_width = int64_t(p.n_heads) * p.head_dim;
  std::vector<uint16_t> k_cache = random_bf16(size_t(n_slots * kv_width), rng), v_cache = random_bf16(size_t(n_slots * kv_width), rng);
  for (int64_t j = 0; j < p.n_logical; ++j) {
    std::copy_n(p.keys.begin() + j * kv_width, kv_width, k_cache.begin() + placement[size_t(j)] * kv_width);
    std::copy_n(p.values.begin() + j * kv_width, kv_width, v_cache.begin() + placement[size_t(j)] * kv_width);
  }
  std::vector<uint16_t> q;
  std::vector<int32_t> slots, offsets, n_keys;
  for (int r : rows) {
    q.insert(q.end(), p.queries.begin() + r * q_width, p.queries.begin() + (r + 1) * q_width);
    offsets.push_back(int32_t(slots.size()));
    n_keys.push_back(int32_t(p.visible[size_t(r)].size()));
    for (int32_t j : p.visible[size_t(r)]) slots.push_back(placement[size_t(j)]);
  }
  if (slots.empty()) slots.push_back(0);
  DeviceBuffer<uint16_t> q_device(q.size()), k_device(k_cache.size()), v_device(v_cache.size()), out(q.size());
  DeviceBuffer<int32_t> slots_device(slots.size()), offsets_device(offsets.size()), n_keys_device(n_keys.size());
  q_device.copy_from_host(q);
  k_device.copy_from_host(k_cache);
  v_device.copy_from_host(v_cache);
  slots_device.copy_from_host(slots);
  offsets_device.copy_from_host(offsets);
  n_keys_device.copy_from_host(n_keys);
  out.fill_bytes(0xff);
  const cuda::AttentionShape shape{p.n_heads, p.n_kv_heads, p.head_dim, 1.0f / std::sqrt(float(p.head_dim))};
  // NaN-poisoned scratch: a partial read before it is written shows up in the output.
  DeviceBuffer<float> scratch(splits == Splits::parallel ? size_t(cuda::attention_scratch_floats(int64_t(rows.size()), shape)) : 0);
  scratch.fill_bytes(0xff);
  const std::vector<int32_t> starts = chain_group_starts(p, rows, shape);
  const std::vector<int32_t> group_count = {int32_t(starts.size()) - 1};
  DeviceBuffer<int32_t> starts_device(starts.size()), group_count_device(1);
  starts_device.copy_from_host(starts);
  group_count_device.copy_from_host(group_count);
  const cuda::AttentionGroups device_groups =
      groups == Groups::chains ? cuda::AttentionGroups{starts_device.data(), group_count_device.data()} : cuda::AttentionGroups{};
  cuda::attention_bf16(q_device.data(), int64_t(rows.size()), k_device.data(), v_device.data(), slots_device.data(),
                       offsets_device.data(), n_keys_device.data(), shape, out.data(), nullptr,
                       {scratch.data(), int64_t(scratch.size())}, device_groups);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  return out.to_host();
}

// Rows at causal positions plus tree rows that see a prefix and a few scattered later keys.
Problem make_problem(int n_heads, int n_kv_heads, int head_dim, int64_t n_logical, std::mt19937& rng) {
  Problem p{n_heads, n_kv_heads, head_dim, n_logical, {}, {}, {}, {}};
  const int64_t kv_width = int64_t(n_kv_heads) * head_dim;
  p.keys = random_bf16(size_t(n_logical * kv_width), rng);
  p.values = random_bf16(size_t(n_logical * kv_width), rng);
  for (int64_t n_visible : {int64_t(1), int64_t(5), int64_t(63), int64_t(64), int64_t(65), int64_t(200), n_logical}) {
    std::vector<int32_t> keys(static_cast<size_t>(n_visible));
    std::iota(keys.begin(), keys.end(), 0);
    p.visible.push_back(keys);
  }
  for (int tree_row = 0; tree_row < 3; ++tree_row) {
    std::vector<int32_t> keys(130);
    std::iota(keys.begin(), keys.end(), 0);
    for (int32_t j = 130; j < n_logical; j += 7 + tree_row) keys.push_back(j);  // masked keys are skipped
    p.visible.push_back(keys);
  }
  p.visible.push_back({});  // a row with no keys
  p.queries = random_bf16(p.visible.size() * size_t(n_heads * head_dim), rng, 2.0f);
  return p;
}

std::vector<int32_t> identity_placement(int64_t n) {
  std::vector<int32_t> placement(static_cast<size_t>(n));
  std::iota(placement.begin(), placement.end(), 0);
  return placement;
}

std::string describe(const Problem& p) {
  return " heads=" + std::to_string(p.n_heads) + "/" + std::to_string(p.n_kv_heads) +
         " head_dim=" + std::to_string(p.head_dim);
}

// Parity: the CPU twin with f32 copies of the same bf16 cache and the same logical key lists;
// gpu_out holds every row of p in order, keys placed by identity.
double error_against_cpu(const Problem& p, const std::vector<uint16_t>& gpu_out, ThreadPool& pool) {
  const std::vector<float> k_f32 = bf16_to_f32(p.keys), v_f32 = bf16_to_f32(p.values), q_f32 = bf16_to_f32(p.queries);
  std::vector<const int32_t*> key_slots;
  std::vector<int32_t> n_keys;
  for (auto& keys : p.visible) {
    key_slots.push_back(keys.data());
    n_keys.push_back(int32_t(keys.size()));
  }
  std::vector<float> reference(gpu_out.size());
  const cpu::AttentionShape cpu_shape{p.n_heads, p.n_kv_heads, p.head_dim, 1.0f / std::sqrt(float(p.head_dim))};
  cpu::attention(q_f32.data(), int64_t(p.visible.size()), k_f32.data(), v_f32.data(),
                 cpu::KvLayout::interleaved(p.n_kv_heads, p.head_dim), key_slots.data(), n_keys.data(), cpu_shape,
                 reference.data(), pool);
  return relative_error(bf16_to_f32(gpu_out), reference);
}

std::vector<int32_t> scattered_placement(int64_t n_logical, int64_t n_slots, std::mt19937& rng) {
  std::vector<int32_t> all_slots(static_cast<size_t>(n_slots));
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  return std::vector<int32_t>(all_slots.begin(), all_slots.begin() + n_logical);
}

void test_attention(int n_heads, int n_kv_heads, int head_dim, std::mt19937& rng, ThreadPool& pool) {
  const int64_t n_logical = 700;
  Problem p = make_problem(n_heads, n_kv_heads, head_dim, n_logical, rng);
  const int n_rows = int(p.visible.size());
  std::vector<int> all_rows(static_cast<size_t>(n_rows));
  std::iota(all_rows.begin(), all_rows.end(), 0);
  const std::string shape_name = describe(p);

  std::vector<uint16_t> gpu_out = run_gpu(p, all_rows, identity_placement(n_logical), n_logical, rng);
  const double error = error_against_cpu(p, gpu_out, pool);
  check(error < 4e-3, "attention parity with cpu (causal, tree, empty rows)" + shape_name + " rel_err=" + format_error(error));

  // Invariance: each row alone with keys in place, against all rows together with keys scattered
  // over a larger cache, and against reversed row order with another scattering and the splits
  // run in order in one block.
  const int64_t q_width = int64_t(n_heads) * head_dim;
  std::vector<std::vector<uint16_t>> alone(static_cast<size_t>(n_rows));
  for (int r = 0; r < n_rows; ++r) alone[size_t(r)] = run_gpu(p, {r}, identity_placement(n_logical), n_logical, rng);
  int n_bad = 0;
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t n_slots = 3 * n_logical;
    const std::vector<int32_t> placement = scattered_placement(n_logical, n_slots, rng);
    std::vector<int> rows = all_rows;
    if (trial == 1) std::reverse(rows.begin(), rows.end());
    // Trials 2 and 3: the causal rows (each a prefix of the next) share blocks as a chain group.
    std::vector<uint16_t> together = run_gpu(p, rows, placement, n_slots, rng, trial % 2 == 0 ? Splits::parallel : Splits::in_order,
                                             trial >= 2 ? Groups::chains : Groups::none);
    for (size_t i = 0; i < rows.size(); ++i)
      if (!bitwise_equal(together.data() + int64_t(i) * q_width, alone[size_t(rows[i])].data(), size_t(q_width))) ++n_bad;
  }
  check(n_bad == 0, "attention rows bitwise equal alone, among neighbours, in chain groups and under other slot placements" +
                        shape_name);
}

// Decode and verify rows: long key lists, cut into many splits. Row 0 sees 4000 keys; 63 others
// see anything from none to all 4100, some with holes (tree rows). Every row alone must equal
// the same row among the 64 (splits in parallel) and among 300 rows (with 16 heads or more, too
// many to split: each row's splits run in order in one block), keys scattered differently each time.
void test_long_keys(int n_heads, int n_kv_heads, int head_dim, std::mt19937& rng, ThreadPool& pool) {
  const int64_t n_logical = 4100;
  Problem p{n_heads, n_kv_heads, head_dim, n_logical, {}, {}, {}, {}};
  const int64_t kv_width = int64_t(n_kv_heads) * head_dim;
  p.keys = random_bf16(size_t(n_logical * kv_width), rng);
  p.values = random_bf16(size_t(n_logical * kv_width), rng);
  std::uniform_int_distribution<int64_t> key_count(0, n_logical);
  for (int r = 0; r < 64; ++r) {
    // 2048 keys: 32 splits of one chunk; 2049: 17 splits of two chunks, the last a single key.
    const int64_t special_counts[] = {4000, 2048, 2049, n_logical};
    const int64_t n_visible = r < 4 ? special_counts[r] : key_count(rng);
    std::vector<int32_t> keys(static_cast<size_t>(n_visible));
    std::iota(keys.begin(), keys.end(), 0);
    if (r % 5 == 4)  // a tree row: a prefix, then every third key
      keys.erase(std::remove_if(keys.begin(), keys.end(), [&](int32_t j) { return j > n_visible / 2 && j % 3 != 0; }),
                 keys.end());
    p.visible.push_back(keys);
  }
  p.queries = random_bf16(p.visible.size() * size_t(n_heads * head_dim), rng, 2.0f);
  const int64_t q_width = int64_t(n_heads) * head_dim;
  std::vector<int> all_rows(p.visible.size());
  std::iota(all_rows.begin(), all_rows.end(), 0);

  const std::vector<uint16_t> together = run_gpu(p, all_rows, scattered_placement(n_logical, 2 * n_logical, rng),
                                                 2 * n_logical, rng);
  const double error = error_against_cpu(p, together, pool);
  check(error < 4e-3, "attention parity with cpu (long key lists)" + describe(p) + " rel_err=" + format_error(error));

  // The rows by key count: runs of plain causal rows are prefixes of each other and share blocks.
  std::vector<int> by_length = all_rows;
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](int a, int b) { return p.visible[size_t(a)].size() < p.visible[size_t(b)].size(); });
  const std::vector<uint16_t> grouped = run_gpu(p, by_length, scattered_placement(n_logical, 2 * n_logical, rng),
                                                2 * n_logical, rng, Splits::parallel, Groups::chains);
  std::vector<int> many_rows;
  for (int i = 0; i < 300; ++i) many_rows.push_back(int(rng() % all_rows.size()));
  many_rows[137] = 0;
  const std::vector<uint16_t> many = run_gpu(p, many_rows, scattered_placement(n_logical, 3 * n_logical, rng),
                                             3 * n_logical, rng);
  int n_bad = 0;
  for (int r : all_rows) {
    const std::vector<uint16_t> alone = run_gpu(p, {r}, identity_placement(n_logical), n_logical, rng);
    if (!bitwise_equal(together.data() + r * q_width, alone.data(), size_t(q_width))) ++n_bad;
    for (size_t i = 0; i < many_rows.size(); ++i)
      if (many_rows[i] == r && !bitwise_equal(many.data() + int64_t(i) * q_width, alone.data(), size_t(q_width))) ++n_bad;
    const size_t at = size_t(std::find(by_length.begin(), by_length.end(), r) - by_length.begin());
    if (!bitwise_equal(grouped.data() + int64_t(at) * q_width, alone.data(), size_t(q_width))) ++n_bad;
  }
  check(n_bad == 0, "attention long rows bitwise equal alone, among 63 others, among 300 and in chain groups" + describe(p));
}

}  // namespace

int main() {
  std::mt19937 rng(99);
  ThreadPool pool(0);
  try {
    test_attention(32, 8, 128, rng, pool);
    if (std::getenv("TF_GPU_TEST_QUICK") != nullptr) {  // under compute-sanitizer: one shape of each kind
      test_long_keys(10, 2, 24, rng, pool);
      return finish("test_attention");
    }
    test_attention(4, 4, 64, rng, pool);
    test_attention(8, 1, 256, rng, pool);
    test_attention(10, 2, 24, rng, pool);  // head dims off the 64/128/256 buckets (the tiny fixtures')
    test_attention(4, 2, 40, rng, pool);
    test_attention(8, 4, 32, rng, pool);
    test_attention(24, 2, 64, rng, pool);  // 12 heads per KV head: query rows of a block straddle rows
    test_long_keys(32, 8, 128, rng, pool);
    test_long_keys(16, 8, 64, rng, pool);
    test_long_keys(8, 1, 256, rng, pool);
    test_long_keys(10, 2, 24, rng, pool);
    test_long_keys(8, 4, 32, rng, pool);
    test_long_keys(4, 2, 40, rng, pool);
  } catch (const std::exception& e) {
    check(false, std::string("exception: ") + e.what());
  }
  return finish("test_attention");
}
