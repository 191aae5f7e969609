// edgespec's spinning thread pool (threadpool.h says why it exists and how it behaves).

#include "threadpool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <pthread.h>

#include <executorch/runtime/kernel/thread_parallel_interface.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace edgespec {
namespace pool {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

// A spinning thread's pause: the CPU's hint, and every kYieldEvery spins the scheduler's turn
// to another runnable thread of this CPU (a worker woken onto the caller's CPU, another
// library's spinning thread), which would otherwise wait for the next scheduler tick (~4 ms).
constexpr int kYieldEvery = 64;
inline void relax(int spins) {
  cpu_relax();
  if (spins % kYieldEvery == 0) std::this_thread::yield();
}

class Pool {
 public:
  explicit Pool(int64_t threads) : threads_(threads) {
    for (int64_t i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int64_t threads() const { return threads_; }

  // One section: chunks [0, chunks) of the range, claimed by the caller and the workers.
  void run(int64_t begin, int64_t end, int64_t chunks, RangeFn fn, void* context) {
    begin_ = begin, end_ = end, chunks_ = chunks, fn_ = fn, context_ = context;
    next_.store(0, std::memory_order_relaxed);
    pending_.store(static_cast<int64_t>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1);  // seq_cst: a worker about to sleep either sees it or is counted below
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    take_chunks();
    for (int spins = 1; pending_.load(std::memory_order_acquire) > 0; ++spins) relax(spins);
  }

 private:
  void take_chunks() {
    const int64_t n = end_ - begin_;
    for (int64_t c; (c = next_.fetch_add(1, std::memory_order_relaxed)) < chunks_;) fn_(context_, begin_ + n * c / chunks_, begin_ + n * (c + 1) / chunks_);
  }

  void work() {
    uint64_t seen = 0;  // the generation at construction (a worker may start after the first section began)
    for (;;) {
      auto last = std::chrono::steady_clock::now();
      for (int spins = 1; generation_.load(std::memory_order_acquire) == seen; ++spins) {
        relax(spins);
        if (spins % 256 == 0 && std::chrono::steady_clock::now() - last > std::chrono::microseconds(kSpinMicros)) {
          std::unique_lock<std::mutex> lock(mutex_);
          sleepers_.fetch_add(1);
          wake_.wait(lock, [&] { return generation_.load() != seen; });
          sleepers_.fetch_sub(1);
          last = std::chrono::steady_clock::now();
        }
      }
      seen = generation_.load();
      if (stop_) return;
      take_chunks();
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  const int64_t threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> sleepers_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> pending_{0};
  int64_t begin_ = 0, end_ = 0, chunks_ = 0;
  RangeFn fn_ = nullptr;
  void* context_ = nullptr;
};

std::mutex g_mutex;  // held by the thread running a section (and while the pool is rebuilt)
std::unique_ptr<Pool> g_pool;
thread_local bool t_in_section = false;

// fork() (threadpool.h): the forking thread takes g_mutex first, so no section is running
// (one on another thread is waited for; a fork from inside a section's task, which no kernel
// makes, skips this); the parent releases it after; the child, whose only thread is the
// forking one, leaks the pool (its workers were not copied: joining them, or waiting for them
// in a section, would never end), so its next section starts a pool of its own, and releases it.
bool g_fork_locked = false;
void before_fork() {
  if (t_in_section) return;
  g_mutex.lock();
  g_fork_locked = true;
}
void after_fork_in_parent() {
  if (!g_fork_locked) return;
  g_fork_locked = false;
  g_mutex.unlock();
}
void after_fork_in_child() {
  (void)g_pool.release();
  after_fork_in_parent();
}

}  // namespace

int64_t threads() { return std::max<int64_t>(executorch::extension::get_thread_count(), 1); }

void parallel_for_raw(int64_t begin, int64_t end, int64_t grain, RangeFn fn, void* context) {
  if (end <= begin) return;
  const int64_t n = end - begin, want = threads();
  const int64_t chunks = std::min<int64_t>(want, (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1 || t_in_section) return fn(context, begin, end);
  std::unique_lock<std::mutex> lock(g_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return fn(context, begin, end);  // another thread's section is running
  if (!g_pool || g_pool->threads() != want) {
    static const int fork_handlers = pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);  // once, before any worker starts
    (void)fork_handlers;
    g_pool.reset();
    g_pool = std::make_unique<Pool>(want);
  }
  t_in_section = true;
  g_pool->run(begin, end, chunks, fn, context);
  t_in_section = false;
}

}  // namespace pool
}  // namespace edgespec
