// CPU attention at the embedded model's shape (8 query heads, 4 KV heads, head_dim 64), one thread,
// timed in that thread's CPU time, the fastest of 9 batches: a cache laid out by position
// ([slot][kv head][dim]) against one laid out by head ([kv head][slot][dim], HostKvStorage's), the
// same rows and keys, and (where the machine reads bf16) a bf16 cache by head. Prints ns per (row,
// head, key) for 1 and 16 rows over 1,000 and 4,000 keys.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/attention_bf16_dot.h"
#include "core/thread_pool.h"

namespace {

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

constexpr int64_t kHeads = 8, kKvHeads = 4, kHeadDim = 64;

// bf16: the cache stored in bf16 (by head), where this machine's attention reads bf16.
double ns_per_key(int64_t n_rows, int64_t n_keys, bool by_head, bool bf16 = false) {
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
  std::vector<uint16_t> k_bf16(k.size()), v_bf16(v.size());
  tf::cpu::KvSlice cache{k.data(), v.data(), layout, false};
  if (bf16) {
    cache = {k_bf16.data(), v_bf16.data(), layout, true};
    for (int64_t slot = 0; slot < n_slots; ++slot) {
      std::vector<float> k_row, v_row;
      for (int64_t head = 0; head < kKvHeads; ++head) {
        const float* at_k = k.data() + slot * layout.slot_stride + head * layout.head_stride;
        const float* at_v = v.data() + slot * layout.slot_stride + head * layout.head_stride;
        k_row.insert(k_row.end(), at_k, at_k + kHeadDim);
        v_row.insert(v_row.end(), at_v, at_v + kHeadDim);
      }
      cache.store(slot, k_row.data(), v_row.data(), kKvHeads, kHeadDim);
    }
  }
  tf::ThreadPool pool(1);
  const int repeats = int(std::max<int64_t>(1, 20000 / n_keys / n_rows + 1));
  double best = 1e30;
  for (int batch = 0; batch < 9; ++batch) {
    const double start = thread_seconds();
    for (int i = 0; i < repeats; ++i)
      tf::cpu::attention(q.data(), n_rows, cache, key_slots.data(), counts.data(), shape, out.data(), pool);
    best = std::min(best, (thread_seconds() - start) / repeats);
  }
  return best * 1e9 / double(n_rows * kHeads * n_keys);
}

}  // namespace

int main() {
  const bool has_bf16_cache = tf::cpu::attention_takes_bf16_dot(kHeadDim);
  std::printf("| rows | keys | by position, ns per (row, head, key) | by head | ratio | by head, bf16 cache |\n"
              "|---|---|---|---|---|---|\n");
  for (int64_t n_rows : {1, 16})
    for (int64_t n_keys : {1000, 4000}) {
      const double by_position = ns_per_key(n_rows, n_keys, false), by_head = ns_per_key(n_rows, n_keys, true);
      std::printf("| %lld | %lld | %.2f | %.2f | %.2fx | ", (long long)n_rows, (long long)n_keys, by_position, by_head,
                  by_position / by_head);
      if (has_bf16_cache) {
        std::printf("%.2f |\n", ns_per_key(n_rows, n_keys, true, true));
      } else {
        std::printf("(this machine reads f32) |\n");
      }
    }
}
