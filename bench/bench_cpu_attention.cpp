// CPU attention at the embedded model's shape (8 query heads, 4 KV heads, head_dim 64), one thread,
// timed in that thread's CPU time, the fastest of 9 batches: a cache laid out by position
// ([slot][kv head][dim]) against one laid out by head ([kv head][slot][dim], HostKvStorage's), the
// same rows and keys. Prints ns per (row, head, key) for 1 and 16 rows over 1,000 and 4,000 keys.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/cpu/kernels/attention.h"
#include "core/thread_pool.h"

namespace {

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

constexpr int64_t kHeads = 8, kKvHeads = 4, kHeadDim = 64;

double ns_per_key(int64_t n_rows, int64_t n_keys, bool by_head) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n_slots = n_keys + n_rows;
  std::vector<float> q(size_t(n_rows * kHeads * kHeadDim)), k(size_t(n_slots * kKvHeads * kHeadDim)),
      v(k.size()), out(q.size());
  for (std::vector<float>* x : {&q, &k, &v})
    for (float& value : *x) value = normal(rng);
  std::vector<int32_t> slots(static_cast<size_t>(n_slots));
  for (int64_t i = 0; i < n_slots; ++i) slots[size_t(i)] = int32_t(i);
  std::vector<const int32_t*> key_slots(static_cast<size_t>(n_rows), slots.data());
  std::vector<int32_t> counts(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) counts[size_t(r)] = int32_t(n_keys + r + 1);
  const tf::cpu::AttentionShape shape{kHeads, kKvHeads, kHeadDim, 0.125f};
  const tf::cpu::KvLayout layout = by_head ? tf::cpu::KvLayout::head_major(n_slots, kHeadDim)
                                           : tf::cpu::KvLayout::interleaved(kKvHeads, kHeadDim);
  tf::ThreadPool pool(1);
  const int repeats = int(std::max<int64_t>(1, 20000 / n_keys / n_rows + 1));
  double best = 1e30;
  for (int batch = 0; batch < 9; ++batch) {
    const double start = thread_seconds();
    for (int i = 0; i < repeats; ++i)
      tf::cpu::attention(q.data(), n_rows, k.data(), v.data(), layout, key_slots.data(), counts.data(), shape,
                         out.data(), pool);
    best = std::min(best, (thread_seconds() - start) / repeats);
  }
  return best * 1e9 / double(n_rows * kHeads * n_keys);
}

}  // namespace

int main() {
  std::printf("| rows | keys | by position, ns per (row, head, key) | by head | ratio |\n|---|---|---|---|---|\n");
  for (int64_t n_rows : {1, 16})
    for (int64_t n_keys : {1000, 4000}) {
      const double by_position = ns_per_key(n_rows, n_keys, false), by_head = ns_per_key(n_rows, n_keys, true);
      std::printf("| %lld | %lld | %.2f | %.2f | %.2fx |\n", (long long)n_rows, (long long)n_keys, by_position, by_head,
                  by_position / by_head);
    }
}
