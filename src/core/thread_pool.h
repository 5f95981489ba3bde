// A fixed pool of worker threads with a chunked parallel-for.
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

  // Calls fn(begin, end) over contiguous chunks that cover [0, n) once, and waits. Threads (the
  // caller among them) claim chunks as they come free, so which thread runs an index is not fixed:
  // fn must make each index's result depend on the index alone. Not reentrant: fn must not call
  // parallel_for.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void run_chunks();

  // A decode step is dozens of short parallel_for calls; waking sleeping threads for each one costs
  // more than the work (futex round trips). So both sides first spin for a while on the atomics
  // below, and only then sleep on the condition variables. Chunks rather than one fixed share per
  // thread: on a shared machine a thread that lost its core leaves its chunks to the others instead
  // of holding up the whole call.
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* task_ = nullptr;  // valid while open_ is its generation
  int64_t task_n_ = 0;
  int64_t n_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<uint64_t> generation_{0};  // bumped under mutex_ for each task
  std::atomic<uint64_t> open_{0};        // the generation whose chunks may still be claimed, or 0
  std::atomic<int> n_active_{0};         // workers inside the current task
  std::atomic<bool> stopping_{false};
};

}  // namespace tf
