#include "core/thread_pool.h"

#include <algorithm>

namespace tf {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

static void run_share(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int index,
                      int n_parts) {
  int64_t begin = n * index / n_parts;
  int64_t end = n * (index + 1) / n_parts;
  if (begin < end) fn(begin, end);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &fn;
    task_n_ = n;
    n_pending_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_share(fn, n, 0, n_threads());
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return n_pending_ == 0; });
  task_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* task;
    int64_t n;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      task = task_;
      n = task_n_;
    }
    run_share(*task, n, index, n_threads());
    std::lock_guard<std::mutex> lock(mutex_);
    if (--n_pending_ == 0) done_.notify_one();
  }
}

}  // namespace tf
