#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tf {
namespace {

// How long a thread spins for the next task (or the caller for the last worker) before it sleeps:
// longer than the gap between the kernels of one forward, short enough that an idle engine sleeps.
constexpr auto kSpinTime = std::chrono::microseconds(100);

// Chunks per thread: enough that a thread delayed by the scheduler leaves work to the others, few
// enough that claiming them (one shared atomic) stays cheap beside the work.
constexpr int64_t kChunksPerThread = 4;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or kSpinTime has passed; says whether done() became true.
template <class Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if (i % 64 == 63) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      // Past the first few microseconds, let a thread that shares this core (more threads than
      // cores) run instead of spinning over it.
      if (i >= 255) std::this_thread::yield();
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    const int64_t chunk = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (chunk >= n_chunks_) return;
    (*task_)(task_n_ * chunk / n_chunks_, task_n_ * (chunk + 1) / n_chunks_);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(0, n);
    return;
  }
  task_ = &fn;
  task_n_ = n;
  n_chunks_ = std::min<int64_t>(n, kChunksPerThread * n_threads());
  next_chunk_.store(0, std::memory_order_relaxed);
  uint64_t generation;
  {
    // Under the mutex, so a worker about to sleep either sees the new generation or gets the notify.
    std::lock_guard<std::mutex> lock(mutex_);
    generation = generation_.load(std::memory_order_relaxed) + 1;
    open_.store(generation, std::memory_order_seq_cst);
    generation_.store(generation, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunks();
  // Close the task, then wait for the workers inside it. A worker counts itself in before it
  // checks open_ (both sequentially consistent), so either this load sees it, or it sees the
  // task closed and never touches it.
  open_.store(0, std::memory_order_seq_cst);
  const auto all_done = [this] { return n_active_.load(std::memory_order_seq_cst) == 0; };
  if (!spin_until(all_done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, all_done);
  }
  task_ = nullptr;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    const auto has_news = [&] {
      return stopping_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(has_news)) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, has_news);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    n_active_.fetch_add(1, std::memory_order_seq_cst);
    if (open_.load(std::memory_order_seq_cst) == seen) run_chunks();
    if (n_active_.fetch_sub(1, std::memory_order_seq_cst) == 1) {
      // Under the mutex, so a caller about to sleep either sees zero or gets the notify.
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

}  // namespace tf
