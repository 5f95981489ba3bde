// A fixed pool of worker threads with a static parallel-for.
// Work is split by index ranges only; no kernel lets the split change a reduction order.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tf {

class ThreadPool {
 public:
  // n_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return int(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) split into contiguous ranges, one per thread, and waits.
  // The calling thread takes a share. Not reentrant: fn must not call parallel_for.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  // A decode step is dozens of short parallel_for calls; waking sleeping threads for each one costs
  // more than the work (futex round trips). So both sides first spin for a while on the atomics
  // below, and only then sleep on the condition variables.
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* task_ = nullptr;  // published by generation_
  int64_t task_n_ = 0;
  std::atomic<uint64_t> generation_{0};  // bumped under mutex_ for each task
  std::atomic<int> n_pending_{0};        // workers still running the current task
  std::atomic<bool> stopping_{false};
};

}  // namespace tf
