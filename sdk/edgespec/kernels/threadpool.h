// edgespec's kernels' threads: `parallel_for` over a pool whose workers spin between sections.
//
// ExecuTorch's pool (pthreadpool) puts a worker to sleep after a few tens of microseconds
// without work, and waking it costs 10-20 us in a virtual machine (measured: a parallel
// section after 50 us of serial work cost 17 us more than after 5 us). A decoded token runs
// ~150 sections between serial stretches of that length (norms, small matrices, the host
// loop), so at 2 threads those wake-ups cost more than the second thread gained. These
// workers spin (with the CPU's pause hint) for kSpinMicros after their last task, long enough
// to cover the gaps of a decoding loop, then sleep on a condition variable.
//
// The pool has as many threads as ExecuTorch's (`executorch::extension::get_thread_count()`,
// set by `_unsafe_reset_threadpool`), the caller included; a change of that count rebuilds it.
// A call from inside a task, or from a second thread while the pool is busy, runs serially.
//
// fork(): a child has only the thread that forked, not the pool's workers, so a section with
// the parent's pool would wait for them forever. A fork handler (pthread_atfork, installed
// with the first pool) waits for a section running on another thread to end, and in the child
// drops the pool unjoined (leaked: its threads are not there to join); the child's first
// section starts a pool of its own. A program embedding edgespec may fork after its kernels ran.

#pragma once

#include <cstdint>
#include <utility>

namespace edgespec {
namespace pool {

constexpr int64_t kSpinMicros = 2000;  // how long an idle worker spins before it sleeps

using RangeFn = void (*)(void* context, int64_t begin, int64_t end);

// [begin, end) in at most `threads()` contiguous chunks of at least `grain` items (one call of
// fn per chunk), the caller taking chunks too; returns when every chunk is done.
void parallel_for_raw(int64_t begin, int64_t end, int64_t grain, RangeFn fn, void* context);

// Threads a section runs on (the caller included).
int64_t threads();

template <typename F>
inline void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  parallel_for_raw(begin, end, grain, [](void* c, int64_t b, int64_t e) { (*static_cast<const F*>(c))(b, e); }, const_cast<F*>(&f));
}

}  // namespace pool
}  // namespace edgespec
