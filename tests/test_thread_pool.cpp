// The thread pool's parallel_for covers every index exactly once, in valid ranges, call after call.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "core/thread_pool.h"

namespace tf {
namespace {

TEST(ThreadPool, EveryIndexExactlyOnce) {
  for (int n_threads = 1; n_threads <= 4; ++n_threads) {
    ThreadPool pool(n_threads);
    for (int64_t n : {1, 2, 3, 5, 7, 8, 9, 16, 31, 64, 100, 1000, 100003}) {
      std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
      std::atomic<bool> bad_range{false};
      pool.parallel_for(n, [&](int64_t begin, int64_t end) {
        if (begin < 0 || end > n || begin >= end) bad_range = true;
        for (int64_t i = begin; i < end && i < n && i >= 0; ++i) visits[size_t(i)].fetch_add(1);
      });
      ASSERT_FALSE(bad_range) << "threads " << n_threads << " n " << n;
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(visits[size_t(i)].load(), 1) << "threads " << n_threads << " n " << n << " index " << i;
    }
  }
}

// Back-to-back calls (as a decode step makes them): no call sees another's indices or function,
// however the workers' wake-ups interleave with the calls.
TEST(ThreadPool, ManyShortCallsInARow) {
  for (int n_threads : {2, 3, 4}) {
    ThreadPool pool(n_threads);
    std::vector<int64_t> sums(8, 0);
    for (int call = 0; call < 20000; ++call) {
      const int64_t n = 1 + call % 13;
      std::atomic<int64_t> sum{0};
      pool.parallel_for(n, [&, call](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) sum.fetch_add(int64_t(call) * 1000 + i);
      });
      ASSERT_EQ(sum.load(), int64_t(call) * 1000 * n + n * (n - 1) / 2) << "threads " << n_threads << " call " << call;
    }
  }
}

// A pool idle long enough for its workers to sleep still runs every index of the next call.
TEST(ThreadPool, WakesSleepingWorkers) {
  ThreadPool pool(3);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::vector<std::atomic<int>> visits(64);
    pool.parallel_for(64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) visits[size_t(i)].fetch_add(1);
    });
    for (auto& v : visits) ASSERT_EQ(v.load(), 1);
  }
}

}  // namespace
}  // namespace tf
